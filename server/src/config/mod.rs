//! Parlor's configuration, read once at startup from the environment.
//!
//! Invalid values stop the server with a message naming the variable and what it accepts;
//! nothing is silently replaced by a default.

use parlor_domain::history::{HistoryLength, HistoryPolicy};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// The most a request body without images may hold (with images: `PARLOR_MAX_CONTEXT_BYTES`).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// An API key. Its `Debug` never shows the key, so it cannot end up in a log line.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

#[derive(Debug, Deserialize)]
struct OpenAiEnv {
    base_url: Option<String>,
    api_key: Option<ApiKey>,
}

#[derive(Debug, Deserialize)]
struct ParlorEnv {
    model: Option<String>,
    #[serde(default = "defaults::llm_timeout_secs")]
    llm_timeout_secs: u64,
    #[serde(default = "defaults::agents_dir")]
    agents_dir: PathBuf,
    #[serde(default = "defaults::data_dir")]
    data_dir: PathBuf,
    #[serde(default = "defaults::max_message_chars")]
    max_message_chars: usize,
    #[serde(default = "defaults::max_context_bytes")]
    max_context_bytes: usize,
    #[serde(default = "defaults::mirror_delay_ms")]
    mirror_delay_ms: u64,
    #[serde(default = "defaults::yes")]
    debug_panel: bool,
    /// The configuration file; `parlor.toml` in the working directory when unset.
    config: Option<PathBuf>,
    /// Allows the chat's admin commands to requests that carry it.
    admin_token: Option<ApiKey>,
    /// Serves the history tools over MCP at `/mcp` to requests carrying it as a bearer token.
    mcp_token: Option<ApiKey>,
    /// Signs browser session cookies (64 hex digits); made and kept by Parlor when unset.
    cookie_key: Option<ApiKey>,
    /// The address users reach Parlor at (behind a proxy, its https address).
    public_url: Option<String>,
    /// Mark cookies `Secure`; by default when `public_url` is https.
    cookie_secure: Option<bool>,
    #[serde(default = "defaults::shutdown_grace_secs")]
    shutdown_grace_secs: u64,
    #[serde(default = "defaults::rate_limit_chat")]
    rate_limit_chat: u32,
    #[serde(default = "defaults::rate_limit_pages")]
    rate_limit_pages: u32,
    trusted_proxies: Option<String>,
    metrics_addr: Option<String>,
}

mod defaults {
    use std::path::PathBuf;
    pub const LLM_TIMEOUT_SECS: u64 = 60;
    pub const AGENTS_DIR: &str = "agents";
    pub const DATA_DIR: &str = "data";
    pub const MAX_MESSAGE_CHARS: usize = 32_000;
    pub const MAX_CONTEXT_BYTES: usize = 10 * 1024 * 1024;
    pub const MIRROR_DELAY_MS: u64 = 25;
    pub const BACKUP_RETENTION: usize = 5;
    pub const CONTEXT_MAX_MESSAGES: usize = 200;
    pub const CONTEXT_MAX_BYTES: usize = 65_536;
    pub const SHUTDOWN_GRACE_SECS: u64 = 10;

    pub fn shutdown_grace_secs() -> u64 {
        SHUTDOWN_GRACE_SECS
    }
    pub const RATE_LIMIT_CHAT: u32 = 60;
    pub const RATE_LIMIT_PAGES: u32 = 300;
    pub fn rate_limit_chat() -> u32 {
        RATE_LIMIT_CHAT
    }
    pub fn rate_limit_pages() -> u32 {
        RATE_LIMIT_PAGES
    }

    pub fn llm_timeout_secs() -> u64 {
        LLM_TIMEOUT_SECS
    }
    pub fn agents_dir() -> PathBuf {
        PathBuf::from(AGENTS_DIR)
    }
    pub fn data_dir() -> PathBuf {
        PathBuf::from(DATA_DIR)
    }
    pub fn max_message_chars() -> usize {
        MAX_MESSAGE_CHARS
    }
    pub fn max_context_bytes() -> usize {
        MAX_CONTEXT_BYTES
    }
    pub fn mirror_delay_ms() -> u64 {
        MIRROR_DELAY_MS
    }
    pub fn yes() -> bool {
        true
    }
}

