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

pub mod approvals;
mod branches;
mod index;
mod lock;
mod scripts;
mod store;

pub use lock::retrying;

use super::{BackupInfo, ConversationInfo, ConversationStore, MaxTurns, Stats};
use super::{ReplyLock, StoreError, Tail};
use async_trait::async_trait;
use parlor_domain::context::Edit;
use parlor_domain::{ConversationId, Message};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct RedisOptions {
    pub url: String,
    pub key_prefix: String,
    pub history_id: String,
    pub max_turns: MaxTurns,
    /// Expiry of a conversation's keys, refreshed on every write.
    pub ttl: Option<Duration>,
}

/// A Redis history's Redis, as other shared state uses it.
#[derive(Clone)]
pub struct SharedRedis {
    pub connection: ConnectionManager,
    pub prefix: String,
    /// Where it is: for a connection of another kind (one Redis tells of changes).
    pub url: String,
}

pub struct RedisStore {
    options: RedisOptions,
    connection: ConnectionManager,
    /// This process's mark in the locks it takes (`<instance>:<token>`).
    instance: String,
    /// The locks this process holds now, by value: a lock of this process's that is not
    /// among them belongs to a reply that is over (its release did not reach Redis).
    held: Arc<Mutex<HashSet<String>>>,
    /// Says to every process sharing this Redis that this one is alive (see [`lock`]).
    _heartbeat: lock::Heartbeat,
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
        let instance = uuid::Uuid::new_v4().simple().to_string();
        let alive = lock::alive_key(&options, &instance);
        // The first beat before any lock is taken (and the check that Redis answers).
        lock::beat_once(&mut connection.clone(), &alive).await?;
        let store = RedisStore {
            options,
            _heartbeat: lock::Heartbeat::start(connection.clone(), alive),
            connection,
            instance,
            held: Arc::default(),
        };
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

    fn messages_key(&self, id: &ConversationId) -> String {
        format!("{}{}", self.base(), id.as_str())
    }

    fn info_key(&self, id: &ConversationId) -> String {
        format!("{}{}:info", self.base(), id.as_str())
    }

    fn summary_key(&self, id: &ConversationId) -> String {
        format!("{}{}:summary", self.base(), id.as_str())
    }

    /// The versions off the chosen path: a list of branches, one JSON branch each.
    fn branches_key(&self, id: &ConversationId) -> String {
        format!("{}{}:branches", self.base(), id.as_str())
    }

    fn version_key(&self, id: &ConversationId) -> String {
        format!("{}{}:version", self.base(), id.as_str())
    }

    /// Adds the step that moves the conversation's version on to `pipe`.
    fn bump_version(&self, pipe: &mut redis::Pipeline, id: &ConversationId) {
        let key = self.version_key(id);
        pipe.cmd("INCR").arg(&key).ignore();
        if let Some(ttl) = self.options.ttl {
            pipe.cmd("EXPIRE").arg(&key).arg(ttl.as_secs()).ignore();
        }
    }

    fn owner_key(&self, owner: &str) -> String {
        format!("{}@owner:{owner}", self.base())
    }

    /// The connection, key prefix and address, for other shared state (live sessions,
    /// accounts, the cookie key).
    pub fn shared(&self) -> SharedRedis {
        SharedRedis {
            connection: self.connection.clone(),
            prefix: self.options.key_prefix.clone(),
            url: self.options.url.clone(),
        }
    }

    fn lock_key(&self, id: &ConversationId) -> String {
        format!("{}{}:writing", self.base(), id.as_str())
    }

    fn conn(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// Adds the trim and TTL steps of a write to `pipe`.
    fn finish_write(&self, pipe: &mut redis::Pipeline, id: &ConversationId) {
        let key = self.messages_key(id);
        if let Some(max) = self.options.max_turns {
            pipe.cmd("EVAL")
                .arg(scripts::TRIM_WHOLE)
                .arg(2)
                .arg(&key)
                .arg(self.branches_key(id))
                .arg(max.get())
                .arg(branches::MARKER)
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
    async fn a_lock_dropped_without_its_release_frees_the_conversation_at_once() {
        let redis = RedisServer::start().unwrap();
        let store = RedisStore::connect(options(&redis, "locks")).await.unwrap();
        let id = ConversationId::parse("dropped").unwrap();
        for _ in 0..20 {
            // A turn that failed after taking the lock drops it (no release awaited): the
            // next message of this process takes it at once, before the release has run.
            let lock = store.lock_reply(&id).await.unwrap().expect("free");
            drop(lock);
            let again = store.lock_reply(&id).await.unwrap();
            assert!(again.is_some(), "the conversation stayed busy");
            again.unwrap().release().await;
        }
        // Another process's lock is never taken over.
        let other = RedisStore::connect(options(&redis, "locks")).await.unwrap();
        let held = other.lock_reply(&id).await.unwrap().expect("free");
        assert!(store.lock_reply(&id).await.unwrap().is_none());
        held.release().await;
    }

    #[tokio::test]
    async fn histories_never_share_keys_and_writes_refresh_the_ttl() {
        let redis = RedisServer::start().unwrap();
        let a = RedisStore::connect(options(&redis, "a")).await.unwrap();
        let b = RedisStore::connect(options(&redis, "b")).await.unwrap();
        let s = ConversationId::parse("same").unwrap();
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
