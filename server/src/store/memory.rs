//! Conversations in memory: for development and tests; lost on restart.

use super::{newest_first, ConversationInfo, ConversationStore, StoreError};
use async_trait::async_trait;
use parlor_domain::{Message, SessionId};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    messages: HashMap<SessionId, Vec<Message>>,
    infos: HashMap<SessionId, ConversationInfo>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        // A panic while holding the lock cannot leave the maps half-updated (each operation
        // is a single insert or clone), so a poisoned lock is safe to reuse.
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }
}

#[async_trait]
impl ConversationStore for MemoryStore {
    async fn load(&self, id: &SessionId) -> Result<Vec<Message>, StoreError> {
        Ok(self.with(|i| i.messages.get(id).cloned().unwrap_or_default()))
    }

    async fn append(&self, id: &SessionId, messages: &[Message]) -> Result<(), StoreError> {
        self.with(|i| {
            i.messages
                .entry(id.clone())
                .or_default()
                .extend_from_slice(messages)
        });
        Ok(())
    }

    async fn replace(&self, id: &SessionId, messages: &[Message]) -> Result<(), StoreError> {
        self.with(|i| i.messages.insert(id.clone(), messages.to_vec()));
        Ok(())
    }

    async fn info(&self, id: &SessionId) -> Result<Option<ConversationInfo>, StoreError> {
        Ok(self.with(|i| i.infos.get(id).cloned()))
    }

    async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError> {
        self.with(|i| i.infos.insert(info.session_id.clone(), info.clone()));
        Ok(())
    }

    async fn list_owned(&self, owner: &str) -> Result<Vec<ConversationInfo>, StoreError> {
        Ok(newest_first(self.with(|i| {
            i.infos
                .values()
                .filter(|info| info.owner.as_deref() == Some(owner))
                .cloned()
                .collect()
        })))
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn passes_the_store_contract() {
        super::super::contract::run(&super::MemoryStore::new()).await;
    }
}
