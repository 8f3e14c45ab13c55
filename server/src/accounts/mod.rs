//! Accounts (`PARLOR_AUTH` other than `none`): who a request is, from a login cookie, a
//! personal access token or a trusted proxy's header; local passwords with lockout; daily
//! quotas. What an account owns is what its [`User::session`] owns, so every rule of
//! ownership that held for a browser holds for an account, on every device.

pub mod file;
pub mod gate;
pub mod oidc;
pub mod pages;
pub mod password;
pub mod proxy;
pub mod quota;
pub use quota::Quota;
pub mod redis;
pub mod store;
pub mod tracked;

use crate::config::auth::AuthConfig;
use crate::store::StoreError;
use parlor_app::ssr::BrowserSession;
use parlor_domain::account::{self as rules, Failures, UserName};
use std::net::IpAddr;
use std::sync::Arc;
pub use store::{Account, AccountStore, FailureKey, Flow, Login, Token};

/// What a personal access token starts with (so a leaked one is recognisable).
pub const TOKEN_PREFIX: &str = "parlor_pat_";
/// The longest name accepted at login before it is refused as input (not counted).
const NAME_INPUT_MAX: usize = 256;

/// Someone logged in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: UserName,
    /// What the page calls them: the identity as their proxy or OpenID provider gives it,
    /// else the account's name.
    pub display: String,
    pub account_id: String,
    pub admin: bool,
}

/// What a store records as the owner of `account`'s conversations (as [`User::session`]
/// owns them).
pub fn owner_key_of(account: &Account) -> String {
    crate::store::owner_key(&account_session(&account.id).0)
}

fn account_session(account_id: &str) -> BrowserSession {
    BrowserSession(format!("account:{account_id}"))
}

impl User {
    /// What this account's conversations are owned through: never a browser's session id
    /// (those are 32 hex digits).
    pub fn session(&self) -> BrowserSession {
        account_session(&self.account_id)
    }
}

/// Why a login is refused.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// A wrong name or a wrong password: the same answer for both.
    #[error("wrong user name or password")]
    Wrong,
    #[error("too many failed logins: try again in {retry_after_s} s")]
    Locked { retry_after_s: u64 },
    #[error("{0}")]
    Input(String),
    /// Every password check this process allows at once is running.
    #[error("too many logins at once: try again in a second")]
    Busy,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Password checks (Argon2id, tens of milliseconds of a core each) run at once per process:
/// about twice the cores, so a flood of logins queues nothing and leaves the chat its CPU.
fn hashes_at_once() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()) * 2
}

/// Why an account cannot be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("{0}")]
    Input(String),
    #[error("there is already an account named {0}")]
    Taken(UserName),
    #[error("there is no account named {0}")]
    NoSuchUser(UserName),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The accounts of this deployment.
pub struct Accounts {
    pub config: AuthConfig,
    /// The addresses whose user header is believed (proxy mode).
    pub trusted_proxies: Vec<IpAddr>,
    /// The OpenID provider (`oidc` mode).
    pub provider: Option<oidc::Provider>,
    store: Arc<dyn AccountStore>,
    /// Password checks allowed at once (see [`hashes_at_once`]).
    hashing: Arc<tokio::sync::Semaphore>,
    /// Sign-ups, one at a time (see [`Accounts::sign_up`]).
    signing_up: tokio::sync::Mutex<()>,
}

/// Where the accounts of the `default` history's backend are kept: its Redis (under its
/// prefix), or `accounts/` in the data folder; none when it is in memory.
pub fn open_store(
    histories: &crate::store::histories::Histories,
    data_dir: &std::path::Path,
) -> Option<Arc<dyn AccountStore>> {
    let default = histories.get(crate::store::histories::DEFAULT_HISTORY);
    match default {
        Some(history) => match &history.redis {
            Some(shared) => Some(Arc::new(
                redis::RedisAccounts::new(shared.connection.clone(), &shared.prefix)
                    .tracking(&shared.url),
            )),
            None if history.store.kind() == "memory" => None,
            None => Some(Arc::new(file::FileAccounts::new(data_dir.join("accounts")))),
        },
        None => Some(Arc::new(file::FileAccounts::new(data_dir.join("accounts")))),
    }
}

impl Accounts {
    pub fn new(
        config: AuthConfig,
        trusted_proxies: Vec<IpAddr>,
        store: Arc<dyn AccountStore>,
    ) -> Accounts {
        let checks = config.password_checks.unwrap_or_else(hashes_at_once);
        Accounts {
            provider: config.oidc.clone().map(oidc::Provider::new),
            config,
            trusted_proxies,
            store,
            hashing: Arc::new(tokio::sync::Semaphore::new(checks)),
            signing_up: tokio::sync::Mutex::new(()),
        }
    }

