//! `POST /api/chat/{agent_id}/sessions/{session_id}/stop`: ends the reply being written in
//! a conversation, as closing its stream does (running tool calls are cancelled at their
//! servers, what arrived is stored, marked stopped), for when the stream cannot be closed: a
//! proxy that keeps the upstream connection open when the browser lets go. Same access rule
//! as the conversation.

use super::error::ApiError;
use crate::gate::session::Requester;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;

/// The reply was told to stop.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Stopped {
    pub stopped: bool,
}

#[utoipa::path(
    post,
    path = "/api/chat/{agent_id}/sessions/{session_id}/stop",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "A conversation this browser (or API client) may see"),
    ),
    responses(
        (status = 200, description = "The reply stops: its stream ends with what arrived stored, marked stopped", body = Stopped),
        (status = 400, description = "A malformed session id, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent or conversation, or no reply is being written in it by this process", body = parlor_domain::ApiError),
    )
)]
pub async fn post_stop(
    State(app): State<AppState>,
    Path((agent_id, session_id)): Path<(String, String)>,
    requester: Requester,
) -> Result<Json<Stopped>, ApiError> {
    let found = super::conversations::visible(&app, &agent_id, &session_id, &requester).await?;
    let stops = &app.services.stops;
    if !stops.stop(&found.history.id, &found.info.session_id) {
        return Err(ApiError::not_found(
            "No reply is being written in this conversation (by this process).",
        ));
    }
    Ok(Json(Stopped { stopped: true }))
}
