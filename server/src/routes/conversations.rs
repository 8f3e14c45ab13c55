//! Whole conversations over HTTP: fork, rename, delete, export, import and search (see
//! [`crate::conversation`]). The access rule is the chat's: a conversation started in a
//! browser exists only for that browser (404 for everyone else).

use super::error::{ApiError, JsonBody};
use super::first_value;
use crate::conversation::{self, ForkAt, Hit, Summary};
use crate::gate::session::Requester;
use crate::state::AppState;
use crate::store::histories::History;
use crate::store::{ConversationInfo, StoreError};
use axum::extract::rejection::StringRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use parlor_domain::{Agent, ConversationId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A conversation this request may see: its agent, history and details.
pub(super) struct Visible {
    pub agent: Arc<Agent>,
    pub history: Arc<History>,
    pub info: ConversationInfo,
}

/// Resolves `agent_id` and `session_id` for the browser in `jar`, with the access rule of
/// every conversation route.
pub(super) async fn visible(
    app: &AppState,
    agent_id: &str,
    session_id: &str,
    requester: &Requester,
) -> Result<Visible, ApiError> {
    let services = &app.services;
    let agent = services
        .agents
        .get(agent_id)
        .ok_or_else(|| ApiError::not_found(format!("unknown agent {agent_id:?}")))?;
    let id = ConversationId::parse(session_id)?;
    let history = services.histories.for_agent(&agent).clone();
    let info = history
        .store
        .info(&id)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| ApiError::not_found("conversation not found"))?;
    info.visible_to(&requester.viewer(services), &agent.id)?;
    Ok(Visible {
        agent,
        history,
        info,
    })
}

pub(super) fn unavailable(e: StoreError) -> ApiError {
    ApiError::from(e)
}

/// Where a fork ends: give exactly one of the two.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// Copy the messages up to and including this one ("Fork from here").
    #[serde(default)]
    pub through: Option<String>,
    /// Copy the messages before this one (to edit it in the fork).
    #[serde(default)]
    pub before: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/chat/{agent_id}/sessions/{session_id}/fork",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "The conversation to fork"),
    ),
    request_body = ForkRequest,
    responses(
        (status = 201, description = "The new conversation: the messages up to the given one (ids, context blocks, pins and exclusions copied; not the summary), titled \"Fork of …\", linked to its origin", body = Summary),
        (status = 400, description = "A malformed body or session id, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent, conversation or message", body = parlor_domain::ApiError),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn post_fork(
    State(app): State<AppState>,
    Path((agent_id, session_id)): Path<(String, String)>,
    requester: Requester,
    JsonBody(request, _): JsonBody<ForkRequest>,
) -> Result<(StatusCode, Json<Summary>), ApiError> {
    let at = match (request.through, request.before) {
        (Some(id), None) => ForkAt::Through(id),
        (None, Some(id)) => ForkAt::Before(id),
        _ => {
            return Err(ApiError::bad_request(
                "give the message to fork at as either \"through\" or \"before\"",
            ))
        }
    };
    let found = visible(&app, &agent_id, &session_id, &requester).await?;
    let (fork, messages) = conversation::fork(&found.history, &found.info, at).await?;
    Ok((StatusCode::CREATED, Json(Summary::new(&fork, messages))))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameRequest {
    /// The new title (one line, at most 200 characters).
    pub title: String,
}

#[utoipa::path(
    patch,
    path = "/api/chat/{agent_id}/sessions/{session_id}",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "The conversation to rename"),
    ),
    request_body = RenameRequest,
    responses(
        (status = 200, description = "Renamed", body = Summary),
        (status = 400, description = "An empty or too long title, a malformed body or session id", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent or conversation", body = parlor_domain::ApiError),
        (status = 409, description = "A reply is being written in the conversation", body = parlor_domain::ApiError),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn patch_conversation(
    State(app): State<AppState>,
    Path((agent_id, session_id)): Path<(String, String)>,
    requester: Requester,
    JsonBody(request, _): JsonBody<RenameRequest>,
) -> Result<Json<Summary>, ApiError> {
    let found = visible(&app, &agent_id, &session_id, &requester).await?;
    let renamed =
        conversation::rename(&app.services, &found.history, &found.info, &request.title).await?;
    let messages = found
        .history
        .store
        .stats(&renamed.session_id)
        .await
        .map_err(unavailable)?
        .messages;
    Ok(Json(Summary::new(&renamed, messages)))
}

/// What a deletion did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Deleted {
    pub session_id: String,
    /// The backup kept of it (`parlor store restore` brings it back), where the backend
    /// keeps backups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
}

#[utoipa::path(
    delete,
    path = "/api/chat/{agent_id}/sessions/{session_id}",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "The conversation to delete"),
    ),
    responses(
        (status = 200, description = "Deleted (backed up first where the backend keeps backups)", body = Deleted),
        (status = 400, description = "A malformed session id, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent or conversation", body = parlor_domain::ApiError),
        (status = 409, description = "A reply is being written in the conversation", body = parlor_domain::ApiError),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn delete_conversation(
    State(app): State<AppState>,
    Path((agent_id, session_id)): Path<(String, String)>,
    requester: Requester,
) -> Result<Json<Deleted>, ApiError> {
    let found = visible(&app, &agent_id, &session_id, &requester).await?;
    let backup = conversation::delete(&app.services, &found.history, &found.info).await?;
    Ok(Json(Deleted {
        session_id: found.info.session_id.to_string(),
        backup: backup.map(|b| b.id),
    }))
}

/// What `GET …/export` writes.
enum ExportFormat {
    Parlor,
    Markdown,
    OpenAi,
}

#[utoipa::path(
    get,
    path = "/api/chat/{agent_id}/sessions/{session_id}/export",
    params(
        ("agent_id" = String, Path, description = "The conversation's agent"),
        ("session_id" = String, Path, description = "The conversation to export"),
        ("format" = Option<String>, Query, description = "`json` (Parlor's stored form with every version, what the import reads; the default), `md` (readable Markdown of the chosen path) or `openai` (the chosen path as an OpenAI-style messages array, which the import reads too)"),
    ),
    responses(
        (status = 200, description = "The conversation, as a download", content_type = "application/json"),
        (status = 400, description = "An unknown format, a malformed session id, or another agent's conversation", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent or conversation", body = parlor_domain::ApiError),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn get_export(
    State(app): State<AppState>,
    Path((agent_id, session_id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    requester: Requester,
) -> Result<Response, ApiError> {
    let format = match first_value(&query, "format").unwrap_or("json") {
        "json" => ExportFormat::Parlor,
        "md" | "markdown" => ExportFormat::Markdown,
        "openai" => ExportFormat::OpenAi,
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown format {other:?}: use json, md or openai"
            )))
        }
    };
    let found = visible(&app, &agent_id, &session_id, &requester).await?;
    let export = conversation::export(found.history.store.as_ref(), &found.info)
        .await
        .map_err(unavailable)?;
    fn pretty(value: &impl serde::Serialize) -> String {
        serde_json::to_string_pretty(value).unwrap_or_default()
    }
    let (body, content_type, extension) = match format {
        ExportFormat::Markdown => (export.to_markdown(), "text/markdown; charset=utf-8", "md"),
        ExportFormat::Parlor => (pretty(&export), "application/json", "json"),
        ExportFormat::OpenAi => (
            pretty(&export.to_openai()),
            "application/json",
            "openai.json",
        ),
    };
    let name = format!(
        "parlor-{}-{}.{extension}",
        found.agent.id, found.info.session_id
    );
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response())
}

