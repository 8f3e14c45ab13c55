//! Browser sessions: an unguessable id in the `parlor_session` cookie (HttpOnly,
//! SameSite=Lax). It owns the conversations started in that browser; no other browser can
//! read them.

use axum::extract::Request;
use axum::http::header::{HeaderValue, SET_COOKIE};
use axum::middleware::Next;
use axum::response::Response;
use axum_extra::extract::cookie::CookieJar;
use parlor_app::ssr::BrowserSession;

pub const COOKIE: &str = "parlor_session";

/// Reads the browser session from the request's cookie.
pub fn from_jar(jar: &CookieJar) -> Option<BrowserSession> {
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

/// Gives every page visitor a browser session: reuses the cookie's, or issues a new one and
/// sets the cookie on the response. The session is put in the request's extensions.
pub async fn ensure_browser_session(jar: CookieJar, mut request: Request, next: Next) -> Response {
    let (session, fresh) = match from_jar(&jar) {
        Some(session) => (session, false),
        None => (BrowserSession(new_id()), true),
    };
    request.extensions_mut().insert(session.clone());
    let mut response = next.run(request).await;
    if fresh {
        // A year, so the sidebar keeps this browser's conversations across visits.
        let cookie = format!(
            "{COOKIE}={}; Path=/; Max-Age=31536000; HttpOnly; SameSite=Lax",
            session.0
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
    response
}

/// What a store records as the owner of conversations started in this browser.
pub fn owner(browser: &BrowserSession) -> String {
    crate::store::owner_key(&browser.0)
}

/// The conversation an API client (or a browser) last chatted in: `parlor_chat`, set on
/// every chat response. A request without `session_id` continues it (see `chat::start`).
pub const CHAT_COOKIE: &str = "parlor_chat";

pub fn chat_from_jar(jar: &CookieJar) -> Option<parlor_domain::SessionId> {
    jar.get(CHAT_COOKIE)
        .map(|c| c.value())
        .filter(|v| !v.is_empty())
        .and_then(|v| parlor_domain::SessionId::parse(v).ok())
}

/// The `Set-Cookie` value naming `id` as the current conversation (30 days, chat API only).
pub fn chat_cookie(id: &parlor_domain::SessionId) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{CHAT_COOKIE}={id}; Path=/api/chat; Max-Age=2592000; HttpOnly; SameSite=Lax"
    ))
    .ok()
}
