//! The logins and tokens this process has read from Redis, with their accounts, kept only
//! while Redis tells it of every change to them: a connection of its own asks Redis to track
//! the keys of logins, tokens and accounts (`CLIENT TRACKING … BCAST`), and each change any
//! process makes (a logout, a removed user, a revoked token, an expiry, a flush) drops what
//! it names before the next request here can use it. While that connection is down nothing
//! is kept and every request asks Redis, as without this.
//!
//! A connection can also go without a word: a NAT or a firewall that forgets it sends no FIN
//! or RST, and the changes Redis sends on it are lost while it still looks open. So it is
//! pinged ([`Timing::ping_every`]), and what is kept is served only while a ping has been
//! answered lately ([`Tracked::trusted`]); a ping not answered in time gives the connection
//! up, forgets everything and opens a new one. Whatever is heard, no record is served longer
//! than [`Timing::max_age`] after it was read.
//!
//! A read that began before a change was heard is not kept ([`Tracked::epoch`]), so a reply
//! that crossed the change on the wire cannot bring the old record back.

use super::store::{Account, Login, Token};
use parlor_domain::account::UserName;
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::{IntoConnectionInfo, PushInfo, PushKind, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Once, Weak};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// At most this many logins and tokens are kept; past it, all are forgotten.
const MOST: usize = 10_000;

/// How the tracking connection is watched and how long what it covers is trusted. The
/// defaults are for production; tests shorten them.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How often the tracking connection is pinged. Redis answers a ping after what it sent
    /// before on the same connection, so an answer shows that the changes made before the
    /// ping was sent have been heard (all but those of Redis's last turn: it sends `BCAST`
    /// invalidations at the end of each, possibly just after the answer). What is kept is
    /// served only within twice this of the last answered ping: a connection dropped
    /// silently stops being trusted that soon, even before its ping times out.
    pub ping_every: Duration,
    /// How long a ping (or opening the connection) may take before the connection is given
    /// up: what is kept is forgotten and another connection opened.
    pub ping_timeout: Duration,
    /// How long a record is served at most after it was read, whatever was heard: a bound
    /// even on a change missed in a way no ping can show.
    pub max_age: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            ping_every: Duration::from_secs(2),
            ping_timeout: Duration::from_secs(2),
            max_age: Duration::from_secs(60),
        }
    }
}

pub struct Tracked {
    url: String,
    /// `{prefix}@account:`
    prefix: String,
    timing: Timing,
    started: Once,
    state: Mutex<State>,
}

/// A record kept, with when it was read.
struct Kept<T> {
    at: Instant,
    found: (T, Option<Account>),
}

#[derive(Default)]
struct State {
    /// The tracking connection is up: records are kept and served only then (and only while
    /// `confirmed` is recent).
    live: bool,
    /// When the last ping that the tracking connection answered was sent (or tracking was
    /// asked for): every change made before then has been heard.
    confirmed: Option<Instant>,
    /// Counts every change heard (and every connect and disconnect).
    epoch: u64,
    /// Numbers the tracking connections; the one up when `live`.
    connection: u64,
    logins: HashMap<String, Kept<Login>>,
    tokens: HashMap<String, Kept<Token>>,
}

impl State {
    fn forget_all(&mut self) {
        self.epoch += 1;
        self.logins.clear();
        self.tokens.clear();
    }

    /// The tracking connection is gone, or may be: nothing it covered can be trusted.
    fn lost(&mut self) {
        self.live = false;
        self.confirmed = None;
        self.forget_all();
    }

    fn forget_user(&mut self, name: &str) {
        self.epoch += 1;
        self.logins
            .retain(|_, kept| kept.found.0.name.as_str() != name);
        self.tokens
            .retain(|_, kept| kept.found.0.name.as_str() != name);
    }

    fn room(&mut self) {
        if self.logins.len() + self.tokens.len() >= MOST {
            self.logins.clear();
            self.tokens.clear();
        }
    }
}

