//! Locks shared by every process on one Redis (a reply or a summary being written), and
//! commands tried again once after a lost connection.
//!
//! A lock names its process (`<instance>:<token>`), and each process keeps a heartbeat key
//! (`<prefix><history>:@alive:<instance>`, set every half second for two). A lock whose
//! process's heartbeat is gone (the process died) is taken over at once, as is one of this
//! process's replies that is over; a lock held by another process waits for it a moment
//! (as long as a dead process's heartbeat takes to go) before the request is refused. So a
//! crash never turns the next request away with "a reply is already being written".

use super::scripts::{RELEASE_IF_HELD, RENEW_IF_HELD, TAKE_OVER, TAKE_OVER_ORPHAN};
use super::{RedisOptions, RedisStore, ReplyLock, StoreError};
use redis::aio::ConnectionManager;
use std::time::Duration;

/// How long a reply lock outlives a holder that stopped renewing it (a process that died):
/// renewed every third of it while the reply is written.
pub const REPLY_LOCK_TTL: Duration = Duration::from_secs(6);

/// How long a process counts as alive after its last heartbeat.
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(2);
/// How often a process says it is alive.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);
/// How often a request waiting for another process's lock tries again.
const WAIT_STEP: Duration = Duration::from_millis(200);

/// The heartbeat key of the process `instance`.
pub(super) fn alive_key(options: &RedisOptions, instance: &str) -> String {
    format!(
        "{}{}:@alive:{instance}",
        options.key_prefix, options.history_id
    )
}

/// One heartbeat: the key set for [`HEARTBEAT_TTL`].
pub(super) async fn beat_once(
    connection: &mut ConnectionManager,
    key: &str,
) -> redis::RedisResult<()> {
    redis::cmd("SET")
        .arg(key)
        .arg(1)
        .arg("PX")
        .arg(HEARTBEAT_TTL.as_millis() as u64)
        .query_async(connection)
        .await
}

