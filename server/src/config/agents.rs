//! The agent catalog, loaded once at startup from `<agents dir>/<id>/template.json`.

use parlor_domain::Agent;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A problem found while loading agents. Errors skip the template; warnings only skip a
/// setting inside it.
#[derive(Debug, Clone)]
pub struct LoadProblem {
    pub file: PathBuf,
    pub message: String,
    pub fatal_for_template: bool,
}

impl std::fmt::Display for LoadProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

#[derive(Debug, Clone, Default)]
pub struct AgentCatalog {
    agents: BTreeMap<String, Arc<Agent>>,
}

impl AgentCatalog {
    /// Loads every `<dir>/*/template.json`. A template that cannot be read or parsed is
    /// reported and skipped; the others still load. Agents are ordered by name.
    pub fn load_dir(dir: &Path) -> std::io::Result<(AgentCatalog, Vec<LoadProblem>)> {
        let mut problems = Vec::new();
        let mut agents = BTreeMap::new();
        let mut folders: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.is_dir())
            .collect();
        folders.sort();
        for folder in folders {
            let file = folder.join("template.json");
            if !file.exists() {
                continue;
            }
            let loaded = std::fs::read_to_string(&file)
                .map_err(|e| e.to_string())
                .and_then(|json| Agent::from_json(&json).map_err(|e| e.to_string()));
            match loaded {
                Ok((agent, warnings)) => {
                    for warning in warnings {
                        problems.push(LoadProblem {
                            file: file.clone(),
                            message: warning.to_string(),
                            fatal_for_template: false,
                        });
                    }
                    if agents.contains_key(&agent.id) {
                        problems.push(LoadProblem {
                            file: file.clone(),
                            message: format!(
                                "agentId {:?} is already used by another template; skipped",
                                agent.id
                            ),
                            fatal_for_template: true,
                        });
                        continue;
                    }
                    agents.insert(agent.id.clone(), Arc::new(agent));
                }
                Err(message) => problems.push(LoadProblem {
                    file,
                    message,
                    fatal_for_template: true,
                }),
            }
        }
        Ok((AgentCatalog { agents }, problems))
    }

    pub fn from_agents(agents: impl IntoIterator<Item = Agent>) -> Self {
        Self {
            agents: agents
                .into_iter()
                .map(|a| (a.id.clone(), Arc::new(a)))
                .collect(),
        }
    }

    pub fn get(&self, id: &str) -> Option<Arc<Agent>> {
        self.agents.get(id).cloned()
    }

    /// Agents sorted by display name.
    pub fn list(&self) -> Vec<Arc<Agent>> {
        let mut list: Vec<_> = self.agents.values().cloned().collect();
        list.sort_by_key(|a| a.name.to_lowercase());
        list
    }

    pub fn len(&self) -> usize {
        self.agents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, id: &str, json: &str) {
        std::fs::create_dir_all(dir.join(id)).unwrap();
        std::fs::write(dir.join(id).join("template.json"), json).unwrap();
    }

    #[test]
    fn a_broken_template_is_reported_and_the_rest_load() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "good", r#"{"agentId":"good","name":"Good"}"#);
        write(dir.path(), "broken", r#"{"agentId": "broken", "name": }"#);
        write(
            dir.path(),
            "warned",
            r#"{"agentId":"warned","name":"W","chatSettings":{"historyPolicy":"sometimes"}}"#,
        );
        let (catalog, problems) = AgentCatalog::load_dir(dir.path()).unwrap();
        assert_eq!(catalog.len(), 2);
        assert!(catalog.get("good").is_some() && catalog.get("warned").is_some());
        let broken = problems.iter().find(|p| p.fatal_for_template).unwrap();
        assert!(broken.file.ends_with("broken/template.json"));
        let warning = problems.iter().find(|p| !p.fatal_for_template).unwrap();
        assert!(
            warning
                .to_string()
                .contains("chatSettings.historyPolicy ignored"),
            "{warning}"
        );
    }

    #[test]
    fn the_shipped_example_agents_all_load_cleanly() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
        let (catalog, problems) = AgentCatalog::load_dir(&dir).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert!(catalog.len() >= 3);
    }
}
