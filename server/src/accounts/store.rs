//! Where accounts, login sessions, personal tokens, failed logins and daily use are kept: in
//! the backend of the `default` history, so the processes that share it share them.

use crate::store::StoreError;
use async_trait::async_trait;
use parlor_domain::account::{Failures, UserName};
use serde::{Deserialize, Serialize};

/// One account.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Account {
    pub name: UserName,
    /// Random, made with the account: what owns its conversations. A name removed and made
    /// again is a new account and owns none of the old one's.
    pub id: String,
    #[serde(default)]
    pub admin: bool,
    pub created_ms: i64,
    /// The Argon2id hash (a PHC string) of a local account's password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Who the OpenID provider says this account is (issuer and subject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Subject>,
    /// Logins started before this moment are over (a password change, "log out everywhere").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logins_after_ms: Option<i64>,
    /// What the page calls this account when it is not its name: the identity as a proxy
    /// sent it, or the name an OpenID provider gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
}

/// An account as an OpenID provider names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    pub issuer: String,
    pub sub: String,
}

/// A login session, stored under the hash of its id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Login {
    pub name: UserName,
    /// The account's id when the login was made: a login outlives no account.
    pub account_id: String,
    pub expires_ms: i64,
    /// When the login was made (0: before this was noted).
    #[serde(default)]
    pub started_ms: i64,
}

/// A personal access token, stored under the hash of its value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Token {
    /// What lists and revokes it (not the secret).
    pub id: String,
    pub name: UserName,
    pub account_id: String,
    pub label: String,
    pub created_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<i64>,
}

/// An OpenID login under way: what the callback checks, stored under the hash of its `state`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Flow {
    pub nonce: String,
    pub pkce_verifier: String,
    /// Where to go once logged in.
    pub next: String,
    pub expires_ms: i64,
}

/// What a failed login is counted against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FailureKey {
    Name(UserName),
    Address(std::net::IpAddr),
}

impl FailureKey {
    pub fn text(&self) -> String {
        match self {
            FailureKey::Name(name) => format!("name:{name}"),
            FailureKey::Address(address) => format!("address:{address}"),
        }
    }
}

/// The accounts' storage. Secrets (login ids, tokens) reach it only as their SHA-256.
#[async_trait]
pub trait AccountStore: Send + Sync {
    fn kind(&self) -> &'static str;
    async fn user(&self, name: &UserName) -> Result<Option<Account>, StoreError>;
    /// Adds a new account: false (and nothing written) when its name is taken.
    async fn add_user(&self, account: &Account) -> Result<bool, StoreError>;
    /// Replaces an existing account (a new password, admin or not).
    async fn put_user(&self, account: &Account) -> Result<(), StoreError>;
    /// Removes an account with its logins and tokens: false when there was none.
    async fn remove_user(&self, name: &UserName) -> Result<bool, StoreError>;
    async fn users(&self) -> Result<Vec<Account>, StoreError>;

    async fn put_login(&self, hash: &str, login: &Login) -> Result<(), StoreError>;
    /// The login of `hash` while it has not expired at `now_ms`.
    async fn login(&self, hash: &str, now_ms: i64) -> Result<Option<Login>, StoreError>;
    async fn end_login(&self, hash: &str) -> Result<(), StoreError>;

    /// A login and its account, as every request with a login cookie needs them: in one
    /// step where the backend can (Redis: one round trip).
    async fn login_account(
        &self,
        hash: &str,
        now_ms: i64,
    ) -> Result<Option<(Login, Option<Account>)>, StoreError> {
        let Some(login) = self.login(hash, now_ms).await? else {
            return Ok(None);
        };
        let account = self.user(&login.name).await?;
        Ok(Some((login, account)))
    }

    /// A token and its account (as [`Self::login_account`]).
    async fn token_account(
        &self,
        hash: &str,
    ) -> Result<Option<(Token, Option<Account>)>, StoreError> {
        let Some(token) = self.token(hash).await? else {
            return Ok(None);
        };
        let account = self.user(&token.name).await?;
        Ok(Some((token, account)))
    }

    async fn put_token(&self, hash: &str, token: &Token) -> Result<(), StoreError>;
    async fn token(&self, hash: &str) -> Result<Option<Token>, StoreError>;
    /// Notes a token's use at `now_ms` (best effort: a lost note loses no access).
    async fn touch_token(&self, hash: &str, now_ms: i64) -> Result<(), StoreError>;
    async fn tokens(&self, name: &UserName) -> Result<Vec<Token>, StoreError>;
    /// Revokes `name`'s token `id`: false when it has none of that id.
    async fn revoke_token(&self, name: &UserName, id: &str) -> Result<bool, StoreError>;

