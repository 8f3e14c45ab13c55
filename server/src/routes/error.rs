//! The HTTP edge's errors: every refusal is a status and `{"error": "…"}`, mapped in one
//! place, so handlers use `?`.

use crate::store::AccessDenied;
use crate::turn::TurnError;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use axum::Json;
use parlor_domain::turn::Refusal;
use parlor_domain::{ChatEvent, ChatRequestError};
use serde::de::DeserializeOwned;
use std::convert::Infallible;

/// A refused request: its status and a message a person can read.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = parlor_domain::ApiError {
            error: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<ChatRequestError> for ApiError {
    fn from(e: ChatRequestError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

impl From<parlor_domain::ConversationIdError> for ApiError {
    fn from(e: parlor_domain::ConversationIdError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

impl ApiError {
    /// A body over [`super::MAX_BODY_BYTES`] that is not a chat request with images.
    pub fn too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body is larger than {} bytes; only chat requests with images may be \
                 larger (up to PARLOR_MAX_CONTEXT_BYTES)",
                super::MAX_BODY_BYTES
            ),
        )
    }
}

/// Every status the API answers is decided here, from the error that caused it.
impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        tracing::error!("history store failed: {e}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the history store failed: {e}"),
        )
    }
}

impl From<crate::conversation::ConversationError> for ApiError {
    fn from(e: crate::conversation::ConversationError) -> Self {
        use crate::conversation::ConversationError;
        match e {
            ConversationError::Busy => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            ConversationError::NoMessage(_) => ApiError::not_found(e.to_string()),
            ConversationError::Invalid(_) | ConversationError::Import(_) => {
                ApiError::bad_request(e.to_string())
            }
            ConversationError::Store(e) => e.into(),
        }
    }
}

impl From<crate::conversation::marks::MarkError> for ApiError {
    fn from(e: crate::conversation::marks::MarkError) -> Self {
        use crate::conversation::marks::MarkError;
        match e {
            MarkError::Busy | MarkError::Changed => {
                ApiError::new(StatusCode::CONFLICT, e.to_string())
            }
            MarkError::NoMessage(_) => ApiError::not_found(e.to_string()),
            MarkError::SystemMessage => ApiError::bad_request(e.to_string()),
            MarkError::Store(e) => e.into(),
        }
    }
}

impl From<crate::conversation::versions::VersionError> for ApiError {
    fn from(e: crate::conversation::versions::VersionError) -> Self {
        use crate::conversation::versions::VersionError;
        use parlor_domain::branch::BranchError;
        match e {
            VersionError::Busy | VersionError::Changed => {
                ApiError::new(StatusCode::CONFLICT, e.to_string())
            }
            VersionError::Branch(BranchError::NoMessage(_)) => ApiError::not_found(e.to_string()),
            VersionError::Branch(BranchError::Unreachable(_)) => {
                ApiError::new(StatusCode::CONFLICT, e.to_string())
            }
            VersionError::Store(e) => e.into(),
        }
    }
}

impl From<AccessDenied> for ApiError {
    fn from(e: AccessDenied) -> Self {
        match e {
            AccessDenied::NotFound => ApiError::not_found(e.to_string()),
            AccessDenied::OtherAgent(_) => ApiError::bad_request(e.to_string()),
        }
    }
}

/// A turn that could not start. A failed history store is answered as a chat stream with
/// one `error` event (the page shows it with Retry); everything else is a refusal.
impl IntoResponse for TurnError {
    fn into_response(self) -> Response {
        crate::ops::metrics::turn("refused");
        let status = match self {
            TurnError::Access(e) => return ApiError::from(e).into_response(),
            TurnError::Store(ref e) => {
                tracing::error!("history store failed: {e}");
                let event = ChatEvent::Error {
                    message: self.to_string(),
                };
                let events =
                    futures::stream::once(async move { Ok::<_, Infallible>(to_sse(&event)) });
                return Sse::<_>::new(events).into_response();
            }
            TurnError::Busy | TurnError::Changed => StatusCode::CONFLICT,
            TurnError::Refused(Refusal::NothingToRegenerate | Refusal::NotUserMessage) => {
                StatusCode::BAD_REQUEST
            }
            TurnError::Refused(Refusal::NoMessage(_)) => StatusCode::NOT_FOUND,
            TurnError::LimitReached(_) => StatusCode::SERVICE_UNAVAILABLE,
            TurnError::NotAllowed => StatusCode::FORBIDDEN,
            TurnError::Quota { .. } => StatusCode::TOO_MANY_REQUESTS,
        };
        ApiError::new(status, self.to_string()).into_response()
    }
}

/// A JSON object body and its size in bytes, refused with the API's error body: 413 over
/// the route's size limit, 400 when it is not a JSON object or does not have the expected
/// shape.
pub struct JsonBody<T>(pub T, pub usize);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|rejection: BytesRejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "request body is larger than this server accepts \
                         (PARLOR_MAX_CONTEXT_BYTES for requests with images)",
                    )
                } else {
                    ApiError::bad_request(rejection.body_text())
                }
            })?;
        match parse_object(&bytes) {
            Ok(value) => Ok(JsonBody(value, bytes.len())),
            // Only a valid request may use the larger limit of requests with images.
            Err(_) if bytes.len() > super::MAX_BODY_BYTES => Err(ApiError::too_large()),
            Err(e) => Err(e),
        }
    }
}

/// Parses a JSON object into `T`: anything else (an array, a string, bad JSON, a wrong
/// shape) is a 400 saying what is wrong.
fn parse_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let invalid = |e: serde_json::Error| ApiError::bad_request(format!("invalid JSON body: {e}"));
    match serde_json::from_slice::<serde_json::Value>(bytes).map_err(invalid)? {
        value @ serde_json::Value::Object(_) => serde_json::from_value(value).map_err(invalid),
        _ => Err(ApiError::bad_request(
            "invalid JSON body: expected an object",
        )),
    }
}

/// A chat event as a server-sent event: its type as the event name, its JSON as the data.
pub fn to_sse(event: &ChatEvent) -> axum::response::sse::Event {
    let data = serde_json::to_string(event).unwrap_or_else(|_| "{}".into());
    axum::response::sse::Event::default()
        .event(event.name())
        .data(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parlor_domain::ChatRequest;

    #[test]
    fn only_a_json_object_of_the_right_shape_is_a_body() {
        let ok: ChatRequest = parse_object(br#"{"message": "hi"}"#).unwrap();
        assert_eq!(ok.message.as_deref(), Some("hi"));
        for (body, expected) in [
            (&b"[1]"[..], "expected an object"),
            (b"\"hi\"", "expected an object"),
            (b"{", "invalid JSON body: EOF"),
            (b"\xff", "invalid JSON body"),
            (br#"{"mesage": "hi"}"#, "unknown field `mesage`"),
        ] {
            let error = parse_object::<ChatRequest>(body).unwrap_err();
            assert_eq!(error.status, StatusCode::BAD_REQUEST);
            assert!(error.message.contains(expected), "{}", error.message);
        }
    }
}
