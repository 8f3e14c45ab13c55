//! `parlor.toml`: what an operator declares beyond the environment (named histories).
//!
//! The file is optional: without it Parlor runs one file-backed history called `default`.
//! `PARLOR_CONFIG` names another file (which must then exist). Unknown keys and invalid
//! values stop the server with a message naming the entry and the field.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Live sessions allowed (0: no limit).
    pub max_users: Option<i64>,
    /// Idle minutes before a session is reaped (0: never).
    pub session_idle_timeout_minutes: Option<i64>,
    pub history: Option<HistorySection>,
    #[serde(default)]
    pub models: Vec<ModelEntry>,
    #[serde(default)]
    pub histories: Vec<HistoryEntry>,
}

/// `[history]`: the processor chain and the window ceiling.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistorySection {
    /// Processors after the policy step, in order.
    pub chain: Option<Vec<String>>,
    /// The agent-wide window ceiling, in messages.
    pub agent_max_ctx: Option<i64>,
}

/// `[[models]]`: a model users can switch to with `!model <name>`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    pub name: String,
    /// `openai` (the OpenAI-compatible upstream) or `mirror` (the built-in offline model).
    pub provider: Option<String>,
    /// The model id sent upstream (default: `name`).
    pub model: Option<String>,
    /// The model's preferred window, in messages.
    pub max_context: Option<i64>,
    /// Tokens one request may take.
    pub token_budget: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    pub id: String,
    pub backend: BackendEntry,
    /// Sent first on every model call of the agents using this history; never stored.
    pub system_message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendEntry {
    #[serde(rename = "type")]
    pub kind: String,
    pub url: Option<String>,
    pub key_prefix: Option<String>,
    /// Messages kept per conversation (the reference's name: 20 keeps 10 exchanges).
    pub max_turns: Option<i64>,
    /// Seconds a Redis conversation lives after its last write.
    pub ttl: Option<i64>,
    /// Folder of a file history (default: the data folder for `default`, else
    /// `<data folder>/histories/<id>`).
    pub path: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {entry}: {field}: {message}")]
    Field {
        path: PathBuf,
        /// e.g. `histories[1] (id "cache")`.
        entry: String,
        field: &'static str,
        message: String,
    },
}

/// Where the configuration comes from: the explicit path, else `parlor.toml` if present.
pub fn locate(explicit: Option<&Path>) -> Option<PathBuf> {
    match explicit {
        Some(path) => Some(path.to_owned()),
        None => {
            let default = PathBuf::from("parlor.toml");
            default.exists().then_some(default)
        }
    }
}

impl ConfigFile {
    pub fn read(path: &Path) -> Result<ConfigFile, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigFileError> {
        toml::from_str(text).map_err(|e| ConfigFileError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })
    }
}

/// The server-wide settings of the file, validated, with their defaults.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// Processors after the policy step.
    pub chain: Vec<String>,
    pub agent_max_ctx: usize,
    pub max_users: usize,
    pub idle_timeout_minutes: u64,
    pub models: Vec<crate::models::ModelSpec>,
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
        let chain = match history.and_then(|h| h.chain.clone()) {
            Some(names) => {
                parlor_domain::chain::Chain::from_names(&names)
                    .map_err(|e| fail("[history]", "chain", e.to_string()))?;
                names
            }
            None => parlor_domain::chain::Chain::default()
                .names()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let agent_max_ctx = match history.and_then(|h| h.agent_max_ctx) {
            None => parlor_domain::chain::DEFAULT_MAX_CTX,
            Some(n) if n >= 1 => n as usize,
            Some(n) => {
                return Err(fail(
                    "[history]",
                    "agent_max_ctx",
                    format!("must be at least 1 (got {n})"),
                ))
            }
        };
        let max_users = match file.max_users {
            None => DEFAULT_MAX_USERS,
            Some(n) if n >= 0 => n as usize,
            Some(n) => {
                return Err(fail(
                    "top level",
                    "max_users",
                    format!("must be 0 (no limit) or more (got {n})"),
                ))
            }
        };
        let idle_timeout_minutes = match file.session_idle_timeout_minutes {
            None => DEFAULT_IDLE_TIMEOUT_MINUTES,
            Some(n) if n >= 0 => n as u64,
            Some(n) => {
                return Err(fail(
                    "top level",
                    "session_idle_timeout_minutes",
                    format!("must be 0 (never) or more (got {n})"),
                ))
            }
        };
        Ok(ServerSettings {
            chain,
            agent_max_ctx,
            max_users,
            idle_timeout_minutes,
            models: crate::models::specs(&file.models, path)?,
        })
    }
}

/// Validates the whole file as the server would read it.
pub fn validate(text: &str, path: &Path, data_dir: &Path) -> Result<ConfigFile, ConfigFileError> {
    let file = ConfigFile::parse(text, path)?;
    ServerSettings::from_file(Some((path, &file)))?;
    crate::histories::specs(Some((path, &file)), data_dir)?;
    Ok(file)
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
pub fn apply_edit(path: &Path, edit: &Edit, data_dir: &Path) -> Result<(), String> {
    use toml_edit::{value, Array, DocumentMut};
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e| format!("{} is not valid TOML: {e}", path.display()))?;
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
    validate(&new_text, path, data_dir).map_err(|e| e.to_string())?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("parlor.toml"),
        uuid::Uuid::new_v4().simple()
    ));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(new_text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
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
        assert_eq!(settings.models.len(), 3);
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
