//! Browser sessions: an unguessable id in the `parlor_session` cookie (HttpOnly,
//! SameSite=Lax, and Secure when Parlor is served over HTTPS), signed with the server's
//! cookie key so that only a session Parlor issued is one. It owns the conversations started
//! in that browser; no other browser can read them.

use crate::state::Services;
use axum::extract::{Request, State};
use axum::http::header::{HeaderValue, SET_COOKIE};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use hmac::{Hmac, Mac};
use parlor_app::ssr::BrowserSession;
use sha2::Sha256;
use std::sync::Arc;

pub const COOKIE: &str = "parlor_session";

/// The secret that signs browser session cookies. Processes that share a history share it:
/// the operator's `PARLOR_COOKIE_KEY`, else kept in Redis when the `default` history is
/// there (`<prefix>cookie-key`), else in the data folder (`cookie.key`), made once by
/// whichever process comes first.
#[derive(Clone)]
pub struct CookieKey(Arc<[u8; 32]>);

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

/// How many hex digits of the signature a cookie carries (128 bits).
const SIGNATURE_HEX: usize = 32;

impl CookieKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        CookieKey(Arc::new(bytes))
    }

    fn random() -> [u8; 32] {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key
    }

    fn mac(&self, id: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0[..])
            .expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac
    }

    /// The cookie value of session `id`: the id and its signature.
    pub fn sign(&self, id: &str) -> String {
        let tag = self.mac(id).finalize().into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        format!("{id}.{}", &hex[..SIGNATURE_HEX])
    }

    /// The session id of a cookie value this key signed (compared in constant time).
    pub fn verify<'a>(&self, value: &'a str) -> Option<&'a str> {
        let (id, signature) = value.split_once('.')?;
        if !is_well_formed(id) || signature.len() != SIGNATURE_HEX {
            return None;
        }
        let bytes: Vec<u8> = (0..SIGNATURE_HEX / 2)
            .map(|i| u8::from_str_radix(signature.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        self.mac(id).verify_truncated_left(&bytes).ok()?;
        Some(id)
    }

    /// The key the processes of this deployment share (see [`CookieKey`]).
    pub async fn load(
        config: &crate::config::Config,
        histories: &crate::histories::Histories,
    ) -> anyhow::Result<CookieKey> {
        if let Some(key) = &config.cookie_key {
            return Ok(key.clone());
        }
        let data_dir = &config.data_dir;
        if let Some((connection, prefix)) = histories.get("default").and_then(|h| h.redis.clone()) {
            return Self::in_redis(connection, &prefix).await;
        }
        let store_is_memory = histories
            .get("default")
            .is_some_and(|h| h.store.kind() == "memory");
        if store_is_memory {
            // Its conversations end with the process: so may its sessions.
            return Ok(CookieKey::from_bytes(Self::random()));
        }
        Self::in_file(&data_dir.join("cookie.key"))
    }

    async fn in_redis(
        mut connection: redis::aio::ConnectionManager,
        prefix: &str,
    ) -> anyhow::Result<CookieKey> {
        let key = format!("{prefix}cookie-key");
        let fresh = hex(&Self::random());
        let _: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&fresh)
            .arg("NX")
            .query_async(&mut connection)
            .await?;
        let stored: String = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut connection)
            .await?;
        CookieKey::parse(&stored)
            .ok_or_else(|| anyhow::anyhow!("Redis key {key} is not a cookie key"))
    }

    fn in_file(path: &std::path::Path) -> anyhow::Result<CookieKey> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if let Ok(text) = std::fs::read_to_string(path) {
            return CookieKey::parse(&text).ok_or_else(|| {
                anyhow::anyhow!(
                    "{} does not hold a cookie key (64 hex digits)",
                    path.display()
                )
            });
        }
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        std::fs::create_dir_all(dir)?;
        // Written whole under another name, then linked into place: a process starting at
        // the same moment either links first or reads the key this one linked.
        let staged = dir.join(format!(".cookie.key.tmp-{}", uuid::Uuid::new_v4().simple()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            // Only the owner may read it: it signs every browser's session.
            .mode(0o600)
            .open(&staged)?;
        file.write_all(hex(&Self::random()).as_bytes())?;
        file.sync_all()?;
        let linked = std::fs::hard_link(&staged, path);
        let _ = std::fs::remove_file(&staged);
        match linked {
            Ok(()) => crate::atomic::sync_dir(dir)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        let text = std::fs::read_to_string(path)?;
        CookieKey::parse(&text)
            .ok_or_else(|| anyhow::anyhow!("{} does not hold a cookie key", path.display()))
    }

    /// A key written as 64 hex digits.
    pub fn parse(text: &str) -> Option<CookieKey> {
        let text = text.trim();
        if text.len() != 64 {
            return None;
        }
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(CookieKey::from_bytes(key))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads the browser session from the request's cookie: only one this server signed.
pub fn from_jar(jar: &CookieJar, key: &CookieKey) -> Option<BrowserSession> {
    jar.get(COOKIE)
        .and_then(|c| key.verify(c.value()))
        .map(|id| BrowserSession(id.to_owned()))
}

/// A cookie from before cookies were signed: the bare session id.
fn legacy_from_jar(jar: &CookieJar) -> Option<BrowserSession> {
    jar.get(COOKIE)
        .map(|c| c.value())
        .filter(|v| is_well_formed(v))
        .map(|v| BrowserSession(v.to_owned()))
}

fn is_well_formed(value: &str) -> bool {
    value.len() == 32 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The key of a browser's live session (see [`crate::live`]).
pub fn live_key(browser: &BrowserSession) -> String {
    format!("browser:{}", owner(browser))
}

/// Gives every page visitor a browser session: reuses the cookie's, or issues a new one and
/// sets the cookie on the response. The session is put in the request's extensions.
///
/// A browser takes one of the `max_users` slots only once it shows it is one: when it comes
/// back with its cookie to a page (or sends its first chat message, see `turn::start`).
/// First visits (uptime probes, crawlers, scripts without a cookie jar), static files and
/// self-declared bots never take a slot, so they cannot lock real users out. A returning
/// browser that is not live yet is admitted only within `max_users`; beyond it, it gets a
/// 503 page saying so.
pub async fn ensure_browser_session(
    State(services): State<Arc<Services>>,
    jar: CookieJar,
    mut request: Request,
    next: Next,
) -> Response {
    let key = &services.cookie_key;
    let (session, fresh) = match from_jar(&jar, key) {
        Some(session) => (session, false),
        None => match legacy_owner(&services, &jar).await {
            // Signed again on this response; it keeps its conversations.
            Some(session) => (session, true),
            None => (BrowserSession(new_id()), true),
        },
    };
    if !fresh && takes_slot(&request) {
        let admitted = services
            .live
            .touch(
                &live_key(&session),
                crate::store::now_ms(),
                services.limits.max_users(),
                false,
            )
            .await;
        match admitted {
            Ok(Ok(())) => {}
            Ok(Err(limit)) => return limit_page(&limit.to_string()),
            // The store being away must not hide the pages; chatting reports it.
            Err(e) => tracing::warn!("could not count live sessions: {e}"),
        }
    }
    request.extensions_mut().insert(session.clone());
    let mut response = next.run(request).await;
    if fresh {
        // A year, so the sidebar keeps this browser's conversations across visits.
        let secure = services.config.cookie_secure;
        if let Some(value) = set_cookie(COOKIE, key.sign(&session.0), "/", 365, secure) {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
    response
}

/// A cookie Parlor issued before it signed them, which owns conversations: kept (and signed
/// on the response) so an upgrade loses no browser its conversations. A made-up value owns
/// none, so it is a stranger's and gets a new session.
async fn legacy_owner(services: &Services, jar: &CookieJar) -> Option<BrowserSession> {
    let session = legacy_from_jar(jar)?;
    let owner = owner(&session);
    for id in services.histories.ids() {
        let history = services.histories.get(id)?;
        if matches!(history.store.list_owned(&owner).await, Ok(owned) if !owned.is_empty()) {
            return Some(session);
        }
    }
    None
}

/// Whether a request with a browser cookie counts as that browser being here: pages and
/// the pages' server functions do; static files (a path whose last part has an extension,
/// or the site's package folder) and clients that call themselves bots do not.
fn takes_slot(request: &Request) -> bool {
    !crate::rate_limit::is_static(request.uri().path()) && !is_bot(request.headers())
}

/// A client whose User-Agent says it is a crawler, a link previewer or a monitor.
fn is_bot(headers: &axum::http::HeaderMap) -> bool {
    let Some(agent) = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let agent = agent.to_ascii_lowercase();
    [
        "bot", "crawl", "spider", "slurp", "preview", "monitor", "uptime",
    ]
    .iter()
    .any(|word| agent.contains(word))
}

/// What a store records as the owner of conversations started in this browser.
pub fn owner(browser: &BrowserSession) -> String {
    crate::store::owner_key(&browser.0)
}

/// The conversation an API client (or a browser) last chatted in: `parlor_chat`, set on
/// every chat response. A request without `session_id` continues it (see `turn::start`).
pub const CHAT_COOKIE: &str = "parlor_chat";

pub fn chat_from_jar(jar: &CookieJar) -> Option<parlor_domain::SessionId> {
    jar.get(CHAT_COOKIE)
        .map(|c| c.value())
        .filter(|v| !v.is_empty())
        .and_then(|v| parlor_domain::SessionId::parse(v).ok())
}

/// The `Set-Cookie` value naming `id` as the current conversation (30 days, chat API only).
pub fn chat_cookie(id: &parlor_domain::SessionId, secure: bool) -> Option<HeaderValue> {
    set_cookie(CHAT_COOKIE, id.to_string(), "/api/chat", 30, secure)
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Lax`, kept for `days`, `Secure` when the
/// operator serves Parlor over HTTPS.
fn set_cookie(
    name: &'static str,
    value: String,
    path: &'static str,
    days: i64,
    secure: bool,
) -> Option<HeaderValue> {
    let cookie = Cookie::build((name, value))
        .path(path)
        .max_age(time::Duration::days(days))
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure)
        .build();
    HeaderValue::from_str(&cookie.to_string()).ok()
}

/// The page a visitor gets when the session limit is reached.
fn limit_page(message: &str) -> Response {
    let body = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Parlor is full</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"></head>\
         <body>\
         <h1>Parlor is full</h1><p role=\"alert\">{message}</p></body></html>"
    );
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_this_key_signed_are_sessions() {
        let key = CookieKey::from_bytes([7; 32]);
        let other = CookieKey::from_bytes([8; 32]);
        let id = "0123456789abcdef0123456789abcdef";
        let signed = key.sign(id);
        assert_eq!(key.verify(&signed), Some(id));
        assert_eq!(other.verify(&signed), None, "another key's signature");
        let (_, tag) = signed.split_once('.').unwrap();
        for forged in [
            id.to_owned(),
            format!("{id}."),
            format!("{id}.{}", "0".repeat(32)),
            format!("{}.{tag}", "f".repeat(32)),
            format!("{id}.{}", &tag[..31]),
            format!("{id}.{tag}0"),
            format!("{}.{tag}", id.to_uppercase()),
            format!("{id}.{}", tag.replace(|c: char| c.is_ascii_digit(), "z")),
            String::new(),
            ".".to_owned(),
        ] {
            assert_eq!(key.verify(&forged), None, "{forged:?}");
        }
    }

    #[test]
    fn processes_on_one_data_folder_share_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cookie.key");
        // Processes starting together: every one ends up with the key one of them made.
        let keys: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| CookieKey::in_file(&path).unwrap().sign("a")))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only the owner reads it");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        std::fs::write(&path, "not a key").unwrap();
        let error = CookieKey::in_file(&path).unwrap_err().to_string();
        assert!(error.contains("cookie.key"), "{error}");
    }

    #[tokio::test]
    async fn processes_on_one_redis_share_one_key() {
        let redis = fake_llm::redis_server::RedisServer::start().unwrap();
        let connect = || async {
            let client = redis::Client::open(redis.url()).unwrap();
            redis::aio::ConnectionManager::new(client).await.unwrap()
        };
        let first = CookieKey::in_redis(connect().await, "p:").await.unwrap();
        let second = CookieKey::in_redis(connect().await, "p:").await.unwrap();
        assert_eq!(first.sign("a"), second.sign("a"));
        let elsewhere = CookieKey::in_redis(connect().await, "q:").await.unwrap();
        assert_ne!(
            first.sign("a"),
            elsewhere.sign("a"),
            "prefixes are separate"
        );
    }
}
