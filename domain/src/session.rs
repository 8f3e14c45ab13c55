//! Session ids: which conversation a request continues.

use serde::{Deserialize, Serialize};

/// The longest session id Parlor accepts.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// A conversation's id. Parlor makes unguessable ones (128 random bits); API clients may
/// bring their own, limited to letters, digits, `-`, `_` and `.` (not leading) so an id is
/// always safe in a file name, a Redis key and a URL.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    #[error("session_id is empty")]
    Empty,
    #[error("session_id is longer than {MAX_SESSION_ID_LEN} characters")]
    TooLong,
    #[error(
        "session_id may only contain letters, digits, '-', '_' and '.', and may not start with '.'"
    )]
    BadCharacter,
}

impl SessionId {
    pub fn parse(raw: &str) -> Result<Self, SessionIdError> {
        if raw.is_empty() {
            return Err(SessionIdError::Empty);
        }
        if raw.len() > MAX_SESSION_ID_LEN {
            return Err(SessionIdError::TooLong);
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if raw.starts_with('.') || !raw.chars().all(allowed) {
            return Err(SessionIdError::BadCharacter);
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

impl TryFrom<String> for SessionId {
    type Error = SessionIdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<SessionId> for String {
    fn from(value: SessionId) -> Self {
        value.0
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_generated_and_client_ids() {
        assert!(SessionId::parse("user_123").is_ok());
        assert!(SessionId::parse("a.b-c_D9").is_ok());
        let id = SessionId::from_random(u128::MAX - 7);
        assert_eq!(id.as_str().len(), 32);
        assert_eq!(SessionId::parse(id.as_str()).unwrap(), id);
    }

    #[test]
    fn rejects_ids_that_could_escape_a_folder_or_key() {
        for bad in [
            "", "..", "../x", "a/b", "a\\b", ".hidden", "a b", "é", "a\nb",
        ] {
            assert!(SessionId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            SessionId::parse(&"x".repeat(129)),
            Err(SessionIdError::TooLong)
        );
    }
}
