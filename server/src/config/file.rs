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
    /// `[[context]]`: the operator's context providers.
    #[serde(default)]
    pub context: Vec<ContextProviderEntry>,
    /// `[tools]`: the limits of a turn's tool loop.
    pub tools: Option<ToolsSection>,
    /// `[[mcp_servers]]`: the tool servers agents may call.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerEntry>,
    /// `[[providers]]`: LLM endpoints besides the environment's (`OPENAI_BASE_URL`).
    #[serde(default)]
    pub providers: Vec<ProviderEntry>,
}

/// `[[providers]]`: an LLM endpoint that `[[models]]` entries name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// `[a-z0-9_-]{1,32}`, unique; not `openai` or `mirror` (Parlor's own).
    pub id: String,
    /// `openai` (Chat Completions, the default).
    pub kind: Option<String>,
    /// The API's base URL, as for `OPENAI_BASE_URL` (`https://api.openai.com/v1`).
    pub base_url: String,
    /// The name of the environment variable that holds the key (never the key itself).
    pub api_key_env: Option<String>,
    /// Headers sent with every request.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Seconds a model call may take (default `PARLOR_LLM_TIMEOUT_SECS`).
    pub timeout_secs: Option<i64>,
}

/// `[tools]`: how far one turn's tool loop may go.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsSection {
    /// Model calls that may ask for tools in one turn (1..=50, default 8).
    pub max_rounds: Option<i64>,
    /// Tool calls in one turn, all rounds together (1..=500, default 32).
    pub max_calls: Option<i64>,
}

/// `[[mcp_servers]]`: one tool server (stdio, streamable HTTP, or Parlor's built-in one).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// `[a-z0-9_-]{1,32}`, unique; the model sees its tools as `<id>__<tool>`.
    pub id: String,
    /// stdio: the program Parlor starts (one process per server).
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: the only variables passed (with PATH and HOME); `${VAR}` reads Parlor's.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Streamable HTTP: the server's URL.
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request; `${VAR}` reads Parlor's.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// `"parlor"`: Parlor's own tool server (no process, no URL).
    pub builtin: Option<String>,
    /// Seconds one call may take (1..=600, default 30).
    pub timeout_secs: Option<i64>,
    /// The longest result kept, in bytes (default 65536); a longer one is cut, saying so.
    pub max_result_bytes: Option<i64>,
    /// The largest read from the server (a stdio line, an HTTP body, one SSE event), in
    /// bytes (65536..=67108864; default 8 MiB, or twice max_result_bytes and 64 KiB more);
    /// a larger one ends the call with a tool error.
    pub max_read_bytes: Option<i64>,
    /// The most content items of one result (1..=10000, default 64); more is a tool error.
    pub max_result_items: Option<i64>,
    /// `never` (default), `always`, or `first` (the first use in a conversation).
    pub confirm: Option<String>,
    /// The tools offered (default: every tool the server lists).
    pub allow: Option<Vec<String>>,
    /// The results' retention: true (default), false, or for the next n turns.
    pub save: Option<parlor_domain::context::Save>,
    /// `shared` (default: one process or HTTP session for every user) or `per_user` (one
    /// per user, started on first use, stopped when idle).
    pub scope: Option<String>,
    /// per_user: minutes without a call after which a user's process or session is ended
    /// (1..=1440, default 15).
    pub idle_minutes: Option<i64>,
    /// per_user: the most users served at once (1..=1000, default 32); the least recently
    /// used idle one is ended to make room.
    pub max_users: Option<i64>,
    /// per_user: values each user sets in the page (`/account/tools`), given to their
    /// process as environment variables, or to an HTTP server through `user_headers`.
    #[serde(default)]
    pub user_secrets: Vec<String>,
    /// per_user, url servers: headers made from the user's secrets (`{NAME}` is replaced).
    #[serde(default)]
    pub user_headers: std::collections::BTreeMap<String, String>,
}

/// `[[context]]`: context added to every turn of the agents that name it in
/// `chatSettings.context`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextProviderEntry {
    /// The source name the model and the debug panel see.
    pub id: String,
    /// `time` or `file`.
    pub kind: String,
    /// `time`: an IANA time zone (default: the server's).
    pub time_zone: Option<String>,
    /// `file`: the file, relative to this configuration file.
    pub path: Option<PathBuf>,
    /// `file`: the largest file read, in bytes (default 65536).
    pub max_bytes: Option<i64>,
    /// Sent with the turn's message (default true).
    pub display: Option<bool>,
    /// Kept in the history: false (default), true, or for the next n turns.
    pub save: Option<parlor_domain::context::Save>,
}

/// `[history]`: the processor chain and the window ceiling.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistorySection {
    /// Processors after the policy step, in order.
    pub chain: Option<Vec<String>>,
    /// The agent-wide window ceiling, in messages.
    pub agent_max_ctx: Option<i64>,
    /// The model that keeps conversation summaries (default: each conversation's own).
    pub summary_model: Option<String>,
    /// Every model's `window_step` unless its entry sets one (0: cut exactly).
    pub window_step: Option<i64>,
    /// Every model's `budget_step` unless its entry sets one (0: cut exactly).
    pub budget_step: Option<i64>,
}

/// `[[models]]`: a model users can switch to with `!model <name>`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    pub name: String,
    /// `openai` (the environment's OpenAI-compatible upstream), `mirror` (the built-in
    /// offline model) or the id of a `[[providers]]` entry.
    pub provider: Option<String>,
    /// The model id sent upstream (default: `name`).
    pub model: Option<String>,
    /// The model's preferred window, in messages.
    pub max_context: Option<i64>,
    /// Tokens one request may take.
    pub token_budget: Option<i64>,
    /// Whether the model takes images (default true); `false` sends a placeholder instead.
    pub vision: Option<bool>,
    /// The model's context window in tokens (the context meter's limit).
    pub context_tokens: Option<i64>,
    /// US dollars per million prompt tokens (with `price_out`: the meter shows costs).
    pub price_in: Option<f64>,
    /// US dollars per million completion tokens.
    pub price_out: Option<f64>,
    /// How far past the window the sliding window cuts when it cuts, in messages, so the
    /// prompt's prefix (and the provider's cache) holds between cuts (default: `[history]`'s).
    pub window_step: Option<i64>,
    /// The same for the token budget, in tokens (default: `[history]`'s).
    pub budget_step: Option<i64>,
    /// US dollars per million prompt tokens read from the provider's cache (default:
    /// `price_in`).
    pub price_cached_in: Option<f64>,
    /// US dollars per million prompt tokens written to the provider's cache (default:
    /// `price_in`).
    pub price_cache_write: Option<f64>,
    /// What the first call of a turn tells the model about its tools: `auto` (default),
    /// `required`, or one tool's model name (`clock__get_current_time`).
    pub tool_choice: Option<String>,
    /// The last call of a loop a limit ended: `none` (default: the tools stay, with
    /// `tool_choice: "none"`) or `without_tools`.
    pub last_call: Option<String>,
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
