//! Conversations in memory: for development and tests; lost on restart.

use super::{
    apply_edits, cap, newest_first, BackupInfo, ConversationInfo, ConversationStore, Listed,
    MaxTurns,
};
use super::{rooted, settled, Stats, StoreError, Tail};
use async_trait::async_trait;
use parlor_domain::branch::{Branches, Rebranch};
use parlor_domain::context::Edit;
use parlor_domain::{ConversationId, Message};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct MemoryStore {
    max_turns: MaxTurns,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    messages: HashMap<ConversationId, Vec<Message>>,
    infos: HashMap<ConversationId, ConversationInfo>,
    summaries: HashMap<ConversationId, serde_json::Value>,
    versions: HashMap<ConversationId, u64>,
    branches: HashMap<ConversationId, Branches>,
}

impl Inner {
    fn bump(&mut self, id: &ConversationId) {
        *self.versions.entry(id.clone()).or_default() += 1;
    }

    /// After the path changed under them: the branches whose parent went go too.
    fn root_branches(&mut self, id: &ConversationId) {
        let path = self.messages.get(id).map(Vec::as_slice).unwrap_or_default();
        if let Some(kept) = self.branches.get(id).and_then(|b| rooted(b, path)) {
            self.branches.insert(id.clone(), kept);
        }
    }
}

impl MemoryStore {
    pub fn new(max_turns: MaxTurns) -> Self {
        MemoryStore {
            max_turns,
            inner: Mutex::default(),
        }
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
    fn describe(&self) -> String {
        "memory (lost when Parlor stops)".into()
    }

    fn max_turns(&self) -> MaxTurns {
        self.max_turns
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn load(&self, id: &ConversationId) -> Result<Vec<Message>, StoreError> {
        Ok(self.with(|i| i.messages.get(id).cloned().unwrap_or_default()))
    }

    async fn load_tail(&self, id: &ConversationId, count: usize) -> Result<Tail, StoreError> {
        Ok(self.with(|i| {
            let all = i.messages.get(id).map(Vec::as_slice).unwrap_or_default();
            Tail {
                messages: all[all.len().saturating_sub(count)..].to_vec(),
                total: all.len(),
            }
        }))
    }

    async fn load_pinned(
        &self,
        id: &ConversationId,
        _hint: &[usize],
    ) -> Result<Option<Vec<(usize, Message)>>, StoreError> {
        Ok(Some(self.with(|i| {
            let all = i.messages.get(id).map(Vec::as_slice).unwrap_or_default();
            super::pinned_in(all, 0)
        })))
    }

    async fn append(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError> {
        self.with(|i| {
            let stored = i.messages.entry(id.clone()).or_default();
            stored.extend_from_slice(messages);
            if cap(stored, self.max_turns) > 0 {
                i.root_branches(id);
            }
        });
        Ok(())
    }

    async fn replace(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError> {
        let mut messages = messages.to_vec();
        cap(&mut messages, self.max_turns);
        self.with(|i| {
            i.bump(id);
            i.messages.insert(id.clone(), messages);
            i.root_branches(id);
        });
        Ok(())
    }

    async fn prune(
        &self,
        id: &ConversationId,
        offset: usize,
        edits: &[Edit],
    ) -> Result<usize, StoreError> {
        Ok(self.with(|i| {
            i.messages
                .get_mut(id)
                .map_or(0, |stored| apply_edits(stored, offset, edits))
        }))
    }

    async fn summary(&self, id: &ConversationId) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(self.with(|i| i.summaries.get(id).cloned()))
    }

    async fn put_summary(
        &self,
        id: &ConversationId,
        summary: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.with(|i| {
            i.bump(id);
            i.summaries.insert(id.clone(), summary.clone())
        });
        Ok(())
    }

    async fn version(&self, id: &ConversationId) -> Result<u64, StoreError> {
        Ok(self.with(|i| i.versions.get(id).copied().unwrap_or_default()))
    }

    async fn put_summary_if(
        &self,
        id: &ConversationId,
        version: u64,
        summary: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        Ok(self.with(|i| {
            if i.versions.get(id).copied().unwrap_or_default() != version {
                return false;
            }
            i.bump(id);
            i.summaries.insert(id.clone(), summary.clone());
            true
        }))
    }

    async fn branches(&self, id: &ConversationId) -> Result<Branches, StoreError> {
        Ok(self.with(|i| i.branches.get(id).cloned().unwrap_or_default()))
    }

    async fn rebranch_if(
        &self,
        id: &ConversationId,
        change: &Rebranch,
    ) -> Result<bool, StoreError> {
        Ok(self.with(|i| {
            let path = i.messages.entry(id.clone()).or_default();
            if !change.still_fits(path) {
                return false;
            }
            change.apply(path);
            let branches = settled(&change.branches, path, self.max_turns);
            i.branches.insert(id.clone(), branches);
            i.bump(id);
            true
        }))
    }

    async fn clear(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
        self.with(|i| {
            i.bump(id);
            i.messages.remove(id);
            i.summaries.remove(id);
            i.branches.remove(id);
        });
        Ok(None)
    }

    async fn delete(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
        self.with(|i| {
            i.bump(id);
            i.messages.remove(id);
            i.summaries.remove(id);
            i.branches.remove(id);
            i.infos.remove(id);
        });
        Ok(None)
    }

    async fn list(&self) -> Result<Vec<ConversationId>, StoreError> {
        Ok(self.with(|i| {
            let mut ids: Vec<ConversationId> = i
                .messages
                .keys()
                .chain(i.summaries.keys())
                .cloned()
                .collect();
            ids.sort();
            ids.dedup();
            ids
        }))
    }

    async fn stats(&self, id: &ConversationId) -> Result<Stats, StoreError> {
        Ok(self.with(|i| {
            let messages = i.messages.get(id).map(Vec::as_slice).unwrap_or_default();
            Stats {
                messages: messages.len(),
                approx_bytes: messages.iter().map(|m| m.text.len() as u64).sum(),
                last_ts: messages.last().map(|m| m.ts),
                backups: 0,
            }
        }))
    }

    async fn exists(&self, id: &ConversationId) -> Result<bool, StoreError> {
        Ok(self.with(|i| {
            i.messages.contains_key(id) || i.summaries.contains_key(id) || i.infos.contains_key(id)
        }))
    }

    async fn info(&self, id: &ConversationId) -> Result<Option<ConversationInfo>, StoreError> {
        Ok(self.with(|i| i.infos.get(id).cloned()))
    }

    async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError> {
        self.with(|i| i.infos.insert(info.session_id.clone(), info.clone()));
        Ok(())
    }

    async fn list_owned(&self, owner: &str) -> Result<Vec<Listed>, StoreError> {
        Ok(newest_first(self.with(|i| {
            i.infos
                .values()
                .filter(|info| info.owner.as_deref() == Some(owner))
                .map(Listed::from)
                .collect()
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::super::contract;

    #[tokio::test]
    async fn passes_the_store_contract() {
        let max = std::num::NonZeroUsize::new(contract::MAX_TURNS);
        contract::run(&super::MemoryStore::new(max)).await;
    }
}
