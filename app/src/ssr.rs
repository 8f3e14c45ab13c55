//! The seam between the UI and the server: the server implements [`Backend`] and provides
//! it as context; server functions reach storage and agents only through it.

use crate::api::{ChatPageData, ChatQuery, HomeData};
use std::sync::Arc;

#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    async fn home(&self) -> HomeData;
    /// The chat page for `query`, as seen by the browser session `browser`.
    async fn chat(
        &self,
        query: ChatQuery,
        browser: Option<BrowserSession>,
    ) -> Result<ChatPageData, BackendError>;
    /// Today's use of `account`'s daily token quota, when one is set (the meter shows it).
    async fn daily_use(&self, account: &str) -> Option<parlor_domain::meter::DailyUse>;
}

/// Why the server could not load a page's data.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The history store could not be read (e.g. Redis is down).
    #[error("history store unavailable: {0}")]
    Store(String),
}

#[derive(Clone)]
pub struct BackendHandle(pub Arc<dyn Backend>);

/// The browser session the request carried (from the `parlor_session` cookie); the server's
/// middleware puts it into the request's extensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrowserSession(pub String);

/// The name of the account logged in, when accounts are on: the server's accounts gate puts
/// it into the request's extensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedIn(pub String);

/// The current request's account name, if one is logged in.
pub async fn signed_in() -> Option<String> {
    leptos_axum::extract::<axum::Extension<SignedIn>>()
        .await
        .ok()
        .map(|axum::Extension(SignedIn(name))| name)
}

/// The current request's browser session, if any.
pub async fn browser_session() -> Option<BrowserSession> {
    leptos_axum::extract::<axum::Extension<BrowserSession>>()
        .await
        .ok()
        .map(|axum::Extension(session)| session)
}

/// The Content-Security-Policy of a page: only Parlor's own scripts (and the inline
/// hydration scripts carrying this response's `nonce`), its own styles, images from itself or
/// `data:` (attachments), requests to itself; no framing, no plugins, no `<base>`. WASM may be
/// compiled (`'wasm-unsafe-eval'`), nothing else evaluated. `dev` allows the live-reload
/// websocket of `cargo leptos watch`.
pub fn content_security_policy(nonce: &str, dev: bool) -> String {
    let connect = if dev { "'self' ws: wss:" } else { "'self'" };
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self'; img-src 'self' data:; connect-src {connect}; font-src 'self'; \
         object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// Sets the page's Content-Security-Policy, with this response's nonce, on the response.
pub fn set_content_security_policy(options: &leptos::config::LeptosOptions) {
    use leptos::prelude::use_context;
    let (Some(response), Some(nonce)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        leptos::nonce::use_nonce(),
    ) else {
        return;
    };
    let dev = matches!(options.env, leptos::config::Env::DEV);
    if let Ok(value) =
        axum::http::HeaderValue::from_str(&content_security_policy(&nonce.to_string(), dev))
    {
        response.insert_header(axum::http::header::CONTENT_SECURITY_POLICY, value);
    }
}