/// An environment variable Parlor reads: its name, its default (as the README's tables say
/// it) and what it does. `parlor --help` prints these, and a test keeps the README's tables
/// and the defaults above in step with them.
pub struct Variable {
    pub name: &'static str,
    pub default: String,
    pub meaning: &'static str,
}

/// Every environment variable Parlor reads.
pub fn variables() -> Vec<Variable> {
    let v = |name, default: &str, meaning| Variable {
        name,
        default: default.to_owned(),
        meaning,
    };
    vec![
        v(
            "OPENAI_BASE_URL",
            "https://api.openai.com/v1",
            "an OpenAI-compatible endpoint (the default applies when only a key is set)",
        ),
        v(
            "OPENAI_API_KEY",
            "none",
            "sent upstream as a bearer token; never sent to the browser or logged",
        ),
        v(
            "PARLOR_MODEL",
            "the agent template's model",
            "overrides every agent's model; `mirror` forces the offline model",
        ),
        v(
            "PARLOR_LLM_TIMEOUT_SECS",
            &defaults::LLM_TIMEOUT_SECS.to_string(),
            "seconds the model server may take to answer, and to send each next piece",
        ),
        v(
            "PARLOR_AGENTS_DIR",
            defaults::AGENTS_DIR,
            "folder of <id>/template.json agent templates",
        ),
        v(
            "PARLOR_DATA_DIR",
            defaults::DATA_DIR,
            "where file-backed histories store conversations",
        ),
        v(
            "PARLOR_CONFIG",
            "parlor.toml",
            "the configuration file (the default only if present; must exist when set)",
        ),
        v(
            "HISTORY_BACKUP_RETENTION",
            &defaults::BACKUP_RETENTION.to_string(),
            "backups kept per conversation by file histories (at least 1)",
        ),
        v(
            "HISTORY_CONTEXT_MAX_MESSAGES",
            &defaults::CONTEXT_MAX_MESSAGES.to_string(),
            "a conversation with more messages gets the maintenance signal (compact it)",
        ),
        v(
            "HISTORY_CONTEXT_MAX_BYTES",
            &defaults::CONTEXT_MAX_BYTES.to_string(),
            "a conversation whose messages and summary take more bytes gets the maintenance signal",
        ),
        v(
            "PARLOR_MCP_TOKEN",
            "unset",
            "serves the history tools over MCP at /mcp to requests with this bearer token",
        ),
        v(
            "PARLOR_COOKIE_KEY",
            "made once, kept in Redis or the data folder",
            "64 hex digits: the key that signs browser session cookies (set the same on processes that share no Redis or data folder)",
        ),
        v(
            "PARLOR_ADMIN_TOKEN",
            "unset",
            "allows admin chat commands to requests carrying it in X-Parlor-Admin-Token",
        ),
        v(
            "PARLOR_MAX_MESSAGE_CHARS",
            &defaults::MAX_MESSAGE_CHARS.to_string(),
            "the longest message accepted, in characters",
        ),
        v(
            "PARLOR_MAX_CONTEXT_BYTES",
            &defaults::MAX_CONTEXT_BYTES.to_string(),
            "the largest chat request with images, in bytes (others: 1048576)",
        ),
        v(
            "PARLOR_MIRROR_DELAY_MS",
            &defaults::MIRROR_DELAY_MS.to_string(),
            "pause between the mirror model's words",
        ),
        v(
            "DEFAULT_HISTORY_POLICY",
            "unset",
            "lastN, all or none; beats the URL and the template",
        ),
        v(
            "DEFAULT_HISTORY_LENGTH",
            "unset",
            "an integer (0 or less acts as 1); beats the URL and the template",
        ),
        v(
            "NEXT_PUBLIC_DEFAULT_HISTORY_POLICY",
            "unset",
            "AgentDock's name for DEFAULT_HISTORY_POLICY",
        ),
        v(
            "NEXT_PUBLIC_DEFAULT_HISTORY_LENGTH",
            "unset",
            "AgentDock's name for DEFAULT_HISTORY_LENGTH",
        ),
        v(
            "HISTORY_URL_OVERRIDES",
            "true",
            "false ignores historyPolicy / historyLength in page URLs",
        ),
        v(
            "PARLOR_DEBUG_PANEL",
            "true",
            "false turns off the ?debug=true panel and the debug endpoint",
        ),
        v(
            "PARLOR_PUBLIC_URL",
            "unset",
            "the address users reach Parlor at, e.g. https://chat.example.com behind a proxy",
        ),
        v(
            "PARLOR_COOKIE_SECURE",
            "on when PARLOR_PUBLIC_URL is https",
            "true marks cookies Secure (sent over HTTPS only); false never does",
        ),
        v(
            "PARLOR_SHUTDOWN_GRACE_SECS",
            &defaults::SHUTDOWN_GRACE_SECS.to_string(),
            "on SIGTERM, seconds replies in progress may take to finish before what they have is stored",
        ),
        v(
            "PARLOR_RATE_LIMIT_CHAT",
            &defaults::RATE_LIMIT_CHAT.to_string(),
            "chat API requests a client address may make per minute (0: no limit)",
        ),
        v(
            "PARLOR_RATE_LIMIT_PAGES",
            &defaults::RATE_LIMIT_PAGES.to_string(),
            "page loads and page data requests per client address per minute (0: no limit)",
        ),
        v(
            "PARLOR_TRUSTED_PROXIES",
            "none",
            "comma-separated proxy addresses whose X-Forwarded-For names the client",
        ),
        v(
            "PARLOR_LOG_FORMAT",
            "text",
            "json writes one JSON object per log line",
        ),
        v(
            "PARLOR_METRICS_ADDR",
            "unset",
            "also serve /metrics here, without the admin token (keep it private)",
        ),
        v(
            "RUST_LOG",
            "info",
            "log filter (tracing), e.g. parlor_server=debug",
        ),
        v(
            "LEPTOS_SITE_ADDR",
            "127.0.0.1:3000",
            "the address to listen on (Leptos.toml's when unset)",
        ),
    ]
}

