//! The versions off a conversation's chosen path on Redis: a list beside the path's list,
//! one JSON branch per item ([`parlor_domain::branch`]), changed with the path in one script.

use super::scripts::REBRANCH_IF;
use super::*;
use crate::store::settled;
use parlor_domain::branch::{Branches, Rebranch};

/// What the trim script writes over a branch it drops before removing it (no branch, a JSON
/// object, can equal it).
pub(super) const MARKER: &str = "-";

impl RedisStore {
    /// The items of the versions' list, as stored.
    async fn branch_items(&self, key: &str) -> Result<Vec<String>, StoreError> {
        let cmd = &redis::cmd("LRANGE").arg(key).arg(0).arg(-1).clone();
        let items: Vec<String> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(items)
    }

    /// The items of the versions' list that do not read (skipped by every reader), a
    /// sentence each.
    pub(super) async fn unreadable_branches(
        &self,
        id: &ConversationId,
    ) -> Result<Vec<String>, StoreError> {
        let key = self.branches_key(id);
        let items = self.branch_items(&key).await?;
        let unread = items.iter().enumerate().filter_map(|(n, item)| {
            let error = serde_json::from_str::<parlor_domain::branch::Branch>(item).err()?;
            Some(format!(
                "item {} of {key} does not read ({error}): that version is left out",
                n + 1
            ))
        });
        Ok(unread.collect())
    }

    pub(super) async fn read_branches(&self, id: &ConversationId) -> Result<Branches, StoreError> {
        let key = self.branches_key(id);
        let items = self.branch_items(&key).await?;
        let mut branches = Branches::default();
        for item in items {
            // One damaged item costs its own branch only (`parlor store check` names it).
            match serde_json::from_str(&item) {
                Ok(branch) => branches.branches.push(branch),
                Err(e) => tracing::warn!("a branch in {key} does not read ({e}); it is skipped"),
            }
        }
        Ok(branches)
    }

    pub(super) async fn rebranch(
        &self,
        id: &ConversationId,
        change: &Rebranch,
    ) -> Result<bool, StoreError> {
        // What the path will be is needed to settle the branches: the kept part and the suffix.
        let mut path = self.load(id).await?;
        if !change.still_fits(&path) {
            return Ok(false);
        }
        change.apply(&mut path);
        let branches = settled(&change.branches, &path, self.options.max_turns);
        let (role, ts, text) = match &change.last {
            Some(last) => (last.role.as_str(), last.ts, last.text.as_str()),
            None => ("", 0, ""),
        };
        let ttl = self.options.ttl.map(|t| t.as_secs().to_string());
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(REBRANCH_IF)
            .arg(3)
            .arg(self.messages_key(id))
            .arg(self.branches_key(id))
            .arg(self.version_key(id))
            .arg(change.total)
            .arg(role)
            .arg(ts)
            .arg(text)
            .arg(change.keep)
            .arg(change.suffix.len())
            .arg(ttl.unwrap_or_default())
            .arg(encode(&change.suffix)?);
        for branch in &branches.branches {
            cmd.arg(serde_json::to_string(branch)?);
        }
        let done: i64 = cmd.query_async(&mut self.conn()).await?;
        Ok(done == 1)
    }
}
