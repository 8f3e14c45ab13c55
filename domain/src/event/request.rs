//! The chat request: its body, its checks, and why one is refused.

use super::*;

/// The body of `POST /api/chat/{agent_id}`: a new message, or `regenerate` to reply again
/// to the last user message. Unknown fields are refused, so a client can never believe it
/// sent something (extra messages, a system prompt) that Parlor ignored.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub regenerate: bool,
    /// Start a new conversation even when the `parlor_chat` cookie names one (the chat page's
    /// "New chat"). Without it and without `session_id`, the cookie's conversation continues.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_conversation: bool,
    /// Extra content for this turn, each entry from one source, with whether it is sent now
    /// and how long the history keeps it (see [`crate::context`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextEntry>,
    /// The id of the conversation's last user message, to replace it with `message`: that
    /// message and what follows it are removed before the new one is stored (Edit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<String>,
}

/// A chat request that passed every check: what [`ChatRequest::validate`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidChatRequest {
    /// The conversation to continue; `None` (absent or empty in the body) lets the cookie or
    /// a new conversation decide.
    pub session_id: Option<ConversationId>,
    /// The new message, or `None` to regenerate the reply to the last one.
    pub message: Option<String>,
    pub new_conversation: bool,
    /// The message's context entries, each checked.
    pub context: Vec<ContextEntry>,
    /// The last user message `message` replaces.
    pub edit: Option<String>,
}

/// Why a chat request was refused (HTTP 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChatRequestError {
    #[error("{0}")]
    ConversationId(#[from] ConversationIdError),
    #[error("send either a message or \"regenerate\": true, not both")]
    MessageAndRegenerate,
    #[error("regenerate needs a session_id")]
    RegenerateWithoutSession,
    #[error("message is missing")]
    MissingMessage,
    #[error("message is empty")]
    EmptyMessage,
    #[error("message is too long: {length} characters, the limit is {limit}")]
    TooLong { length: usize, limit: usize },
    #[error("context goes with a new message, not with regenerate")]
    ContextWithRegenerate,
    #[error("context cannot go with a ! command")]
    ContextWithCommand,
    #[error("{0}")]
    Context(#[from] ContextError),
    #[error("edit needs a session_id and a new message that is not a ! command")]
    BadEdit,
}

impl ChatRequest {
    /// Checks the request: a well-formed `session_id` if any; either a message (not blank,
    /// at most `max_message_chars` characters) or `regenerate` with a `session_id`.
    pub fn validate(self, max_message_chars: usize) -> Result<ValidChatRequest, ChatRequestError> {
        let session_id = match self.session_id.as_deref() {
            None | Some("") => None,
            Some(raw) => Some(ConversationId::parse(raw)?),
        };
        let message = match (self.message, self.regenerate) {
            (Some(_), true) => return Err(ChatRequestError::MessageAndRegenerate),
            (None, true) if session_id.is_none() => {
                return Err(ChatRequestError::RegenerateWithoutSession)
            }
            (None, true) => None,
            (None, false) => return Err(ChatRequestError::MissingMessage),
            (Some(text), false) if text.trim().is_empty() => {
                return Err(ChatRequestError::EmptyMessage)
            }
            (Some(text), false) => {
                let length = text.chars().count();
                if length > max_message_chars {
                    return Err(ChatRequestError::TooLong {
                        length,
                        limit: max_message_chars,
                    });
                }
                Some(text)
            }
        };
        if !self.context.is_empty() {
            match message.as_deref() {
                None => return Err(ChatRequestError::ContextWithRegenerate),
                Some(text) if !matches!(parse_command(text), Parsed::Message) => {
                    return Err(ChatRequestError::ContextWithCommand)
                }
                Some(_) => {}
            }
            for (i, entry) in self.context.iter().enumerate() {
                entry.validate(i)?;
            }
        }
        if self.edit.is_some()
            && (session_id.is_none()
                || !matches!(message.as_deref().map(parse_command), Some(Parsed::Message)))
        {
            return Err(ChatRequestError::BadEdit);
        }
        Ok(ValidChatRequest {
            session_id,
            message,
            new_conversation: self.new_conversation,
            context: self.context,
            edit: self.edit,
        })
    }
}
