//! Conversations in Redis: for production and for several Parlor processes behind one
//! load balancer.
//!
//! Keys (`<prefix>` and `<history>` from the configuration; session ids cannot contain `:`
//! or `@`, so the three kinds never collide, nor do two histories):
//! - `<prefix><history>:<session>`: a list, oldest first, each element a JSON message;
//! - `<prefix><history>:<session>:info`: the conversation's details as JSON;
//! - `<prefix><history>:<session>:summary`: the rolling summary as JSON;
//! - `<prefix><history>:@owner:<owner hash>`: a sorted set of the owner's sessions by time.
//!
//! Appends push, trim to `max_turns` and refresh the TTL in one MULTI/EXEC; tail reads use
//! LRANGE with negative indexes, so a turn's cost does not grow with the conversation.
//! The connection manager reconnects by itself when Redis comes back.

use super::{newest_first, BackupInfo, ConversationInfo, ConversationStore, MaxTurns, Stats};
use super::{ReplyLock, StoreError, Tail};
use async_trait::async_trait;
use parlor_domain::context::Edit;
use parlor_domain::{Message, SessionId};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a reply lock outlives a holder that stopped renewing it (a process that died):
/// renewed every third of it while the reply is written.
pub const REPLY_LOCK_TTL: Duration = Duration::from_secs(6);

/// Takes over the lock `KEYS[1]` from `ARGV[1]` (a holder of this process whose reply is
/// over, whose release did not reach Redis): sets `ARGV[2]` for `ARGV[3]` ms if the lock
/// still holds `ARGV[1]`. Returns 1 if it did.
const TAKE_OVER: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
end
return 0
";

/// Extends the lock `KEYS[1]` to `ARGV[2]` ms if it still holds the token `ARGV[1]`.
const RENEW_IF_HELD: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes the lock `KEYS[1]` if it still holds the token `ARGV[1]` (never another's).
const RELEASE_IF_HELD: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
";

/// Applies pruning edits to the list `KEYS[1]` in one step. `ARGV[1]` is a marker no message
/// can equal; then, per edit, the index, the `ts`, `text` and number of context blocks of
/// the message the pass read there, and its new JSON (empty: remove it). An edit whose
/// message is no longer the one read is skipped. Returns how many were applied.
const PRUNE: &str = r"
local applied, removed = 0, 0
for i = 2, #ARGV, 5 do
    local current = redis.call('LINDEX', KEYS[1], ARGV[i])
    if current then
        local ok, message = pcall(cjson.decode, current)
        if ok and type(message) == 'table' and message.role == 'user'
            and message.ts == tonumber(ARGV[i + 1]) and message.text == ARGV[i + 2]
            and type(message.context) == 'table'
            and #message.context == tonumber(ARGV[i + 3]) then
            if ARGV[i + 4] == '' then
                redis.call('LSET', KEYS[1], ARGV[i], ARGV[1])
                removed = removed + 1
            else
                redis.call('LSET', KEYS[1], ARGV[i], ARGV[i + 4])
            end
            applied = applied + 1
        end
    end
end
if removed > 0 then
    redis.call('LREM', KEYS[1], 0, ARGV[1])
end
return applied
";

/// Rewrites messages in place, each only if it still has the role, time and text the caller
/// read. ARGV: (index, role, ts, text, new) per message; returns how many were rewritten.
const REWRITE: &str = r"
local applied = 0
for i = 1, #ARGV, 5 do
    local current = redis.call('LINDEX', KEYS[1], ARGV[i])
    if current then
        local ok, message = pcall(cjson.decode, current)
        if ok and type(message) == 'table' and message.role == ARGV[i + 1]
            and message.ts == tonumber(ARGV[i + 2]) and message.text == ARGV[i + 3] then
            redis.call('LSET', KEYS[1], ARGV[i], ARGV[i + 4])
            applied = applied + 1
        end
    end
end
return applied
";

/// Writes the summary `KEYS[1]` (`ARGV[2]`, expiring in `ARGV[3]` seconds unless empty) and
/// moves the version `KEYS[2]` on, only if the version is still `ARGV[1]`. Returns 1 if it
/// wrote.
const PUT_SUMMARY_IF: &str = r"
if (tonumber(redis.call('GET', KEYS[2])) or 0) ~= tonumber(ARGV[1]) then
    return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('INCR', KEYS[2])
if ARGV[3] ~= '' then
    redis.call('EXPIRE', KEYS[1], ARGV[3])
    redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
";

/// Keeps the first `ARGV[5]` messages of the list `KEYS[1]`, only if it still holds
/// `ARGV[1]` messages and the last still has the role, time and text `ARGV[2..4]`. Returns
/// 1 if it did.
const TRUNCATE_IF: &str = r"
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[1]) then
    return 0
