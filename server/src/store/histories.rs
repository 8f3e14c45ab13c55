//! Named histories: where each agent's conversations are kept.
//!
//! A history pairs a store backend (memory, file or Redis, with its `max_turns` and `ttl`)
//! with an optional system message. Agents choose one with `chatSettings.historyId` in their
//! template; without it they use `default`, which Parlor provides (file-backed, in the data
//! folder) when the configuration does not declare it.

use crate::config::file::{BackendEntry, ConfigFile, ConfigFileError, HistoryEntry};
use crate::store::{
    ConversationStore, FileStore, MaxTurns, Measured, MemoryStore, RedisOptions, RedisStore,
    SharedRedis,
};
use parlor_domain::Agent;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_HISTORY: &str = "default";
const DEFAULT_KEY_PREFIX: &str = "parlor:";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendSpec {
    Memory,
    File { path: PathBuf },
    Redis { url: String, key_prefix: String },
}

/// A validated history declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistorySpec {
    pub id: String,
    pub backend: BackendSpec,
    pub max_turns: MaxTurns,
    pub ttl: Option<Duration>,
    pub system_message: Option<String>,
    /// Where it was declared (`histories[0] (id "x")`), or `None` for the built-in default.
    pub declared_at: Option<String>,
}

impl HistorySpec {
    /// The built-in `default`: file-backed, in the data folder, everything kept.
    pub fn builtin_default(data_dir: &Path) -> HistorySpec {
        HistorySpec {
            id: DEFAULT_HISTORY.into(),
            backend: BackendSpec::File {
                path: data_dir.to_owned(),
            },
            max_turns: None,
            ttl: None,
            system_message: None,
            declared_at: None,
        }
    }
}

/// Validates the declared histories and adds the built-in `default` when it is missing.
pub fn specs(
    file: Option<(&Path, &ConfigFile)>,
    data_dir: &Path,
) -> Result<Vec<HistorySpec>, ConfigFileError> {
    let mut specs: Vec<HistorySpec> = Vec::new();
    if let Some((path, file)) = file {
        for (index, entry) in file.histories.iter().enumerate() {
            let spec = validate(entry, index, data_dir).map_err(|(field, message)| {
                ConfigFileError::Field {
                    path: path.to_owned(),
                    entry: entry_name(index, &entry.id),
                    field,
                    message,
                }
            })?;
            if let Some(first) = specs.iter().find(|s| s.id == spec.id) {
                return Err(ConfigFileError::Field {
                    path: path.to_owned(),
                    entry: entry_name(index, &entry.id),
                    field: "id",
                    message: format!(
                        "duplicate id (already used by {})",
                        first.declared_at.as_deref().unwrap_or_default()
                    ),
                });
            }
            specs.push(spec);
        }
    }
    if !specs.iter().any(|s| s.id == DEFAULT_HISTORY) {
        specs.push(HistorySpec::builtin_default(data_dir));
    }
    Ok(specs)
}

fn entry_name(index: usize, id: &str) -> String {
    format!("histories[{index}] (id {id:?})")
}

fn validate(
    entry: &HistoryEntry,
    index: usize,
    data_dir: &Path,
) -> Result<HistorySpec, (&'static str, String)> {
    let id = entry.id.as_str();
    if id.is_empty()
        || id.len() > 64
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err((
            "id",
            "must be 1-64 characters of letters, digits, '_' and '-'".into(),
        ));
    }
    let BackendEntry { max_turns, ttl, .. } = &entry.backend;
    let at_least_one = |field: &'static str, value: Option<i64>, unit: &str| match value {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n as u64)),
        Some(n) => Err((field, format!("must be at least 1{unit} (got {n})"))),
    };
    let max_turns = at_least_one("backend.max_turns", *max_turns, "")?
        .and_then(|n| NonZeroUsize::new(usize::try_from(n).unwrap_or(usize::MAX)));
    let ttl = at_least_one("backend.ttl", *ttl, " second")?.map(Duration::from_secs);
    let backend = backend_of(&entry.backend, id, data_dir)?;
    Ok(HistorySpec {
        id: id.to_owned(),
        backend,
        max_turns,
        ttl,
        system_message: entry
            .system_message
            .clone()
            .filter(|s| !s.trim().is_empty()),
        declared_at: Some(entry_name(index, id)),
    })
}

