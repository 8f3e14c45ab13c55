//! `GET /api/chat/{agent_id}/debug`: the debug panel's facts as JSON.
//!
//! Query: `session_id` (optional), and the page's `historyPolicy` / `historyLength`, resolved
//! exactly as the chat stream resolves them. Off when the operator sets
//! `PARLOR_DEBUG_PANEL=false`.

use super::json_error;
use crate::chat::{check_access, debug_info, TurnError};
use crate::session;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use axum_extra::extract::cookie::CookieJar;
use parlor_domain::SessionId;

pub async fn get_debug(
    State(app): State<AppState>,
    Path(agent_id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
    jar: CookieJar,
) -> Response {
    let services = &app.services;
    if !services.config.debug_panel {
        return json_error(
            StatusCode::NOT_FOUND,
            "the debug panel is turned off (PARLOR_DEBUG_PANEL=false)",
        );
    }
    let Some(agent) = services.agents.get(&agent_id) else {
        return json_error(StatusCode::NOT_FOUND, format!("unknown agent {agent_id:?}"));
    };
    let first = |key: &str| {
        query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let conversation = match first("session_id").filter(|s| !s.is_empty()) {
        None => None,
        Some(raw) => {
            let id = match SessionId::parse(raw) {
                Ok(id) => id,
                Err(e) => return json_error(StatusCode::BAD_REQUEST, e.to_string()),
            };
            let info = match services.histories.for_agent(&agent).store.info(&id).await {
                Ok(Some(info)) => info,
                Ok(None) => return json_error(StatusCode::NOT_FOUND, "conversation not found"),
                Err(e) => return json_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            };
            let browser = session::from_jar(&jar);
            match check_access(Some(&info), browser.as_ref(), &agent.id) {
                Ok(()) => Some(info),
                Err(e @ TurnError::ConversationNotFound) => {
                    return json_error(StatusCode::NOT_FOUND, e.to_string())
                }
                Err(e) => return json_error(StatusCode::BAD_REQUEST, e.to_string()),
            }
        }
    };
    Json(debug_info(
        services,
        &agent,
        conversation.as_ref(),
        first("historyPolicy"),
        first("historyLength"),
    ))
    .into_response()
}