end
local ok, last = pcall(cjson.decode, redis.call('LINDEX', KEYS[1], -1) or '')
if not ok or type(last) ~= 'table' or last.role ~= ARGV[2]
    or last.ts ~= tonumber(ARGV[3]) or last.text ~= ARGV[4] then
    return 0
end
local keep = tonumber(ARGV[5])
if keep == 0 then
    redis.call('DEL', KEYS[1])
else
    redis.call('LTRIM', KEYS[1], 0, keep - 1)
end
return 1
";

#[derive(Clone, Debug)]
pub struct RedisOptions {
    pub url: String,
    pub key_prefix: String,
    pub history_id: String,
    pub max_turns: MaxTurns,
    /// Expiry of a conversation's keys, refreshed on every write.
    pub ttl: Option<Duration>,
}

pub struct RedisStore {
    options: RedisOptions,
    connection: ConnectionManager,
    /// This process's mark in the locks it takes (`<instance>:<token>`).
    instance: String,
    /// The locks this process holds now, by value: a lock of this process's that is not
    /// among them belongs to a reply that is over (its release did not reach Redis).
    held: Arc<Mutex<HashSet<String>>>,
}

impl RedisStore {
    /// Connects (failing when Redis cannot be reached now).
    pub async fn connect(options: RedisOptions) -> Result<RedisStore, StoreError> {
        let client = redis::Client::open(options.url.as_str())?;
        // Short timeouts and few retries: a chat turn should fail fast with a clear error
        // rather than hang while Redis is away; the manager keeps reconnecting in between.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connection = ConnectionManager::new_with_config(client, config).await?;
        let store = RedisStore {
            options,
            connection,
            instance: uuid::Uuid::new_v4().simple().to_string(),
            held: Arc::default(),
        };
        let _: String = redis::cmd("PING")
            .query_async(&mut store.connection.clone())
            .await?;
        Ok(store)
    }

    fn base(&self) -> String {
        format!("{}{}:", self.options.key_prefix, self.options.history_id)
    }

    /// The commands that store a conversation's details and index it under its owner.
    fn info_commands(
        &self,
        pipe: &mut redis::Pipeline,
        info: &ConversationInfo,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(info).map_err(StoreError::from)?;
        let key = self.info_key(&info.session_id);
        match self.options.ttl {
            Some(ttl) => pipe
                .cmd("SET")
                .arg(&key)
                .arg(json)
                .arg("EX")
                .arg(ttl.as_secs()),
            None => pipe.cmd("SET").arg(&key).arg(json),
        }
        .ignore();
        if let Some(owner) = &info.owner {
            let owned = self.owner_key(owner);
            pipe.cmd("ZADD")
                .arg(&owned)
                .arg(info.updated_ms)
                .arg(info.session_id.as_str())
                .ignore();
            if let Some(ttl) = self.options.ttl {
                pipe.cmd("EXPIRE").arg(&owned).arg(ttl.as_secs()).ignore();
            }
        }
        Ok(())
    }

    fn messages_key(&self, id: &SessionId) -> String {
        format!("{}{}", self.base(), id.as_str())
    }

    fn info_key(&self, id: &SessionId) -> String {
        format!("{}{}:info", self.base(), id.as_str())
    }

    fn summary_key(&self, id: &SessionId) -> String {
        format!("{}{}:summary", self.base(), id.as_str())
    }

    fn version_key(&self, id: &SessionId) -> String {
        format!("{}{}:version", self.base(), id.as_str())
    }

    /// Adds the step that moves the conversation's version on to `pipe`.
    fn bump_version(&self, pipe: &mut redis::Pipeline, id: &SessionId) {
        let key = self.version_key(id);
        pipe.cmd("INCR").arg(&key).ignore();
        if let Some(ttl) = self.options.ttl {
            pipe.cmd("EXPIRE").arg(&key).arg(ttl.as_secs()).ignore();
        }
    }

    fn owner_key(&self, owner: &str) -> String {
        format!("{}@owner:{owner}", self.base())
    }

    /// The connection and key prefix, for other shared state (live sessions).
    pub fn shared(&self) -> (ConnectionManager, String) {
        (self.connection.clone(), self.options.key_prefix.clone())
    }

    fn lock_key(&self, id: &SessionId) -> String {
        format!("{}{}:writing", self.base(), id.as_str())
    }

