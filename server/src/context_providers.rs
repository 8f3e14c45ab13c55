//! The operator's context providers: `[[context]]` entries of `parlor.toml` that add
//! context to every turn of the agents that switch them on (`chatSettings.context`).
//!
//! Kinds: `time` (the current date and time in a time zone) and `file` (a file re-read at
//! every turn, up to a size). Each has its `display` and `save`, as a chat API client's
//! context entries do. A provider that fails on a turn (a missing file) never fails the
//! turn: the turn goes on without it and the debug panel says why.

use crate::config::file::{ConfigFileError, ContextProviderEntry};
use parlor_domain::context::{Block, ContextEntry, Save, SourceFailure, MAX_SOURCE_CHARS};
use parlor_domain::Agent;
use std::path::{Path, PathBuf};

/// The largest file a `file` provider reads by default, in bytes.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024;

#[derive(Clone, Debug)]
pub struct Provider {
    pub id: String,
    kind: Kind,
    display: bool,
    save: Save,
}

#[derive(Clone, Debug)]
enum Kind {
    Time {
        zone: jiff::tz::TimeZone,
        /// The zone as configured (or `system`).
        name: String,
    },
    File {
        path: PathBuf,
        max_bytes: u64,
    },
}

/// Validates `[[context]]`; relative file paths are relative to the configuration file.
pub fn specs(
    entries: &[ContextProviderEntry],
    path: &Path,
) -> Result<Vec<Provider>, ConfigFileError> {
    let mut providers: Vec<Provider> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let provider =
            spec(entry, &providers, path).map_err(|(field, message)| ConfigFileError::Field {
                path: path.to_owned(),
                entry: format!("context[{index}] (id {:?})", entry.id),
                field,
                message,
            })?;
        providers.push(provider);
    }
    Ok(providers)
}

/// Why a provider entry is refused: the field, and what it must be.
type Refusal = (&'static str, String);

/// `field` is set though kind `kind` does not use it.
fn only(field: &'static str, set: bool, kind: &str) -> Result<(), Refusal> {
    match set {
        true => Err((field, format!("does not apply to kind {kind:?}"))),
        false => Ok(()),
    }
}

/// One `[[context]]` entry, checked (`declared`: the entries before it; `path`: the file,
/// which relative file paths start from).
fn spec(
    entry: &ContextProviderEntry,
    declared: &[Provider],
    path: &Path,
) -> Result<Provider, Refusal> {
    let id_chars = entry.id.chars().count();
    if id_chars == 0 || id_chars > MAX_SOURCE_CHARS || entry.id.chars().any(char::is_control) {
        let rule = format!("must be 1 to {MAX_SOURCE_CHARS} printable characters");
        return Err(("id", rule));
    }
    if declared.iter().any(|p| p.id == entry.id) {
        return Err(("id", "duplicate id".into()));
    }
    let kind = match entry.kind.as_str() {
        "time" => time_kind(entry)?,
        "file" => file_kind(entry, path)?,
        other => {
            let rule = format!("unknown kind {other:?} (allowed: time, file)");
            return Err(("kind", rule));
        }
    };
    Ok(Provider {
        id: entry.id.clone(),
        kind,
        display: entry.display.unwrap_or(true),
        save: entry.save.unwrap_or_default(),
    })
}

/// The current time, in the entry's time zone (the system's when it names none).
fn time_kind(entry: &ContextProviderEntry) -> Result<Kind, Refusal> {
    only("path", entry.path.is_some(), "time")?;
    only("max_bytes", entry.max_bytes.is_some(), "time")?;
    let Some(name) = entry.time_zone.as_deref() else {
        return Ok(Kind::Time {
            zone: jiff::tz::TimeZone::system(),
            name: "system".into(),
        });
    };
    let zone = jiff::tz::TimeZone::get(name).map_err(|_| {
        let rule = "use an IANA name such as \"Europe/Paris\" or \"UTC\"";
        ("time_zone", format!("unknown time zone {name:?} ({rule})"))
    })?;
    Ok(Kind::Time {
        zone,
        name: name.to_owned(),
    })
}

/// A file read at every turn, relative to the configuration file `path`.
fn file_kind(entry: &ContextProviderEntry, path: &Path) -> Result<Kind, Refusal> {
    only("time_zone", entry.time_zone.is_some(), "file")?;
    let file = entry
        .path
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| ("path", "is required for kind \"file\"".to_owned()))?;
    let max_bytes = match entry.max_bytes {
        None => DEFAULT_MAX_BYTES,
        Some(n) if n >= 1 => n as u64,
        Some(n) => return Err(("max_bytes", format!("must be at least 1 (got {n})"))),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    Ok(Kind::File {
        path: base.join(file),
        max_bytes,
    })
}

impl Provider {
    /// This turn's context from the provider.
    pub async fn entry(&self) -> Result<ContextEntry, ProviderError> {
        let text = match &self.kind {
            Kind::Time { zone, name } => {
                let now = jiff::Zoned::now().with_time_zone(zone.clone());
                format!(
                    "Current date and time: {} (time zone {name}, UTC{})",
                    now.strftime("%A %Y-%m-%d %H:%M"),
                    now.strftime("%:z")
                )
            }
            Kind::File { path, max_bytes } => read_file(path, *max_bytes).await?,
        };
        Ok(ContextEntry {
            source: self.id.clone(),
            blocks: vec![Block::Text { text }],
            display: self.display,
            save: self.save,
        })
    }
}

/// Why a provider gave no context this turn (the turn goes on without it).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is {size} bytes, over its max_bytes of {max}")]
    TooLarge { path: String, size: u64, max: u64 },
    #[error("{path} grew over its max_bytes of {max}")]
    Grew { path: String, max: u64 },
    #[error("{path} is not UTF-8 text")]
    NotText { path: String },
}

