//! `[[providers]]` of `parlor.toml`: the LLM endpoints models are sent to, beside the
//! implicit `openai` one (`OPENAI_BASE_URL` / `OPENAI_API_KEY`) and the offline `mirror`.
//! A key is named by the variable that holds it (`api_key_env`), never written in the file;
//! every refusal names the entry and the field.

use crate::config::file::{ConfigFileError, ProviderEntry};
use crate::config::ApiKey;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The ids every deployment has: the environment's OpenAI-compatible upstream, and the
/// built-in offline model.
pub const IMPLICIT: [&str; 2] = ["openai", "mirror"];

/// The protocol a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// OpenAI's Chat Completions (`POST {base_url}/chat/completions`).
    OpenAi,
    /// Anthropic's Messages (`POST {base_url}/messages`).
    Anthropic,
}

/// One declared provider, checked.
#[derive(Clone, Debug)]
pub struct ProviderSpec {
    pub id: String,
    pub kind: Kind,
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    /// Sent with every request (`Authorization` is the key's).
    pub headers: BTreeMap<String, String>,
    /// The model call's timeout (`None`: `PARLOR_LLM_TIMEOUT_SECS`'s).
    pub timeout: Option<Duration>,
}

type Refusal = (&'static str, String);

impl ProviderSpec {
    /// The client that speaks to it (`default_timeout`: `PARLOR_LLM_TIMEOUT_SECS`'s).
    pub fn client(&self, default_timeout: Duration) -> super::LlmClient {
        let timeout = self.timeout.unwrap_or(default_timeout);
        let (url, key) = (self.base_url.clone(), self.api_key.clone());
        let setting = format!("the base_url of provider {:?}", self.id);
        match self.kind {
            Kind::OpenAi => super::LlmClient::OpenAi(
                super::OpenAiClient::new(url, key, timeout)
                    .with_headers(&self.headers)
                    .set_by(setting),
            ),
            Kind::Anthropic => super::LlmClient::Anthropic(
                super::AnthropicClient::new(url, key, timeout)
                    .with_headers(&self.headers)
                    .set_by(setting),
            ),
        }
    }
}

/// The key in the variable `name` names, which must be set.
fn api_key(
    name: Option<&str>,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<ApiKey>, Refusal> {
    let Some(name) = name else {
        return Ok(None);
    };
    let value = var(name).filter(|v| !v.trim().is_empty());
    let value = value.ok_or_else(|| {
        (
            "api_key_env",
            format!("{name} is not set in Parlor's environment"),
        )
    })?;
    Ok(Some(ApiKey::new(value)))
}

/// Headers that are Parlor's or the connection's to set: the key's, the protocol's, and
/// those that frame or route the request.
const RESERVED_HEADERS: [&str; 13] = [
    "authorization",
    "x-api-key",
    "anthropic-version",
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "expect",
];

/// Headers Parlor may send for the operator (the key is never one of them).
fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), Refusal> {
    for (name, value) in headers {
        let valid = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
            && reqwest::header::HeaderValue::from_str(value).is_ok();
        let lower = name.to_ascii_lowercase();
        let reserved = RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("proxy-");
        if !valid || reserved {
            let why =
                format!("{name:?} is not a header Parlor may send (the key goes in api_key_env)");
            return Err(("headers", why));
        }
    }
    Ok(())
}

/// Checks `[[providers]]`; `var` reads Parlor's environment (the keys' variables).
pub fn specs(
    entries: &[ProviderEntry],
    path: &Path,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<ProviderSpec>, ConfigFileError> {
    let mut specs: Vec<ProviderSpec> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let fail = |(field, message): Refusal| ConfigFileError::Field {
            path: path.to_owned(),
            entry: format!("providers[{index}] (id {:?})", entry.id),
            field,
            message,
        };
        if specs.iter().any(|s| s.id == entry.id) {
            return Err(fail(("id", "duplicate id".into())));
        }
        specs.push(spec(entry, var).map_err(fail)?);
    }
    Ok(specs)
}

fn is_id(id: &str) -> bool {
    (1..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn spec(
    entry: &ProviderEntry,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<ProviderSpec, Refusal> {
    if !is_id(&entry.id) {
        return Err(("id", "must be 1 to 32 of a-z, 0-9, _ and -".into()));
    }
    if IMPLICIT.contains(&entry.id.as_str()) {
        let why = format!(
            "{:?} is Parlor's own (OPENAI_BASE_URL, or the offline model): choose another id",
            entry.id
        );
        return Err(("id", why));
    }
    let kind = match entry.kind.as_deref() {
        None | Some("openai") => Kind::OpenAi,
        Some("anthropic") => Kind::Anthropic,
        Some(other) => {
            let why = format!("must be \"openai\" or \"anthropic\" (got {other:?})");
            return Err(("kind", why));
        }
    };
    let url = reqwest::Url::parse(&entry.base_url)
        .map_err(|e| ("base_url", format!("{e} ({:?})", entry.base_url)))?;
    if !url.username().is_empty() || url.password().is_some() {
        let why = "must not hold credentials: name the variable holding the key in api_key_env";
        return Err(("base_url", why.into()));
    }
    if !matches!(url.scheme(), "http" | "https") {
        return Err((
            "base_url",
            format!("must be http or https (got {:?})", entry.base_url),
        ));
    }
    let api_key = api_key(entry.api_key_env.as_deref(), var)?;
    check_headers(&entry.headers)?;
    let timeout = match entry.timeout_secs {
        None => None,
        Some(n) if (1..=3600).contains(&n) => Some(Duration::from_secs(n as u64)),
        Some(n) => {
            let why = format!("must be between 1 and 3600 (got {n})");
            return Err(("timeout_secs", why));
        }
    };
    Ok(ProviderSpec {
        id: entry.id.clone(),
        kind,
        base_url: entry.base_url.trim_end_matches('/').to_owned(),
        api_key,
        headers: entry.headers.clone(),
        timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(toml: &str) -> Result<Vec<ProviderSpec>, String> {
        let path = Path::new("parlor.toml");
        let file = crate::config::file::ConfigFile::parse(toml, path).map_err(|e| e.to_string())?;
        let var = |name: &str| (name == "TEAM_KEY").then(|| "sk-team".to_owned());
        specs(&file.providers, path, &var).map_err(|e| e.to_string())
    }

    #[test]
    fn a_provider_names_its_key_by_variable_and_every_refusal_names_the_field() {
        let specs = read(
            "[[providers]]\nid = \"team\"\nbase_url = \"http://127.0.0.1:1/v1/\"\n\
             api_key_env = \"TEAM_KEY\"\nheaders = { X-Team = \"parlor\" }\ntimeout_secs = 5\n",
        )
        .unwrap();
        assert_eq!(specs[0].base_url, "http://127.0.0.1:1/v1");
        assert_eq!(
            specs[0].api_key.as_ref().map(ApiKey::expose),
            Some("sk-team")
        );
        assert_eq!(specs[0].timeout, Some(Duration::from_secs(5)));
        assert_eq!(specs[0].kind, Kind::OpenAi);
        let claude = read("[[providers]]\nid = \"claude\"\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com/v1\"\n");
        assert_eq!(claude.unwrap()[0].kind, Kind::Anthropic);
        let entry = |fields: &str| {
            format!("[[providers]]\nid = \"p\"\nbase_url = \"http://h/v1\"\n{fields}")
        };
        for (toml, expected) in [
            (
                entry("api_key_env = \"NOT_SET\""),
                "providers[0] (id \"p\"): api_key_env: NOT_SET is not set",
            ),
            (entry("kind = \"grpc\""), "kind: must be"),
            (
                entry("headers = { Authorization = \"x\" }"),
                "headers: \"Authorization\"",
            ),
            (
                entry("headers = { Host = \"evil.example\" }"),
                "headers: \"Host\"",
            ),
            (
                entry("headers = { Content-Length = \"5\" }"),
                "headers: \"Content-Length\"",
            ),
            (
                entry("headers = { X-Api-Key = \"k\" }"),
                "headers: \"X-Api-Key\"",
            ),
            (
                "[[providers]]\nid = \"p\"\nbase_url = \"http://u:pw@h/v1\"".into(),
                "base_url: must not hold credentials",
            ),
            (
                entry("timeout_secs = 0"),
                "timeout_secs: must be between 1 and 3600",
            ),
            (
                "[[providers]]\nid = \"openai\"\nbase_url = \"http://h\"".into(),
                "id: \"openai\" is Parlor's own",
            ),
            (
                "[[providers]]\nid = \"Team\"\nbase_url = \"http://h\"".into(),
                "id: must be",
            ),
            (
                "[[providers]]\nid = \"p\"\nbase_url = \"ftp://h\"".into(),
                "base_url: must be http",
            ),
            (
                format!("{}\n{}", entry(""), entry("")),
                "providers[1] (id \"p\"): id: duplicate",
            ),
            (
                "[[providers]]\nid = \"p\"\nbase_url = \"http://h\"\napi_key = \"sk\"".into(),
                "unknown field `api_key`",
            ),
        ] {
            let error = read(&toml).unwrap_err();
            assert!(error.contains(expected), "{toml}\n→ {error}");
        }
    }
}
