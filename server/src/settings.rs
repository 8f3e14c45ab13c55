//! The server-wide settings of the configuration file, validated with their defaults;
//! validation of the whole file as the server reads it; and the edits administrators make
//! (`parlor history …`, `!maxusers`, …), saved atomically with the file's comments kept.
//!
//! Above the raw file ([`crate::config::file`]), the histories and the models, which only
//! read the raw file.

use crate::config::file::{ConfigFile, ConfigFileError};
use crate::store::atomic::write_atomically;
use std::path::{Path, PathBuf};

/// The server-wide settings of the file, validated, with their defaults.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// Processors after the policy step.
    pub chain: Vec<String>,
    pub agent_max_ctx: usize,
    pub max_users: usize,
    pub idle_timeout_minutes: u64,
    pub models: Vec<crate::llm::models::ModelSpec>,
    /// `[[providers]]`: the LLM endpoints models may name.
    pub llm_providers: Vec<crate::llm::providers::ProviderSpec>,
    pub providers: Vec<crate::context_providers::Provider>,
    /// The model that keeps conversation summaries (`None`: each conversation's own).
    pub summary_model: Option<String>,
    /// `[tools]` and `[[mcp_servers]]`.
    pub tools: crate::tools::spec::ToolSpecs,
    /// `[history]` `window_step` and `budget_step`: every model's unless its entry sets
    /// its own (`None`: a third of its window or budget).
    pub steps: (Option<usize>, Option<u64>),
}

pub const DEFAULT_MAX_USERS: usize = 50;
pub const DEFAULT_IDLE_TIMEOUT_MINUTES: u64 = 60;

impl ServerSettings {
    pub fn from_file(
        file: Option<(&Path, &ConfigFile)>,
    ) -> Result<ServerSettings, ConfigFileError> {
        let default_path = PathBuf::from("parlor.toml");
        let empty = ConfigFile::default();
        let (path, file) = file.unwrap_or((default_path.as_path(), &empty));
        let fail = |entry: &str, field: &'static str, message: String| ConfigFileError::Field {
            path: path.to_owned(),
            entry: entry.to_owned(),
            field,
            message,
        };
        let history = file.history.as_ref();
        let chain = chain_of(history.and_then(|h| h.chain.clone()))
            .map_err(|e| fail(HISTORY, "chain", e.to_string()))?;
        let summary_model = history.and_then(|h| h.summary_model.clone());
        if summary_model.as_deref().is_some_and(is_blank) {
            return Err(fail(HISTORY, "summary_model", "must name a model".into()));
        }
        let limit = |value: Option<i64>, (entry, field, min, rule): Limit| match value {
            Some(n) if n < min => Err(fail(entry, field, format!("must be {rule} (got {n})"))),
            other => Ok(other.map(|n| n as u64)),
        };
        let agent_max_ctx = limit(history.and_then(|h| h.agent_max_ctx), AGENT_MAX_CTX)?;
        let window_step = limit(history.and_then(|h| h.window_step), WINDOW_STEP)?;
        let budget_step = limit(history.and_then(|h| h.budget_step), BUDGET_STEP)?;
        let max_users = limit(file.max_users, MAX_USERS)?;
        let idle_timeout_minutes = limit(file.session_idle_timeout_minutes, IDLE_TIMEOUT)?;
        let var = |name: &str| crate::config::vars::named(std::env::vars(), name);
        let llm_providers = crate::llm::providers::specs(&file.providers, path, &var)?;
        let provider_ids: Vec<&str> = llm_providers.iter().map(|p| p.id.as_str()).collect();
        Ok(ServerSettings {
            chain,
            agent_max_ctx: agent_max_ctx
                .map_or(parlor_domain::chain::DEFAULT_MAX_CTX, |n| n as usize),
            max_users: max_users.map_or(DEFAULT_MAX_USERS, |n| n as usize),
            idle_timeout_minutes: idle_timeout_minutes.unwrap_or(DEFAULT_IDLE_TIMEOUT_MINUTES),
            models: crate::llm::models::specs(&file.models, path, &provider_ids)?,
            llm_providers,
            providers: crate::context_providers::specs(&file.context, path)?,
            tools: crate::tools::spec::specs(file, path, &var)?,
            summary_model,
            steps: (window_step.map(|n| n as usize), budget_step),
        })
    }
}