type Refusal = (&'static str, String);

/// `field` is set though it applies to the `backend` backend only.
fn only_for(field: &'static str, present: bool, backend: &str) -> Result<(), Refusal> {
    match present {
        true => Err((field, format!("applies to the {backend} backend only"))),
        false => Ok(()),
    }
}

/// Where a history keeps its conversations, checked field by field.
fn backend_of(entry: &BackendEntry, id: &str, data_dir: &Path) -> Result<BackendSpec, Refusal> {
    let BackendEntry {
        kind,
        url,
        key_prefix,
        ttl,
        path,
        ..
    } = entry;
    if kind.as_str() == "redis" {
        only_for("backend.path", path.is_some(), "file")?;
        return redis_backend(url.as_deref(), key_prefix.as_deref());
    }
    if !matches!(kind.as_str(), "memory" | "file") {
        return Err((
            "backend.type",
            format!("unknown backend {kind:?} (allowed: memory, file, redis)"),
        ));
    }
    only_for("backend.url", url.is_some(), "redis")?;
    only_for("backend.key_prefix", key_prefix.is_some(), "redis")?;
    only_for("backend.ttl", ttl.is_some(), "redis")?;
    if kind == "memory" {
        only_for("backend.path", path.is_some(), "file")?;
        return Ok(BackendSpec::Memory);
    }
    Ok(BackendSpec::File {
        path: match path {
            Some(path) => path.clone(),
            None if id == DEFAULT_HISTORY => data_dir.to_owned(),
            None => data_dir.join("histories").join(id),
        },
    })
}

/// A Redis history's connection: its URL (required) and key prefix.
fn redis_backend(url: Option<&str>, key_prefix: Option<&str>) -> Result<BackendSpec, Refusal> {
    let Some(url) = url else {
        return Err((
            "backend.url",
            "required for a redis history, e.g. \"redis://127.0.0.1:6379\"".into(),
        ));
    };
    if !["redis://", "rediss://", "unix://", "redis+unix://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
    {
        return Err((
            "backend.url",
            format!("{url:?} is not a Redis URL (redis://, rediss:// or unix://)"),
        ));
    }
    Ok(BackendSpec::Redis {
        url: url.to_owned(),
        key_prefix: key_prefix.unwrap_or(DEFAULT_KEY_PREFIX).to_owned(),
    })
}

/// One history, ready to use.
pub struct History {
    pub id: String,
    pub store: Arc<dyn ConversationStore>,
    pub system_message: Option<String>,
    /// The Redis of a Redis history.
    pub redis: Option<SharedRedis>,
}

/// An agent names a history that is not declared.
#[derive(Debug, thiserror::Error)]
#[error(
    "agent {agent:?}: chatSettings.historyId {history:?} names no history (declared: {})",
    declared.join(", ")
)]
pub struct UnknownHistory {
    pub agent: String,
    pub history: String,
    pub declared: Vec<String>,
}

/// All histories, by id.
pub struct Histories {
    by_id: HashMap<String, Arc<History>>,
}

#[derive(Debug, thiserror::Error)]
#[error("history {history:?} ({declared}): {field}: {message}")]
pub struct OpenError {
    pub history: String,
    pub declared: String,
    pub field: &'static str,
    pub message: String,
}

impl Histories {
    /// Opens every history's store: creates folders, connects to Redis (failing when it
    /// cannot be reached now).
    pub async fn open(
        specs: &[HistorySpec],
        backup_retention: usize,
    ) -> Result<Histories, OpenError> {
        let mut by_id = HashMap::new();
        for spec in specs {
            let (store, redis) = open_store(spec, backup_retention).await?;
            tracing::info!("history {:?}: {}", spec.id, store.describe());
            by_id.insert(
                spec.id.clone(),
                Arc::new(History {
                    id: spec.id.clone(),
                    store,
                    system_message: spec.system_message.clone(),
                    redis,
                }),
            );
        }
        Ok(Histories { by_id })
    }

    /// Puts `wrap(store)` in place of history `id`'s store: for tests that act between the
    /// steps of a request (another writer's save), and tools that observe a store.
    pub fn wrap_store(
        &mut self,
        id: &str,
        wrap: impl FnOnce(Arc<dyn ConversationStore>) -> Arc<dyn ConversationStore>,
    ) {
        if let Some(history) = self.by_id.get_mut(id) {
            let store = wrap(history.store.clone());
            *history = Arc::new(History {
                id: history.id.clone(),
                store,
                system_message: history.system_message.clone(),
                redis: history.redis.clone(),
            });
        }
    }

