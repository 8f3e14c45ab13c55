//! `POST /api/chat/{agent_id}`: one chat turn, streamed as server-sent events.
//!
//! Body: `{"session_id": "<optional>", "message": "<text>"}`, or
//! `{"session_id": "<id>", "regenerate": true}` to reply again to the last user message, or
//! `{"session_id": "<id>", "message": "<text>", "edit": "<message id>"}` to replace the last
//! user message (and what follows it) with a new text.
//! The query may carry `historyPolicy` / `historyLength`; the server decides whether they
//! apply. Events: `meta`, then `delta`s, then `done` or `error`.

use super::error::{to_sse, ApiError, JsonBody};
use super::first_value;
use crate::gate::session::Requester;
use crate::ops::browser;
use crate::state::AppState;
use crate::turn::{self, Turn, TurnInput};
use axum::extract::{Path, Query, State};
use axum::http::header::SET_COOKIE;
use axum::http::HeaderMap;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use futures::StreamExt;
use parlor_domain::context::Block;
use parlor_domain::{ChatEvent, ChatRequest, ConversationId};
use std::convert::Infallible;
use std::future::Future;

#[utoipa::path(
    post,
    path = "/api/chat/{agent_id}",
    params(
        ("agent_id" = String, Path, description = "The agent to chat with"),
        ("historyPolicy" = Option<String>, Query, description = "`lastN`, `all` or `none`; the server decides whether it applies"),
        ("historyLength" = Option<String>, Query, description = "An integer; 0 or less acts as 1"),
        ("X-Parlor-Admin-Token" = Option<String>, Header, description = "The operator's token, for admin commands"),
    ),
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The turn as server-sent events: `meta` first, then `delta`s, then `done` or `error` (or a `notice` and `done` for a command); each event's name is its `type`", content_type = "text/event-stream", body = ChatEvent),
        (status = 400, description = "A bad body or request", body = parlor_domain::ApiError),
        (status = 403, description = "An admin command without the admin token", body = parlor_domain::ApiError),
        (status = 404, description = "Unknown agent, or another browser's conversation", body = parlor_domain::ApiError),
        (status = 409, description = "A reply is still being written in this conversation", body = parlor_domain::ApiError),
        (status = 413, description = "A body over 1 MiB without images, or over `PARLOR_MAX_CONTEXT_BYTES` with them", body = parlor_domain::ApiError),
        (status = 429, description = "Too many requests from this address; see Retry-After", body = parlor_domain::ApiError),
        (status = 503, description = "The session limit is reached", body = parlor_domain::ApiError),
    )
)]
///
/// The request is read at the call; the future returned holds only the turn's input while
/// the turn is made durable (under load, a thousand requests can be waiting at once).
pub fn post_chat(
    State(app): State<AppState>,
    Path(agent_id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
    jar: CookieJar,
    requester: Requester,
    headers: HeaderMap,
    JsonBody(body, size): JsonBody<ChatRequest>,
) -> impl Future<Output = Result<Response, Response>> + Send {
    let input = turn_input(
        &app, &agent_id, &query, &jar, requester, &headers, body, size,
    );
    let services = app.services;
    async move {
        let input = input.map_err(IntoResponse::into_response)?;
        let turn = turn::start(&services, input)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(stream(turn, services.config.cookie_secure))
    }
}

/// What the request asks of the turn, or why it is refused.
#[allow(clippy::too_many_arguments)]
fn turn_input(
    app: &AppState,
    agent_id: &str,
    query: &[(String, String)],
    jar: &CookieJar,
    requester: Requester,
    headers: &HeaderMap,
    body: ChatRequest,
    size: usize,
) -> Result<TurnInput, ApiError> {
    let services = &app.services;
    if size > super::MAX_BODY_BYTES && !carries_images(&body) {
        return Err(ApiError::too_large());
    }
    let agent = services
        .agents
        .get(agent_id)
        .ok_or_else(|| ApiError::not_found(format!("unknown agent {agent_id:?}")))?;
    let request = body
        .validate(services.config.max_message_chars)
        .map_err(ApiError::from)?;
    Ok(TurnInput {
        agent,
        session_id: request.session_id,
        cookie_session: browser::chat_from_jar(jar),
        new_conversation: request.new_conversation,
        browser: requester.session,
        user: requester.user,
        message: request.message,
        context: request.context,
        url_policy: first_value(query, "historyPolicy").map(str::to_owned),
        url_length: first_value(query, "historyLength").map(str::to_owned),
        admin_token: headers
            .get("x-parlor-admin-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        edit: request.edit,
    })
}

/// The turn as a server-sent event stream (`meta` first), naming its conversation in the
/// `parlor_chat` cookie.
fn stream(turn: Turn, secure_cookie: bool) -> Response {
    let chat_cookie = ConversationId::parse(&turn.meta.session_id)
        .ok()
        .and_then(|id| browser::chat_cookie(&id, secure_cookie));
    let meta = futures::stream::once(async move { ChatEvent::Meta(turn.meta) });
    let rest = futures::stream::unfold(turn.events, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    });
    let events = meta
        .chain(rest)
        .map(|event| Ok::<_, Infallible>(to_sse(&event)));
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(crate::ops::connections::KEEP_ALIVE))
        .into_response();
    if let Some(cookie) = chat_cookie {
        response.headers_mut().append(SET_COOKIE, cookie);
    }
    response
}

/// Whether a request carries an image: only those may use the larger body limit.
fn carries_images(request: &ChatRequest) -> bool {
    request
        .context
        .iter()
        .flat_map(|entry| &entry.blocks)
        .any(|block| matches!(block, Block::Image { .. }))
}