    /// The accounts when the configuration asks for them (a store is there then: see
    /// [`crate::setup`]).
    pub fn for_config(
        (config, trusted_proxies): &(AuthConfig, Vec<IpAddr>),
        store: Option<Arc<dyn AccountStore>>,
    ) -> Option<Arc<Accounts>> {
        match (config.required(), store) {
            (true, Some(store)) => Some(Arc::new(Accounts::new(
                config.clone(),
                trusted_proxies.clone(),
                store,
            ))),
            _ => None,
        }
    }

    pub fn store(&self) -> &dyn AccountStore {
        self.store.as_ref()
    }

    /// Whether `account` is an admin: by its record or by `PARLOR_ADMINS`.
    pub fn is_admin(&self, account: &Account) -> bool {
        // `PARLOR_ADMINS` names the local and proxy accounts; an OpenID account's name is
        // what its user chose at the provider, so it never makes an admin.
        account.admin || (account.subject.is_none() && self.config.admins.contains(&account.name))
    }

    /// The user an account is, as requests see it.
    pub fn user_of(&self, account: &Account) -> User {
        User {
            name: account.name.clone(),
            display: account
                .display
                .clone()
                .unwrap_or_else(|| account.name.to_string()),
            account_id: account.id.clone(),
            admin: self.is_admin(account),
        }
    }

    /// Makes a local account; `password` is checked first (length) and hashed.
    pub async fn add(
        &self,
        name: &str,
        password: &str,
        admin: bool,
    ) -> Result<Account, AccountError> {
        let name = UserName::parse(name).map_err(|e| AccountError::Input(e.to_string()))?;
        rules::check_new_password(password).map_err(|e| AccountError::Input(e.to_string()))?;
        let account = Account {
            name: name.clone(),
            id: password::random_hex(),
            admin,
            created_ms: crate::store::now_ms(),
            password: Some(password::hash_blocking(password.to_owned()).await),
            subject: None,
            logins_after_ms: None,
            display: None,
        };
        match self.store.add_user(&account).await? {
            true => Ok(account),
            false => Err(AccountError::Taken(name)),
        }
    }

    /// Makes the first account an admin: sign-up's rule. A name `PARLOR_ADMINS` lists is not
    /// for anyone to take (in any case). Sign-ups are made one at a time, so two first ones
    /// cannot both be admins.
    pub async fn sign_up(&self, name: &str, password: &str) -> Result<Account, AccountError> {
        let parsed = UserName::parse(name).map_err(|e| AccountError::Input(e.to_string()))?;
        if self.config.admins.contains(&parsed) {
            return Err(AccountError::Taken(parsed));
        }
        let _one = self.signing_up.lock().await;
        let first = self.store.users().await?.is_empty();
        self.add(name, password, first).await
    }

    pub async fn set_password(&self, name: &str, password: &str) -> Result<(), AccountError> {
        let name = UserName::parse(name).map_err(|e| AccountError::Input(e.to_string()))?;
        rules::check_new_password(password).map_err(|e| AccountError::Input(e.to_string()))?;
        let mut account = self
            .store
            .user(&name)
            .await?
            .ok_or(AccountError::NoSuchUser(name))?;
        account.password = Some(password::hash_blocking(password.to_owned()).await);
        // A new password ends every login made with the old one, on every process.
        account.logins_after_ms = Some(crate::store::now_ms());
        Ok(self.store.put_user(&account).await?)
    }

    /// Ends every login of `name` made until now, on every process (its tokens stay).
    pub async fn end_logins(&self, name: &str) -> Result<(), AccountError> {
        let name = UserName::parse(name).map_err(|e| AccountError::Input(e.to_string()))?;
        let mut account = self
            .store
            .user(&name)
            .await?
            .ok_or(AccountError::NoSuchUser(name))?;
        account.logins_after_ms = Some(crate::store::now_ms());
        Ok(self.store.put_user(&account).await?)
    }

    /// Removes an account, its logins (on every process) and its tokens; its conversations
    /// stay stored.
    pub async fn remove(&self, name: &str) -> Result<(), AccountError> {
        let name = UserName::parse(name).map_err(|e| AccountError::Input(e.to_string()))?;
        match self.store.remove_user(&name).await? {
            true => Ok(()),
            false => Err(AccountError::NoSuchUser(name)),
        }
    }

