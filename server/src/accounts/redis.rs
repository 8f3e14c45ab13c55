//! Accounts in the Redis of the `default` history, under its key prefix:
//! `@account:user:<name>` (JSON) with the set `@account:users`; `@account:login:<hash>` (JSON,
//! expiring with the login) with the set `@account:logins:<name>`; `@account:token:<hash>`
//! with `@account:tokens:<name>`; `@account:fail:<key>` (a counter expiring with its window)
//! and `@account:use:<day>:<name>` (a counter kept two days); `@account:flow:<hash>` (an
//! OpenID login under way, ten minutes). Processes on one Redis share
//! them all.

use super::store::{Account, AccountStore, FailureKey, Flow, Login, Token};
use super::tracked::Tracked;
use crate::store::{redis_retrying, StoreError};
use async_trait::async_trait;
use parlor_domain::account::{Failures, UserName, LOCKOUT_WINDOW_MS};
use redis::aio::ConnectionManager;
use serde::de::DeserializeOwned;
use std::sync::Arc;

pub struct RedisAccounts {
    connection: ConnectionManager,
    prefix: String,
    /// What this process keeps of logins and tokens while Redis tells it of changes.
    tracked: Option<Arc<Tracked>>,
}

const TWO_DAYS_S: i64 = 2 * 24 * 60 * 60;

/// How long Redis keeps a key that expires at `expires_ms`: a minute at least, and at most
/// ten years (Redis refuses an expiry past its clock's range, and an expiry far off, such as
/// `i64::MAX`, would be one).
fn key_ttl_ms(expires_ms: i64) -> i64 {
    const TEN_YEARS_MS: i64 = 10 * 366 * 24 * 60 * 60 * 1000;
    expires_ms
        .saturating_sub(crate::store::now_ms())
        .clamp(60_000, TEN_YEARS_MS)
}

/// Counts a failure: the counter and, with the first of a window, when the window ends.
const FAIL: &str = r#"
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {n, redis.call('PTTL', KEYS[1])}
"#;

/// One failure taken back (the key goes when none is left; its expiry stays).
const FORGIVE: &str = r#"
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n <= 1 then redis.call('DEL', KEYS[1]) return 0 end
return redis.call('DECR', KEYS[1])
"#;

/// A record (a login or a token) and the account it names, in one round trip: the second
/// key is built from the record's `name` (a single Redis, not a cluster).
const WITH_ACCOUNT: &str = r#"
local record = redis.call('GET', KEYS[1])
if not record then return false end
local ok, decoded = pcall(cjson.decode, record)
if not ok or type(decoded['name']) ~= 'string' then return {record, false} end
return {record, redis.call('GET', ARGV[1] .. decoded['name'])}
"#;

impl RedisAccounts {
    /// The record at `key` and its account (see [`WITH_ACCOUNT`]).
    async fn with_account<T: DeserializeOwned>(
        &self,
        key: String,
    ) -> Result<Option<(T, Option<Account>)>, StoreError> {
        let cmd = redis::cmd("EVAL")
            .arg(WITH_ACCOUNT)
            .arg(1)
            .arg(&key)
            .arg(self.key(&["user", ""]))
            .clone();
        let found: Option<(String, Option<String>)> = self.query(&cmd).await?;
        let Some((record, account)) = found else {
            return Ok(None);
        };
        let parse_error = |at: &str| {
            let at = at.to_owned();
            move |source| StoreError::Json { at, source }
        };
        let record: T = serde_json::from_str(&record).map_err(parse_error(&key))?;
        let account = account
            .map(|a| serde_json::from_str(&a).map_err(parse_error("an account")))
            .transpose()?;
        Ok(Some((record, account)))
    }

    /// Reads every login and token from Redis (the command line).
    pub fn new(connection: ConnectionManager, prefix: &str) -> RedisAccounts {
        RedisAccounts {
            connection,
            prefix: format!("{prefix}@account:"),
            tracked: None,
        }
    }

    /// Keeps logins and tokens it has read, with their accounts, while the Redis at `url`
    /// tells of every change to them (see [`Tracked`]): a server checks one at every request.
    pub fn tracking(mut self, url: &str) -> RedisAccounts {
        self.tracked = Some(Tracked::new(url, &self.prefix));
        self
    }

    #[cfg(test)]
    pub(super) fn tracked(&self) -> &Arc<Tracked> {
        self.tracked.as_ref().expect("a tracking store")
    }

