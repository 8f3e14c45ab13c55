//! The logins and tokens this process has read from Redis, with their accounts, kept only
//! while Redis tells it of every change to them: a connection of its own asks Redis to track
//! the keys of logins, tokens and accounts (`CLIENT TRACKING … BCAST`), and each change any
//! process makes (a logout, a removed user, a revoked token, an expiry, a flush) drops what
//! it names before the next request here can use it. While that connection is down nothing
//! is kept and every request asks Redis, as without this.
//!
//! A read that began before a change was heard is not kept ([`Tracked::epoch`]), so a reply
//! that crossed the change on the wire cannot bring the old record back.

use super::store::{Account, Login, Token};
use parlor_domain::account::UserName;
use redis::{IntoConnectionInfo, PushInfo, PushKind, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::Duration;
use tokio::sync::oneshot;

/// At most this many logins and tokens are kept; past it, all are forgotten.
const MOST: usize = 10_000;

pub struct Tracked {
    url: String,
    /// `{prefix}@account:`
    prefix: String,
    started: Once,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The tracking connection is up: records are kept and served only then.
    live: bool,
    /// Counts every change heard (and every connect and disconnect).
    epoch: u64,
    /// Numbers the tracking connections; the one up when `live`.
    connection: u64,
    logins: HashMap<String, (Login, Option<Account>)>,
    tokens: HashMap<String, (Token, Option<Account>)>,
}

impl State {
    fn forget_all(&mut self) {
        self.epoch += 1;
        self.logins.clear();
        self.tokens.clear();
    }

    fn forget_user(&mut self, name: &str) {
        self.epoch += 1;
        self.logins
            .retain(|_, (login, _)| login.name.as_str() != name);
        self.tokens
            .retain(|_, (token, _)| token.name.as_str() != name);
    }

    fn room(&mut self) {
        if self.logins.len() + self.tokens.len() >= MOST {
            self.logins.clear();
            self.tokens.clear();
        }
    }
}

/// A change to one key under the prefix.
enum Change<'a> {
    Login(&'a str),
    Token(&'a str),
    User(&'a str),
}

impl Tracked {
    /// Keeps nothing until [`Self::epoch`] is first asked (a command-line run never connects).
    pub fn new(url: &str, prefix: &str) -> Arc<Tracked> {
        Arc::new(Tracked {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
            started: Once::new(),
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the epoch stands before a read, or none while nothing is kept (and then the
    /// tracking connection is started, once).
    pub fn epoch(self: &Arc<Self>) -> Option<u64> {
        self.started.call_once(|| {
            tokio::spawn(watch(Arc::downgrade(self)));
        });
        let state = self.state();
        state.live.then_some(state.epoch)
    }

    pub fn login(&self, hash: &str) -> Option<(Login, Option<Account>)> {
        let state = self.state();
        state
            .live
            .then(|| state.logins.get(hash).cloned())
            .flatten()
    }

    pub fn token(&self, hash: &str) -> Option<(Token, Option<Account>)> {
        let state = self.state();
        state
            .live
            .then(|| state.tokens.get(hash).cloned())
            .flatten()
    }

    /// Keeps a login read at `epoch`, unless something changed since.
    pub fn keep_login(&self, epoch: u64, hash: &str, found: &(Login, Option<Account>)) {
        let mut state = self.state();
        if state.live && state.epoch == epoch {
            state.room();
            state.logins.insert(hash.to_owned(), found.clone());
        }
    }

    pub fn keep_token(&self, epoch: u64, hash: &str, found: &(Token, Option<Account>)) {
        let mut state = self.state();
        if state.live && state.epoch == epoch {
            state.room();
            state.tokens.insert(hash.to_owned(), found.clone());
        }
    }

    /// This process changed a login (at once, not waiting for Redis to say so).
    pub fn forget_login(&self, hash: &str) {
        let mut state = self.state();
        state.epoch += 1;
        state.logins.remove(hash);
    }

    pub fn forget_token(&self, hash: &str) {
        let mut state = self.state();
        state.epoch += 1;
        state.tokens.remove(hash);
    }

    pub fn forget_user(&self, name: &UserName) {
        self.state().forget_user(name.as_str());
    }

    /// The keys whose changes matter, as `CLIENT TRACKING` prefixes.
    fn prefixes(&self) -> [String; 3] {
        ["login:", "token:", "user:"].map(|part| format!("{}{part}", self.prefix))
    }

    fn change<'a>(&self, key: &'a str) -> Option<Change<'a>> {
        let rest = key.strip_prefix(&self.prefix)?;
        if let Some(hash) = rest.strip_prefix("login:") {
            Some(Change::Login(hash))
        } else if let Some(hash) = rest.strip_prefix("token:") {
            Some(Change::Token(hash))
        } else {
            rest.strip_prefix("user:").map(Change::User)
        }
    }

    /// What tracking connection `id` hears; `closed` is told when it closes.
    fn heard(&self, id: u64, push: PushInfo, closed: &Mutex<Option<oneshot::Sender<()>>>) {
        match push.kind {
            PushKind::Invalidate => self.invalidate(&push.data),
            PushKind::Disconnection => {
                // Told under the lock, so `connect` sees either this or nothing.
                let mut state = self.state();
                if state.connection == id {
                    state.live = false;
                    state.forget_all();
                }
                if let Some(closed) = closed.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    let _ = closed.send(());
                }
            }
            _ => {}
        }
    }

    fn invalidate(&self, data: &[Value]) {
        let mut state = self.state();
        // A flush names no keys: everything goes.
        let Some(Value::Array(keys)) = data.first() else {
            state.forget_all();
            return;
        };
        state.epoch += 1;
        for key in keys {
            let Value::BulkString(bytes) = key else {
                state.forget_all();
                return;
            };
            let key = String::from_utf8_lossy(bytes);
            match self.change(&key) {
                Some(Change::Login(hash)) => drop(state.logins.remove(hash)),
                Some(Change::Token(hash)) => drop(state.tokens.remove(hash)),
                Some(Change::User(name)) => state.forget_user(name),
                None => {}
            }
        }
    }

    /// Opens a tracking connection: the connection (kept open while it lives) and what is
    /// told when it closes.
    async fn connect(
        self: &Arc<Self>,
        id: u64,
    ) -> redis::RedisResult<(redis::aio::MultiplexedConnection, oneshot::Receiver<()>)> {
        let info = self.url.as_str().into_connection_info()?;
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let me = Arc::downgrade(self);
        let (tell, mut closed) = oneshot::channel();
        let tell = Mutex::new(Some(tell));
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_push_sender(move |push: PushInfo| match me.upgrade() {
                Some(tracked) => {
                    tracked.heard(id, push, &tell);
                    Ok(())
                }
                None => Err(()),
            });
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let mut track = redis::cmd("CLIENT");
        track.arg("TRACKING").arg("ON").arg("BCAST");
        for prefix in self.prefixes() {
            track.arg("PREFIX").arg(prefix);
        }
        track.query_async::<()>(&mut connection).await?;
        let mut state = self.state();
        if closed.try_recv() == Err(oneshot::error::TryRecvError::Empty) {
            state.forget_all();
            state.connection = id;
            state.live = true;
        }
        drop(state);
        Ok((connection, closed))
    }
}

/// Keeps the tracking connection open while the accounts are in use, reconnecting (with a
/// growing pause) when it closes.
async fn watch(tracked: Weak<Tracked>) {
    let mut pause = Duration::from_millis(100);
    let mut warned = false;
    for id in 1.. {
        let Some(me) = tracked.upgrade() else { return };
        match me.connect(id).await {
            Ok((connection, closed)) => {
                pause = Duration::from_millis(100);
                warned = false;
                drop(me);
                if !until_closed(&tracked, closed).await {
                    return;
                }
                drop(connection);
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(
                        "accounts: cannot ask Redis to tell of changes ({e}); until it can, \
                         every request reads its login or token from Redis"
                    );
                    warned = true;
                }
                drop(me);
                pause = (pause * 2).min(Duration::from_secs(10));
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Waits for a tracking connection to close: false when the accounts went first.
async fn until_closed(tracked: &Weak<Tracked>, mut closed: oneshot::Receiver<()>) -> bool {
    loop {
        tokio::select! {
            // Told, or the sender went with the connection: closed both ways.
            _ = &mut closed => return true,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {
                if tracked.strong_count() == 0 {
                    return false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::redis::RedisAccounts;
    use super::super::store::AccountStore;
    use super::*;
    use fake_llm::redis_server::RedisServer;
    use redis::aio::ConnectionManager;

    /// Waits (at most five seconds) until `check` holds: for what another connection hears.
    async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !check().await {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn account(name: &str, id: &str) -> Account {
        Account {
            name: UserName::parse(name).unwrap(),
            id: id.into(),
            admin: false,
            created_ms: 1,
            password: None,
            subject: None,
        }
    }

    async fn manager(redis: &RedisServer) -> ConnectionManager {
        let client = redis::Client::open(redis.url()).unwrap();
        ConnectionManager::new(client).await.unwrap()
    }

    #[tokio::test]
    async fn a_tracking_store_keeps_every_rule() {
        let redis = RedisServer::start().unwrap();
        let store = RedisAccounts::new(manager(&redis).await, "t:").tracking(&redis.url());
        // Up before the rules run, so they run against what is kept.
        let _ = store.login_account("none", 0).await.unwrap();
        eventually("tracking is up", async || store.tracked().epoch().is_some()).await;
        super::super::store::contract::run(&store).await;
    }

    #[tokio::test]
    async fn what_another_process_changes_is_forgotten_here() {
        let redis = RedisServer::start().unwrap();
        let here = RedisAccounts::new(manager(&redis).await, "t:").tracking(&redis.url());
        let there = RedisAccounts::new(manager(&redis).await, "t:");
        let ada = account("ada", "a1");
        there.add_user(&ada).await.unwrap();
        let login = Login {
            name: ada.name.clone(),
            account_id: "a1".into(),
            expires_ms: i64::MAX,
        };
        there.put_login("h1", &login).await.unwrap();
        let _ = here.login_account("h1", 5).await.unwrap();
        eventually("tracking is up", async || here.tracked().epoch().is_some()).await;

        // Read once, then kept: with its account.
        let found = here.login_account("h1", 5).await.unwrap().unwrap();
        assert_eq!(found, (login.clone(), Some(ada.clone())));
        assert_eq!(here.tracked().login("h1"), Some(found));
        // A forged login is not kept (nothing to fill memory with).
        assert_eq!(here.login_account("forged", 5).await.unwrap(), None);
        assert_eq!(here.tracked().login("forged"), None);

        // A logout there ends it here.
        there.end_login("h1").await.unwrap();
        eventually("the logout is heard", async || {
            here.login_account("h1", 5).await.unwrap().is_none()
        })
        .await;

        // A token, kept; its user removed there: the token names no account here.
        let token = Token {
            id: "t1".into(),
            name: ada.name.clone(),
            account_id: "a1".into(),
            label: String::new(),
            created_ms: 1,
            last_used_ms: None,
        };
        there.put_token("th", &token).await.unwrap();
        assert!(here.token_account("th").await.unwrap().unwrap().1.is_some());
        assert!(here.tracked().token("th").is_some());
        there.remove_user(&ada.name).await.unwrap();
        eventually("the removal is heard", async || {
            here.token_account("th").await.unwrap().is_none()
        })
        .await;

        // Changes made here are forgotten at once, without waiting for Redis.
        there.add_user(&ada).await.unwrap();
        there.put_login("h2", &login).await.unwrap();
        assert!(here.login_account("h2", 5).await.unwrap().is_some());
        assert!(here.tracked().login("h2").is_some());
        here.end_login("h2").await.unwrap();
        assert_eq!(here.tracked().login("h2"), None);
        assert_eq!(here.login_account("h2", 5).await.unwrap(), None);

        // A flush forgets everything.
        there.put_login("h3", &login).await.unwrap();
        assert!(here.login_account("h3", 5).await.unwrap().is_some());
        let mut raw = manager(&redis).await;
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut raw)
            .await
            .unwrap();
        eventually("the flush is heard", async || {
            here.tracked().login("h3").is_none()
        })
        .await;
        assert_eq!(here.login_account("h3", 5).await.unwrap(), None);
    }

    #[tokio::test]
    async fn nothing_is_kept_while_the_tracking_connection_is_down() {
        let redis = RedisServer::start().unwrap();
        let here = RedisAccounts::new(manager(&redis).await, "t:").tracking(&redis.url());
        let there = RedisAccounts::new(manager(&redis).await, "t:");
        there.add_user(&account("ada", "a1")).await.unwrap();
        let login = Login {
            name: UserName::parse("ada").unwrap(),
            account_id: "a1".into(),
            expires_ms: i64::MAX,
        };
        there.put_login("h1", &login).await.unwrap();
        let _ = here.login_account("h1", 5).await.unwrap();
        eventually("tracking is up", async || here.tracked().epoch().is_some()).await;
        assert!(here.login_account("h1", 5).await.unwrap().is_some());
        assert!(here.tracked().login("h1").is_some());

        // Every client connection is closed (as when Redis restarts): what was kept goes,
        // and tracking comes back by itself.
        let mut raw = manager(&redis).await;
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query_async(&mut raw)
            .await
            .unwrap();
        eventually("the close is heard", async || {
            here.tracked().login("h1").is_none()
        })
        .await;
        eventually("tracking is back", async || {
            here.tracked().epoch().is_some()
        })
        .await;
        there.end_login("h1").await.unwrap();
        eventually("the logout is heard", async || {
            here.login_account("h1", 5).await.unwrap().is_none()
        })
        .await;
    }
}
