//! Every environment variable Parlor reads, each declared once: its name (the constant's),
//! its default, what it means and how its value is read. [`super::Config`] reads them
//! through [`Env`]; `parlor --help` and the README check list [`ALL`].
//!
//! A new variable is one entry in [`variables!`] below.

use super::auth::{readers as auth_read, AuthMode};
use super::ApiKey;
use crate::config::cookie_key::CookieKey;
use parlor_domain::account::UserName;
use parlor_domain::history::{HistoryLength, HistoryPolicy};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// The most a request body without images may hold (with images: `PARLOR_MAX_CONTEXT_BYTES`).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// What applies when a variable is unset.
#[derive(Clone, Copy, Debug)]
pub enum Fallback {
    /// This value, read as a set one would be.
    Value(&'static str),
    /// Nothing: this says what that means.
    Unset(&'static str),
}
use Fallback::{Unset, Value};

/// One environment variable.
pub struct Var<T: 'static> {
    pub name: &'static str,
    pub default: Fallback,
    pub meaning: &'static str,
    read: fn(&str) -> Result<T, String>,
    /// Its value never appears in an error (keys, tokens).
    secret: bool,
    /// Where [`Vars`] holds it.
    field: fn(&Vars) -> Option<&Read<T>>,
}

/// One variable as envy read it: its text, and what its declaration's reader made of it (the
/// typed value, or why the text is refused).
pub struct Read<T> {
    text: String,
    value: Result<T, String>,
}

impl<T> Read<T> {
    fn of(var: &Var<T>, text: String) -> Read<T> {
        Read {
            value: (var.read)(&text),
            text,
        }
    }
}

/// The field of a variable not yet placed in [`Vars`] (only while it is declared).
fn unplaced<T>(_: &Vars) -> Option<&Read<T>> {
    None
}

impl<T> Var<T> {
    const fn new(
        default: Fallback,
        read: fn(&str) -> Result<T, String>,
        meaning: &'static str,
    ) -> Self {
        Var {
            name: "",
            default,
            meaning,
            read,
            secret: false,
            field: unplaced::<T>,
        }
    }

    const fn at(self, field: fn(&Vars) -> Option<&Read<T>>) -> Self {
        Var { field, ..self }
    }

    const fn secret(self) -> Self {
        Var {
            secret: true,
            ..self
        }
    }

    const fn named(self, name: &'static str) -> Self {
        Var { name, ..self }
    }
}

/// What `--help` and the README check need of a variable, whatever its type.
pub trait Describe: Sync {
    fn name(&self) -> &'static str;
    /// The default as the README and `--help` show it.
    fn shown_default(&self) -> &'static str;
    fn meaning(&self) -> &'static str;
    /// Whether its default reads as a set value would (a declaration's mistake otherwise).
    fn default_reads(&self) -> bool;
}

impl<T> Describe for Var<T> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn shown_default(&self) -> &'static str {
        match self.default {
            Value(text) | Unset(text) => text,
        }
    }
    fn meaning(&self) -> &'static str {
        self.meaning
    }
    fn default_reads(&self) -> bool {
        match self.default {
            Value(text) => (self.read)(text).is_ok(),
            Unset(_) => true,
        }
    }
}