#[utoipa::path(
    post,
    path = "/api/chat/{agent_id}/sessions/import",
    params(("agent_id" = String, Path, description = "The agent the conversation is imported for")),
    request_body(content = String, description = "A Parlor JSON export, or an OpenAI-style array of {\"role\", \"content\"} messages", content_type = "application/json"),
    responses(
        (status = 201, description = "The new conversation (this browser's, or reachable by its id for API clients)", body = Summary),
        (status = 400, description = "Not a conversation Parlor can import; the error names what is wrong, and nothing is stored", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent", body = parlor_domain::ApiError),
        (status = 413, description = "Over `PARLOR_MAX_CONTEXT_BYTES`", body = parlor_domain::ApiError),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn post_import(
    State(app): State<AppState>,
    Path(agent_id): Path<String>,
    requester: Requester,
    body: Result<String, StringRejection>,
) -> Result<(StatusCode, Json<Summary>), ApiError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(),
        _ => ApiError::bad_request(format!("the body is not UTF-8 text: {e}")),
    })?;
    let services = &app.services;
    let agent = services
        .agents
        .get(&agent_id)
        .ok_or_else(|| ApiError::not_found(format!("unknown agent {agent_id:?}")))?;
    let owner = requester.owner();
    let store = services.histories.for_agent(&agent).store.clone();
    let (info, messages) = conversation::import(store.as_ref(), &agent.id, owner, &body).await?;
    Ok((StatusCode::CREATED, Json(Summary::new(&info, messages))))
}

/// Search results.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SearchResults {
    pub query: String,
    pub results: Vec<Hit>,
}

#[utoipa::path(
    get,
    path = "/api/conversations/search",
    params(
        ("q" = String, Query, description = "The text to find (case-insensitive) in titles and messages"),
        ("format" = Option<String>, Query, description = "`html`: the results as the chat page's sidebar shows them, instead of JSON"),
    ),
    responses(
        (status = 200, description = "This browser's conversations that contain the text, newest first, each with the first matching line (at most 50)", body = SearchResults),
        (status = 503, description = "The history store failed", body = parlor_domain::ApiError),
    )
)]
pub async fn get_search(
    State(app): State<AppState>,
    Query(query): Query<Vec<(String, String)>>,
    requester: Requester,
) -> Result<Response, ApiError> {
    let text = first_value(&query, "q").unwrap_or_default().to_owned();
    // Only a browser's own conversations: API clients' conversations are listed nowhere.
    let results = match requester.owner() {
        Some(owner) => conversation::search_owned(&app.services.histories, &owner, &text)
            .await
            .map_err(unavailable)?,
        None => Vec::new(),
    };
    if first_value(&query, "format") == Some("html") {
        let hits = results
            .into_iter()
            .map(|hit| parlor_app::api::SearchHit {
                session_id: hit.session_id,
                agent_id: hit.agent_id,
                title: hit.title,
                line: hit.line,
                version: hit.message_id.filter(|_| hit.on_branch),
            })
            .collect();
        return Ok(Html(parlor_app::components::search_results::render(hits)).into_response());
    }
    Ok(Json(SearchResults {
        query: text,
        results,
    })
    .into_response())
}
