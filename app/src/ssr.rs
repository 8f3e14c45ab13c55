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

/// The current request's browser session, if any.
pub async fn browser_session() -> Option<BrowserSession> {
    leptos_axum::extract::<axum::Extension<BrowserSession>>()
        .await
        .ok()
        .map(|axum::Extension(session)| session)
}