    /// One file-backed `default` history in `data_dir`: what Parlor runs without a
    /// configuration file.
    pub fn file_default(
        data_dir: &Path,
        backup_retention: usize,
    ) -> Result<Histories, crate::store::StoreError> {
        let store = FileStore::open(data_dir, None, backup_retention)?;
        Ok(Self::single(Arc::new(store)))
    }

    /// A `default` history on the given store (tests, tools).
    pub fn single(store: Arc<dyn ConversationStore>) -> Histories {
        let history = History {
            id: DEFAULT_HISTORY.into(),
            store,
            system_message: None,
            redis: None,
        };
        Histories {
            by_id: HashMap::from([(DEFAULT_HISTORY.to_owned(), Arc::new(history))]),
        }
    }

    pub fn get(&self, id: &str) -> Option<&Arc<History>> {
        self.by_id.get(id)
    }

    /// The history an agent uses. Agents are checked at startup ([`Self::check_agents`]).
    pub fn for_agent(&self, agent: &Agent) -> &Arc<History> {
        let id = agent.history_id.as_deref().unwrap_or(DEFAULT_HISTORY);
        self.by_id
            .get(id)
            .or_else(|| self.by_id.get(DEFAULT_HISTORY))
            .expect("the default history always exists")
    }

    /// Every agent's `historyId` must name a declared history.
    pub fn check_agents<'a>(
        &self,
        agents: impl IntoIterator<Item = &'a Agent>,
    ) -> Result<(), UnknownHistory> {
        for agent in agents {
            if let Some(id) = &agent.history_id {
                if !self.by_id.contains_key(id) {
                    let mut declared: Vec<String> = self.by_id.keys().cloned().collect();
                    declared.sort();
                    return Err(UnknownHistory {
                        agent: agent.id.clone(),
                        history: id.clone(),
                        declared,
                    });
                }
            }
        }
        Ok(())
    }

    /// The conversations a browser started, in every history, newest first.
    pub async fn list_owned(
        &self,
        owner: &str,
    ) -> Result<Vec<crate::store::Listed>, crate::store::StoreError> {
        let mut all = Vec::new();
        for id in self.ids() {
            all.extend(self.by_id[id].store.list_owned(owner).await?);
        }
        all.sort_by_key(|info| std::cmp::Reverse(info.updated_ms));
        Ok(all)
    }

    /// The default history's Redis, when it has one: what all processes share (live
    /// sessions are counted there).
    pub fn shared_redis(&self) -> Option<&SharedRedis> {
        self.by_id
            .get(DEFAULT_HISTORY)
            .and_then(|h| h.redis.as_ref())
    }

    /// Ids, sorted.
    pub fn ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.by_id.keys().map(String::as_str).collect();
        ids.sort();
        ids
    }
}