/// Declares each variable as a constant named after it, [`ALL`] in the same order, and
/// [`Vars`], the typed struct envy reads the environment into: one field per variable, read
/// by its declaration's reader as envy hands it over (a refused value keeps why, so the error
/// names the variable when the variable is used).
macro_rules! variables {
    ($($id:ident: $t:ty = $var:expr;)*) => {
        $(pub const $id: Var<$t> = $var.named(stringify!($id)).at({
            fn field(vars: &Vars) -> Option<&Read<$t>> {
                vars.$id.as_ref()
            }
            field
        });)*
        /// Every environment variable Parlor reads, in the order `--help` lists them.
        pub const ALL: &[&dyn Describe] = &[$(&$id),*];

        /// The environment as envy deserializes it: each declared variable, typed by its
        /// declaration, `None` when unset.
        #[derive(Default)]
        #[allow(non_snake_case)]
        pub struct Vars {
            $($id: Option<Read<$t>>,)*
        }

        /// envy gives names in lower case: each is matched to its declaration without case
        /// (the names given are upper case, see [`Env::new`]).
        impl<'de> serde::Deserialize<'de> for Vars {
            fn deserialize<D: serde::Deserializer<'de>>(from: D) -> Result<Vars, D::Error> {
                struct Fields;
                impl<'de> serde::de::Visitor<'de> for Fields {
                    type Value = Vars;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("environment variables")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<Vars, A::Error> {
                        let mut vars = Vars::default();
                        while let Some((name, text)) = map.next_entry::<String, String>()? {
                            $(if name.eq_ignore_ascii_case(stringify!($id)) {
                                vars.$id = Some(Read::of(&$id, text));
                                continue;
                            })*
                        }
                        Ok(vars)
                    }
                }
                from.deserialize_map(Fields)
            }
        }
    };
}

