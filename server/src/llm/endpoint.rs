//! What the protocol clients share: one HTTP endpoint with its key, timeout and headers,
//! a request that becomes a readable [`LlmError`] whatever goes wrong, and the endpoint's
//! health for `/readyz`. The key is scrubbed from any text shown to users.

use super::errors::{error_message, root_cause};
use super::LlmError;
use crate::config::ApiKey;
use std::collections::BTreeMap;
use std::time::Duration;

/// The most of an error body read (a proxy's page can be large; the message is short).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How the key travels: `Authorization: Bearer` (OpenAI) or a header of its own
/// (Anthropic's `x-api-key`).
#[derive(Clone, Copy, Debug)]
pub enum KeyHeader {
    Bearer,
    Named(&'static str),
}

#[derive(Clone)]
struct Endpoint {
    http: reqwest::Client,
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    pub timeout: Duration,
    key_header: KeyHeader,
    /// How its last requests went (shared by its clones), for `/readyz`.
    health: super::health::Health,
    /// Where its address is set, as errors name it.
    setting: String,
}

fn client(timeout: Duration, headers: reqwest::header::HeaderMap) -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .default_headers(headers)
        .build()
        .unwrap_or_default()
}

impl Endpoint {
    pub fn new(
        base_url: String,
        api_key: Option<ApiKey>,
        timeout: Duration,
        key_header: KeyHeader,
    ) -> Self {
        Endpoint {
            http: client(timeout, Default::default()),
            base_url,
            api_key,
            timeout,
            key_header,
            health: Default::default(),
            setting: "OPENAI_BASE_URL".into(),
        }
    }

    pub fn set_by(&mut self, setting: String) {
        self.setting = setting;
    }

    /// Sends `headers` with every request (checked with the provider's entry).
    pub fn add_headers(&mut self, headers: &BTreeMap<String, String>) {
        let mut map = reqwest::header::HeaderMap::new();
        for (name, value) in headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes());
            let value = reqwest::header::HeaderValue::from_str(value);
            if let (Ok(name), Ok(value)) = (name, value) {
                map.insert(name, value);
            }
        }
        self.http = client(self.timeout, map);
    }

    pub fn health(&self) -> String {
        self.health.describe()
    }

    /// Notes how a request went, as the user saw it (without the key).
    pub fn note<T>(&self, outcome: &Result<T, LlmError>) {
        let error = outcome.as_ref().err().map(|e| self.scrub(&e.to_string()));
        self.health.note(error);
    }

    /// `scheme://host:port` of the upstream, without credentials or path.
    pub fn host(&self) -> String {
        match reqwest::Url::parse(&self.base_url) {
            Ok(url) => format!(
                "{}://{}{}",
                url.scheme(),
                url.host_str().unwrap_or("?"),
                url.port().map(|p| format!(":{p}")).unwrap_or_default()
            ),
            Err(_) => format!("the configured {}", self.setting),
        }
    }

    pub fn scrub(&self, text: &str) -> String {
        super::redact::redact(text, self.api_key.as_ref().map(|k| k.expose()))
    }

    /// POSTs `body` to `path` under the base URL with `headers` (the protocol's own): the
    /// response when it succeeded, else the error a person can act on (an HTTP error's
    /// message from its body, read up to 64 KiB, and when to retry if the server said).
    pub async fn post(
        &self,
        path: &str,
        headers: &[(&'static str, &'static str)],
        body: &serde_json::Value,
    ) -> Result<reqwest::Response, LlmError> {
        let mut builder = self
            .http
            .post(format!("{}{path}", self.base_url))
            .json(body);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some(key) = &self.api_key {
            builder = match self.key_header {
                KeyHeader::Bearer => builder.bearer_auth(key.expose()),
                KeyHeader::Named(name) => builder.header(name, key.expose()),
            };
        }
        let secs = self.timeout.as_secs();
        let response = tokio::time::timeout(self.timeout, builder.send())
            .await
            .map_err(|_| LlmError::Timeout { secs })?
            .map_err(|e| self.classify(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let text = tokio::time::timeout(self.timeout, bounded_text(response))
            .await
            .unwrap_or_default();
        let mut message = self.scrub(&error_message(&text, status));
        if status.as_u16() == 529 {
            message.push_str(" (the provider is overloaded; try again in a moment)");
        }
        if let Some(secs) = retry_after {
            message.push_str(&format!(" (the server asks to retry after {secs} s)"));
        }
        Err(LlmError::Http {
            status: status.as_u16(),
            message,
        })
    }

    fn classify(&self, error: &reqwest::Error) -> LlmError {
        if error.is_timeout() {
            return LlmError::Timeout {
                secs: self.timeout.as_secs(),
            };
        }
        LlmError::Unreachable {
            host: self.host(),
            detail: root_cause(error),
            setting: self.setting.clone(),
        }
    }
}

/// At most [`MAX_ERROR_BODY`] bytes of a body, as text.
async fn bounded_text(response: reqwest::Response) -> String {
    use futures::StreamExt;
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = MAX_ERROR_BODY - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// What makes an [`HttpClient`] speak one protocol: where requests go, how the key and
/// the version travel, the body of a request, and how its stream is read.
pub trait Wire: Send + Sync + 'static {
    const PATH: &'static str;
    const HEADERS: &'static [(&'static str, &'static str)];
    const KEY_HEADER: KeyHeader;
    /// Where the address is set when nothing else is said.
    const SETTING: &'static str;
    type Reader: super::sse::Protocol;
    fn body(request: &super::ModelRequest) -> serde_json::Value;
    fn reader(key: Option<ApiKey>) -> Self::Reader;
}

/// A streaming client of one [`Wire`] protocol at one endpoint.
pub struct HttpClient<W> {
    endpoint: Endpoint,
    wire: std::marker::PhantomData<W>,
}

impl<W> Clone for HttpClient<W> {
    fn clone(&self) -> Self {
        HttpClient {
            endpoint: self.endpoint.clone(),
            wire: std::marker::PhantomData,
        }
    }
}

impl<W: Wire> HttpClient<W> {
    pub fn new(base_url: String, api_key: Option<ApiKey>, timeout: Duration) -> Self {
        let mut endpoint = Endpoint::new(base_url, api_key, timeout, W::KEY_HEADER);
        endpoint.set_by(W::SETTING.into());
        HttpClient {
            endpoint,
            wire: std::marker::PhantomData,
        }
    }

    /// The same client, its address set by `setting` (a provider's `base_url`).
    pub fn set_by(mut self, setting: String) -> Self {
        self.endpoint.set_by(setting);
        self
    }

    /// The same client, sending `headers` with every request (checked with the entry).
    pub fn with_headers(mut self, headers: &BTreeMap<String, String>) -> Self {
        self.endpoint.add_headers(headers);
        self
    }

    /// How the endpoint has answered (see [`super::health::Health::describe`]).
    pub fn health(&self) -> String {
        self.endpoint.health()
    }

    pub async fn stream(&self, request: super::ModelRequest) -> Result<super::LlmStream, LlmError> {
        let endpoint = &self.endpoint;
        let opened = endpoint.post(W::PATH, W::HEADERS, &W::body(&request)).await;
        endpoint.note(&opened);
        let reader = W::reader(endpoint.api_key.clone());
        Ok(super::sse::read(opened?, reader, endpoint.timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_hides_credentials_and_path() {
        let endpoint = Endpoint::new(
            "https://user:pw@llm.example:8443/v1".into(),
            None,
            Duration::from_secs(5),
            KeyHeader::Bearer,
        );
        assert_eq!(endpoint.host(), "https://llm.example:8443");
    }
}
