//! Where conversations are kept: one trait, one file per backend.

mod file;
mod memory;

pub use file::FileStore;
pub use memory::MemoryStore;

use async_trait::async_trait;
use parlor_domain::{Message, SessionId, TurnReport};
use serde::{Deserialize, Serialize};

/// What Parlor knows about a conversation besides its messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationInfo {
    pub session_id: SessionId,
    pub agent_id: String,
    /// The browser session that started it; `None` for conversations started by API clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// A title taken from the first user message.
    pub title: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// What the last model call was sent, for the debug panel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<TurnReport>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("history store I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("history store data is not valid: {0}")]
    Corrupt(String),
}

#[async_trait]
pub trait ConversationStore: Send + Sync + 'static {
    /// The conversation's messages, oldest first (empty when it does not exist).
    async fn load(&self, id: &SessionId) -> Result<Vec<Message>, StoreError>;
    /// Adds messages at the end.
    async fn append(&self, id: &SessionId, messages: &[Message]) -> Result<(), StoreError>;
    /// Replaces all messages.
    async fn replace(&self, id: &SessionId, messages: &[Message]) -> Result<(), StoreError>;
    async fn info(&self, id: &SessionId) -> Result<Option<ConversationInfo>, StoreError>;
    async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError>;
    /// The conversations a browser session started, newest first.
    async fn list_owned(&self, owner: &str) -> Result<Vec<ConversationInfo>, StoreError>;
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

fn newest_first(mut list: Vec<ConversationInfo>) -> Vec<ConversationInfo> {
    list.sort_by_key(|info| std::cmp::Reverse(info.updated_ms));
    list
}

#[cfg(test)]
pub(crate) mod contract {
    //! The behaviour every backend must share.
    use super::*;

    fn id(s: &str) -> SessionId {
        SessionId::parse(s).unwrap()
    }

    fn info(session: &str, owner: Option<&str>, updated_ms: i64) -> ConversationInfo {
        ConversationInfo {
            session_id: id(session),
            agent_id: "a".into(),
            owner: owner.map(str::to_owned),
            title: session.into(),
            created_ms: 1,
            updated_ms,
            last_turn: None,
        }
    }

    pub async fn run(store: &dyn ConversationStore) {
        let s = id("s1");
        assert!(store.load(&s).await.unwrap().is_empty());
        store.append(&s, &[Message::user("one", 1)]).await.unwrap();
        store
            .append(
                &s,
                &[Message::assistant("two", 2), Message::user("three", 3)],
            )
            .await
            .unwrap();
        let texts: Vec<String> = store
            .load(&s)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(texts, ["one", "two", "three"]);
        store
            .replace(&s, &[Message::user("only", 4)])
            .await
            .unwrap();
        assert_eq!(store.load(&s).await.unwrap().len(), 1);
        assert!(
            store.load(&id("other")).await.unwrap().is_empty(),
            "sessions are separate"
        );

        assert!(store.info(&s).await.unwrap().is_none());
        store.put_info(&info("s1", Some("b1"), 10)).await.unwrap();
        store.put_info(&info("s2", Some("b1"), 30)).await.unwrap();
        store.put_info(&info("s3", Some("b2"), 20)).await.unwrap();
        store.put_info(&info("s4", None, 40)).await.unwrap();
        let mine: Vec<String> = store
            .list_owned("b1")
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.session_id.to_string())
            .collect();
        assert_eq!(mine, ["s2", "s1"], "own conversations only, newest first");
        let mut updated = info("s1", Some("b1"), 50);
        updated.title = "renamed".into();
        store.put_info(&updated).await.unwrap();
        assert_eq!(store.info(&s).await.unwrap().unwrap().title, "renamed");
        assert_eq!(store.list_owned("b1").await.unwrap()[0].session_id, s);
    }
}