    async fn put_flow(&self, hash: &str, flow: &Flow) -> Result<(), StoreError>;
    /// Takes the flow of `hash` (it is gone afterwards: a callback counts once), while it has
    /// not expired at `now_ms`.
    async fn take_flow(&self, hash: &str, now_ms: i64) -> Result<Option<Flow>, StoreError>;

    /// Counts one more failed login against `key` at `now_ms`.
    async fn fail(&self, key: &FailureKey, now_ms: i64) -> Result<Failures, StoreError>;
    async fn failures(&self, key: &FailureKey, now_ms: i64)
        -> Result<Option<Failures>, StoreError>;
    async fn clear_failures(&self, key: &FailureKey) -> Result<(), StoreError>;
    /// Removes what has expired by `now_ms` (OpenID flows, logins, failure counts): how many
    /// records went. Backends whose records expire by themselves (Redis) have nothing to do.
    async fn sweep(&self, _now_ms: i64) -> Result<usize, StoreError> {
        Ok(0)
    }
    /// Takes back one failure counted against `key` (an attempt counted before it was
    /// checked that turned out right); nothing when none is counted.
    async fn forgive(&self, key: &FailureKey, now_ms: i64) -> Result<(), StoreError>;

    /// Adds `tokens` (taken away when negative: a reservation given back) to what `name`
    /// used on `day`, atomically, returning the new total (never below 0).
    async fn add_usage(&self, name: &UserName, day: i64, tokens: i64) -> Result<u64, StoreError>;
    async fn usage(&self, name: &UserName, day: i64) -> Result<u64, StoreError>;
}