/// What is kept under `hash`, unless it was read more than `max_age` ago (then it goes).
fn fresh<T: Clone>(
    kept: &mut HashMap<String, Kept<T>>,
    hash: &str,
    max_age: Duration,
) -> Option<(T, Option<Account>)> {
    let entry = kept.get(hash)?;
    if entry.at.elapsed() < max_age {
        return Some(entry.found.clone());
    }
    kept.remove(hash);
    None
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
        Tracked::with_timing(url, prefix, Timing::default())
    }

    /// As [`Self::new`], watching the tracking connection as `timing` says.
    pub fn with_timing(url: &str, prefix: &str, timing: Timing) -> Arc<Tracked> {
        Arc::new(Tracked {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
            timing,
            started: Once::new(),
            state: Mutex::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, when what is kept may be served and kept: the tracking connection is up and
    /// answered a ping lately. `live` alone is not enough: a connection dropped silently stays
    /// `live` until its ping times out, and the changes sent on it meanwhile are lost.
    fn trusted(&self) -> Option<MutexGuard<'_, State>> {
        let state = self.state();
        let recent = state
            .confirmed
            .is_some_and(|at| at.elapsed() < self.timing.ping_every * 2);
        (state.live && recent).then_some(state)
    }

    /// Where the epoch stands before a read, or none while nothing is kept (and then the
    /// tracking connection is started, once).
    pub fn epoch(self: &Arc<Self>) -> Option<u64> {
        self.started.call_once(|| {
            tokio::spawn(watch(Arc::downgrade(self)));
        });
        self.trusted().map(|state| state.epoch)
    }

    pub fn login(&self, hash: &str) -> Option<(Login, Option<Account>)> {
        fresh(&mut self.trusted()?.logins, hash, self.timing.max_age)
    }

    pub fn token(&self, hash: &str) -> Option<(Token, Option<Account>)> {
        fresh(&mut self.trusted()?.tokens, hash, self.timing.max_age)
    }

    /// Keeps a login read at `epoch`, unless something changed since.
    pub fn keep_login(&self, epoch: u64, hash: &str, found: &(Login, Option<Account>)) {
        let Some(mut state) = self.trusted() else {
            return;
        };
        if state.epoch == epoch {
            state.room();
            let kept = Kept {
                at: Instant::now(),
                found: found.clone(),
            };
            state.logins.insert(hash.to_owned(), kept);
        }
    }

    pub fn keep_token(&self, epoch: u64, hash: &str, found: &(Token, Option<Account>)) {
        let Some(mut state) = self.trusted() else {
            return;
        };
        if state.epoch == epoch {
            state.room();
            let kept = Kept {
                at: Instant::now(),
                found: found.clone(),
            };
            state.tokens.insert(hash.to_owned(), kept);
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
                    state.lost();
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

    /// Tracking connection `id` answered a ping sent at `sent`: every change made before
    /// then has been heard.
    fn answered(&self, id: u64, sent: Instant) {
        let mut state = self.state();
        if state.live && state.connection == id {
            state.confirmed = Some(sent);
        }
    }

    /// Tracking connection `id` did not answer a ping in time: it may be gone without a word,
    /// and with it changes it should have heard.
    fn unanswered(&self, id: u64) {
        let mut state = self.state();
        if state.connection == id {
            state.lost();
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
        let info = info
            .set_redis_settings(settings)
            .set_tcp_settings(tcp_settings());
        let client = redis::Client::open(info)?;
        let me = Arc::downgrade(self);
        let (tell, mut closed) = oneshot::channel();
        let tell = Mutex::new(Some(tell));
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timing.ping_timeout))
            .set_response_timeout(Some(self.timing.ping_timeout))
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
        let asked = Instant::now();
        track.query_async::<()>(&mut connection).await?;
        let mut state = self.state();
        if closed.try_recv() == Err(oneshot::error::TryRecvError::Empty) {
            state.forget_all();
            state.connection = id;
            state.live = true;
            state.confirmed = Some(asked);
        }
        drop(state);
        Ok((connection, closed))
    }
}

/// TCP keepalive for the tracking connection, so the system too gives up a connection whose
/// other end is gone. Keepalive probes only an idle connection, and the pings keep this one
/// busy, so it matters only if they stop; where the system has it, `TCP_USER_TIMEOUT` also
/// closes the connection when what is written on it (the pings) goes unacknowledged, which
/// the client then tells as a disconnection.
fn tcp_settings() -> TcpSettings {
    let keepalive = TcpKeepalive::new().with_time(Duration::from_secs(5));
    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "windows"))]
    let keepalive = keepalive
        .with_interval(Duration::from_secs(2))
        .with_retries(3);
    let settings = TcpSettings::default().set_keepalive(keepalive);
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    let settings = settings.set_user_timeout(Duration::from_secs(10));
    settings
}