async fn read_file(path: &Path, max_bytes: u64) -> Result<String, ProviderError> {
    let shown = || path.display().to_string();
    let unreadable = |source| ProviderError::Read {
        path: shown(),
        source,
    };
    let size = tokio::fs::metadata(path).await.map_err(unreadable)?.len();
    if size > max_bytes {
        return Err(ProviderError::TooLarge {
            path: shown(),
            size,
            max: max_bytes,
        });
    }
    let bytes = tokio::fs::read(path).await.map_err(unreadable)?;
    if bytes.len() as u64 > max_bytes {
        return Err(ProviderError::Grew {
            path: shown(),
            max: max_bytes,
        });
    }
    String::from_utf8(bytes).map_err(|_| ProviderError::NotText { path: shown() })
}

/// Every configured provider.
#[derive(Debug, Default)]
pub struct Providers {
    list: Vec<Provider>,
}

/// An agent names a provider that is not configured.
#[derive(Debug, thiserror::Error)]
#[error(
    "agent {agent:?}: chatSettings.context names {provider:?}, which is not a [[context]] id \
     of the configuration file (declared: {declared:?})"
)]
pub struct UnknownProvider {
    pub agent: String,
    pub provider: String,
    pub declared: Vec<String>,
}

impl Providers {
    pub fn new(list: Vec<Provider>) -> Providers {
        Providers { list }
    }

