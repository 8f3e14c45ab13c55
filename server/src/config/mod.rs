//! Parlor's configuration, read once at startup from the environment.
//!
//! Each variable is declared once in [`vars`] (name, default, meaning, how it is read);
//! [`Config::from_vars`] puts them together. Invalid values stop the server with a message
//! naming the variable and what it accepts; nothing is silently replaced by a default.

pub mod agents;
pub mod auth;
pub mod cookie_key;
pub mod file;

pub mod vars;

pub use vars::{ConfigError, LogFormat, MAX_BODY_BYTES};

use parlor_domain::history::{HistoryLength, HistoryPolicy};
use std::path::PathBuf;
use std::time::Duration;
use vars::*;

/// An API key. Its `Debug` never shows the key, so it cannot end up in a log line.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// A key read from the environment (a provider's `api_key_env`).
    pub(crate) fn new(value: String) -> ApiKey {
        ApiKey(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
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
    pub cookie_key: Option<crate::config::cookie_key::CookieKey>,
    /// `PARLOR_SECRETS_KEY`: the operator's key for the values users set for tool servers.
    pub secrets_key: Option<crate::config::cookie_key::CookieKey>,
    /// `PARLOR_PUBLIC_URL`: the address users reach Parlor at.
    pub public_url: Option<String>,
    /// Cookies carry `Secure`.
    pub cookie_secure: bool,
    /// `PARLOR_SHUTDOWN_GRACE_SECS`: how long replies may run on after SIGTERM.
    pub shutdown_grace: Duration,
    /// What a connection may hold and take (`PARLOR_MAX_CONNECTIONS_PER_ADDRESS`, …).
    pub connections: Connections,
    /// Requests per minute per client address (0: no limit).
    pub rate_limit_chat: u32,
    pub rate_limit_pages: u32,
    /// Login attempts per client address per minute.
    pub rate_limit_login: u32,
    /// New accounts per client address per hour.
    pub rate_limit_signup: u32,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// A separate address serving `/metrics` without the admin token.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// `PARLOR_LOG_FORMAT`.
    pub log_format: LogFormat,
    /// `RUST_LOG`: which logs are written (unset: `info`, and debug for Parlor in
    /// development).
    pub log_filter: Option<String>,
    /// Who may use Parlor (`PARLOR_AUTH` and its mode's variables).
    pub auth: auth::AuthConfig,
}

/// History settings the operator fixed in the environment; they beat URL and template.
#[derive(Debug, Clone, Default)]
pub struct HistoryEnv {
    pub policy: Option<HistoryPolicy>,
    pub length: Option<HistoryLength>,
    pub url_overrides: bool,
}

impl Config {
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    /// Reads configuration from the given variables (the environment, or a test's map).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let env = Env::new(vars);
        let public_url = env.set(&PARLOR_PUBLIC_URL)?;
        let trusted_proxies = env.set(&PARLOR_TRUSTED_PROXIES)?.unwrap_or_default();
        let mut auth = auth_config(&env, public_url.as_deref(), &trusted_proxies)?;
        let https = public_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"));
        let cookie_secure = env.set(&PARLOR_COOKIE_SECURE)?.unwrap_or(https);
        // Served over https at the site's root: the login cookie takes the `__Host-` prefix,
        // which browsers keep only when it is Secure, for `/`, and set by this very host (no
        // sibling subdomain can plant or overwrite it).
        let at_root = public_url.as_deref().is_none_or(|u| {
            url::Url::parse(u).is_ok_and(|u| u.path() == "/" || u.path().is_empty())
        });
        if cookie_secure && at_root {
            auth.login_cookie = auth::HOST_LOGIN_COOKIE;
        }
        Ok(Config {
            llm: llm(&env)?,
            model_override: env.set(&PARLOR_MODEL)?,
            llm_timeout: Duration::from_secs(env.value(&PARLOR_LLM_TIMEOUT_SECS)?),
            agents_dir: env.value(&PARLOR_AGENTS_DIR)?,
            data_dir: env.value(&PARLOR_DATA_DIR)?,
            max_message_chars: env.value(&PARLOR_MAX_MESSAGE_CHARS)?,
            max_context_bytes: env.value(&PARLOR_MAX_CONTEXT_BYTES)?,
            mirror_delay: Duration::from_millis(env.value(&PARLOR_MIRROR_DELAY_MS)?),
            history: HistoryEnv {
                policy: env.one_of(&DEFAULT_HISTORY_POLICY, &NEXT_PUBLIC_DEFAULT_HISTORY_POLICY)?,
                length: env.one_of(&DEFAULT_HISTORY_LENGTH, &NEXT_PUBLIC_DEFAULT_HISTORY_LENGTH)?,
                url_overrides: env.value(&HISTORY_URL_OVERRIDES)?,
            },
            debug_panel: env.value(&PARLOR_DEBUG_PANEL)?,
            config_file: env.set(&PARLOR_CONFIG)?,
            backup_retention: env.value(&HISTORY_BACKUP_RETENTION)?,
            maintenance: parlor_domain::summary::Thresholds {
                max_messages: env.value(&HISTORY_CONTEXT_MAX_MESSAGES)?,
                max_bytes: env.value(&HISTORY_CONTEXT_MAX_BYTES)?,
            },
            admin_token: env.set(&PARLOR_ADMIN_TOKEN)?,
            mcp_token: env.set(&PARLOR_MCP_TOKEN)?,
            cookie_key: env.set(&PARLOR_COOKIE_KEY)?,
            secrets_key: env.set(&PARLOR_SECRETS_KEY)?,
            cookie_secure,
            public_url,
            shutdown_grace: Duration::from_secs(env.value(&PARLOR_SHUTDOWN_GRACE_SECS)?),
            connections: Connections::from_env(&env)?,
            rate_limit_chat: env.value(&PARLOR_RATE_LIMIT_CHAT)?,
            rate_limit_pages: env.value(&PARLOR_RATE_LIMIT_PAGES)?,
            rate_limit_login: env.value(&PARLOR_RATE_LIMIT_LOGIN)?,
            rate_limit_signup: env.value(&PARLOR_RATE_LIMIT_SIGNUP)?,
            trusted_proxies: trusted_proxies.clone(),
            metrics_addr: env.set(&PARLOR_METRICS_ADDR)?,
            log_format: env.value(&PARLOR_LOG_FORMAT)?,
            log_filter: env.set(&RUST_LOG)?,
            auth,
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

/// What a connection may hold and how long it may take (see `crate::ops::connections`).
#[derive(Clone, Debug)]
pub struct Connections {
    /// Connections one client address may hold (0: no limit).
    pub per_address: usize,
    /// How long a new connection may take to send its first request's head.
    pub request_head: Duration,
    /// How long a connection may stay still.
    pub idle: Duration,
}

impl Connections {
    fn from_env(env: &Env) -> Result<Connections, ConfigError> {
        Ok(Connections {
            per_address: env.value(&PARLOR_MAX_CONNECTIONS_PER_ADDRESS)?,
            request_head: Duration::from_secs(env.value(&PARLOR_REQUEST_HEAD_TIMEOUT_SECS)?),
            idle: Duration::from_secs(env.value(&PARLOR_IDLE_TIMEOUT_SECS)?),
        })
    }
}

/// Where replies come from: the mirror when `PARLOR_MODEL=mirror` or no upstream is
/// configured, else the OpenAI-compatible server (its default address when only a key is set).
fn llm(env: &Env) -> Result<LlmConfig, ConfigError> {
    let base_url = env.set(&OPENAI_BASE_URL)?;
    let api_key = env.set(&OPENAI_API_KEY)?;
    let mirror = env.set(&PARLOR_MODEL)?.as_deref() == Some(parlor_domain::mirror::MIRROR_MODEL);
    if mirror || (base_url.is_none() && api_key.is_none()) {
        return Ok(LlmConfig::Mirror);
    }
    Ok(LlmConfig::OpenAi {
        base_url: match base_url {
            Some(url) => url,
            None => env.value(&OPENAI_BASE_URL)?,
        },
        api_key,
    })
}

/// Who may use Parlor: a mode's missing variable is an error naming it.
fn must_set(var: &'static str, mode: auth::AuthMode) -> ConfigError {
    ConfigError::Invalid {
        var,
        value: String::new(),
        reason: format!("must be set when PARLOR_AUTH={}", mode.name()),
    }
}

fn auth_config(
    env: &Env,
    public_url: Option<&str>,
    trusted_proxies: &[std::net::IpAddr],
) -> Result<auth::AuthConfig, ConfigError> {
    let mode = env.value(&PARLOR_AUTH)?;
    let oidc = match mode {
        auth::AuthMode::Oidc => Some(oidc(env, public_url)?),
        _ => None,
    };
    if mode == auth::AuthMode::Proxy && trusted_proxies.is_empty() {
        return Err(must_set("PARLOR_TRUSTED_PROXIES", mode));
    }
    // A proxy's identities are compared exactly: `Ada` in the list would make `ada` the
    // admin, another person.
    let admins_text = env.text(&PARLOR_ADMINS).unwrap_or_default();
    if mode == auth::AuthMode::Proxy && admins_text.chars().any(char::is_uppercase) {
        return Err(ConfigError::Invalid {
            var: PARLOR_ADMINS.name,
            value: admins_text.to_owned(),
            reason: "with PARLOR_AUTH=proxy identities are compared exactly, and `Ada` is not \
                     `ada`: list an identity in lower case as the proxy sends it, or the \
                     account name `parlor user list` shows for it"
                .into(),
        });
    }
    Ok(auth::AuthConfig {
        mode,
        signup: env.value(&PARLOR_SIGNUP)?,
        login_days: env.value(&PARLOR_LOGIN_DAYS)?,
        admins: env.set(&PARLOR_ADMINS)?.unwrap_or_default(),
        tokens_per_day: env.value(&PARLOR_TOKENS_PER_DAY)?,
        header: env.value(&PARLOR_AUTH_HEADER)?,
        oidc,
        login_cookie: auth::LOGIN_COOKIE,
        password_checks: env.set(&PARLOR_PASSWORD_CHECKS)?,
    })
}

fn oidc(env: &Env, public_url: Option<&str>) -> Result<auth::OidcConfig, ConfigError> {
    let mode = auth::AuthMode::Oidc;
    let public_url = public_url.ok_or_else(|| must_set("PARLOR_PUBLIC_URL", mode))?;
    Ok(auth::OidcConfig {
        issuer: env
            .set(&PARLOR_OIDC_ISSUER)?
            .ok_or_else(|| must_set("PARLOR_OIDC_ISSUER", mode))?,
        client_id: env
            .set(&PARLOR_OIDC_CLIENT_ID)?
            .ok_or_else(|| must_set("PARLOR_OIDC_CLIENT_ID", mode))?,
        client_secret: env.set(&PARLOR_OIDC_CLIENT_SECRET)?,
        scopes: env.value(&PARLOR_OIDC_SCOPES)?,
        allowed_domains: env.set(&PARLOR_OIDC_ALLOWED_DOMAINS)?.unwrap_or_default(),
        admin_group: env.set(&PARLOR_OIDC_ADMIN_GROUP)?,
        admin_emails: env.set(&PARLOR_OIDC_ADMIN_EMAILS)?.unwrap_or_default(),
        groups_claim: env.value(&PARLOR_OIDC_GROUPS_CLAIM)?,
        redirect_url: format!("{}/auth/callback", public_url.trim_end_matches('/')),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listed_defaults_are_the_ones_that_apply() {
        let config = Config::from_vars(Vec::new()).unwrap();
        let default = |name: &str| {
            vars::ALL
                .iter()
                .find(|v| v.name() == name)
                .unwrap()
                .shown_default()
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