/// Keeps the tracking connection open while the accounts are in use, reconnecting (with a
/// growing pause) when it closes or stops answering.
async fn watch(tracked: Weak<Tracked>) {
    let mut pause = Duration::from_millis(100);
    let mut warned = false;
    for id in 1.. {
        let Some(me) = tracked.upgrade() else { return };
        let timing = me.timing;
        match me.connect(id).await {
            Ok((mut connection, closed)) => {
                pause = Duration::from_millis(100);
                warned = false;
                drop(me);
                if !until_closed(&tracked, id, &mut connection, closed, timing).await {
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

/// Pings tracking connection `id` until it closes or a ping goes unanswered (then it is
/// given up here, to be dropped and opened again): false when the accounts went first.
async fn until_closed(
    tracked: &Weak<Tracked>,
    id: u64,
    connection: &mut redis::aio::MultiplexedConnection,
    mut closed: oneshot::Receiver<()>,
    timing: Timing,
) -> bool {
    let mut next = tokio::time::Instant::now() + timing.ping_every;
    loop {
        tokio::select! {
            // Told, or the sender went with the connection: closed both ways.
            _ = &mut closed => return true,
            _ = tokio::time::sleep_until(next) => {}
        }
        if tracked.strong_count() == 0 {
            return false;
        }
        // Pings go at a steady pace, whatever each takes, so that one answered within the
        // interval confirms the connection before the last confirmation runs out.
        let sent = Instant::now();
        next = tokio::time::Instant::from_std(sent) + timing.ping_every;
        let ping = redis::cmd("PING");
        let answer =
            tokio::time::timeout(timing.ping_timeout, ping.query_async::<()>(connection)).await;
        let Some(me) = tracked.upgrade() else {
            return false;
        };
        let failed = match answer {
            Ok(Ok(())) => {
                me.answered(id, sent);
                continue;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", timing.ping_timeout),
        };
        me.unanswered(id);
        tracing::warn!(
            "accounts: the connection on which Redis tells of changes did not answer a ping \
             ({failed}); forgetting every login and token read, and opening another"
        );
        return true;
    }
}

#[cfg(test)]
mod tests {
    use super::super::redis::RedisAccounts;
    use super::super::store::AccountStore;
    use super::*;
    use fake_llm::redis_server::RedisServer;
    use redis::aio::ConnectionManager;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
    use tokio::net::{TcpListener, TcpStream};

    /// Waits (at most five seconds) until `check` holds: for what another connection hears.
    async fn eventually(what: &str, check: impl AsyncFnMut() -> bool) {
        within(Duration::from_secs(5), what, check).await;
    }

    /// Waits at most `most` until `check` holds.
    async fn within(most: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + most;
        while !check().await {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A TCP forwarder to Redis that can be made to swallow everything silently, as a NAT or
    /// a firewall that forgot the connection does: nothing passes either way, nothing closes.
    struct Forwarder {
        addr: std::net::SocketAddr,
        hole: Arc<AtomicBool>,
    }

    impl Forwarder {
        async fn start(redis: &RedisServer) -> Forwarder {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let hole = Arc::new(AtomicBool::new(false));
            let port = redis.port();
            let swallowing = hole.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else {
                        continue;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::spawn(pass(client_read, server_write, swallowing.clone()));
                    tokio::spawn(pass(server_read, client_write, swallowing.clone()));
                }
            });
            Forwarder { addr, hole }
        }

        fn url(&self) -> String {
            format!("redis://{}", self.addr)
        }

        /// From now on, everything on every connection (old or new) is dropped, or passes.
        fn swallow(&self, swallow: bool) {
            self.hole.store(swallow, Ordering::SeqCst);
        }
    }

    /// Copies `from` to `to`, dropping what comes while the hole is open, until `from` ends.
    async fn pass(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, hole: Arc<AtomicBool>) {
        let mut buffer = vec![0; 16 * 1024];
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            if !hole.load(Ordering::SeqCst) && to.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    }

    fn ada_login() -> Login {
        Login {
            name: UserName::parse("ada").unwrap(),
            account_id: "a1".into(),
            expires_ms: i64::MAX,
            started_ms: 0,
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
            logins_after_ms: None,
            display: None,
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
            started_ms: 0,
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
            started_ms: 0,
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

    /// Pings ten times a second, so a silent connection stops being trusted within 0.2 s,
    /// but waits the production two seconds for an answer: in between, the connection is
    /// still `live` and nothing is served all the same.
    fn quick() -> Timing {
        Timing {
            ping_every: Duration::from_millis(100),
            ping_timeout: Duration::from_secs(2),
            max_age: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn a_silently_dropped_tracking_connection_is_not_trusted() {
        let redis = RedisServer::start().unwrap();
        let forwarder = Forwarder::start(&redis).await;
        let here = Tracked::with_timing(&forwarder.url(), "t:", quick());
        let there = RedisAccounts::new(manager(&redis).await, "t:");
        there.add_user(&account("ada", "a1")).await.unwrap();
        there.put_login("h1", &ada_login()).await.unwrap();
        let _ = here.epoch();
        eventually("tracking is up", async || here.epoch().is_some()).await;

        // Read (as the store does) and kept; the pings keep it served well past the time a
        // single confirmation lasts.
        let epoch = here.epoch().unwrap();
        let found = there.login_account("h1", 5).await.unwrap().unwrap();
        here.keep_login(epoch, "h1", &found);
        assert_eq!(here.login("h1"), Some(found.clone()));
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(here.login("h1"), Some(found));

        // The path to Redis goes silent, and the login is ended on another connection: what
        // Redis sends of it is lost.
        forwarder.swallow(true);
        let silenced = Instant::now();
        there.end_login("h1").await.unwrap();
        within(
            Duration::from_secs(1),
            "the stale login is no longer served",
            async || here.login("h1").is_none() && here.epoch().is_none(),
        )
        .await;
        // Not for having heard the logout or given the connection up: it is still `live`,
        // its ping not yet timed out, and the login still in memory.
        {
            let state = here.state();
            assert!(state.live, "given up after {:?}", silenced.elapsed());
            assert!(state.logins.contains_key("h1"));
        }

        // The unanswered ping gives the connection up, forgetting everything.
        within(
            Duration::from_secs(4),
            "the connection is given up",
            async || !here.state().live,
        )
        .await;
        assert!(here.state().logins.is_empty());
        assert_eq!(here.epoch(), None);

        // Once the path is back, so is tracking; the ended login stays ended.
        forwarder.swallow(false);
        eventually("tracking is back", async || here.epoch().is_some()).await;
        assert_eq!(here.login("h1"), None);
        assert_eq!(there.login_account("h1", 5).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_silently_dropped_tracking_connection_is_not_trusted_by_default() {
        let redis = RedisServer::start().unwrap();
        let forwarder = Forwarder::start(&redis).await;
        let here = RedisAccounts::new(manager(&redis).await, "t:").tracking(&forwarder.url());
        let there = RedisAccounts::new(manager(&redis).await, "t:");
        there.add_user(&account("ada", "a1")).await.unwrap();
        there.put_login("h1", &ada_login()).await.unwrap();
        let _ = here.login_account("h1", 5).await.unwrap();
        eventually("tracking is up", async || here.tracked().epoch().is_some()).await;
        assert!(here.login_account("h1", 5).await.unwrap().is_some());
        assert!(here.tracked().login("h1").is_some());

        forwarder.swallow(true);
        there.end_login("h1").await.unwrap();
        // No later than twice the ping interval after the last answered ping.
        let most = Timing::default().ping_every * 2 + Duration::from_secs(1);
        within(most, "the stale login is no longer served", async || {
            here.login_account("h1", 5).await.unwrap().is_none()
        })
        .await;
    }

    #[tokio::test]
    async fn a_kept_record_is_not_served_past_its_age() {
        let redis = RedisServer::start().unwrap();
        let timing = Timing {
            max_age: Duration::from_millis(300),
            ..quick()
        };
        let here = Tracked::with_timing(&redis.url(), "t:", timing);
        let there = RedisAccounts::new(manager(&redis).await, "t:");
        there.add_user(&account("ada", "a1")).await.unwrap();
        there.put_login("h1", &ada_login()).await.unwrap();
        let _ = here.epoch();
        eventually("tracking is up", async || here.epoch().is_some()).await;

        let found = there.login_account("h1", 5).await.unwrap().unwrap();
        here.keep_login(here.epoch().unwrap(), "h1", &found);
        assert_eq!(here.login("h1"), Some(found.clone()));
        tokio::time::sleep(Duration::from_millis(400)).await;
        // Still trusted (the pings go on), but read too long ago.
        assert!(here.epoch().is_some());
        assert_eq!(here.login("h1"), None);
        assert!(!here.state().logins.contains_key("h1"));
        // Read again, kept again.
        here.keep_login(here.epoch().unwrap(), "h1", &found);
        assert_eq!(here.login("h1"), Some(found));
    }
}