/// A whole-number setting's place in the file (entry, field), its least value and that
/// rule as a message says it.
type Limit = (&'static str, &'static str, i64, &'static str);
const HISTORY: &str = "[history]";
const AGENT_MAX_CTX: Limit = (HISTORY, "agent_max_ctx", 1, "at least 1");
const WINDOW_STEP: Limit = (HISTORY, "window_step", 0, "0 (cut exactly) or more");
const BUDGET_STEP: Limit = (HISTORY, "budget_step", 0, "0 (cut exactly) or more");
const MAX_USERS: Limit = ("top level", "max_users", 0, "0 (no limit) or more");
const IDLE_TIMEOUT: Limit = (
    "top level",
    "session_idle_timeout_minutes",
    0,
    "0 (never) or more",
);

fn is_blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// The chain after the policy step: the file's (checked), else the default one.
fn chain_of(
    names: Option<Vec<String>>,
) -> Result<Vec<String>, parlor_domain::chain::ChainConfigError> {
    use parlor_domain::chain::Chain;
    match names {
        Some(names) => Chain::from_names(&names).map(|_| names),
        None => Ok(Chain::default()
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect()),
    }
}

/// Validates the whole file as the server would read it.
pub fn validate(text: &str, path: &Path, data_dir: &Path) -> Result<ConfigFile, ConfigFileError> {
    let file = ConfigFile::parse(text, path)?;
    ServerSettings::from_file(Some((path, &file)))?;
    crate::store::histories::specs(Some((path, &file)), data_dir)?;
    Ok(file)
}

/// Why an edit of the configuration file was not saved; the file is then unchanged.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid TOML: {message}")]
    Toml { path: PathBuf, message: String },
    /// The edited file would not be accepted by the server.
    #[error(transparent)]
    Invalid(#[from] ConfigFileError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A change an administrator makes to the configuration file.
#[derive(Clone, Debug)]
pub enum Edit {
    Chain(Vec<String>),
    AgentMaxCtx(usize),
    MaxUsers(usize),
    IdleTimeoutMinutes(u64),
}

/// Applies `edit` to the file at `path` (created when missing), keeping its comments and
/// layout, validating the result, and replacing the file atomically.
pub fn apply_edit(path: &Path, edit: &Edit, data_dir: &Path) -> Result<(), EditError> {
    use toml_edit::{value, Array, DocumentMut};
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(EditError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| EditError::Toml {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
    if matches!(edit, Edit::Chain(_) | Edit::AgentMaxCtx(_)) && !doc.contains_key("history") {
        doc.insert("history", toml_edit::Item::Table(toml_edit::Table::new()));
    }
    match edit {
        Edit::Chain(names) => {
            doc["history"]["chain"] = value(names.iter().map(String::as_str).collect::<Array>())
        }
        Edit::AgentMaxCtx(n) => doc["history"]["agent_max_ctx"] = value(*n as i64),
        Edit::MaxUsers(n) => doc["max_users"] = value(*n as i64),
        Edit::IdleTimeoutMinutes(n) => doc["session_idle_timeout_minutes"] = value(*n as i64),
    }
    let new_text = doc.to_string();
    validate(&new_text, path, data_dir)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("parlor.toml");
    write_atomically(dir, name, new_text.as_bytes()).map_err(|source| EditError::Write {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../parlor.example.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let file = validate(&text, &path, Path::new("data")).unwrap();
        let settings = ServerSettings::from_file(Some((&path, &file))).unwrap();
        assert_eq!(settings.chain, ["sliding_window", "token_budget"]);
        assert_eq!(settings.models.len(), 4);
        assert_eq!(settings.llm_providers[0].id, "local");
    }

    #[test]
    fn server_settings_are_validated_naming_the_field() {
        for (text, expected) in [
            (
                "max_users = -1",
                "top level: max_users: must be 0 (no limit) or more",
            ),
            (
                "session_idle_timeout_minutes = -2",
                "session_idle_timeout_minutes",
            ),
            (
                "[history]\nagent_max_ctx = 0",
                "[history]: agent_max_ctx: must be at least 1",
            ),
            (
                "[history]\nchain = [\"policy\"]",
                "[history]: chain: the policy step is always first",
            ),
            (
                "[history]\nchain = [\"nope\"]",
                "unknown history processor \"nope\"",
            ),
            ("maxusers = 3", "unknown field `maxusers`"),
        ] {
            let error = validate(text, Path::new("parlor.toml"), Path::new("data"))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