    /// Checks that every provider an agent names is configured.
    pub fn check_agents<'a>(
        &self,
        agents: impl IntoIterator<Item = &'a Agent>,
    ) -> Result<(), UnknownProvider> {
        for agent in agents {
            for id in &agent.context {
                if !self.list.iter().any(|p| &p.id == id) {
                    return Err(UnknownProvider {
                        agent: agent.id.clone(),
                        provider: id.clone(),
                        declared: self.list.iter().map(|p| p.id.clone()).collect(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Runs the agent's providers for a turn: their entries, and those that failed.
    pub async fn run(&self, agent: &Agent) -> (Vec<ContextEntry>, Vec<SourceFailure>) {
        let mut entries = Vec::new();
        let mut failed = Vec::new();
        let chosen = agent
            .context
            .iter()
            .filter_map(|id| self.list.iter().find(|p| &p.id == id));
        for provider in chosen {
            match provider.entry().await {
                Ok(entry) => entries.push(entry),
                Err(error) => {
                    tracing::warn!("context provider {:?} failed: {error}", provider.id);
                    failed.push(SourceFailure {
                        source: provider.id.clone(),
                        // As the debug panel and the page show it.
                        error: error.to_string(),
                    });
                }
            }
        }
        (entries, failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, kind: &str) -> ContextProviderEntry {
        ContextProviderEntry {
            id: id.into(),
            kind: kind.into(),
            time_zone: None,
            path: None,
            max_bytes: None,
            display: None,
            save: None,
        }
    }

    #[test]
    fn entries_are_validated_naming_the_entry_and_field() {
        let path = Path::new("/etc/parlor/parlor.toml");
        let mut file = entry("notes", "file");
        file.path = Some("notes.md".into());
        let ok = specs(&[entry("clock", "time"), file], path).unwrap();
        assert!(
            matches!(&ok[1].kind, Kind::File { path, max_bytes: DEFAULT_MAX_BYTES }
            if path == Path::new("/etc/parlor/notes.md"))
        );
        let bad_zone = ContextProviderEntry {
            time_zone: Some("Mars/Olympus".into()),
            ..entry("clock", "time")
        };
        let cases = [
            (
                vec![entry("", "time")],
                "context[0] (id \"\"): id: must be 1 to 64",
            ),
            (
                vec![entry("a", "time"), entry("a", "time")],
                "context[1] (id \"a\"): id: duplicate",
            ),
            (
                vec![entry("a", "weather")],
                "kind: unknown kind \"weather\"",
            ),
            (vec![entry("a", "file")], "path: is required"),
            (
                vec![bad_zone],
                "time_zone: unknown time zone \"Mars/Olympus\"",
            ),
            (
                vec![ContextProviderEntry {
                    path: Some("x".into()),
                    ..entry("a", "time")
                }],
                "path: does not apply to kind \"time\"",
            ),
            (
                vec![ContextProviderEntry {
                    path: Some("x".into()),
                    max_bytes: Some(0),
                    ..entry("a", "file")
                }],
                "max_bytes: must be at least 1",
            ),
        ];
        for (entries, expected) in cases {
            let error = specs(&entries, path).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
            assert!(error.starts_with("/etc/parlor/parlor.toml: "), "{error}");
        }
    }

    #[tokio::test]
    async fn the_time_provider_says_the_time_in_its_zone() {
        let clock = ContextProviderEntry {
            time_zone: Some("Asia/Kolkata".into()),
            save: Some(Save::Turns(std::num::NonZeroU32::MIN)),
            ..entry("clock", "time")
        };
        let provider = &specs(&[clock], Path::new("p.toml")).unwrap()[0];
        let entry = provider.entry().await.unwrap();
        let Block::Text { text } = &entry.blocks[0] else {
            panic!("a text block")
        };
        assert!(
            text.contains("(time zone Asia/Kolkata, UTC+05:30)"),
            "{text}"
        );
        assert_eq!(entry.source, "clock");
        assert!(entry.display);
        assert_eq!(entry.save, Save::Turns(std::num::NonZeroU32::MIN));
    }

    #[tokio::test]
    async fn a_file_provider_rereads_its_file_and_fails_without_failing_the_turn() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("parlor.toml");
        let small = ContextProviderEntry {
            path: Some("notes.md".into()),
            max_bytes: Some(10),
            ..entry("notes", "file")
        };
        let providers = Providers::new(specs(&[small], &config).unwrap());
        let (agent, _) = Agent::from_json(
            r#"{"agentId": "a", "name": "A", "chatSettings": {"context": ["notes"]}}"#,
        )
        .unwrap();
        let (entries, failed) = providers.run(&agent).await;
        assert!(entries.is_empty());
        assert!(failed[0].error.starts_with("cannot read "), "{:?}", failed);
        std::fs::write(dir.path().join("notes.md"), "v1").unwrap();
        let (entries, _) = providers.run(&agent).await;
        assert_eq!(entries[0].blocks, [Block::Text { text: "v1".into() }]);
        std::fs::write(dir.path().join("notes.md"), "version two").unwrap();
        let (entries, failed) = providers.run(&agent).await;
        assert!(entries.is_empty());
        assert!(
            failed[0]
                .error
                .contains("11 bytes, over its max_bytes of 10"),
            "{failed:?}"
        );
    }
}
