//! `GET /api/chat/{agent_id}/sessions/{session_id}/messages`: an older page of a
//! conversation (the chat page loads it as the reader scrolls up), and
//! `PUT /api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}`: pins, excludes,
//! or clears the mark of one message (see [`crate::conversation::marks`]), and
//! `POST …/messages/{message_id}/choose`: goes on from that version of the message (see
//! [`crate::conversation::versions`]).

use super::error::{ApiError, JsonBody};
use crate::conversation::marks::set_mark;
use crate::gate::session::Requester;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::Json;
use parlor_app::api::OlderMessages;
use parlor_domain::{MarkReply, MarkRequest};
use serde::Deserialize;

/// Which older page: the messages before the stored position `before`, whose message has
/// the id `before_id` (the first message the page shows).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OlderQuery {
    /// The stored position of the first message the page shows.
    pub before: usize,
    /// That message's id (the page still finds it after `max_turns` dropped older ones).
    pub before_id: String,
    /// Include each message's tokens (when the operator allows the debug panel).
    #[serde(default)]
    pub debug: bool,
}

#[utoipa::path(
    get,
    path = "/api/chat/{agent_id}/sessions/{session_id}/messages",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "A conversation this browser (or API client) may see"),
        OlderQuery,
    ),
    responses(
        (status = 200, description = "Up to 40 messages before `before`, oldest first: `{messages, html, first_index, summarized}` (`html`: each reply's sanitized HTML, empty for questions; `first_index`: the stored position of the first; `summarized`: where the rolling summary ends when that is in this page, else 0). Empty when the message `before_id` is gone.", body = Object),
        (status = 400, description = "A malformed query or session id, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent or conversation", body = parlor_domain::ApiError),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn get_older(
    State(app): State<AppState>,
    Path((agent_id, session_id)): Path<(String, String)>,
    requester: Requester,
    query: Result<Query<OlderQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<OlderMessages>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let found = super::conversations::visible(&app, &agent_id, &session_id, &requester).await?;
    crate::routes::pages::older(
        &app.services,
        &found.agent,
        &found.info.session_id,
        &found.info,
        query.before,
        &query.before_id,
        query.debug,
    )
    .await
    .map(Json)
    .map_err(super::conversations::unavailable)
}

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
    requester: Requester,
    JsonBody(request, _): JsonBody<MarkRequest>,
) -> Result<Json<MarkReply>, ApiError> {
    let found = super::conversations::visible(&app, &agent_id, &session_id, &requester).await?;
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
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(
    post,
    path = "/api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}/choose",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "A conversation this browser (or API client) may see"),
        ("message_id" = String, Path, description = "A message of the version to go on from (the ids ‹ › name), on any branch"),
    ),
    responses(
        (status = 200, description = "The version is the chosen path now (choosing one already on it changes nothing)", body = parlor_domain::branch::ChooseReply),
        (status = 400, description = "A malformed session id, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent, conversation or message", body = parlor_domain::ApiError),
        (status = 409, description = "A reply is being written in the conversation, or it changed meanwhile", body = parlor_domain::ApiError),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn post_choose(
    State(app): State<AppState>,
    Path((agent_id, session_id, message_id)): Path<(String, String, String)>,
    requester: Requester,
) -> Result<Json<parlor_domain::branch::ChooseReply>, ApiError> {
    let found = super::conversations::visible(&app, &agent_id, &session_id, &requester).await?;
    let history = &found.history;
    crate::conversation::versions::choose_version(&app.services, history, &found.info, &message_id)
        .await
        .map(Json)
        .map_err(ApiError::from)
}
