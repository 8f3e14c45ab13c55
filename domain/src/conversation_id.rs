//! Conversation ids: which conversation a request continues. The API and the stored files
//! call it `session_id` (AgentDock's name); the MCP tools call it a dialog's name.

use serde::{Deserialize, Serialize};

/// The longest conversation id Parlor accepts.
pub const MAX_CONVERSATION_ID_LEN: usize = 128;

/// A conversation's id. Parlor makes unguessable ones (128 random bits); API clients may
/// bring their own, limited to letters, digits, `-`, `_` and `.` (not leading) so an id is
/// always safe in a file name, a Redis key and a URL.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ConversationId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversationIdError {
    #[error("session_id is empty")]
    Empty,
    #[error("session_id is longer than {MAX_CONVERSATION_ID_LEN} characters")]
    TooLong,
    #[error(
        "session_id may only contain letters, digits, '-', '_' and '.', and may not start with '.'"
    )]
    BadCharacter,
}

impl ConversationId {
    pub fn parse(raw: &str) -> Result<Self, ConversationIdError> {
        if raw.is_empty() {
            return Err(ConversationIdError::Empty);
        }
        if raw.len() > MAX_CONVERSATION_ID_LEN {
            return Err(ConversationIdError::TooLong);
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if raw.starts_with('.') || !raw.chars().all(allowed) {
            return Err(ConversationIdError::BadCharacter);
        }
        Ok(Self(raw.to_owned()))
    }

    /// Builds an id from 128 random bits supplied by the caller (the domain has no RNG).
    pub fn from_random(bits: u128) -> Self {
        Self(format!("{bits:032x}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first characters, enough to tell sessions apart on screen.
    pub fn short(&self) -> &str {
        let end = self.0.len().min(8);
        &self.0[..end]
    }
}

impl TryFrom<String> for ConversationId {
    type Error = ConversationIdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<ConversationId> for String {
    fn from(value: ConversationId) -> Self {
        value.0
    }
}

impl std::fmt::Display for ConversationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_generated_and_client_ids() {
        assert!(ConversationId::parse("user_123").is_ok());
        assert!(ConversationId::parse("a.b-c_D9").is_ok());
        let id = ConversationId::from_random(u128::MAX - 7);
        assert_eq!(id.as_str().len(), 32);
        assert_eq!(ConversationId::parse(id.as_str()).unwrap(), id);
    }

    #[test]
    fn rejects_ids_that_could_escape_a_folder_or_key() {
        for bad in [
            "", "..", "../x", "a/b", "a\\b", ".hidden", "a b", "é", "a\nb",
        ] {
            assert!(ConversationId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            ConversationId::parse(&"x".repeat(129)),
            Err(ConversationIdError::TooLong)
        );
    }
}