/// The variables as `parlor --help` lists them.
pub fn variables_help() -> String {
    let mut out = String::from("Environment variables (default in brackets):\n");
    for var in variables() {
        out.push_str(&format!(
            "  {:<36} {} [{}]\n",
            var.name, var.meaning, var.default
        ));
    }
    out
}

/// Where replies come from.
#[derive(Debug, Clone)]
pub enum LlmConfig {
    /// The built-in offline model.
    Mirror,
    /// An OpenAI-compatible Chat Completions server.
    OpenAi {
        base_url: String,
        api_key: Option<ApiKey>,
    },
}

#[derive(Debug, Clone)]
pub struct Config {
    pub llm: LlmConfig,
    /// Overrides every agent's model when set.
    pub model_override: Option<String>,
    /// How long the upstream may take to answer, and to send each next piece of a reply.
    pub llm_timeout: Duration,
    pub agents_dir: PathBuf,
    pub data_dir: PathBuf,
    /// The longest user message accepted, in characters.
    pub max_message_chars: usize,
    /// The largest chat request body that carries images.
    pub max_context_bytes: usize,
    /// Pause between the mirror model's words.
    pub mirror_delay: Duration,
    pub history: HistoryEnv,
    pub debug_panel: bool,
    /// `PARLOR_CONFIG`: a configuration file that must exist. Unset: `parlor.toml` when it
    /// exists, else the built-in defaults.
    pub config_file: Option<PathBuf>,
    /// `HISTORY_BACKUP_RETENTION`: backups kept per conversation by the file backend.
    pub backup_retention: usize,
    /// When a conversation gets the maintenance signal (`HISTORY_CONTEXT_MAX_*`).
    pub maintenance: parlor_domain::summary::Thresholds,
    /// `PARLOR_ADMIN_TOKEN`: without it, admin commands are refused to everyone.
    pub admin_token: Option<ApiKey>,
    /// `PARLOR_MCP_TOKEN`: without it, `/mcp` is off.
    pub mcp_token: Option<ApiKey>,
    /// `PARLOR_COOKIE_KEY`: the operator's key for browser session cookies.
    pub cookie_key: Option<crate::cookie_key::CookieKey>,
    /// `PARLOR_PUBLIC_URL`: the address users reach Parlor at.
    pub public_url: Option<String>,
    /// Cookies carry `Secure`.
    pub cookie_secure: bool,
    /// `PARLOR_SHUTDOWN_GRACE_SECS`: how long replies may run on after SIGTERM.
    pub shutdown_grace: Duration,
    /// Requests per minute per client address (0: no limit).
    pub rate_limit_chat: u32,
    pub rate_limit_pages: u32,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// A separate address serving `/metrics` without the admin token.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// History settings the operator fixed in the environment; they beat URL and template.
#[derive(Debug, Clone, Default)]
pub struct HistoryEnv {
    pub policy: Option<HistoryPolicy>,
    pub length: Option<HistoryLength>,
    pub url_overrides: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid environment: {0}")]
    Env(String),
    #[error("{var}={value:?} is invalid: {reason}")]
    Invalid {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error("{a} and {b} are both set and differ ({a_value:?} vs {b_value:?}); set only one")]
    Conflict {
        a: &'static str,
        b: &'static str,
        a_value: String,
        b_value: String,
    },
}

impl Config {
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    /// Reads configuration from the given variables (the environment, or a test's map).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        // An empty variable counts as unset, as in most shells' `VAR=` idiom.
        let vars: Vec<(String, String)> = vars.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        let openai: OpenAiEnv = envy::prefixed("OPENAI_")
            .from_iter(vars.clone())
            .map_err(|e| naming_variable(e, "OPENAI_"))?;
        let parlor: ParlorEnv = envy::prefixed("PARLOR_")
            .from_iter(vars.clone())
            .map_err(|e| naming_variable(e, "PARLOR_"))?;
        let get = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());