    fn forget_token(&self, hash: &str) {
        if let Some(tracked) = &self.tracked {
            tracked.forget_token(hash);
        }
    }

    /// Forgets what this process keeps of `name`'s logins and tokens.
    fn forget_user(&self, name: &UserName) {
        if let Some(tracked) = &self.tracked {
            tracked.forget_user(name);
        }
    }

    fn key(&self, parts: &[&str]) -> String {
        format!("{}{}", self.prefix, parts.join(":"))
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        Ok(redis_retrying(&self.connection, |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await?)
    }

    async fn get_json<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StoreError> {
        let text: Option<String> = self.query(redis::cmd("GET").arg(key)).await?;
        text.map(|t| {
            serde_json::from_str(&t).map_err(|source| StoreError::Json {
                at: key.to_owned(),
                source,
            })
        })
        .transpose()
    }

    /// Deletes every key a set of `name`'s lists, and the set.
    async fn drop_listed(&self, list: &str, part: &str, name: &UserName) -> Result<(), StoreError> {
        let set = self.key(&[list, name.as_str()]);
        let hashes: Vec<String> = self.query(redis::cmd("SMEMBERS").arg(&set)).await?;
        let mut keys: Vec<String> = hashes.iter().map(|h| self.key(&[part, h])).collect();
        keys.push(set);
        self.query::<()>(redis::cmd("DEL").arg(keys)).await
    }

    fn failures_of(count: i64, ttl_ms: i64, now_ms: i64) -> Failures {
        Failures {
            count: count.clamp(0, u32::MAX as i64) as u32,
            since_ms: now_ms + ttl_ms.max(0) - LOCKOUT_WINDOW_MS,
        }
    }
}

#[async_trait]
impl AccountStore for RedisAccounts {
    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn user(&self, name: &UserName) -> Result<Option<Account>, StoreError> {
        self.get_json(&self.key(&["user", name.as_str()])).await
    }

    async fn add_user(&self, account: &Account) -> Result<bool, StoreError> {
        let key = self.key(&["user", account.name.as_str()]);
        let set: Option<String> = self
            .query(
                redis::cmd("SET")
                    .arg(&key)
                    .arg(serde_json::to_string(account)?)
                    .arg("NX"),
            )
            .await?;
        if set.is_some() {
            let users = self.key(&["users"]);
            self.query::<()>(redis::cmd("SADD").arg(users).arg(account.name.as_str()))
                .await?;
            self.forget_user(&account.name);
        }
        Ok(set.is_some())
    }

    async fn put_user(&self, account: &Account) -> Result<(), StoreError> {
        let key = self.key(&["user", account.name.as_str()]);
        self.query::<()>(
            redis::cmd("SET")
                .arg(key)
                .arg(serde_json::to_string(account)?),
        )
        .await?;
        self.forget_user(&account.name);
        Ok(())
    }

    async fn remove_user(&self, name: &UserName) -> Result<bool, StoreError> {
        let removed: i64 = self
            .query(redis::cmd("DEL").arg(self.key(&["user", name.as_str()])))
            .await?;
        self.query::<()>(
            redis::cmd("SREM")
                .arg(self.key(&["users"]))
                .arg(name.as_str()),
        )
        .await?;
        self.drop_listed("logins", "login", name).await?;
        self.drop_listed("tokens", "token", name).await?;
        self.forget_user(name);
        Ok(removed > 0)
    }

    async fn users(&self) -> Result<Vec<Account>, StoreError> {
        let names: Vec<String> = self
            .query(redis::cmd("SMEMBERS").arg(self.key(&["users"])))
            .await?;
        let mut out = Vec::new();
        for name in names {
            if let Some(account) = self.get_json(&self.key(&["user", &name])).await? {
                out.push(account);
            }
        }
        Ok(out)
    }

    async fn put_login(&self, hash: &str, login: &Login) -> Result<(), StoreError> {
        // Reads check the expiry; Redis forgets the key a while after it.
        let ttl = key_ttl_ms(login.expires_ms);
        let key = self.key(&["login", hash]);
        let json = serde_json::to_string(login)?;
        self.query::<()>(redis::cmd("SET").arg(key).arg(json).arg("PX").arg(ttl))
            .await?;
        let set = self.key(&["logins", login.name.as_str()]);
        self.query(redis::cmd("SADD").arg(set).arg(hash)).await
    }

    async fn login(&self, hash: &str, now_ms: i64) -> Result<Option<Login>, StoreError> {
        let login: Option<Login> = self.get_json(&self.key(&["login", hash])).await?;
        Ok(login.filter(|l| l.expires_ms > now_ms))
    }

