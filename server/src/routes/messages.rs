//! `PUT /api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}`: pins, excludes,
//! or clears the mark of one message (see [`crate::marks`]).

use super::error::{ApiError, JsonBody};
use crate::marks::{set_mark, MarkError};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use axum_extra::extract::cookie::CookieJar;
use parlor_domain::{MarkReply, MarkRequest};

#[utoipa::path(
    put,
    path = "/api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "A conversation this browser (or API client) may see"),
        ("message_id" = String, Path, description = "The message's id, as the page and the history show it"),
    ),
    request_body = MarkRequest,
    responses(
        (status = 200, description = "The mark is set; how many messages are pinned now", body = MarkReply),
        (status = 400, description = "A malformed body or session id, a system message, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent, conversation or message", body = parlor_domain::ApiError),
        (status = 409, description = "A reply is being written in the conversation", body = parlor_domain::ApiError),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn put_mark(
    State(app): State<AppState>,
    Path((agent_id, session_id, message_id)): Path<(String, String, String)>,
    jar: CookieJar,
    JsonBody(request, _): JsonBody<MarkRequest>,
) -> Result<Json<MarkReply>, ApiError> {
    let found = super::conversations::visible(&app, &agent_id, &session_id, &jar).await?;
    match set_mark(
        &app.services,
        &found.history,
        &found.info,
        &message_id,
        request.send,
    )
    .await
    {
        Ok(reply) => Ok(Json(reply)),
        Err(e) => Err(match e {
            MarkError::Busy | MarkError::Changed => {
                ApiError::new(StatusCode::CONFLICT, e.to_string())
            }
            MarkError::NoMessage(_) => ApiError::not_found(e.to_string()),
            MarkError::SystemMessage => ApiError::bad_request(e.to_string()),
            MarkError::Store(e) => super::conversations::unavailable(e),
        }),
    }
}
