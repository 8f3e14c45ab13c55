//! Plain axum routes (everything that is not a Leptos page or server function).

mod chat;
mod debug;

use crate::state::AppState;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

/// The most a request body may hold; messages have their own, smaller limit.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

pub fn api() -> Router<AppState> {
    Router::new()
        .route("/api/chat/{agent_id}", post(chat::post_chat))
        .route("/api/chat/{agent_id}/debug", get(debug::get_debug))
        .route("/healthz", get(|| async { "ok" }))
}

/// A JSON error: `{"error": "<what went wrong>"}`.
pub fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = parlor_domain::ApiError {
        error: message.into(),
    };
    (status, Json(body)).into_response()
}