    async fn login_account(
        &self,
        hash: &str,
        now_ms: i64,
    ) -> Result<Option<(Login, Option<Account>)>, StoreError> {
        let epoch = self.tracked.as_ref().and_then(|t| t.epoch());
        let kept = epoch.and(self.tracked.as_ref()).and_then(|t| t.login(hash));
        let found = match kept {
            Some(kept) => Some(kept),
            None => {
                let found = self
                    .with_account::<Login>(self.key(&["login", hash]))
                    .await?;
                if let (Some(tracked), Some(epoch), Some(found @ (_, Some(_)))) =
                    (&self.tracked, epoch, &found)
                {
                    tracked.keep_login(epoch, hash, found);
                }
                found
            }
        };
        Ok(found.filter(|(login, _)| login.expires_ms > now_ms))
    }

    async fn token_account(
        &self,
        hash: &str,
    ) -> Result<Option<(Token, Option<Account>)>, StoreError> {
        let epoch = self.tracked.as_ref().and_then(|t| t.epoch());
        if let Some(kept) = epoch.and(self.tracked.as_ref()).and_then(|t| t.token(hash)) {
            return Ok(Some(kept));
        }
        let found = self.with_account(self.key(&["token", hash])).await?;
        if let (Some(tracked), Some(epoch), Some(found @ (_, Some(_)))) =
            (&self.tracked, epoch, &found)
        {
            tracked.keep_token(epoch, hash, found);
        }
        Ok(found)
    }

    async fn end_login(&self, hash: &str) -> Result<(), StoreError> {
        let key = self.key(&["login", hash]);
        if let Some(login) = self.get_json::<Login>(&key).await? {
            let set = self.key(&["logins", login.name.as_str()]);
            self.query::<()>(redis::cmd("SREM").arg(set).arg(hash))
                .await?;
        }
        self.query::<()>(redis::cmd("DEL").arg(key)).await?;
        if let Some(tracked) = &self.tracked {
            tracked.forget_login(hash);
        }
        Ok(())
    }

    async fn put_token(&self, hash: &str, token: &Token) -> Result<(), StoreError> {
        let key = self.key(&["token", hash]);
        self.query::<()>(
            redis::cmd("SET")
                .arg(key)
                .arg(serde_json::to_string(token)?),
        )
        .await?;
        let set = self.key(&["tokens", token.name.as_str()]);
        self.query(redis::cmd("SADD").arg(set).arg(hash)).await
    }

    async fn token(&self, hash: &str) -> Result<Option<Token>, StoreError> {
        self.get_json(&self.key(&["token", hash])).await
    }

    async fn touch_token(&self, hash: &str, now_ms: i64) -> Result<(), StoreError> {
        let key = self.key(&["token", hash]);
        if let Some(mut token) = self.get_json::<Token>(&key).await? {
            token.last_used_ms = Some(now_ms);
            // Only while it exists: a revoke in between stays a revoke.
            let json = serde_json::to_string(&token)?;
            self.query::<()>(redis::cmd("SET").arg(key).arg(json).arg("XX"))
                .await?;
            self.forget_token(hash);
        }
        Ok(())
    }

    async fn tokens(&self, name: &UserName) -> Result<Vec<Token>, StoreError> {
        let set = self.key(&["tokens", name.as_str()]);
        let hashes: Vec<String> = self.query(redis::cmd("SMEMBERS").arg(set)).await?;
        let mut out = Vec::new();
        for hash in hashes {
            if let Some(token) = self.token(&hash).await? {
                out.push(token);
            }
        }
        out.sort_by_key(|t: &Token| t.created_ms);
        Ok(out)
    }

