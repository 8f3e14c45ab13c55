//! `POST /api/chat/{agent_id}`: one chat turn, streamed as server-sent events.
//!
//! Body: `{"session_id": "<optional>", "message": "<text>"}`, or
//! `{"session_id": "<id>", "regenerate": true}` to reply again to the last user message.
//! The query may carry `historyPolicy` / `historyLength`; the server decides whether they
//! apply. Events: `meta`, then `delta`s, then `done` or `error`.

use super::{json_error, MAX_BODY_BYTES};
use crate::chat::{self, TurnError, TurnInput};
use crate::session;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use futures::StreamExt;
use parlor_domain::{ChatEvent, ChatRequest, SessionId};
use std::convert::Infallible;

pub async fn post_chat(
    State(app): State<AppState>,
    Path(agent_id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
    jar: CookieJar,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let services = app.services.clone();
    let Some(agent) = services.agents.get(&agent_id) else {
        return json_error(StatusCode::NOT_FOUND, format!("unknown agent {agent_id:?}"));
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than {MAX_BODY_BYTES} bytes"),
            )
        }
        Err(rejection) => return json_error(StatusCode::BAD_REQUEST, rejection.body_text()),
    };
    let body: ChatRequest = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(value @ serde_json::Value::Object(_)) => match serde_json::from_value(value) {
            Ok(body) => body,
            Err(e) => {
                return json_error(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}"))
            }
        },
        Ok(_) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                "invalid JSON body: expected an object",
            )
        }
        Err(e) => return json_error(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")),
    };
    let session_id = match body.session_id.as_deref() {
        None | Some("") => None,
        Some(raw) => match SessionId::parse(raw) {
            Ok(id) => Some(id),
            Err(e) => return json_error(StatusCode::BAD_REQUEST, e.to_string()),
        },
    };
    let message = match (body.message, body.regenerate) {
        (Some(_), true) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                "send either a message or \"regenerate\": true, not both",
            )
        }
        (None, true) if session_id.is_none() => {
            return json_error(StatusCode::BAD_REQUEST, "regenerate needs a session_id")
        }
        (None, true) => None,
        (None, false) => return json_error(StatusCode::BAD_REQUEST, "message is missing"),
        (Some(text), false) if text.trim().is_empty() => {
            return json_error(StatusCode::BAD_REQUEST, "message is empty")
        }
        (Some(text), false) => {
            let limit = services.config.max_message_chars;
            let length = text.chars().count();
            if length > limit {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    format!("message is too long: {length} characters, the limit is {limit}"),
                );
            }
            Some(text)
        }
    };
    let first = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let input = TurnInput {
        agent,
        session_id,
        cookie_session: session::chat_from_jar(&jar),
        new_conversation: body.new_conversation,
        browser: session::from_jar(&jar),
        message,
        url_policy: first("historyPolicy"),
        url_length: first("historyLength"),
        admin_token: headers
            .get("x-parlor-admin-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    match chat::start(&services, input).await {
        Ok(turn) => {
            let chat_cookie = SessionId::parse(&turn.meta.session_id)
                .ok()
                .and_then(|id| session::chat_cookie(&id));
            let meta = futures::stream::once(async move { ChatEvent::Meta(turn.meta) });
            let rest = futures::stream::unfold(turn.events, |mut rx| async move {
                rx.recv().await.map(|event| (event, rx))
            });
            let events = meta
                .chain(rest)
                .map(|event| Ok::<_, Infallible>(to_sse(&event)));
            let mut response = Sse::new(events)
                .keep_alive(KeepAlive::default())
                .into_response();
            if let Some(cookie) = chat_cookie {
                response
                    .headers_mut()
                    .append(axum::http::header::SET_COOKIE, cookie);
            }
            response
        }
        Err(TurnError::Store(e)) => {
            tracing::error!("history store failed: {e}");
            let event = ChatEvent::Error {
                message: TurnError::Store(e).to_string(),
            };
            let events = futures::stream::once(async move { Ok::<_, Infallible>(to_sse(&event)) });
            Sse::new(events).into_response()
        }
        Err(e @ TurnError::ConversationNotFound) => {
            json_error(StatusCode::NOT_FOUND, e.to_string())
        }
        Err(e @ TurnError::Busy) => json_error(StatusCode::CONFLICT, e.to_string()),
        Err(e @ TurnError::LimitReached(_)) => {
            json_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(e @ TurnError::NotAllowed) => json_error(StatusCode::FORBIDDEN, e.to_string()),
        Err(e @ (TurnError::WrongAgent(_) | TurnError::NothingToRegenerate)) => {
            json_error(StatusCode::BAD_REQUEST, e.to_string())
        }
    }
}

fn to_sse(event: &ChatEvent) -> Event {
    let data = serde_json::to_string(event).unwrap_or_else(|_| "{}".into());
    Event::default().event(event.name()).data(data)
}
