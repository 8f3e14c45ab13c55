//! A store that times every operation of another for `/metrics`
//! (`parlor_store_seconds{backend, op}`), and otherwise does exactly what it does.

use super::{
    BackupInfo, ConversationInfo, ConversationStore, Listed, ReplyLock, Stats, StoreError, Tail,
};
use async_trait::async_trait;
use parlor_domain::context::Edit;
use parlor_domain::{ConversationId, Message};
use std::future::Future;
use std::time::Instant;

pub struct Measured<S> {
    inner: S,
}

impl<S: ConversationStore> Measured<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    async fn timed<T>(&self, op: &'static str, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = call.await;
        let (backend, seconds) = (self.inner.kind(), started.elapsed().as_secs_f64());
        metrics::histogram!("parlor_store_seconds", "backend" => backend, "op" => op)
            .record(seconds);
        result
    }
}

#[async_trait]
impl<S: ConversationStore> ConversationStore for Measured<S> {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn max_turns(&self) -> super::MaxTurns {
        self.inner.max_turns()
    }
    async fn load(&self, id: &ConversationId) -> Result<Vec<Message>, StoreError> {
        self.timed("load", self.inner.load(id)).await
    }
    async fn load_tail(&self, id: &ConversationId, count: usize) -> Result<Tail, StoreError> {
        self.timed("load_tail", self.inner.load_tail(id, count))
            .await
    }
    async fn load_tail_sized(
        &self,
        id: &ConversationId,
        count: usize,
    ) -> Result<(Tail, usize), StoreError> {
        self.timed("load_tail", self.inner.load_tail_sized(id, count))
            .await
    }
    async fn load_range(
        &self,
        id: &ConversationId,
        start: usize,
        end: usize,
    ) -> Result<Vec<Message>, StoreError> {
        self.timed("load_range", self.inner.load_range(id, start, end))
            .await
    }
    async fn load_pinned(
        &self,
        id: &ConversationId,
        hint: &[usize],
    ) -> Result<Option<Vec<(usize, Message)>>, StoreError> {
        self.timed("load_pinned", self.inner.load_pinned(id, hint))
            .await
    }
    async fn create(
        &self,
        info: &ConversationInfo,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        self.timed("create", self.inner.create(info, messages))
            .await
    }
    async fn append(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError> {
        self.timed("append", self.inner.append(id, messages)).await
    }
    async fn replace(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError> {
        self.timed("replace", self.inner.replace(id, messages))
            .await
    }
    async fn append_stamped(
        &self,
        id: &ConversationId,
        make: super::StampedMessages,
    ) -> Result<usize, StoreError> {
        self.timed("append", self.inner.append_stamped(id, make))
            .await
    }
    async fn prune(
        &self,
        id: &ConversationId,
        offset: usize,
        edits: &[Edit],
    ) -> Result<usize, StoreError> {
        self.timed("prune", self.inner.prune(id, offset, edits))
            .await
    }
    async fn rewrite(&self, id: &ConversationId, edits: &[Edit]) -> Result<usize, StoreError> {
        self.timed("rewrite", self.inner.rewrite(id, edits)).await
    }
    async fn version(&self, id: &ConversationId) -> Result<u64, StoreError> {
        self.timed("version", self.inner.version(id)).await
    }
    async fn put_summary_if(
        &self,
        id: &ConversationId,
        version: u64,
        summary: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        self.timed(
            "put_summary",
            self.inner.put_summary_if(id, version, summary),
        )
        .await
    }
    async fn branches(
        &self,
        id: &ConversationId,
    ) -> Result<parlor_domain::branch::Branches, StoreError> {
        self.timed("branches", self.inner.branches(id)).await
    }
    async fn unreadable(&self, id: &ConversationId) -> Result<Vec<String>, StoreError> {
        self.inner.unreadable(id).await
    }
    async fn rebranch_if(
        &self,
        id: &ConversationId,
        change: &parlor_domain::branch::Rebranch,
    ) -> Result<bool, StoreError> {
        self.timed("rebranch", self.inner.rebranch_if(id, change))
            .await
    }
    async fn summary(&self, id: &ConversationId) -> Result<Option<serde_json::Value>, StoreError> {
        self.timed("summary", self.inner.summary(id)).await
    }
    async fn put_summary(
        &self,
        id: &ConversationId,
        summary: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.timed("put_summary", self.inner.put_summary(id, summary))
            .await
    }
    async fn clear(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
        self.timed("clear", self.inner.clear(id)).await
    }
    async fn delete(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
        self.timed("delete", self.inner.delete(id)).await
    }
    async fn list(&self) -> Result<Vec<ConversationId>, StoreError> {
        self.timed("list", self.inner.list()).await
    }
    async fn stats(&self, id: &ConversationId) -> Result<Stats, StoreError> {
        self.timed("stats", self.inner.stats(id)).await
    }
    async fn list_backups(&self, id: &ConversationId) -> Result<Vec<BackupInfo>, StoreError> {
        self.timed("list_backups", self.inner.list_backups(id))
            .await
    }
    async fn restore_backup(&self, id: &ConversationId, backup: &str) -> Result<(), StoreError> {
        self.timed("restore_backup", self.inner.restore_backup(id, backup))
            .await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.timed("ping", self.inner.ping()).await
    }
    async fn lock_reply(&self, id: &ConversationId) -> Result<Option<ReplyLock>, StoreError> {
        self.timed("lock_reply", self.inner.lock_reply(id)).await
    }
    async fn lock_summary(&self, id: &ConversationId) -> Result<Option<ReplyLock>, StoreError> {
        self.timed("lock_summary", self.inner.lock_summary(id))
            .await
    }
    async fn exists(&self, id: &ConversationId) -> Result<bool, StoreError> {
        self.timed("exists", self.inner.exists(id)).await
    }
    async fn info(&self, id: &ConversationId) -> Result<Option<ConversationInfo>, StoreError> {
        self.timed("info", self.inner.info(id)).await
    }
    async fn info_for_turn(
        &self,
        id: &ConversationId,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        self.timed("info_for_turn", self.inner.info_for_turn(id))
            .await
    }
    fn turn_read_done(&self, id: &ConversationId) {
        self.inner.turn_read_done(id);
    }
    async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError> {
        self.timed("put_info", self.inner.put_info(info)).await
    }
    async fn list_owned(&self, owner: &str) -> Result<Vec<Listed>, StoreError> {
        self.timed("list_owned", self.inner.list_owned(owner)).await
    }
}