    fn conn(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// Takes the lock `key` for every process sharing this Redis: `SET NX PX`, renewed
    /// while held, so it outlives no holder by more than [`REPLY_LOCK_TTL`]; released (only
    /// by its holder) when dropped or released. A lock this process took for a reply that is
    /// over (its release did not reach Redis, which was away) is taken over at once: a reply
    /// that has ended never holds its conversation.
    async fn lock(&self, key: String) -> Result<Option<ReplyLock>, StoreError> {
        let value = format!("{}:{}", self.instance, uuid::Uuid::new_v4().simple());
        let ttl_ms = REPLY_LOCK_TTL.as_millis() as u64;
        let cmd = &redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .clone();
        let taken: Option<String> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        if taken.is_none() && !self.take_over_stale(&key, &value, ttl_ms).await? {
            return Ok(None);
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
        let held = self.held.clone();
        Ok(Some(ReplyLock::new(async move {
            renew.abort();
            // Over for this process at once, whatever Redis says.
            held.lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&value);
            release(connection, key, value).await;
        })))
    }

    /// Whether the lock `key`, held by a reply of this process that is over, was taken over
    /// for `value`.
    async fn take_over_stale(
        &self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<bool, StoreError> {
        let holder: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.conn())
            .await?;
        let Some(holder) = holder else {
            return Ok(false);
        };
        let ours = holder.starts_with(&format!("{}:", self.instance));
        let live = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&holder);
        if !ours || live {
            return Ok(false);
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
        Ok(took == 1)
    }

    /// Adds the trim and TTL steps of a write to `pipe`.
    fn finish_write(&self, pipe: &mut redis::Pipeline, id: &SessionId) {
        let key = self.messages_key(id);
        if let Some(max) = self.options.max_turns {
            pipe.cmd("LTRIM")
                .arg(&key)
                .arg(-(max.get() as i64))
                .arg(-1)
                .ignore();
        }
        if let Some(ttl) = self.options.ttl {
            pipe.cmd("EXPIRE").arg(&key).arg(ttl.as_secs()).ignore();
            pipe.cmd("EXPIRE")
                .arg(self.info_key(id))
                .arg(ttl.as_secs())
                .ignore();
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
fn is_disconnect(e: &redis::RedisError) -> bool {
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

fn encode(messages: &[Message]) -> Result<Vec<String>, StoreError> {
    messages
        .iter()
        .map(|m| serde_json::to_string(m).map_err(StoreError::from))
        .collect()
}

fn decode(items: Vec<String>, key: &str) -> Result<Vec<Message>, StoreError> {
    items
        .iter()
        .map(|item| {
            serde_json::from_str(item).map_err(|source| StoreError::Json {
                at: format!("a message in {key}"),
                source,
            })
        })
        .collect()
}

/// Escapes the glob characters of a SCAN pattern.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

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
    /// outlives no holder by more than [`REPLY_LOCK_TTL`]; released (only by its holder)
    /// when the reply ends.
    async fn lock_reply(&self, id: &SessionId) -> Result<Option<ReplyLock>, StoreError> {
        self.lock(self.lock_key(id)).await
    }

    /// The summarizer's lock: one run per conversation across processes, held like the
    /// reply lock, and independent of it (a summary being written never delays a turn).
    async fn lock_summary(&self, id: &SessionId) -> Result<Option<ReplyLock>, StoreError> {
        self.lock(format!("{}{}:summarizing", self.base(), id.as_str()))
            .await
    }

    async fn load(&self, id: &SessionId) -> Result<Vec<Message>, StoreError> {
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
        id: &SessionId,
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

    async fn load_tail(&self, id: &SessionId, count: usize) -> Result<Tail, StoreError> {
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

    async fn append(&self, id: &SessionId, messages: &[Message]) -> Result<(), StoreError> {
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

    async fn replace(&self, id: &SessionId, messages: &[Message]) -> Result<(), StoreError> {
        let key = self.messages_key(id);
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("DEL").arg(&key).ignore();
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
        id: &SessionId,
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

    async fn rewrite(&self, id: &SessionId, edits: &[Edit]) -> Result<usize, StoreError> {
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

    async fn summary(&self, id: &SessionId) -> Result<Option<serde_json::Value>, StoreError> {
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
        id: &SessionId,
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

    async fn version(&self, id: &SessionId) -> Result<u64, StoreError> {
        let cmd = &redis::cmd("GET").arg(self.version_key(id)).clone();
        let version: Option<u64> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        Ok(version.unwrap_or_default())
    }

    async fn put_summary_if(
        &self,
        id: &SessionId,
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

    async fn truncate_if(
        &self,
        id: &SessionId,
        keep: usize,
        total: usize,
        last: &Message,
    ) -> Result<bool, StoreError> {
        let done: i64 = redis::cmd("EVAL")
            .arg(TRUNCATE_IF)
            .arg(1)
            .arg(self.messages_key(id))
            .arg(total)
            .arg(last.role.as_str())
            .arg(last.ts)
            .arg(&last.text)
            .arg(keep)
            .query_async(&mut self.conn())
            .await?;
        Ok(done == 1)
    }

    async fn clear(&self, id: &SessionId) -> Result<Option<BackupInfo>, StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("DEL")
            .arg(self.messages_key(id))
            .arg(self.summary_key(id))
            .ignore();
        self.bump_version(&mut pipe, id);
        let pipe = &pipe;
        retrying(&self.connection, |mut c| async move {
            pipe.query_async::<()>(&mut c).await
        })
        .await?;
        Ok(None)
    }

    async fn delete(&self, id: &SessionId) -> Result<Option<BackupInfo>, StoreError> {
        let owner = self.info(id).await?.and_then(|info| info.owner);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("DEL")
            .arg(self.messages_key(id))
            .arg(self.summary_key(id))
            .arg(self.info_key(id))
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

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
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
                    .filter_map(|rest| SessionId::parse(rest).ok()),
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

    async fn stats(&self, id: &SessionId) -> Result<Stats, StoreError> {
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

    async fn restore_backup(&self, _id: &SessionId, _backup: &str) -> Result<(), StoreError> {
        Err(StoreError::NoBackups("redis"))
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
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

    async fn info(&self, id: &SessionId) -> Result<Option<ConversationInfo>, StoreError> {
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

    async fn list_owned(&self, owner: &str) -> Result<Vec<ConversationInfo>, StoreError> {
        let owned = self.owner_key(owner);
        let mut conn = self.conn();
        let cmd = &redis::cmd("ZRANGE").arg(&owned).arg(0).arg(-1).clone();
        let sessions: Vec<String> = retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?;
        let ids: Vec<SessionId> = sessions
            .iter()
            .filter_map(|s| SessionId::parse(s).ok())
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
                Some(Ok(info)) => list.push(info),
                Some(Err(e)) => tracing::error!("skipping unreadable {}: {e}", self.info_key(id)),
                None => expired.push(id.as_str().to_owned()),
            }
        }
        if !expired.is_empty() {
            // Their keys expired: forget them in the index too.
            let _: Result<(), _> = redis::cmd("ZREM")
                .arg(&owned)
                .arg(expired)
                .query_async(&mut conn)
                .await;
        }
        Ok(newest_first(list))
    }
}

#[cfg(test)]
mod tests {
    use super::super::contract;
    use super::*;
    use fake_llm::redis_server::RedisServer;

    fn options(redis: &RedisServer, history_id: &str) -> RedisOptions {
        RedisOptions {
            url: redis.url(),
            key_prefix: "test:".into(),
            history_id: history_id.into(),
            max_turns: std::num::NonZeroUsize::new(contract::MAX_TURNS),
            ttl: Some(Duration::from_secs(600)),
        }
    }

    #[tokio::test]
    async fn passes_the_store_contract_on_a_real_redis() {
        let redis = RedisServer::start().unwrap();
        let store = RedisStore::connect(options(&redis, "main")).await.unwrap();
        contract::run(&store).await;
    }

    #[tokio::test]
    async fn histories_never_share_keys_and_writes_refresh_the_ttl() {
        let redis = RedisServer::start().unwrap();
        let a = RedisStore::connect(options(&redis, "a")).await.unwrap();
        let b = RedisStore::connect(options(&redis, "b")).await.unwrap();
        let s = SessionId::parse("same").unwrap();
        a.append(&s, &[Message::user("for a", 1)]).await.unwrap();
        assert!(b.load(&s).await.unwrap().is_empty());
        let mut conn = a.conn();
        let ttl: i64 = redis::cmd("TTL")
            .arg("test:a:same")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!((590..=600).contains(&ttl), "ttl {ttl}");
        let element: String = redis::cmd("LINDEX")
            .arg("test:a:same")
            .arg(0)
            .query_async(&mut conn)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_str(&element).unwrap();
        assert_eq!(json["text"], "for a", "one JSON message per list element");
    }

    #[tokio::test]
    async fn an_unreachable_redis_is_an_error_not_a_hang() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = RedisOptions {
            url: format!("redis://127.0.0.1:{port}"),
            key_prefix: String::new(),
            history_id: "x".into(),
            max_turns: None,
            ttl: None,
        };
        assert!(matches!(
            RedisStore::connect(options).await,
            Err(StoreError::Redis(_))
        ));
    }

    #[test]
    fn scan_patterns_escape_glob_characters() {
        assert_eq!(super::glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
