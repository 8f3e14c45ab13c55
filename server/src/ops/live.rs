//! Live sessions, for `max_users` and the idle reaper: in this process, or in Redis so that
//! every Parlor process sharing it counts the same sessions.
//!
//! A session is a browser (`browser:<owner hash>`, however many conversations it has) or,
//! for API clients without the browser cookie, one conversation (`api:<history>:<session>`).
//! It becomes live when it first opens a page or chats, its last activity is set on every
//! chat message, and it stops being live when the reaper frees it. Stored conversations are
//! not affected.

use crate::store::StoreError;
use async_trait::async_trait;
use parlor_domain::live_sessions::{LimitReached, LiveSessionTable};
use redis::aio::ConnectionManager;
use std::sync::Mutex;

#[async_trait]
pub trait LiveSessions: Send + Sync + 'static {
    /// Marks `key` active at `now` (for a live session only when `refresh`); a session that
    /// is not live is admitted only while fewer than `max_users` are (0: no limit).
    async fn touch(
        &self,
        key: &str,
        now: i64,
        max_users: usize,
        refresh: bool,
    ) -> Result<Result<(), LimitReached>, StoreError>;
    /// Frees sessions idle strictly longer than `timeout_ms` (0: none); how many.
    async fn reap(&self, now: i64, timeout_ms: u64) -> Result<usize, StoreError>;
    async fn count(&self) -> Result<usize, StoreError>;
    fn describe(&self) -> &'static str;
}

/// Where live sessions are counted: in the default history's Redis when it has one (so all
/// processes share the count), else in this process.
pub fn of_histories(
    histories: &crate::store::histories::Histories,
) -> std::sync::Arc<dyn LiveSessions> {
    match histories.shared_redis() {
        Some(redis) => {
            std::sync::Arc::new(RedisSessions::new(redis.connection.clone(), &redis.prefix))
        }
        None => std::sync::Arc::new(LocalSessions::default()),
    }
}

#[derive(Default)]
pub struct LocalSessions(Mutex<LiveSessionTable>);

#[async_trait]
impl LiveSessions for LocalSessions {
    async fn touch(
        &self,
        key: &str,
        now: i64,
        max_users: usize,
        refresh: bool,
    ) -> Result<Result<(), LimitReached>, StoreError> {
        let mut table = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !refresh && table.contains(key) {
            return Ok(Ok(()));
        }
        Ok(table.touch(key, now, max_users))
    }

    async fn reap(&self, now: i64, timeout_ms: u64) -> Result<usize, StoreError> {
        Ok(self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reap(now, timeout_ms)
            .len())
    }

    async fn count(&self) -> Result<usize, StoreError> {
        Ok(self.0.lock().unwrap_or_else(|e| e.into_inner()).len())
    }

    fn describe(&self) -> &'static str {
        "counted in this process"
    }
}

/// A sorted set of session keys scored by last activity; admission is one Lua script, so
/// two processes can never both take the last slot.
pub struct RedisSessions {
    connection: ConnectionManager,
    key: String,
}

const TOUCH: &str = r#"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score then
  if ARGV[4] == '1' and tonumber(ARGV[2]) > tonumber(score) then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  end
  return -1
end
local active = redis.call('ZCARD', KEYS[1])
local limit = tonumber(ARGV[3])
if limit > 0 and active >= limit then return active end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return -1
"#;

impl RedisSessions {
    pub fn new(connection: ConnectionManager, key_prefix: &str) -> Self {
        RedisSessions {
            connection,
            key: format!("{key_prefix}@live-sessions"),
        }
    }
}

#[async_trait]
impl LiveSessions for RedisSessions {
    async fn touch(
        &self,
        key: &str,
        now: i64,
        max_users: usize,
        refresh: bool,
    ) -> Result<Result<(), LimitReached>, StoreError> {
        let cmd = &redis::cmd("EVAL")
            .arg(TOUCH)
            .arg(1)
            .arg(&self.key)
            .arg(key)
            .arg(now)
            .arg(max_users)
            .arg(if refresh { "1" } else { "0" })
            .clone();
        // Touching twice is touching once, so it may be retried after a lost connection.
        let active: i64 = crate::store::redis_retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(if active < 0 {
            Ok(())
        } else {
            Err(LimitReached {
                active: active as usize,
            })
        })
    }

    async fn reap(&self, now: i64, timeout_ms: u64) -> Result<usize, StoreError> {
        if timeout_ms == 0 {
            return Ok(0);
        }
        // Scores strictly below the cutoff: idle strictly longer than the timeout.
        let cutoff = now.saturating_sub(timeout_ms.min(i64::MAX as u64) as i64);
        let removed: usize = redis::cmd("ZREMRANGEBYSCORE")
            .arg(&self.key)
            .arg("-inf")
            .arg(format!("({cutoff}"))
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(removed)
    }

    async fn count(&self) -> Result<usize, StoreError> {
        Ok(redis::cmd("ZCARD")
            .arg(&self.key)
            .query_async(&mut self.connection.clone())
            .await?)
    }

    fn describe(&self) -> &'static str {
        "shared through Redis"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fake_llm::redis_server::RedisServer;

    async fn contract(live: &dyn LiveSessions) {
        live.touch("a", 0, 2, true).await.unwrap().unwrap();
        live.touch("b", 10, 2, true).await.unwrap().unwrap();
        assert_eq!(
            live.touch("c", 10, 2, true).await.unwrap(),
            Err(LimitReached { active: 2 })
        );
        live.touch("a", 20, 1, true).await.unwrap().unwrap();
        // Without refresh (a page view) a live session is let through but not made younger.
        live.touch("b", 5_000, 1, false).await.unwrap().unwrap();
        assert_eq!(live.count().await.unwrap(), 2, "lowering never evicts");
        assert_eq!(
            live.reap(1_010, 1_000).await.unwrap(),
            0,
            "b is exactly at the timeout"
        );
        assert_eq!(live.reap(1_011, 1_000).await.unwrap(), 1);
        assert_eq!(live.count().await.unwrap(), 1);
        live.touch("c", 1_011, 2, true).await.unwrap().unwrap();
        live.touch("d", 1_011, 0, true).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn local_sessions_follow_the_limit_and_reaper_rules() {
        contract(&LocalSessions::default()).await;
    }

    #[tokio::test]
    async fn redis_sessions_follow_the_same_rules_across_connections() {
        let redis = RedisServer::start().unwrap();
        let client = redis::Client::open(redis.url()).unwrap();
        let one = ConnectionManager::new(client.clone()).await.unwrap();
        contract(&RedisSessions::new(one, "t:")).await;
        // Another process sees the same count.
        let two = ConnectionManager::new(client).await.unwrap();
        assert_eq!(RedisSessions::new(two, "t:").count().await.unwrap(), 3);
    }
}