        let model_override = parlor.model.clone();
        let llm = if model_override.as_deref() == Some(parlor_domain::mirror::MIRROR_MODEL)
            || (openai.base_url.is_none() && openai.api_key.is_none())
        {
            LlmConfig::Mirror
        } else {
            let base_url = openai
                .base_url
                .unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
            if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
                return Err(ConfigError::Invalid {
                    var: "OPENAI_BASE_URL",
                    value: base_url,
                    reason: "must start with http:// or https://".into(),
                });
            }
            LlmConfig::OpenAi {
                base_url: base_url.trim_end_matches('/').to_owned(),
                api_key: openai.api_key,
            }
        };
        if parlor.llm_timeout_secs == 0 {
            return Err(ConfigError::Invalid {
                var: "PARLOR_LLM_TIMEOUT_SECS",
                value: "0".into(),
                reason: "must be at least 1 (seconds)".into(),
            });
        }
        if parlor.max_message_chars == 0 {
            return Err(ConfigError::Invalid {
                var: "PARLOR_MAX_MESSAGE_CHARS",
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        if parlor.max_context_bytes < MAX_BODY_BYTES {
            return Err(ConfigError::Invalid {
                var: "PARLOR_MAX_CONTEXT_BYTES",
                value: parlor.max_context_bytes.to_string(),
                reason: format!(
                    "must be at least {} (the limit of requests without images)",
                    MAX_BODY_BYTES
                ),
            });
        }

        let policy = one_of(
            &get,
            "DEFAULT_HISTORY_POLICY",
            "NEXT_PUBLIC_DEFAULT_HISTORY_POLICY",
        )?
        .map(|(var, value)| {
            value
                .parse::<HistoryPolicy>()
                .map_err(|_| ConfigError::Invalid {
                    var,
                    value: value.clone(),
                    reason: format!(
                        "allowed values: {} (case-sensitive)",
                        HistoryPolicy::ALLOWED
                    ),
                })
        })
        .transpose()?;
        let length = one_of(
            &get,
            "DEFAULT_HISTORY_LENGTH",
            "NEXT_PUBLIC_DEFAULT_HISTORY_LENGTH",
        )?
        .map(|(var, value)| {
            value
                .parse::<HistoryLength>()
                .map_err(|_| ConfigError::Invalid {
                    var,
                    value: value.clone(),
                    reason: "must be an integer such as 20 (0 or less acts as 1)".into(),
                })
        })
        .transpose()?;
        let url_overrides = match get("HISTORY_URL_OVERRIDES").as_deref() {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    var: "HISTORY_URL_OVERRIDES",
                    value: other.to_owned(),
                    reason: "allowed values: true, false".into(),
                })
            }
        };

        let positive = |var: &'static str, default: usize| match get(var) {
            None => Ok(default),
            Some(value) => match value.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(ConfigError::Invalid {
                    var,
                    value,
                    reason: "must be a whole number of at least 1".into(),
                }),
            },
        };
        let maintenance = parlor_domain::summary::Thresholds {
            max_messages: positive(
                "HISTORY_CONTEXT_MAX_MESSAGES",
                defaults::CONTEXT_MAX_MESSAGES,
            )?,
            max_bytes: positive("HISTORY_CONTEXT_MAX_BYTES", defaults::CONTEXT_MAX_BYTES)?,
        };
        let mcp_token = match parlor.mcp_token {
            Some(token) if token.expose().trim().is_empty() => {
                return Err(ConfigError::Invalid {
                    var: "PARLOR_MCP_TOKEN",
                    value: String::new(),
                    reason: "must not be empty (unset it to turn /mcp off)".into(),
                })
            }
            token => token,
        };
        let cookie_key = parlor.cookie_key.map(|key| {
            let key = crate::cookie_key::CookieKey::parse(key.expose());
            key.ok_or_else(|| ConfigError::Invalid {
                var: "PARLOR_COOKIE_KEY",
                value: "[redacted]".into(),
                reason: crate::cookie_key::CookieKey::FORMAT.into(),
            })
        });
        let cookie_key = cookie_key.transpose()?;
        let backup_retention = match get("HISTORY_BACKUP_RETENTION") {
            None => defaults::BACKUP_RETENTION,
            Some(value) => match value.parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(ConfigError::Invalid {
                        var: "HISTORY_BACKUP_RETENTION",
                        value,
                        reason: "must be a whole number of at least 1".into(),
                    })
                }
            },
        };

        let trusted_proxies = parlor
            .trusted_proxies
            .iter()
            .flat_map(|list| list.split(','))
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<std::net::IpAddr>()
                    .map_err(|_| ConfigError::Invalid {
                        var: "PARLOR_TRUSTED_PROXIES",
                        value: item.to_owned(),
                        reason: "must be IP addresses separated by commas, e.g. 127.0.0.1,10.0.0.2"
                            .into(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;

        let metrics_addr = parlor
            .metrics_addr
            .map(|addr| {
                addr.parse::<std::net::SocketAddr>()
                    .map_err(|_| ConfigError::Invalid {
                        var: "PARLOR_METRICS_ADDR",
                        value: addr.clone(),
                        reason: "must be an address and port, e.g. 127.0.0.1:9100".into(),
                    })
            })
            .transpose()?;

        Ok(Config {
            llm,
            model_override,
            llm_timeout: Duration::from_secs(parlor.llm_timeout_secs),
            agents_dir: parlor.agents_dir,
            data_dir: parlor.data_dir,
            max_message_chars: parlor.max_message_chars,
            max_context_bytes: parlor.max_context_bytes,
            mirror_delay: Duration::from_millis(parlor.mirror_delay_ms),
            history: HistoryEnv {
                policy,
                length,
                url_overrides,
            },
            debug_panel: parlor.debug_panel,
            config_file: parlor.config,
            backup_retention,
            maintenance,
            admin_token: parlor.admin_token,
            mcp_token,
            cookie_key,
            public_url: parlor.public_url.clone(),
            shutdown_grace: Duration::from_secs(parlor.shutdown_grace_secs),
            rate_limit_chat: parlor.rate_limit_chat,
            rate_limit_pages: parlor.rate_limit_pages,
            trusted_proxies,
            metrics_addr,
            cookie_secure: parlor.cookie_secure.unwrap_or_else(|| {
                parlor
                    .public_url
                    .as_deref()
                    .is_some_and(|url| url.starts_with("https://"))
            }),
        })
    }

    pub fn uses_mirror(&self) -> bool {
        matches!(self.llm, LlmConfig::Mirror)
    }

    /// Whether `given` is the MCP token (constant time); false when `/mcp` is off.
    pub fn mcp_token_matches(&self, given: Option<&str>) -> bool {
        use subtle::ConstantTimeEq;
        match (&self.mcp_token, given) {
            (Some(expected), Some(given)) => {
                bool::from(expected.expose().as_bytes().ct_eq(given.as_bytes()))
            }
            _ => false,
        }
    }

    /// Whether `given` is the operator's admin token (compared in constant time); always
    /// false when no token is configured.
    pub fn admin_token_matches(&self, given: Option<&str>) -> bool {
        use subtle::ConstantTimeEq;
        match (&self.admin_token, given) {
            (Some(expected), Some(given)) => {
                bool::from(expected.expose().as_bytes().ct_eq(given.as_bytes()))
            }
            _ => false,
        }
    }
}

/// envy names variables without their prefix; put it back so the message names the real one.
fn naming_variable(error: envy::Error, prefix: &str) -> ConfigError {
    let text = error.to_string();
    const MARK: &str = "provided by ";
    ConfigError::Env(match text.rfind(MARK) {
        Some(at) => format!("{}{MARK}{prefix}{}", &text[..at], &text[at + MARK.len()..]),
        None => text,
    })
}

/// The value of `primary` or its AgentDock-era `alias`; both set and different is an error.
fn one_of(
    get: &impl Fn(&str) -> Option<String>,
    primary: &'static str,
    alias: &'static str,
) -> Result<Option<(&'static str, String)>, ConfigError> {
    match (get(primary), get(alias)) {
        (Some(a), Some(b)) if a != b => Err(ConfigError::Conflict {
            a: primary,
            b: alias,
            a_value: a,
            b_value: b,
        }),
        (Some(a), _) => Ok(Some((primary, a))),
        (None, Some(b)) => Ok(Some((alias, b))),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_documents_every_variable_with_its_default() {
        let readme = include_str!("../../README.md");
        for var in variables() {
            let row = readme
                .lines()
                .find(|l| l.starts_with("| ") && l.contains(&format!("`{}`", var.name)))
                .unwrap_or_else(|| panic!("{} is not in the README's tables", var.name));
            let default_cell = row.rsplit('|').nth(1).unwrap().replace('`', "");
            assert!(
                default_cell.contains(&var.default),
                "README gives {} the default {default_cell:?}; Parlor's is {:?}",
                var.name,
                var.default
            );
        }
    }

    #[test]
    fn the_listed_defaults_are_the_ones_that_apply() {
        let config = Config::from_vars(Vec::new()).unwrap();
        let default = |name: &str| {
            variables()
                .into_iter()
                .find(|v| v.name == name)
                .unwrap()
                .default
        };
        assert_eq!(
            default("PARLOR_LLM_TIMEOUT_SECS"),
            config.llm_timeout.as_secs().to_string()
        );
        assert_eq!(
            default("PARLOR_AGENTS_DIR"),
            config.agents_dir.display().to_string()
        );
        assert_eq!(
            default("PARLOR_DATA_DIR"),
            config.data_dir.display().to_string()
        );
        assert_eq!(
            default("PARLOR_MAX_MESSAGE_CHARS"),
            config.max_message_chars.to_string()
        );
        assert_eq!(
            default("PARLOR_MAX_CONTEXT_BYTES"),
            config.max_context_bytes.to_string()
        );
        assert_eq!(
            default("PARLOR_MIRROR_DELAY_MS"),
            config.mirror_delay.as_millis().to_string()
        );
        assert_eq!(
            default("HISTORY_CONTEXT_MAX_MESSAGES"),
            config.maintenance.max_messages.to_string()
        );
        assert_eq!(
            default("HISTORY_CONTEXT_MAX_BYTES"),
            config.maintenance.max_bytes.to_string()
        );
        assert_eq!(
            default("HISTORY_BACKUP_RETENTION"),
            config.backup_retention.to_string()
        );
        assert_eq!(
            default("HISTORY_URL_OVERRIDES"),
            config.history.url_overrides.to_string()
        );
        assert_eq!(
            default("PARLOR_DEBUG_PANEL"),
            config.debug_panel.to_string()
        );
        let with_key = Config::from_vars(vec![("OPENAI_API_KEY".into(), "k".into())]).unwrap();
        match with_key.llm {
            LlmConfig::OpenAi { base_url, .. } => assert_eq!(base_url, default("OPENAI_BASE_URL")),
            LlmConfig::Mirror => panic!("a key selects the upstream"),
        }
    }

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn defaults_to_the_mirror_model_with_nothing_configured() {
        let c = config(&[]).unwrap();
        assert!(c.uses_mirror());
        assert_eq!(c.data_dir, PathBuf::from("data"));
        assert!(c.history.url_overrides);
        assert!(c.debug_panel);
    }

    #[test]
    fn an_api_key_or_base_url_selects_the_openai_client() {
        let c = config(&[("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1/")]).unwrap();
        match c.llm {
            LlmConfig::OpenAi { base_url, api_key } => {
                assert_eq!(base_url, "http://127.0.0.1:11434/v1");
                assert!(api_key.is_none());
            }
            LlmConfig::Mirror => panic!("expected the OpenAI client"),
        }
        let c = config(&[("OPENAI_API_KEY", "sk-secret")]).unwrap();
        assert!(!c.uses_mirror());
        assert!(
            !format!("{c:?}").contains("sk-secret"),
            "keys never reach logs"
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = config(&[("PARLOR_LLM_TIMEOUT_SECS", "soon")]).unwrap_err();
        assert!(err.to_string().contains("PARLOR_LLM_TIMEOUT_SECS"), "{err}");
        let err = config(&[("DEFAULT_HISTORY_POLICY", "LastN")]).unwrap_err();
        assert!(err.to_string().contains("DEFAULT_HISTORY_POLICY"), "{err}");
        assert!(err.to_string().contains("lastN, all, none"), "{err}");
        for bad in ["20abc", "5.9"] {
            let err = config(&[("NEXT_PUBLIC_DEFAULT_HISTORY_LENGTH", bad)]).unwrap_err();
            assert!(
                err.to_string()
                    .contains("NEXT_PUBLIC_DEFAULT_HISTORY_LENGTH"),
                "{err}"
            );
        }
        assert!(config(&[("OPENAI_BASE_URL", "localhost:8080")]).is_err());
        assert!(config(&[("HISTORY_URL_OVERRIDES", "no")]).is_err());
    }

    #[test]
    fn history_environment_accepts_agentdock_names_and_refuses_conflicts() {
        let c = config(&[
            ("NEXT_PUBLIC_DEFAULT_HISTORY_POLICY", "all"),
            ("DEFAULT_HISTORY_LENGTH", "0"),
        ])
        .unwrap();
        assert_eq!(c.history.policy, Some(HistoryPolicy::All));
        assert_eq!(c.history.length, Some(HistoryLength::new(0)));
        let err = config(&[
            ("DEFAULT_HISTORY_POLICY", "all"),
            ("NEXT_PUBLIC_DEFAULT_HISTORY_POLICY", "none"),
        ])
        .unwrap_err();
        assert!(matches!(err, ConfigError::Conflict { .. }), "{err}");
        assert!(config(&[
            ("DEFAULT_HISTORY_POLICY", "all"),
            ("NEXT_PUBLIC_DEFAULT_HISTORY_POLICY", "all"),
        ])
        .is_ok());
    }
}
