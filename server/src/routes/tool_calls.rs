//! `POST /api/chat/{agent_id}/sessions/{session_id}/tool-calls/{call_id}`: approves or denies
//! a tool call waiting for the user (a server with `confirm`), with the conversation's own
//! ownership rules: only who may see the conversation may answer.

use super::error::{ApiError, JsonBody};
use crate::gate::session::Requester;
use crate::state::AppState;
use crate::tools::approval::Answer;
use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};

/// The answer to a waiting call.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    pub approve: bool,
    /// What an approval covers: `once` (default: this call) or `conversation` (this call
    /// and the server's later calls in the conversation, for a server with
    /// `confirm = "first"`; a server with `confirm = "always"` asks every time).
    #[serde(default)]
    pub scope: Scope,
}

/// What an approval covers.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    #[default]
    Once,
    Conversation,
}

/// What was recorded.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApprovalRecorded {
    pub call_id: String,
    pub approved: bool,
    pub scope: Scope,
}

#[utoipa::path(
    post,
    path = "/api/chat/{agent_id}/sessions/{session_id}/tool-calls/{call_id}",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "A conversation this browser (or API client) may see"),
        ("call_id" = String, Path, description = "The call's id, as the `approval` event gave it"),
    ),
    request_body = ApprovalAnswer,
    responses(
        (status = 200, description = "The answer reached the waiting call", body = ApprovalRecorded),
        (status = 400, description = "A malformed body or session id, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent or conversation, or no call waits under this id (answered already, timed out, or its turn ended)", body = parlor_domain::ApiError),
    )
)]
pub async fn post_answer(
    State(app): State<AppState>,
    Path((agent_id, session_id, call_id)): Path<(String, String, String)>,
    requester: Requester,
    JsonBody(answer, _): JsonBody<ApprovalAnswer>,
) -> Result<Json<ApprovalRecorded>, ApiError> {
    let found = super::conversations::visible(&app, &agent_id, &session_id, &requester).await?;
    let approvals = &app.services.tools.approvals;
    let given = match (answer.approve, answer.scope) {
        (false, _) => Answer::Deny,
        (true, Scope::Once) => Answer::Once,
        (true, Scope::Conversation) => Answer::Conversation,
    };
    let history = &found.history.id;
    let session = &found.info.session_id;
    // On Redis the answer goes through it first, whichever process waits: answered once.
    let shared = match &found.history.redis {
        Some(redis) => {
            use crate::store::shared_approvals::answer as shared_answer;
            let given = shared_answer(redis, history, session, &call_id, given).await;
            Some(given.inspect_err(|e| tracing::warn!("an approval did not reach Redis: {e}")))
        }
        None => None,
    };
    use crate::store::shared_approvals::Given;
    let local = || approvals.answer(history, session, &call_id, given);
    let reached = match shared {
        Some(Ok(Given::Taken)) => {
            local();
            true
        }
        Some(Ok(Given::Answered)) => false,
        // No marker (the call waits here, marked while Redis was away, or nowhere), or
        // Redis is away: only this process can tell.
        Some(Ok(Given::Unmarked)) | Some(Err(_)) | None => local(),
    };
    if !reached {
        return Err(ApiError::not_found(format!(
            "No tool call {call_id:?} waits for approval in this conversation (answered already, timed out, or its turn ended)."
        )));
    }
    Ok(Json(ApprovalRecorded {
        call_id,
        approved: answer.approve,
        scope: answer.scope,
    }))
}
