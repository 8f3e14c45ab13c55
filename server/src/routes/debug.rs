//! `GET /api/chat/{agent_id}/debug`: the debug panel's facts as JSON.
//!
//! Query: `session_id` (optional), and the page's `historyPolicy` / `historyLength`, resolved
//! exactly as the chat stream resolves them; `format=html` answers with the panel as the chat
//! page shows it. Off when the operator sets `PARLOR_DEBUG_PANEL=false`.

use super::error::ApiError;
use super::first_value;
use crate::gate::session::Requester;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use parlor_domain::{ConversationId, DebugInfo};

#[utoipa::path(
    get,
    path = "/api/chat/{agent_id}/debug",
    params(
        ("agent_id" = String, Path, description = "The agent"),
        ("session_id" = Option<String>, Query, description = "A conversation this browser may see"),
        ("historyPolicy" = Option<String>, Query, description = "As on the page URL: `lastN`, `all` or `none`"),
        ("historyLength" = Option<String>, Query, description = "As on the page URL: an integer"),
        ("format" = Option<String>, Query, description = "`html`: the panel's HTML as the chat page shows it, instead of JSON"),
    ),
    responses(
        (status = 200, description = "The settings as they resolve for this query, and the conversation's last model call (with `format=html`: as HTML)", body = DebugInfo),
        (status = 400, description = "A malformed session id, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent or conversation, or the panel is off", body = parlor_domain::ApiError),
        (status = 503, description = "The history store cannot be read", body = parlor_domain::ApiError),
    )
)]
pub async fn get_debug(
    State(app): State<AppState>,
    Path(agent_id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
    requester: Requester,
) -> Result<Response, ApiError> {
    let services = &app.services;
    if !services.config.debug_panel {
        return Err(ApiError::not_found(
            "the debug panel is turned off (PARLOR_DEBUG_PANEL=false)",
        ));
    }
    let agent = services
        .agents
        .get(&agent_id)
        .ok_or_else(|| ApiError::not_found(format!("unknown agent {agent_id:?}")))?;
    let store = &services.histories.for_agent(&agent).store;
    let unavailable = ApiError::from;
    let conversation = match first_value(&query, "session_id").filter(|s| !s.is_empty()) {
        None => None,
        Some(raw) => {
            let id = ConversationId::parse(raw)?;
            let info = store
                .info(&id)
                .await
                .map_err(unavailable)?
                .ok_or_else(|| ApiError::not_found("conversation not found"))?;
            info.visible_to(&requester.viewer(services), &agent.id)?;
            Some(info)
        }
    };
    let mut info = services.debug_info(
        &agent,
        conversation.as_ref(),
        first_value(&query, "historyPolicy"),
        first_value(&query, "historyLength"),
    );
    if let Some(c) = &conversation {
        info.versions = crate::conversation::versions::facts(store.as_ref(), &c.session_id)
            .await
            .map_err(unavailable)?;
    }
    if first_value(&query, "format") != Some("html") {
        return Ok(Json(info).into_response());
    }
    let messages = match &conversation {
        Some(c) => {
            store
                .stats(&c.session_id)
                .await
                .map_err(unavailable)?
                .messages
        }
        None => 0,
    };
    Ok(Html(parlor_app::components::debug_panel::render(info, messages)).into_response())
}