/// Opens the store a history declares, and for Redis its connection (shared with other
/// state, e.g. live sessions).
async fn open_store(
    spec: &HistorySpec,
    backup_retention: usize,
) -> Result<(Arc<dyn ConversationStore>, Option<SharedRedis>), OpenError> {
    let fail = |field: &'static str, message: String| OpenError {
        history: spec.id.clone(),
        declared: spec
            .declared_at
            .clone()
            .unwrap_or_else(|| "built in".into()),
        field,
        message,
    };
    let mut redis = None;
    let store: Arc<dyn ConversationStore> = match &spec.backend {
        BackendSpec::Memory => {
            tracing::warn!(
                "history {:?} keeps conversations in memory: they are lost when Parlor stops",
                spec.id
            );
            Arc::new(Measured::new(MemoryStore::new(spec.max_turns)))
        }
        BackendSpec::File { path } => Arc::new(Measured::new(
            FileStore::open(path, spec.max_turns, backup_retention).map_err(|e| {
                fail(
                    "backend.path",
                    format!("cannot open {}: {e}", path.display()),
                )
            })?,
        )),
        BackendSpec::Redis { url, key_prefix } => {
            let store = RedisStore::connect(RedisOptions {
                url: url.clone(),
                key_prefix: key_prefix.clone(),
                history_id: spec.id.clone(),
                max_turns: spec.max_turns,
                ttl: spec.ttl,
            })
            .await
            .map_err(|e| fail("backend.url", format!("cannot reach Redis at {url}: {e}")))?;
            redis = Some(store.shared());
            Arc::new(Measured::new(store))
        }
    };
    Ok((store, redis))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<HistorySpec>, String> {
        let path = Path::new("parlor.toml");
        let file = ConfigFile::parse(text, path).map_err(|e| e.to_string())?;
        specs(Some((path, &file)), Path::new("data")).map_err(|e| e.to_string())
    }

    #[test]
    fn without_a_file_there_is_one_file_backed_default() {
        let specs = specs(None, Path::new("d")).unwrap();
        assert_eq!(specs, [HistorySpec::builtin_default(Path::new("d"))]);
    }

    #[test]
    fn reads_the_reference_fields() {
        let specs = parse(
            r#"
            [[histories]]
            id = "main_chat"
            system_message = "You are a helpful assistant."
            backend = { type = "redis", url = "redis://127.0.0.1:6379", key_prefix = "chat:", max_turns = 100, ttl = 3600 }

            [[histories]]
            id = "scratch"
            backend = { type = "memory", max_turns = 3 }
            "#,
        )
        .unwrap();
        assert_eq!(specs.len(), 3, "plus the built-in default");
        assert_eq!(
            specs[0].backend,
            BackendSpec::Redis {
                url: "redis://127.0.0.1:6379".into(),
                key_prefix: "chat:".into()
            }
        );
        assert_eq!(specs[0].max_turns.map(|n| n.get()), Some(100));
        assert_eq!(specs[0].ttl, Some(Duration::from_secs(3600)));
        assert_eq!(
            specs[0].system_message.as_deref(),
            Some("You are a helpful assistant.")
        );
        assert_eq!(specs[1].backend, BackendSpec::Memory);
        assert_eq!(specs[2].id, "default");
    }

    #[test]
    fn file_histories_get_their_own_folder_and_default_keeps_the_data_folder() {
        let specs = parse(
            r#"
            [[histories]]
            id = "default"
            backend = { type = "file", max_turns = 50 }
            [[histories]]
            id = "notes"
            backend = { type = "file" }
            "#,
        )
        .unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(
            specs[0].backend,
            BackendSpec::File {
                path: "data".into()
            }
        );
        assert_eq!(
            specs[1].backend,
            BackendSpec::File {
                path: Path::new("data").join("histories").join("notes")
            }
        );
    }

    #[test]
    fn errors_name_the_entry_and_the_field() {
        let cases = [
            (
                r#"[[histories]]
                id = "a"
                backend = { type = "mongo" }"#,
                r#"parlor.toml: histories[0] (id "a"): backend.type: unknown backend "mongo""#,
            ),
            (
                r#"[[histories]]
                id = "a"
                backend = { type = "memory" }
                [[histories]]
                id = "a"
                backend = { type = "file" }"#,
                r#"histories[1] (id "a"): id: duplicate id (already used by histories[0] (id "a"))"#,
            ),
            (
                r#"[[histories]]
                id = "a"
                backend = { type = "file", max_turns = 0 }"#,
                r#"histories[0] (id "a"): backend.max_turns: must be at least 1 (got 0)"#,
            ),
            (
                r#"[[histories]]
                id = "r"
                backend = { type = "redis", url = "redis://x", ttl = -5 }"#,
                r#"histories[0] (id "r"): backend.ttl: must be at least 1 second (got -5)"#,
            ),
            (
                r#"[[histories]]
                id = "r"
                backend = { type = "redis" }"#,
                r#"histories[0] (id "r"): backend.url: required"#,
            ),
            (
                r#"[[histories]]
                id = "r"
                backend = { type = "redis", url = "http://x" }"#,
                r#"backend.url: "http://x" is not a Redis URL"#,
            ),
            (
                r#"[[histories]]
                id = "m"
                backend = { type = "memory", ttl = 5 }"#,
                r#"histories[0] (id "m"): backend.ttl: applies to the redis backend only"#,
            ),
            (
                r#"[[histories]]
                id = "../etc"
                backend = { type = "file" }"#,
                r#"histories[0] (id "../etc"): id: must be 1-64 characters"#,
            ),
            (
                r#"[[histories]]
                id = "a"
                backend = { type = "file", max_turn = 5 }"#,
                "unknown field `max_turn`",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(text).unwrap_err();
            assert!(
                error.contains(expected),
                "{error}\n  should contain: {expected}"
            );
        }
    }

    #[tokio::test]
    async fn an_unreachable_redis_stops_startup_naming_the_history() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let specs = parse(&format!(
            r#"[[histories]]
            id = "shared"
            backend = {{ type = "redis", url = "redis://127.0.0.1:{port}" }}"#
        ))
        .unwrap();
        let error = Histories::open(&specs, 5).await.err().unwrap().to_string();
        assert!(
            error.starts_with(
                r#"history "shared" (histories[0] (id "shared")): backend.url: cannot reach Redis"#
            ),
            "{error}"
        );
    }
}