    /// Checks a name and password from `address`: locked names and addresses are refused
    /// before anything is hashed; a wrong name and a wrong password take the same time and
    /// get the same answer, and each counts against both the name and the address.
    pub async fn check_password(
        &self,
        name: &str,
        password: &str,
        address: IpAddr,
        now_ms: i64,
    ) -> Result<Account, LoginError> {
        if name.len() > NAME_INPUT_MAX || password.len() > rules::PASSWORD_MAX_BYTES {
            return Err(LoginError::Input(format!(
                "a user name has at most {} characters and a password at most {} bytes",
                rules::NAME_MAX,
                rules::PASSWORD_MAX_BYTES
            )));
        }
        // Busy: refused before anything is counted or hashed.
        let _hashing = self
            .hashing
            .clone()
            .try_acquire_owned()
            .map_err(|_| LoginError::Busy)?;
        let name = UserName::parse(name).ok();
        let mut keys = vec![FailureKey::Address(address)];
        keys.extend(name.clone().map(FailureKey::Name));
        // Each attempt is counted before anything is hashed, in one atomic step of the store:
        // parallel guesses each see the ones before them, so no more than the allowed number
        // is ever checked. An attempt that turns out right is taken back.
        for (i, key) in keys.iter().enumerate() {
            let counted = self.store.fail(key, now_ms).await?;
            let before = Failures {
                count: counted.count.saturating_sub(1),
                ..counted
            };
            if let Some(until) = before.locked_until(now_ms) {
                for earlier in &keys[..i] {
                    self.store.forgive(earlier, now_ms).await?;
                }
                let retry_after_s = rules::seconds_until(now_ms, until);
                return Err(LoginError::Locked { retry_after_s });
            }
        }
        let account = match &name {
            Some(name) => self.store.user(name).await?,
            None => None,
        };
        let phc = account.as_ref().and_then(|a| a.password.clone());
        if password::verify_blocking(password.to_owned(), phc).await {
            if let Some(name) = name {
                self.store.clear_failures(&FailureKey::Name(name)).await?;
            }
            self.store
                .forgive(&FailureKey::Address(address), now_ms)
                .await?;
            return Ok(account.expect("a password matched, so the account exists"));
        }
        Err(LoginError::Wrong)
    }

    /// Starts a login session for `account`: the cookie's value (a new random id) and when
    /// it expires.
    pub async fn start_login(
        &self,
        account: &Account,
        now_ms: i64,
    ) -> Result<(String, i64), StoreError> {
        let secret = password::random_hex();
        let expires_ms = now_ms + self.config.login_days as i64 * 24 * 60 * 60 * 1000;
        let login = Login {
            name: account.name.clone(),
            account_id: account.id.clone(),
            expires_ms,
            started_ms: now_ms,
        };
        self.store
            .put_login(&store::hash_secret(&secret), &login)
            .await?;
        Ok((secret, expires_ms))
    }

    /// Who a login cookie's value is: none when it is unknown, expired, ended, or its account
    /// was removed.
    pub async fn of_login(&self, secret: &str, now_ms: i64) -> Result<Option<User>, StoreError> {
        if !is_hex64(secret) {
            return Ok(None);
        }
        let hash = store::hash_secret(secret);
        let Some((login, account)) = self.store.login_account(&hash, now_ms).await? else {
            return Ok(None);
        };
        // Ended by a password change or "log out everywhere" after it began.
        let ended = |a: &Account| {
            a.logins_after_ms
                .is_some_and(|after| login.started_ms < after)
        };
        let account = account.filter(|a| !ended(a));
        Ok(self.same_account(account, &login.account_id))
    }

    /// The user of `account` while it is the one a login or token was made for.
    fn same_account(&self, account: Option<Account>, account_id: &str) -> Option<User> {
        account
            .filter(|a| a.id == account_id)
            .map(|a| self.user_of(&a))
    }

    pub async fn end_login(&self, secret: &str) -> Result<(), StoreError> {
        match is_hex64(secret) {
            true => self.store.end_login(&store::hash_secret(secret)).await,
            false => Ok(()),
        }
    }

    /// Makes a personal access token for `name`: the token (shown once) and its record.
    pub async fn create_token(
        &self,
        name: &str,
        label: &str,
    ) -> Result<(String, Token), AccountError> {
        let name = UserName::parse(name).map_err(|e| AccountError::Input(e.to_string()))?;
        let label = label.trim();
        if label.chars().count() > 100 {
            return Err(AccountError::Input(
                "a token's label has at most 100 characters".into(),
            ));
        }
        let account = self
            .store
            .user(&name)
            .await?
            .ok_or(AccountError::NoSuchUser(name.clone()))?;
        let secret = format!("{TOKEN_PREFIX}{}", password::random_hex());
        let token = Token {
            id: password::random_hex()[..16].to_owned(),
            name,
            account_id: account.id,
            label: label.to_owned(),
            created_ms: crate::store::now_ms(),
            last_used_ms: None,
        };
        self.store
            .put_token(&store::hash_secret(&secret), &token)
            .await?;
        Ok((secret, token))
    }

    /// Who a bearer token is (noting its use), or none.
    pub async fn of_token(&self, secret: &str, now_ms: i64) -> Result<Option<User>, StoreError> {
        let well_formed = secret.strip_prefix(TOKEN_PREFIX).is_some_and(is_hex64);
        if !well_formed {
            return Ok(None);
        }
        let hash = store::hash_secret(secret);
        let Some((token, account)) = self.store.token_account(&hash).await? else {
            return Ok(None);
        };
        let user = self.same_account(account, &token.account_id);
        if user.is_some() && token.last_used_ms.is_none_or(|t| now_ms - t > 60_000) {
            if let Err(e) = self.store.touch_token(&hash, now_ms).await {
                tracing::warn!("could not note a token's use: {e}");
            }
        }
        Ok(user)
    }
}

fn is_hex64(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}
