//! Browser sessions: an unguessable id in the `parlor_session` cookie (HttpOnly,
//! SameSite=Lax, and Secure when Parlor is served over HTTPS), signed with the server's
//! cookie key so that only a session Parlor issued is one. It owns the conversations started
//! in that browser; no other browser can read them.

pub use crate::config::cookie_key::CookieKey;
use axum::http::header::HeaderValue;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use parlor_app::ssr::BrowserSession;

pub const COOKIE: &str = "parlor_session";

/// Reads the browser session from the request's cookie: only one this server signed.
pub fn from_jar(jar: &CookieJar, key: &CookieKey) -> Option<BrowserSession> {
    jar.get(COOKIE)
        .and_then(|c| key.verify(c.value()))
        .map(|id| BrowserSession(id.to_owned()))
}

/// A cookie from before cookies were signed: the bare session id.
pub fn legacy_from_jar(jar: &CookieJar) -> Option<BrowserSession> {
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

/// The key of a browser's live session (see [`crate::ops::live`]).
pub fn live_key(browser: &BrowserSession) -> String {
    format!("browser:{}", owner(browser))
}

/// The viewer a browser session (an account's, with accounts on) and its admin flag make:
/// while accounts are on, only admins reach conversations without an owner.
pub fn viewer(
    session: Option<&BrowserSession>,
    admin: bool,
    accounts_on: bool,
) -> parlor_domain::conversation::Viewer {
    parlor_domain::conversation::Viewer {
        owner: session.map(owner),
        unowned: !accounts_on || admin,
    }
}

/// What a store records as the owner of conversations started in this browser.
pub fn owner(browser: &BrowserSession) -> String {
    crate::store::owner_key(&browser.0)
}

/// The conversation an API client (or a browser) last chatted in: `parlor_chat`, set on
/// every chat response. A request without `session_id` continues it (see `turn::start`).
pub const CHAT_COOKIE: &str = "parlor_chat";

pub fn chat_from_jar(jar: &CookieJar) -> Option<parlor_domain::ConversationId> {
    jar.get(CHAT_COOKIE)
        .map(|c| c.value())
        .filter(|v| !v.is_empty())
        .and_then(|v| parlor_domain::ConversationId::parse(v).ok())
}

/// The `Set-Cookie` value naming `id` as the current conversation (30 days, chat API only).
pub fn chat_cookie(id: &parlor_domain::ConversationId, secure: bool) -> Option<HeaderValue> {
    set_cookie(
        CHAT_COOKIE,
        id.to_string(),
        "/api/chat",
        time::Duration::days(30),
        secure,
    )
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Lax`, kept for `lasts` (zero: removed),
/// `Secure` when the operator serves Parlor over HTTPS.
pub fn set_cookie(
    name: &'static str,
    value: String,
    path: &'static str,
    lasts: time::Duration,
    secure: bool,
) -> Option<HeaderValue> {
    let cookie = Cookie::build((name, value))
        .path(path)
        .max_age(lasts)
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure)
        .build();
    HeaderValue::from_str(&cookie.to_string()).ok()
}
