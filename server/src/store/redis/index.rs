//! Listing a history's conversations: all of them (SCAN), a browser's (its sorted set),
//! and one conversation's numbers.

use super::{decode, glob_escape, retrying, RedisStore};
use crate::store::{newest_first, ConversationInfo, Listed, Stats, StoreError};
use parlor_domain::ConversationId;

impl RedisStore {
    /// Every conversation of this history: its messages, or its summary alone (a dialog
    /// written over MCP).
    pub(super) async fn scan_conversations(&self) -> Result<Vec<ConversationId>, StoreError> {
        let base = self.base();
        let pattern = format!("{}*", glob_escape(&base));
        let mut conn = self.conn();
        let mut cursor: u64 = 0;
        let mut ids = Vec::new();
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await?;
            // A conversation's messages, or its summary alone (a dialog written over MCP).
            ids.extend(
                keys.iter()
                    .filter_map(|k| k.strip_prefix(&base))
                    .map(|rest| rest.strip_suffix(":summary").unwrap_or(rest))
                    .filter_map(|rest| ConversationId::parse(rest).ok()),
            );
            if next == 0 {
                break;
            }
            cursor = next;
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// The numbers an operator looks at for one conversation.
    pub(super) async fn conversation_stats(
        &self,
        id: &ConversationId,
    ) -> Result<Stats, StoreError> {
        let key = self.messages_key(id);
        let (messages, last, bytes): (usize, Option<String>, Option<u64>) = redis::pipe()
            .cmd("LLEN")
            .arg(&key)
            .cmd("LINDEX")
            .arg(&key)
            .arg(-1)
            .cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .query_async(&mut self.conn())
            .await?;
        let last_ts = match last {
            Some(item) => decode(vec![item], &key)?.pop().map(|m| m.ts),
            None => None,
        };
        Ok(Stats {
            messages,
            approx_bytes: bytes.unwrap_or(0),
            last_ts,
            backups: 0,
        })
    }

    /// The conversations a browser started, newest first; those whose keys expired are
    /// forgotten in its index.
    pub(super) async fn owned_conversations(&self, owner: &str) -> Result<Vec<Listed>, StoreError> {
        let owned = self.owner_key(owner);
        let mut conn = self.conn();
        let cmd = &redis::cmd("ZRANGE").arg(&owned).arg(0).arg(-1).clone();
        let sessions: Vec<String> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        let ids: Vec<ConversationId> = sessions
            .iter()
            .filter_map(|s| ConversationId::parse(s).ok())
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.info_key(id)).collect();
        let raws: Vec<Option<String>> =
            redis::cmd("MGET").arg(&keys).query_async(&mut conn).await?;
        let mut list = Vec::new();
        let mut expired = Vec::new();
        for (id, raw) in ids.iter().zip(raws) {
            match raw.map(|raw| serde_json::from_str::<ConversationInfo>(&raw)) {
                Some(Ok(info)) if info.owner.as_deref() == Some(owner) => {
                    list.push(Listed::from(&info))
                }
                // It moved to another owner (a browser's conversations to its account).
                Some(Ok(_)) => expired.push(id.as_str().to_owned()),
                Some(Err(e)) => tracing::error!("skipping unreadable {}: {e}", self.info_key(id)),
                None => expired.push(id.as_str().to_owned()),
            }
        }
        if !expired.is_empty() {
            // Their keys expired, or they are another's now: forget them in this index.
            let _: Result<(), _> = redis::cmd("ZREM")
                .arg(&owned)
                .arg(expired)
                .query_async(&mut conn)
                .await;
        }
        Ok(newest_first(list))
    }
}