/// The SHA-256 of a secret, in hex: what the store keeps of it.
pub fn hash_secret(secret: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Tests every backend runs: what the accounts' rules need of a store.
#[cfg(test)]
pub mod contract {
    use super::*;

    fn name(s: &str) -> UserName {
        UserName::parse(s).unwrap()
    }

    pub fn account(s: &str) -> Account {
        Account {
            name: name(s),
            id: format!("id-{s}"),
            admin: false,
            created_ms: 1,
            password: Some("$argon2id$stub".into()),
            subject: None,
            logins_after_ms: None,
            display: None,
        }
    }

    pub async fn run(store: &dyn AccountStore) {
        users(store).await;
        logins(store).await;
        tokens(store).await;
        failures(store).await;
        flows(store).await;
        usage(store).await;
        removal_ends_everything(store).await;
    }

    async fn users(store: &dyn AccountStore) {
        assert!(store.user(&name("ada")).await.unwrap().is_none());
        assert!(store.add_user(&account("ada")).await.unwrap());
        let mut again = account("ada");
        again.id = "other".into();
        assert!(
            !store.add_user(&again).await.unwrap(),
            "a name is taken once"
        );
        assert_eq!(
            store.user(&name("ada")).await.unwrap().unwrap().id,
            "id-ada"
        );
        let mut admin = account("ada");
        admin.admin = true;
        store.put_user(&admin).await.unwrap();
        assert!(store.user(&name("ada")).await.unwrap().unwrap().admin);
        assert!(store.add_user(&account("bob")).await.unwrap());
        let mut names: Vec<_> = store
            .users()
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.name)
            .collect();
        names.sort();
        assert_eq!(names, vec![name("ada"), name("bob")]);
    }

    async fn logins(store: &dyn AccountStore) {
        let login = Login {
            name: name("ada"),
            account_id: "id-ada".into(),
            expires_ms: 10_000,
            started_ms: 0,
        };
        store.put_login("h1", &login).await.unwrap();
        assert_eq!(store.login("h1", 5_000).await.unwrap(), Some(login.clone()));
        let (found, account) = store.login_account("h1", 5_000).await.unwrap().unwrap();
        assert_eq!(
            (found, account.map(|a| a.id)),
            (login.clone(), Some("id-ada".into()))
        );
        assert_eq!(
            store.login_account("h1", 10_000).await.unwrap(),
            None,
            "expired"
        );
        assert_eq!(store.login_account("nope", 5_000).await.unwrap(), None);
        assert_eq!(store.login("h1", 10_000).await.unwrap(), None, "expired");
        assert_eq!(store.login("nope", 5_000).await.unwrap(), None);
        store.end_login("h1").await.unwrap();
        assert_eq!(store.login("h1", 5_000).await.unwrap(), None);
    }

    async fn tokens(store: &dyn AccountStore) {
        let token = Token {
            id: "t1".into(),
            name: name("ada"),
            account_id: "id-ada".into(),
            label: "laptop".into(),
            created_ms: 3,
            last_used_ms: None,
        };
        store.put_token("th1", &token).await.unwrap();
        store.touch_token("th1", 99).await.unwrap();
        let read = store.token("th1").await.unwrap().unwrap();
        assert_eq!(read.last_used_ms, Some(99));
        let (found, account) = store.token_account("th1").await.unwrap().unwrap();
        assert_eq!(
            (found, account.map(|a| a.id)),
            (read, Some("id-ada".into()))
        );
        assert_eq!(store.token_account("nope").await.unwrap(), None);
        assert_eq!(store.tokens(&name("ada")).await.unwrap().len(), 1);
        assert!(store.tokens(&name("bob")).await.unwrap().is_empty());
        assert!(
            !store.revoke_token(&name("bob"), "t1").await.unwrap(),
            "not bob's"
        );
        assert!(store.revoke_token(&name("ada"), "t1").await.unwrap());
        assert_eq!(store.token("th1").await.unwrap(), None);
    }

    async fn failures(store: &dyn AccountStore) {
        let key = FailureKey::Name(name("ada"));
        let other = FailureKey::Address("10.0.0.1".parse().unwrap());
        for _ in 0..5 {
            store.fail(&key, 1_000).await.unwrap();
        }
        let counted = store.failures(&key, 2_000).await.unwrap().unwrap();
        assert_eq!(counted.count, 5);
        assert!(counted.locked_until(2_000).is_some());
        assert_eq!(store.failures(&other, 2_000).await.unwrap(), None);
        store.forgive(&key, 2_000).await.unwrap();
        assert_eq!(store.failures(&key, 2_000).await.unwrap().unwrap().count, 4);
        store.forgive(&other, 2_000).await.unwrap();
        assert_eq!(store.failures(&other, 2_000).await.unwrap(), None);
        store.clear_failures(&key).await.unwrap();
        assert_eq!(store.failures(&key, 2_000).await.unwrap(), None);
    }

    async fn flows(store: &dyn AccountStore) {
        let flow = Flow {
            nonce: "n".into(),
            pkce_verifier: "v".into(),
            next: "/".into(),
            expires_ms: 10_000,
        };
        store.put_flow("f1", &flow).await.unwrap();
        assert_eq!(
            store.take_flow("f1", 5_000).await.unwrap(),
            Some(flow.clone())
        );
        assert_eq!(
            store.take_flow("f1", 5_000).await.unwrap(),
            None,
            "once only"
        );
        store.put_flow("f2", &flow).await.unwrap();
        assert_eq!(
            store.take_flow("f2", 10_000).await.unwrap(),
            None,
            "expired"
        );
    }

    async fn usage(store: &dyn AccountStore) {
        assert_eq!(store.usage(&name("ada"), 7).await.unwrap(), 0);
        assert_eq!(store.add_usage(&name("ada"), 7, 40).await.unwrap(), 40);
        assert_eq!(store.add_usage(&name("ada"), 7, 2).await.unwrap(), 42);
        assert_eq!(store.add_usage(&name("ada"), 7, -12).await.unwrap(), 30);
        assert_eq!(store.usage(&name("ada"), 8).await.unwrap(), 0);
        assert_eq!(store.usage(&name("bob"), 7).await.unwrap(), 0);
    }

    async fn removal_ends_everything(store: &dyn AccountStore) {
        let login = Login {
            name: name("bob"),
            account_id: "id-bob".into(),
            expires_ms: i64::MAX,
            started_ms: 0,
        };
        store.put_login("hb", &login).await.unwrap();
        let token = Token {
            id: "tb".into(),
            name: name("bob"),
            account_id: "id-bob".into(),
            label: String::new(),
            created_ms: 3,
            last_used_ms: None,
        };
        store.put_token("thb", &token).await.unwrap();
        assert!(store.remove_user(&name("bob")).await.unwrap());
        assert!(!store.remove_user(&name("bob")).await.unwrap());
        assert_eq!(store.user(&name("bob")).await.unwrap(), None);
        assert_eq!(store.login("hb", 0).await.unwrap(), None);
        assert_eq!(store.token("thb").await.unwrap(), None);
        assert!(store.user(&name("ada")).await.unwrap().is_some());
    }
}
