//! The store's operations on Redis.

use super::lock::is_disconnect;
use super::scripts::*;
use super::*;
use parlor_domain::branch::{Branches, Rebranch};

#[async_trait]
impl ConversationStore for RedisStore {
    fn describe(&self) -> String {
        let ttl = match self.options.ttl {
            Some(ttl) => format!(", ttl {} s", ttl.as_secs()),
            None => String::new(),
        };
        format!("redis (keys {}*{ttl})", self.base())
    }

    fn max_turns(&self) -> MaxTurns {
        self.options.max_turns
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let cmd = &redis::cmd("PING");
        let _: String = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(())
    }

    /// `SET key token NX PX`: held by one process; renewed while the reply is written, so it
    /// outlives no holder by more than [`lock::REPLY_LOCK_TTL`](super::lock::REPLY_LOCK_TTL); released (only by its holder)
    /// when the reply ends.
    async fn lock_reply(&self, id: &ConversationId) -> Result<Option<ReplyLock>, StoreError> {
        // A reply waits a moment for another process's lock (a process that just died).
        self.lock(self.lock_key(id), true).await
    }

    /// The summarizer's lock: one run per conversation across processes, held like the
    /// reply lock, and independent of it (a summary being written never delays a turn).
    async fn lock_summary(&self, id: &ConversationId) -> Result<Option<ReplyLock>, StoreError> {
        // A summary is not worth waiting for: another process is writing it.
        self.lock(format!("{}{}:summarizing", self.base(), id.as_str()), false)
            .await
    }