variables! {
    OPENAI_BASE_URL: String = Var::new(
        Value("https://api.openai.com/v1"), read::http_url,
        "an OpenAI-compatible endpoint (the default applies when only a key is set)");
    OPENAI_API_KEY: ApiKey = Var::new(
        Unset("none"), read::key,
        "sent upstream as a bearer token; never sent to the browser or logged").secret();
    PARLOR_MODEL: String = Var::new(
        Unset("the agent template's model"), read::text,
        "overrides every agent's model; `mirror` forces the offline model");
    PARLOR_LLM_TIMEOUT_SECS: u64 = Var::new(
        Value("60"), read::at_least::<1>,
        "seconds the model server may take to answer, and to send each next piece");
    PARLOR_AGENTS_DIR: PathBuf = Var::new(
        Value("agents"), read::path, "folder of <id>/template.json agent templates");
    PARLOR_DATA_DIR: PathBuf = Var::new(
        Value("data"), read::path, "where file-backed histories store conversations");
    PARLOR_CONFIG: PathBuf = Var::new(
        Unset("parlor.toml"), read::path,
        "the configuration file (the default only if present; must exist when set)");
    HISTORY_BACKUP_RETENTION: usize = Var::new(
        Value("5"), read::count::<1>,
        "backups kept per conversation by file histories (at least 1)");
    HISTORY_CONTEXT_MAX_MESSAGES: usize = Var::new(
        Value("200"), read::count::<1>,
        "a conversation with more messages gets the maintenance signal (compact it)");
    HISTORY_CONTEXT_MAX_BYTES: usize = Var::new(
        Value("65536"), read::count::<1>,
        "a conversation whose messages and summary take more bytes gets the maintenance signal");
    PARLOR_MCP_TOKEN: ApiKey = Var::new(
        Unset("unset"), read::token,
        "serves the history tools over MCP at /mcp to requests with this bearer token").secret();
    PARLOR_COOKIE_KEY: CookieKey = Var::new(
        Unset("made once, kept in Redis or the data folder"), read::cookie_key,
        "64 hex digits: the key that signs browser session cookies (set the same on processes \
         that share no Redis or data folder)").secret();
    PARLOR_SECRETS_KEY: CookieKey = Var::new(
        Unset("made once, kept in Redis or the data folder"), read::cookie_key,
        "64 hex digits: the key that seals the values users set for their own tool servers \
         (set the same on processes that share no Redis or data folder)").secret();
    PARLOR_ADMIN_TOKEN: ApiKey = Var::new(
        Unset("unset"), read::key,
        "allows admin chat commands to requests carrying it in X-Parlor-Admin-Token").secret();
    PARLOR_MAX_MESSAGE_CHARS: usize = Var::new(
        Value("32000"), read::count::<1>, "the longest message accepted, in characters");
    PARLOR_MAX_CONTEXT_BYTES: usize = Var::new(
        Value("10485760"), read::context_bytes,
        "the largest chat request with images, in bytes (others: 1048576)");
    PARLOR_MIRROR_DELAY_MS: u64 = Var::new(
        Value("25"), read::at_least::<0>, "pause between the mirror model's words");
    DEFAULT_HISTORY_POLICY: HistoryPolicy = Var::new(
        Unset("unset"), read::policy, "lastN, all or none; beats the URL and the template");
    DEFAULT_HISTORY_LENGTH: HistoryLength = Var::new(
        Unset("unset"), read::length,
        "an integer (0 or less acts as 1); beats the URL and the template");
    NEXT_PUBLIC_DEFAULT_HISTORY_POLICY: HistoryPolicy = Var::new(
        Unset("unset"), read::policy, "AgentDock's name for DEFAULT_HISTORY_POLICY");
    NEXT_PUBLIC_DEFAULT_HISTORY_LENGTH: HistoryLength = Var::new(
        Unset("unset"), read::length, "AgentDock's name for DEFAULT_HISTORY_LENGTH");
    HISTORY_URL_OVERRIDES: bool = Var::new(
        Value("true"), read::yes_no, "false ignores historyPolicy / historyLength in page URLs");
    PARLOR_DEBUG_PANEL: bool = Var::new(
        Value("true"), read::yes_no,
        "false turns off the ?debug=true panel and the debug endpoint");
    PARLOR_PUBLIC_URL: String = Var::new(
        Unset("unset"), read::text,
        "the address users reach Parlor at, e.g. https://chat.example.com behind a proxy");
    PARLOR_COOKIE_SECURE: bool = Var::new(
        Unset("on when PARLOR_PUBLIC_URL is https"), read::yes_no,
        "true marks cookies Secure (sent over HTTPS only); false never does");
    PARLOR_SHUTDOWN_GRACE_SECS: u64 = Var::new(
        Value("10"), read::at_least::<0>,
        "on SIGTERM, seconds replies in progress may take to finish before what they have is stored");
    PARLOR_MAX_CONNECTIONS_PER_ADDRESS: usize = Var::new(
        Value("256"), read::count::<0>,
        "connections one client address may hold open at once (a trusted proxy any number; 0: no limit)");
    PARLOR_REQUEST_HEAD_TIMEOUT_SECS: u64 = Var::new(
        Value("30"), read::at_least::<1>,
        "seconds a new connection may take to send its first request's head");
    PARLOR_IDLE_TIMEOUT_SECS: u64 = Var::new(
        Value("120"), read::at_least::<1>,
        "seconds a connection may stay with nothing read or written before it is closed");
    PARLOR_RATE_LIMIT_CHAT: u32 = Var::new(
        Value("60"), read::per_minute,
        "chat API requests a client address may make per minute (0: no limit)");
    PARLOR_RATE_LIMIT_PAGES: u32 = Var::new(
        Value("300"), read::per_minute,
        "page loads and page data requests per client address per minute (0: no limit)");
    PARLOR_RATE_LIMIT_LOGIN: u32 = Var::new(
        Value("30"), read::per_minute,
        "login attempts and OpenID round trips per client address per minute (0: no limit)");
    PARLOR_RATE_LIMIT_SIGNUP: u32 = Var::new(
        Value("5"), read::per_minute,
        "accounts one client address may sign up per hour (0: no limit)");
    PARLOR_TRUSTED_PROXIES: Vec<IpAddr> = Var::new(
        Unset("none"), read::addresses,
        "comma-separated proxy addresses whose X-Forwarded-For names the client");
    PARLOR_LOG_FORMAT: LogFormat = Var::new(
        Value("text"), read::log_format, "json writes one JSON object per log line");
    PARLOR_METRICS_ADDR: SocketAddr = Var::new(
        Unset("unset"), read::socket,
        "also serve /metrics here, without the admin token (keep it private)");
    PARLOR_AUTH: AuthMode = Var::new(
        Value("none"), auth_read::mode,
        "who may chat: none (anyone; a browser cookie owns conversations), local, oidc or proxy");
    PARLOR_SIGNUP: bool = Var::new(
        Value("false"), read::yes_no,
        "with PARLOR_AUTH=local, true lets visitors make accounts at /signup (the first is an admin)");
    PARLOR_LOGIN_DAYS: u64 = Var::new(
        Value("30"), read::at_least::<1>, "days a login lasts");
    PARLOR_PASSWORD_CHECKS: usize = Var::new(
        Unset("twice the cores"), read::count::<1>,
        "password checks (Argon2id) a process runs at once; a login beyond them gets 503 with Retry-After");
    PARLOR_ADMINS: Vec<UserName> = Var::new(
        Unset("none"), auth_read::names,
        "comma-separated user names that are admins (the proxy mode's only admins)");
    PARLOR_TOKENS_PER_DAY: u64 = Var::new(
        Value("0"), read::at_least::<0>,
        "model tokens an account may use per UTC day (0: no quota; admins are exempt)");
    PARLOR_OIDC_ISSUER: String = Var::new(
        Unset("unset"), auth_read::issuer,
        "with PARLOR_AUTH=oidc: the provider's issuer address (discovery is read from it)");
    PARLOR_OIDC_CLIENT_ID: String = Var::new(
        Unset("unset"), read::text, "with PARLOR_AUTH=oidc: Parlor's client id at the provider");
    PARLOR_OIDC_CLIENT_SECRET: ApiKey = Var::new(
        Unset("unset"), read::key, "with PARLOR_AUTH=oidc: Parlor's client secret").secret();
    PARLOR_OIDC_SCOPES: Vec<String> = Var::new(
        Value("openid email profile"), auth_read::words, "the scopes Parlor asks for");
    PARLOR_OIDC_ALLOWED_DOMAINS: Vec<String> = Var::new(
        Unset("all"), auth_read::domains,
        "comma-separated e-mail domains whose users may log in");
    PARLOR_OIDC_ADMIN_GROUP: String = Var::new(
        Unset("none"), read::text, "members of this group (in PARLOR_OIDC_GROUPS_CLAIM) are admins");
    PARLOR_OIDC_ADMIN_EMAILS: Vec<String> = Var::new(
        Unset("none"), auth_read::emails,
        "comma-separated e-mail addresses whose users are admins, when the provider says the address is verified");
    PARLOR_OIDC_GROUPS_CLAIM: String = Var::new(
        Value("groups"), read::text, "the ID token claim that lists the user's groups");
    PARLOR_AUTH_HEADER: String = Var::new(
        Value("X-Forwarded-User"), auth_read::header,
        "with PARLOR_AUTH=proxy: the header naming the user, believed from PARLOR_TRUSTED_PROXIES only");
    RUST_LOG: String = Var::new(
        Unset("info"), read::text, "log filter (tracing), e.g. parlor_server=debug");
    LEPTOS_SITE_ADDR: SocketAddr = Var::new(
        Value("127.0.0.1:3000"), read::socket,
        "the address to listen on (Leptos.toml's when unset)");
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Text, coloured on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// Why the environment cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
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

/// The environment as Parlor reads it: deserialized by envy into [`Vars`], an empty
/// variable counting as unset, as in most shells' `VAR=` idiom.
pub struct Env(Vars);

/// The variables set, without those set empty.
fn non_empty(
    vars: impl IntoIterator<Item = (String, String)>,
) -> impl Iterator<Item = (String, String)> {
    vars.into_iter().filter(|(_, v)| !v.is_empty())
}

impl Env {
    pub fn new(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        // envy matches names without case; Parlor's are upper case and exact, so only
        // upper-case names are given to it (`parlor_model` is not `PARLOR_MODEL`, and the
        // two set at once are not a duplicate). A refused value is kept with why, so envy
        // itself cannot fail on them.
        let exact = non_empty(vars).filter(|(k, _)| !k.bytes().any(|b| b.is_ascii_lowercase()));
        Env(envy::from_iter(exact).unwrap_or_default())
    }

    fn raw<T>(&self, var: &Var<T>) -> Option<&str> {
        (var.field)(&self.0).map(|read| read.text.as_str())
    }

    /// Its text as set (for a check that needs what was written, not what it reads as).
    pub fn text<T>(&self, var: &Var<T>) -> Option<&str> {
        self.raw(var)
    }

    fn invalid<T>(var: &Var<T>, text: &str, reason: String) -> ConfigError {
        ConfigError::Invalid {
            var: var.name,
            value: match var.secret {
                true => "[redacted]".into(),
                false => text.to_owned(),
            },
            reason,
        }
    }

    fn typed<T: Clone>(var: &Var<T>, read: &Read<T>) -> Result<T, ConfigError> {
        read.value
            .clone()
            .map_err(|reason| Env::invalid(var, &read.text, reason))
    }

    /// Its value when it is set.
    pub fn set<T: Clone>(&self, var: &Var<T>) -> Result<Option<T>, ConfigError> {
        (var.field)(&self.0)
            .map(|read| Env::typed(var, read))
            .transpose()
    }

    /// Its value, or its default when it has one.
    pub fn get<T: Clone>(&self, var: &Var<T>) -> Result<Option<T>, ConfigError> {
        match ((var.field)(&self.0), var.default) {
            (Some(read), _) => Env::typed(var, read).map(Some),
            (None, Value(text)) => Env::typed(var, &Read::of(var, text.to_owned())).map(Some),
            (None, Unset(_)) => Ok(None),
        }
    }

    /// Its value or its default (declared with one).
    pub fn value<T: Clone>(&self, var: &Var<T>) -> Result<T, ConfigError> {
        self.get(var)?.ok_or_else(|| ConfigError::Invalid {
            var: var.name,
            value: String::new(),
            reason: "must be set".into(),
        })
    }

    /// The value of `primary` or its AgentDock-era `alias`; both set and different is an
    /// error.
    pub fn one_of<T: Clone>(
        &self,
        primary: &Var<T>,
        alias: &Var<T>,
    ) -> Result<Option<T>, ConfigError> {
        match (self.raw(primary), self.raw(alias)) {
            (Some(a), Some(b)) if a != b => Err(ConfigError::Conflict {
                a: primary.name,
                b: alias.name,
                a_value: a.to_owned(),
                b_value: b.to_owned(),
            }),
            (Some(_), _) => self.set(primary),
            (None, _) => self.set(alias),
        }
    }
}

/// How values are read: each returns the value or why it is refused.
mod read;

/// The variable a `[[providers]]` entry names (`api_key_env`), read as the declared ones
/// are: through envy, from `vars`, set empty counting as unset.
pub fn named(vars: impl IntoIterator<Item = (String, String)>, name: &str) -> Option<String> {
    let only = non_empty(vars).filter(|(k, _)| k == name);
    let found: HashMap<String, String> = envy::from_iter(only).ok()?;
    found.into_values().next()
}

/// The variables as `parlor --help` lists them.
pub fn help() -> String {
    let mut out = String::from("Environment variables (default in brackets):\n");
    for var in ALL {
        out.push_str(&format!(
            "  {:<36} {} [{}]\n",
            var.name(),
            var.meaning(),
            var.shown_default()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_reads_as_a_set_value_would() {
        for var in ALL {
            assert!(
                var.default_reads(),
                "{}'s default does not read",
                var.name()
            );
        }
        let names: std::collections::HashSet<_> = ALL.iter().map(|v| v.name()).collect();
        assert_eq!(names.len(), ALL.len(), "a variable is declared twice");
    }

    #[test]
    fn the_readme_documents_every_variable_with_its_default() {
        let readme = include_str!("../../../README.md");
        for var in ALL {
            let row = readme
                .lines()
                .find(|l| l.starts_with("| ") && l.contains(&format!("`{}`", var.name())))
                .unwrap_or_else(|| panic!("{} is not in the README's tables", var.name()));
            let default_cell = row.rsplit('|').nth(1).unwrap().replace('`', "");
            assert!(
                default_cell.contains(var.shown_default()),
                "README gives {} the default {default_cell:?}; Parlor's is {:?}",
                var.name(),
                var.shown_default()
            );
        }
    }

    #[test]
    fn a_secret_never_appears_in_an_error() {
        let env = Env::new([("PARLOR_COOKIE_KEY".to_owned(), "not-hex-secret".to_owned())]);
        let err = env.set(&PARLOR_COOKIE_KEY).unwrap_err().to_string();
        assert!(
            err.contains("PARLOR_COOKIE_KEY") && !err.contains("not-hex-secret"),
            "{err}"
        );
        let env = Env::new([("PARLOR_MCP_TOKEN".to_owned(), "   ".to_owned())]);
        assert!(env.set(&PARLOR_MCP_TOKEN).is_err());
    }

    #[test]
    fn envy_reads_each_declared_variable_and_nothing_else() {
        let env = Env::new([
            ("PARLOR_MODEL".to_owned(), "sonnet".to_owned()),
            ("parlor_data_dir".to_owned(), "lower".to_owned()),
            ("UNRELATED".to_owned(), "x".to_owned()),
        ]);
        assert_eq!(env.set(&PARLOR_MODEL).unwrap().as_deref(), Some("sonnet"));
        assert_eq!(
            env.get(&PARLOR_DATA_DIR).unwrap(),
            Some("data".into()),
            "not the lower-case one"
        );
        assert!(
            env.0.PARLOR_DATA_DIR.is_none(),
            "read under its exact name only"
        );
        let vars = || {
            [
                ("TEAM_KEY".to_owned(), "sk-team".to_owned()),
                ("EMPTY_KEY".to_owned(), String::new()),
            ]
        };
        assert_eq!(named(vars(), "TEAM_KEY").as_deref(), Some("sk-team"));
        assert_eq!(named(vars(), "EMPTY_KEY"), None);
        assert_eq!(named(vars(), "team_key"), None, "names are exact");
    }

    #[test]
    fn envy_reads_typed_values_and_a_refused_one_names_its_variable() {
        let env = Env::new([
            ("PARLOR_LLM_TIMEOUT_SECS".to_owned(), "90".to_owned()),
            (
                "PARLOR_TRUSTED_PROXIES".to_owned(),
                "10.0.0.2, ::1".to_owned(),
            ),
            ("PARLOR_RATE_LIMIT_CHAT".to_owned(), "lots".to_owned()),
        ]);
        // Typed as envy handed the values over, before anything asked for them.
        let timeout = env.0.PARLOR_LLM_TIMEOUT_SECS.as_ref().unwrap();
        assert_eq!(timeout.value, Ok(90));
        let proxies = env.0.PARLOR_TRUSTED_PROXIES.as_ref().unwrap();
        assert_eq!(proxies.value.as_ref().map(Vec::len), Ok(2));
        assert!(env
            .0
            .PARLOR_RATE_LIMIT_CHAT
            .as_ref()
            .unwrap()
            .value
            .is_err());
        let err = env.set(&PARLOR_RATE_LIMIT_CHAT).unwrap_err().to_string();
        assert!(
            err.starts_with("PARLOR_RATE_LIMIT_CHAT=\"lots\" is invalid: "),
            "{err}"
        );
        assert_eq!(env.value(&PARLOR_LLM_TIMEOUT_SECS).unwrap(), 90);
    }

    #[test]
    fn an_empty_variable_is_unset_and_the_default_applies() {
        let env = Env::new([("PARLOR_LLM_TIMEOUT_SECS".to_owned(), String::new())]);
        assert_eq!(env.value(&PARLOR_LLM_TIMEOUT_SECS).unwrap(), 60);
        assert_eq!(env.set(&PARLOR_LLM_TIMEOUT_SECS).unwrap(), None);
        assert_eq!(env.get(&PARLOR_METRICS_ADDR).unwrap(), None);
    }
}