    async fn revoke_token(&self, name: &UserName, id: &str) -> Result<bool, StoreError> {
        let set = self.key(&["tokens", name.as_str()]);
        let hashes: Vec<String> = self.query(redis::cmd("SMEMBERS").arg(&set)).await?;
        for hash in hashes {
            if self.token(&hash).await?.is_some_and(|t| t.id == id) {
                self.query::<()>(redis::cmd("DEL").arg(self.key(&["token", &hash])))
                    .await?;
                self.query::<()>(redis::cmd("SREM").arg(&set).arg(&hash))
                    .await?;
                self.forget_token(&hash);
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn put_flow(&self, hash: &str, flow: &Flow) -> Result<(), StoreError> {
        let ttl = key_ttl_ms(flow.expires_ms);
        let key = self.key(&["flow", hash]);
        let json = serde_json::to_string(flow)?;
        self.query(redis::cmd("SET").arg(key).arg(json).arg("PX").arg(ttl))
            .await
    }

    async fn take_flow(&self, hash: &str, now_ms: i64) -> Result<Option<Flow>, StoreError> {
        let key = self.key(&["flow", hash]);
        // Not retried: a flow is taken once.
        let mut connection = self.connection.clone();
        let text: Option<String> = redis::cmd("GETDEL")
            .arg(&key)
            .query_async(&mut connection)
            .await?;
        let flow: Option<Flow> = text
            .map(|t| {
                serde_json::from_str(&t).map_err(|source| StoreError::Json { at: key, source })
            })
            .transpose()?;
        Ok(flow.filter(|f| f.expires_ms > now_ms))
    }

    async fn fail(&self, key: &FailureKey, now_ms: i64) -> Result<Failures, StoreError> {
        let key = self.key(&["fail", &key.text()]);
        let cmd = redis::cmd("EVAL")
            .arg(FAIL)
            .arg(1)
            .arg(key)
            .arg(LOCKOUT_WINDOW_MS)
            .clone();
        // Not retried: counting twice would be a failure the user did not make.
        let mut connection = self.connection.clone();
        let (count, ttl): (i64, i64) = cmd.query_async(&mut connection).await?;
        Ok(Self::failures_of(count, ttl, now_ms))
    }

    async fn failures(
        &self,
        key: &FailureKey,
        now_ms: i64,
    ) -> Result<Option<Failures>, StoreError> {
        let key = self.key(&["fail", &key.text()]);
        let count: Option<i64> = self.query(redis::cmd("GET").arg(&key)).await?;
        let Some(count) = count else {
            return Ok(None);
        };
        let ttl: i64 = self.query(redis::cmd("PTTL").arg(&key)).await?;
        Ok((ttl > 0).then(|| Self::failures_of(count, ttl, now_ms)))
    }

    async fn forgive(&self, key: &FailureKey, _now_ms: i64) -> Result<(), StoreError> {
        let key = self.key(&["fail", &key.text()]);
        let cmd = redis::cmd("EVAL").arg(FORGIVE).arg(1).arg(key).clone();
        // Not retried: taking back twice would forget a failure that happened.
        let mut connection = self.connection.clone();
        let _: i64 = cmd.query_async(&mut connection).await?;
        Ok(())
    }

    async fn clear_failures(&self, key: &FailureKey) -> Result<(), StoreError> {
        self.query(redis::cmd("DEL").arg(self.key(&["fail", &key.text()])))
            .await
    }

    async fn add_usage(&self, name: &UserName, day: i64, tokens: i64) -> Result<u64, StoreError> {
        let key = self.key(&["use", &day.to_string(), name.as_str()]);
        let mut connection = self.connection.clone();
        // Not retried: adding twice would count use that did not happen.
        let (total, _): (i64, i64) = redis::pipe()
            .cmd("INCRBY")
            .arg(&key)
            .arg(tokens)
            .cmd("EXPIRE")
            .arg(&key)
            .arg(TWO_DAYS_S)
            .query_async(&mut connection)
            .await?;
        Ok(total.max(0) as u64)
    }

    async fn usage(&self, name: &UserName, day: i64) -> Result<u64, StoreError> {
        let key = self.key(&["use", &day.to_string(), name.as_str()]);
        let used: Option<u64> = self.query(redis::cmd("GET").arg(key)).await?;
        Ok(used.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fake_llm::redis_server::RedisServer;

    #[tokio::test]
    async fn redis_accounts_keep_every_rule_and_are_shared() {
        let redis = RedisServer::start().unwrap();
        let client = redis::Client::open(redis.url()).unwrap();
        let connection = ConnectionManager::new(client).await.unwrap();
        let store = RedisAccounts::new(connection.clone(), "t:");
        super::super::store::contract::run(&store).await;
        // Another process on the same Redis and prefix sees the same accounts; another
        // prefix (another deployment) sees none.
        let ada = UserName::parse("ada").unwrap();
        let same = RedisAccounts::new(connection.clone(), "t:");
        assert!(same.user(&ada).await.unwrap().is_some());
        assert_eq!(same.usage(&ada, 7).await.unwrap(), 30);
        let other = RedisAccounts::new(connection, "u:");
        assert!(other.user(&ada).await.unwrap().is_none());
    }
}