    async fn load(&self, id: &ConversationId) -> Result<Vec<Message>, StoreError> {
        let key = self.messages_key(id);
        let cmd = &redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).clone();
        let items: Vec<String> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        decode(items, &key)
    }

    async fn load_range(
        &self,
        id: &ConversationId,
        start: usize,
        end: usize,
    ) -> Result<Vec<Message>, StoreError> {
        if start >= end {
            return Ok(Vec::new());
        }
        let key = self.messages_key(id);
        let last = (end - 1).min(i64::MAX as usize) as i64;
        let cmd = &redis::cmd("LRANGE")
            .arg(&key)
            .arg(start.min(i64::MAX as usize) as i64)
            .arg(last)
            .clone();
        let items: Vec<String> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        decode(items, &key)
    }

    /// The messages at the positions the details name, in one round trip, each checked to
    /// be pinned: `None` when one is not (the conversation changed since the marks did).
    async fn load_pinned(
        &self,
        id: &ConversationId,
        hint: &[usize],
    ) -> Result<Option<Vec<(usize, Message)>>, StoreError> {
        if hint.is_empty() {
            return Ok(None);
        }
        let key = self.messages_key(id);
        let mut pipe = redis::pipe();
        for &at in hint {
            pipe.cmd("LINDEX")
                .arg(&key)
                .arg(at.min(i64::MAX as usize) as i64);
        }
        let pipe = &pipe;
        let items: Vec<Option<String>> = retrying(&self.connection, |mut c| async move {
            pipe.query_async(&mut c).await
        })
        .await?;
        let mut pins = Vec::with_capacity(hint.len());
        for (&at, item) in hint.iter().zip(items) {
            let Some(item) = item else { return Ok(None) };
            let message = decode(vec![item], &key)?.pop();
            match message.filter(Message::is_pinned) {
                Some(message) => pins.push((at, message)),
                None => return Ok(None),
            }
        }
        Ok(Some(pins))
    }

    async fn load_tail(&self, id: &ConversationId, count: usize) -> Result<Tail, StoreError> {
        if count == 0 {
            let cmd = &redis::cmd("LLEN").arg(self.messages_key(id)).clone();
            let total: usize = retrying(&self.connection, |mut c| async move {
                cmd.query_async(&mut c).await
            })
            .await?;
            return Ok(Tail {
                messages: Vec::new(),
                total,
            });
        }
        let key = self.messages_key(id);
        let pipe = &redis::pipe()
            .atomic()
            .cmd("LLEN")
            .arg(&key)
            .cmd("LRANGE")
            .arg(&key)
            .arg(-(count.min(i64::MAX as usize) as i64))
            .arg(-1)
            .clone();
        let (total, items): (usize, Vec<String>) = retrying(&self.connection, |mut c| async move {
            pipe.query_async(&mut c).await
        })
        .await?;
        Ok(Tail {
            messages: decode(items, &key)?,
            total,
        })
    }

    async fn append(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError> {
        if messages.is_empty() {
            return Ok(());
        }
        let key = self.messages_key(id);
        let encoded = encode(messages)?;
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("RPUSH").arg(&key).arg(&encoded).ignore();
        self.finish_write(&mut pipe, id);
        match pipe.query_async::<()>(&mut self.conn()).await {
            Err(e) if is_disconnect(&e) => {
                // The transaction may have run before the connection was lost: append only
                // if the list does not already end with these messages, so a message is
                // never stored twice.
                tracing::info!("the Redis connection was lost ({e}); trying again once");
                let tail: Vec<String> = redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(-(encoded.len() as i64))
                    .arg(-1)
                    .query_async(&mut self.conn())
                    .await?;
                if tail != encoded {
                    let () = pipe.query_async(&mut self.conn()).await?;
                }
                Ok(())
            }
            other => Ok(other?),
        }
    }

    async fn replace(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError> {
        let key = self.messages_key(id);
        let mut pipe = redis::pipe();
        // A new conversation's path (a fork, an import): versions are written after it.
        pipe.atomic()
            .cmd("DEL")
            .arg(&key)
            .arg(self.branches_key(id))
            .ignore();
        self.bump_version(&mut pipe, id);
        if !messages.is_empty() {
            pipe.cmd("RPUSH").arg(&key).arg(encode(messages)?).ignore();
            self.finish_write(&mut pipe, id);
        }
        let pipe = &pipe;
        retrying(&self.connection, |mut c| async move {
            pipe.query_async::<()>(&mut c).await
        })
        .await?;
        Ok(())
    }

    async fn prune(
        &self,
        id: &ConversationId,
        offset: usize,
        edits: &[Edit],
    ) -> Result<usize, StoreError> {
        if edits.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("EVAL");
        // Not JSON, so no stored message can equal it.
        let marker = format!("\u{0}pruned:{}", uuid::Uuid::new_v4());
        cmd.arg(PRUNE).arg(1).arg(self.messages_key(id)).arg(marker);
        for edit in edits {
            let new = match &edit.new {
                Some(message) => encode(std::slice::from_ref(message))?.remove(0),
                None => String::new(),
            };
            cmd.arg(offset + edit.index)
                .arg(edit.old.ts)
                .arg(&edit.old.text)
                .arg(edit.old.context.len())
                .arg(new);
        }
        let cmd = &cmd;
        // Safe to run twice: a second run finds the messages already changed.
        let applied: usize = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(applied)
    }

    async fn rewrite(&self, id: &ConversationId, edits: &[Edit]) -> Result<usize, StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(REWRITE).arg(1).arg(self.messages_key(id));
        let mut count = 0;
        for edit in edits {
            let Some(new) = &edit.new else { continue };
            cmd.arg(edit.index)
                .arg(edit.old.role.as_str())
                .arg(edit.old.ts)
                .arg(&edit.old.text)
                .arg(encode(std::slice::from_ref(new))?.remove(0));
            count += 1;
        }
        if count == 0 {
            return Ok(0);
        }
        let cmd = &cmd;
        // Safe to run twice: a second run rewrites the same messages the same way.
        let applied: usize = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(applied)
    }

    async fn summary(&self, id: &ConversationId) -> Result<Option<serde_json::Value>, StoreError> {
        let cmd = &redis::cmd("GET").arg(self.summary_key(id)).clone();
        let text: Option<String> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(text
            .as_deref()
            .and_then(parlor_domain::summary::read_summary))
    }

    async fn put_summary(
        &self,
        id: &ConversationId,
        summary: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(self.summary_key(id))
            .arg(summary.to_string());
        if let Some(ttl) = self.options.ttl {
            pipe.arg("EX").arg(ttl.as_secs());
        }
        pipe.ignore();
        self.bump_version(&mut pipe, id);
        let pipe = &pipe;
        // Run twice, it moves the version once more: a concurrent step is only retried.
        retrying(&self.connection, |mut c| async move {
            pipe.query_async::<()>(&mut c).await
        })
        .await?;
        Ok(())
    }

    async fn version(&self, id: &ConversationId) -> Result<u64, StoreError> {
        let cmd = &redis::cmd("GET").arg(self.version_key(id)).clone();
        let version: Option<u64> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(version.unwrap_or_default())
    }

    async fn put_summary_if(
        &self,
        id: &ConversationId,
        version: u64,
        summary: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        let ttl = self
            .options
            .ttl
            .map(|ttl| ttl.as_secs().to_string())
            .unwrap_or_default();
        let wrote: i64 = redis::cmd("EVAL")
            .arg(PUT_SUMMARY_IF)
            .arg(2)
            .arg(self.summary_key(id))
            .arg(self.version_key(id))
            .arg(version)
            .arg(summary.to_string())
            .arg(ttl)
            .query_async(&mut self.conn())
            .await?;
        Ok(wrote == 1)
    }

    async fn branches(&self, id: &ConversationId) -> Result<Branches, StoreError> {
        self.read_branches(id).await
    }

    async fn unreadable(&self, id: &ConversationId) -> Result<Vec<String>, StoreError> {
        self.unreadable_branches(id).await
    }

    async fn rebranch_if(
        &self,
        id: &ConversationId,
        change: &Rebranch,
    ) -> Result<bool, StoreError> {
        self.rebranch(id, change).await
    }

    async fn clear(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("DEL")
            .arg(self.messages_key(id))
            .arg(self.summary_key(id))
            .arg(self.branches_key(id))
            .ignore();
        self.bump_version(&mut pipe, id);
        let pipe = &pipe;
        retrying(&self.connection, |mut c| async move {
            pipe.query_async::<()>(&mut c).await
        })
        .await?;
        Ok(None)
    }

    async fn delete(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
        let owner = self.info(id).await?.and_then(|info| info.owner);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("DEL")
            .arg(self.messages_key(id))
            .arg(self.summary_key(id))
            .arg(self.info_key(id))
            .arg(self.branches_key(id))
            .ignore();
        // The version outlives the conversation for a day: long enough for any step that
        // read it before the delete to find it moved, not forever.
        pipe.cmd("INCR").arg(self.version_key(id)).ignore();
        pipe.cmd("EXPIRE")
            .arg(self.version_key(id))
            .arg(86_400)
            .ignore();
        if let Some(owner) = owner {
            pipe.cmd("ZREM")
                .arg(self.owner_key(&owner))
                .arg(id.as_str())
                .ignore();
        }
        let pipe = &pipe;
        retrying(&self.connection, |mut c| async move {
            pipe.query_async::<()>(&mut c).await
        })
        .await?;
        Ok(None)
    }

    async fn restore_backup(&self, _id: &ConversationId, _backup: &str) -> Result<(), StoreError> {
        Err(StoreError::NoBackups("redis"))
    }

    async fn exists(&self, id: &ConversationId) -> Result<bool, StoreError> {
        let cmd = &redis::cmd("EXISTS")
            .arg(self.messages_key(id))
            .arg(self.summary_key(id))
            .arg(self.info_key(id))
            .clone();
        let found: usize = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(found > 0)
    }

    async fn info(&self, id: &ConversationId) -> Result<Option<ConversationInfo>, StoreError> {
        let key = self.info_key(id);
        let cmd = &redis::cmd("GET").arg(&key).clone();
        let raw: Option<String> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        raw.map(|raw| {
            serde_json::from_str(&raw).map_err(|source| StoreError::Json {
                at: key.clone(),
                source,
            })
        })
        .transpose()
    }

    async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        self.info_commands(&mut pipe, info)?;
        let pipe = &pipe;
        retrying(&self.connection, |mut c| async move {
            pipe.query_async::<()>(&mut c).await
        })
        .await?;
        Ok(())
    }

    async fn create(
        &self,
        info: &ConversationInfo,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        // One transaction, one round trip: the details, the owner's index and the messages.
        let id = &info.session_id;
        let key = self.messages_key(id);
        let encoded = encode(messages)?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        self.info_commands(&mut pipe, info)?;
        if !encoded.is_empty() {
            pipe.cmd("RPUSH").arg(&key).arg(&encoded).ignore();
            self.finish_write(&mut pipe, id);
        }
        match pipe.query_async::<()>(&mut self.conn()).await {
            Err(e) if is_disconnect(&e) => {
                // As for `append`: run it again only if it did not run before the loss.
                tracing::info!("the Redis connection was lost ({e}); trying again once");
                let stored: Vec<String> = redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut self.conn())
                    .await?;
                if stored != encoded {
                    let () = pipe.query_async(&mut self.conn()).await?;
                }
                Ok(())
            }
            other => Ok(other?),
        }
    }

    async fn list(&self) -> Result<Vec<ConversationId>, StoreError> {
        self.scan_conversations().await
    }

    async fn stats(&self, id: &ConversationId) -> Result<Stats, StoreError> {
        self.conversation_stats(id).await
    }

    async fn list_owned(&self, owner: &str) -> Result<Vec<crate::store::Listed>, StoreError> {
        self.owned_conversations(owner).await
    }
}