/// The task that keeps this process's heartbeat; it ends with the store.
pub(super) struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    pub(super) fn start(connection: ConnectionManager, key: String) -> Heartbeat {
        Heartbeat(tokio::spawn(async move {
            let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
            loop {
                tick.tick().await;
                // Redis away: the next beat tries again.
                let _ = beat_once(&mut connection.clone(), &key).await;
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl RedisStore {
    /// Takes the lock `key` for every process sharing this Redis: `SET NX PX`, renewed
    /// while held, so it outlives no holder by more than [`REPLY_LOCK_TTL`]; released (only
    /// by its holder) when dropped or released. A lock this process took for a reply that is
    /// over (its release did not reach Redis, which was away) is taken over at once: a reply
    /// that has ended never holds its conversation.
    pub(super) async fn lock(
        &self,
        key: String,
        wait: bool,
    ) -> Result<Option<ReplyLock>, StoreError> {
        let value = format!("{}:{}", self.instance, uuid::Uuid::new_v4().simple());
        let ttl_ms = REPLY_LOCK_TTL.as_millis() as u64;
        // Another process's: with `wait`, as long as a dead process's heartbeat takes to go.
        let until = tokio::time::Instant::now() + HEARTBEAT_TTL + HEARTBEAT_EVERY;
        while !self.take(&key, &value, ttl_ms).await? {
            if !wait || tokio::time::Instant::now() >= until {
                return Ok(None);
            }
            tokio::time::sleep(WAIT_STEP).await;
        }
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(value.clone());
        let connection = self.conn();
        let renew = tokio::spawn({
            let (mut connection, key, value) = (connection.clone(), key.clone(), value.clone());
            async move {
                let mut tick = tokio::time::interval(REPLY_LOCK_TTL / 3);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let renewed: redis::RedisResult<i64> = redis::cmd("EVAL")
                        .arg(RENEW_IF_HELD)
                        .arg(1)
                        .arg(&key)
                        .arg(&value)
                        .arg(ttl_ms)
                        .query_async(&mut connection)
                        .await;
                    match renewed {
                        Ok(1) => {}
                        // Redis away for a moment: try again at the next tick.
                        Err(e) if is_disconnect(&e) || e.is_timeout() => {}
                        _ => {
                            tracing::warn!("lost the lock {key}");
                            return;
                        }
                    }
                }
            }
        });
        let (held, ours) = (self.held.clone(), value.clone());
        let ended = move || {
            renew.abort();
            // Over for this process at once, whatever Redis says: the next request for this
            // conversation may take the lock over even before the release reaches Redis.
            held.lock().unwrap_or_else(|e| e.into_inner()).remove(&ours);
        };
        Ok(Some(ReplyLock::ending(
            ended,
            release(connection, key, value),
        )))
    }

    /// Sets the lock `key` to `value` when it is free, or held by a reply of this process
    /// that is over. A lock freed between the two checks (its release just reached Redis)
    /// is tried again.
    async fn take(&self, key: &str, value: &str, ttl_ms: u64) -> Result<bool, StoreError> {
        for _ in 0..3 {
            let cmd = &redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .clone();
            let taken: Option<String> = retrying(&self.connection, |mut c| async move {
                cmd.query_async(&mut c).await
            })
            .await?;
            if taken.is_some() {
                return Ok(true);
            }
            match self.take_over_stale(key, value, ttl_ms).await? {
                Some(took) => return Ok(took),
                // Freed meanwhile: try to set it again.
                None => continue,
            }
        }
        Ok(false)
    }

    /// Whether the lock `key`, held by a reply of this process that is over or by a process
    /// that died, was taken over for `value`; `None` when it was freed meanwhile.
    async fn take_over_stale(
        &self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<Option<bool>, StoreError> {
        let holder: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.conn())
            .await?;
        let Some(holder) = holder else {
            return Ok(None);
        };
        let ours = holder.starts_with(&format!("{}:", self.instance));
        if !ours {
            return self.take_over_orphan(key, &holder, value, ttl_ms).await;
        }
        let live = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&holder);
        if live {
            return Ok(Some(false));
        }
        let took: i64 = redis::cmd("EVAL")
            .arg(TAKE_OVER)
            .arg(1)
            .arg(key)
            .arg(&holder)
            .arg(value)
            .arg(ttl_ms)
            .query_async(&mut self.conn())
            .await?;
        match took {
            1 => Ok(Some(true)),
            // Changed meanwhile: freed (try again), or another holder's now.
            _ => Ok(None),
        }
    }
}

impl RedisStore {
    /// Takes the lock `key` over from `holder`, another process's, when that process's
    /// heartbeat is gone; `None` when the lock changed meanwhile.
    async fn take_over_orphan(
        &self,
        key: &str,
        holder: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<Option<bool>, StoreError> {
        let instance = holder.split(':').next().unwrap_or_default();
        let took: i64 = redis::cmd("EVAL")
            .arg(TAKE_OVER_ORPHAN)
            .arg(2)
            .arg(key)
            .arg(alive_key(&self.options, instance))
            .arg(holder)
            .arg(value)
            .arg(ttl_ms)
            .query_async(&mut self.conn())
            .await?;
        match took {
            1 => {
                tracing::info!("took over {key} from a process that is gone");
                Ok(Some(true))
            }
            0 => Ok(Some(false)),
            _ => Ok(None),
        }
    }
}

/// How long a release waits for Redis before the reply's end goes on without it (the
/// release then goes on trying in the background).
const RELEASE_WAIT: Duration = Duration::from_millis(300);

/// Deletes the lock `key` if it still holds `value`: at once when Redis answers, else
/// again every so often until it does or the lock has lapsed anyway.
async fn release(connection: ConnectionManager, key: String, value: String) {
    let attempt = {
        let (connection, key, value) = (connection.clone(), key.clone(), value.clone());
        move || {
            let (mut connection, key, value) = (connection.clone(), key.clone(), value.clone());
            async move {
                redis::cmd("EVAL")
                    .arg(RELEASE_IF_HELD)
                    .arg(1)
                    .arg(&key)
                    .arg(&value)
                    .query_async::<i64>(&mut connection)
                    .await
            }
        }
    };
    if let Ok(Ok(_)) = tokio::time::timeout(RELEASE_WAIT, attempt()).await {
        return;
    }
    tokio::spawn(async move {
        let until = tokio::time::Instant::now() + REPLY_LOCK_TTL;
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if let Ok(Ok(_)) = tokio::time::timeout(RELEASE_WAIT, attempt()).await {
                return;
            }
        }
        tracing::warn!("could not release the lock {key}; it has lapsed");
    });
}

/// Whether an error means the connection was lost (not that Redis refused the command).
pub(super) fn is_disconnect(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal()
}

/// Runs `query`, and once more when the connection had been lost: after Redis restarts, the
/// connection manager reports the broken connection once and reconnects, so without this
/// the first request after Redis came back would fail. Only for commands that may safely
/// run twice (reads, and writes that set rather than add).
pub async fn retrying<T, F, Fut>(connection: &ConnectionManager, query: F) -> redis::RedisResult<T>
where
    F: Fn(ConnectionManager) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<T>>,
{
    match query(connection.clone()).await {
        Err(e) if is_disconnect(&e) => {
            tracing::info!("the Redis connection was lost ({e}); trying again once");
            query(connection.clone()).await
        }
        other => other,
    }
}
