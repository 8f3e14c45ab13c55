//! Plain axum routes (everything that is not a Leptos page or server function).

mod chat;
mod conversations;
mod debug;
pub mod error;
mod messages;
pub mod metrics;
pub mod openapi;
mod ready;

use crate::state::AppState;
use axum::routing::{get, patch, post, put};
use axum::Router;

/// The most a request body without images may hold (those with images:
/// `PARLOR_MAX_CONTEXT_BYTES`); messages have their own, smaller limit.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The chat API (rate-limited per client address by the caller) and the health check.
pub fn api() -> Router<AppState> {
    Router::new()
        .route("/api/chat/{agent_id}", post(chat::post_chat))
        .route("/api/chat/{agent_id}/debug", get(debug::get_debug))
        .route(
            "/api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}",
            put(messages::put_mark),
        )
        .route(
            "/api/chat/{agent_id}/sessions/{session_id}/messages",
            get(messages::get_older),
        )
        .route(
            "/api/chat/{agent_id}/sessions/import",
            post(conversations::post_import),
        )
        .route(
            "/api/chat/{agent_id}/sessions/{session_id}",
            patch(conversations::patch_conversation).delete(conversations::delete_conversation),
        )
        .route(
            "/api/chat/{agent_id}/sessions/{session_id}/fork",
            post(conversations::post_fork),
        )
        .route(
            "/api/chat/{agent_id}/sessions/{session_id}/export",
            get(conversations::get_export),
        )
        .route("/api/conversations/search", get(conversations::get_search))
}

/// `/healthz` (the process is up) and `/readyz` (it can serve chats): never limited, never
/// a session.
pub fn health() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/openapi.json", get(openapi::get_openapi))
}

/// Readiness: rate-limited per client address (see `crate::router`).
pub fn ready() -> Router<AppState> {
    Router::new().route("/readyz", get(ready::get_ready))
}

/// The metrics: their failed authorizations are limited (see `crate::router`).
pub fn metrics() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics::get_metrics))
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "`ok` while the process runs", body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// A query parameter's first value (the page URL's rule: the first value counts if a key
/// repeats).
pub fn first_value<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}
