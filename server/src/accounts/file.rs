//! Accounts in files, under `PARLOR_DATA_DIR/accounts/`: one JSON file per account, login,
//! token and failure count, and one per account and day of use; each written atomically.
//! Secrets are kept only as hashes, which are also the file names.

use super::store::{Account, AccountStore, FailureKey, Flow, Login, Token};
use crate::store::atomic::write_privately;
use crate::store::StoreError;
use async_trait::async_trait;
use parlor_domain::account::{Failures, UserName};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The accounts of a file `default` history.
pub struct FileAccounts {
    root: Arc<PathBuf>,
    /// Read-modify-write steps of this process one at a time (adding an account, counting).
    writes: tokio::sync::Mutex<()>,
    /// Accounts, logins and tokens as last read, with their file's stamp: a request's check
    /// is one `stat` while the file is the same one (every write replaces it), so a change
    /// by any process, a logout or a removal, is seen at once.
    seen: std::sync::Mutex<Seen>,
}

/// Each file read for requests: its stamp then, and what it held.
type Seen = HashMap<PathBuf, (Stamp, Arc<dyn Any + Send + Sync>)>;

/// What `stat` says of a file: a write replaces the file, so the same stamp is the same
/// content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    modified_ns: i128,
    len: u64,
}

fn stamp(path: &Path) -> std::io::Result<Option<Stamp>> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(Stamp {
            inode: m.ino(),
            modified_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            len: m.len(),
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

const USERS: &str = "users";
const LOGINS: &str = "logins";
const TOKENS: &str = "tokens";
const FAILURES: &str = "failures";
const USAGE: &str = "usage";
const FLOWS: &str = "flows";

impl FileAccounts {
    pub fn new(root: PathBuf) -> FileAccounts {
        FileAccounts {
            root: Arc::new(root),
            writes: tokio::sync::Mutex::new(()),
            seen: Default::default(),
        }
    }

    fn dir(&self, part: &str) -> PathBuf {
        self.root.join(part)
    }

    async fn write<T: Serialize>(
        &self,
        part: &str,
        file: &str,
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(value)?;
        let dir = self.dir(part);
        let name = format!("{file}.json");
        // Password hashes and login records: for the owner's eyes only.
        blocking(move || write_privately(&dir, &name, &bytes)).await
    }

    async fn remove(&self, part: &str, file: &str) -> Result<bool, StoreError> {
        let path = self.dir(part).join(format!("{file}.json"));
        match std::fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn read<T: DeserializeOwned>(&self, part: &str, file: &str) -> Result<Option<T>, StoreError> {
        read_json(&self.dir(part).join(format!("{file}.json")))
    }

    /// [`Self::read`] for what every request checks (accounts, logins, tokens): read again
    /// only when the file is not the one read last.
    fn read_seen<T>(&self, part: &str, file: &str) -> Result<Option<T>, StoreError>
    where
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let path = self.dir(part).join(format!("{file}.json"));
        // The stamp is taken before the read: content newer than it is read again next time.
        let Some(now) = stamp(&path)? else {
            self.seen_cache().remove(&path);
            return Ok(None);
        };
        if let Some((was, value)) = self.seen_cache().get(&path) {
            if *was == now {
                if let Some(value) = value.downcast_ref::<T>() {
                    return Ok(Some(value.clone()));
                }
            }
        }
        let value: Option<T> = read_json(&path)?;
        match &value {
            Some(v) => {
                let kept: Arc<dyn Any + Send + Sync> = Arc::new(v.clone());
                self.seen_cache().insert(path, (now, kept));
            }
            None => {
                self.seen_cache().remove(&path);
            }
        }
        Ok(value)
    }

    fn seen_cache(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every value in `part`, with its file's stem.
    fn all<T: DeserializeOwned>(&self, part: &str) -> Result<Vec<(String, T)>, StoreError> {
        let entries = match std::fs::read_dir(self.dir(part)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for entry in entries {
            let path = entry?.path();
            let Some(stem) = json_stem(&path) else {
                continue;
            };
            if let Some(value) = read_json(&path)? {
                out.push((stem, value));
            }
        }
        Ok(out)
    }
}

/// The stem of a stored `*.json` file (not of a temporary one being written).
fn json_stem(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".json")?;
    (!stem.starts_with('.')).then(|| stem.to_owned())
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Json {
                at: path.display().to_string(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Runs a write (it syncs to disk) off the async threads.
async fn blocking(
    write: impl FnOnce() -> std::io::Result<()> + Send + 'static,
) -> Result<(), StoreError> {
    tokio::task::spawn_blocking(write)
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))?
        .map_err(StoreError::Io)
}

fn failure_file(key: &FailureKey) -> String {
    super::store::hash_secret(&key.text())
}

fn usage_file(name: &UserName, day: i64) -> String {
    format!("{day}-{name}")
}

#[async_trait]
impl AccountStore for FileAccounts {
    fn kind(&self) -> &'static str {
        "file"
    }

    async fn user(&self, name: &UserName) -> Result<Option<Account>, StoreError> {
        self.read_seen(USERS, name.as_str())
    }

    async fn add_user(&self, account: &Account) -> Result<bool, StoreError> {
        let _one = self.writes.lock().await;
        if self.user(&account.name).await?.is_some() {
            return Ok(false);
        }
        self.write(USERS, account.name.as_str(), account).await?;
        Ok(true)
    }

    async fn put_user(&self, account: &Account) -> Result<(), StoreError> {
        let _one = self.writes.lock().await;
        self.write(USERS, account.name.as_str(), account).await
    }

    async fn remove_user(&self, name: &UserName) -> Result<bool, StoreError> {
        let _one = self.writes.lock().await;
        let removed = self.remove(USERS, name.as_str()).await?;
        for (hash, login) in self.all::<Login>(LOGINS)? {
            if &login.name == name {
                self.remove(LOGINS, &hash).await?;
            }
        }
        for (hash, token) in self.all::<Token>(TOKENS)? {
            if &token.name == name {
                self.remove(TOKENS, &hash).await?;
            }
        }
        Ok(removed)
    }

    async fn users(&self) -> Result<Vec<Account>, StoreError> {
        Ok(self.all(USERS)?.into_iter().map(|(_, a)| a).collect())
    }

    async fn put_login(&self, hash: &str, login: &Login) -> Result<(), StoreError> {
        self.write(LOGINS, hash, login).await
    }

    async fn login(&self, hash: &str, now_ms: i64) -> Result<Option<Login>, StoreError> {
        let login: Option<Login> = self.read_seen(LOGINS, hash)?;
        match login {
            Some(login) if login.expires_ms > now_ms => Ok(Some(login)),
            Some(_) => {
                self.remove(LOGINS, hash).await?;
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn end_login(&self, hash: &str) -> Result<(), StoreError> {
        self.remove(LOGINS, hash).await.map(|_| ())
    }

    async fn put_token(&self, hash: &str, token: &Token) -> Result<(), StoreError> {
        self.write(TOKENS, hash, token).await
    }

    async fn token(&self, hash: &str) -> Result<Option<Token>, StoreError> {
        self.read_seen(TOKENS, hash)
    }

    async fn touch_token(&self, hash: &str, now_ms: i64) -> Result<(), StoreError> {
        let _one = self.writes.lock().await;
        match self.token(hash).await? {
            Some(mut token) => {
                token.last_used_ms = Some(now_ms);
                self.write(TOKENS, hash, &token).await
            }
            None => Ok(()),
        }
    }

    async fn tokens(&self, name: &UserName) -> Result<Vec<Token>, StoreError> {
        let mut tokens: Vec<Token> = self
            .all::<Token>(TOKENS)?
            .into_iter()
            .map(|(_, t)| t)
            .filter(|t| &t.name == name)
            .collect();
        tokens.sort_by_key(|t| t.created_ms);
        Ok(tokens)
    }

    async fn revoke_token(&self, name: &UserName, id: &str) -> Result<bool, StoreError> {
        let _one = self.writes.lock().await;
        for (hash, token) in self.all::<Token>(TOKENS)? {
            if &token.name == name && token.id == id {
                return self.remove(TOKENS, &hash).await;
            }
        }
        Ok(false)
    }

    async fn put_flow(&self, hash: &str, flow: &Flow) -> Result<(), StoreError> {
        self.write(FLOWS, hash, flow).await
    }

    async fn take_flow(&self, hash: &str, now_ms: i64) -> Result<Option<Flow>, StoreError> {
        let _one = self.writes.lock().await;
        let flow: Option<Flow> = self.read(FLOWS, hash)?;
        if flow.is_some() {
            self.remove(FLOWS, hash).await?;
        }
        Ok(flow.filter(|f| f.expires_ms > now_ms))
    }

    async fn fail(&self, key: &FailureKey, now_ms: i64) -> Result<Failures, StoreError> {
        let _one = self.writes.lock().await;
        let file = failure_file(key);
        let counted = Failures::after_failure(self.read(FAILURES, &file)?, now_ms);
        self.write(FAILURES, &file, &counted).await?;
        Ok(counted)
    }

    async fn failures(
        &self,
        key: &FailureKey,
        now_ms: i64,
    ) -> Result<Option<Failures>, StoreError> {
        let counted: Option<Failures> = self.read(FAILURES, &failure_file(key))?;
        Ok(counted.filter(|f| f.is_current(now_ms)))
    }

    async fn sweep(&self, now_ms: i64) -> Result<usize, StoreError> {
        let mut gone = 0;
        for part in [FLOWS, LOGINS, FAILURES] {
            let dir = self.dir(part);
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            for entry in entries {
                let path = entry?.path();
                let Some(file) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".json"))
                    .filter(|n| !n.starts_with('.'))
                    .map(str::to_owned)
                else {
                    continue;
                };
                // A record that cannot be read is left for an operator to see.
                let expired = match part {
                    FLOWS => self
                        .read::<Flow>(part, &file)
                        .ok()
                        .flatten()
                        .is_some_and(|f| f.expires_ms <= now_ms),
                    LOGINS => self
                        .read::<Login>(part, &file)
                        .ok()
                        .flatten()
                        .is_some_and(|l| l.expires_ms <= now_ms),
                    _ => self
                        .read::<Failures>(part, &file)
                        .ok()
                        .flatten()
                        .is_some_and(|f| !f.is_current(now_ms)),
                };
                if expired && self.remove(part, &file).await? {
                    self.seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&path);
                    gone += 1;
                }
            }
        }
        Ok(gone)
    }

    async fn forgive(&self, key: &FailureKey, now_ms: i64) -> Result<(), StoreError> {
        let _one = self.writes.lock().await;
        let file = failure_file(key);
        let counted: Option<Failures> = self.read(FAILURES, &file)?;
        match counted.filter(|f| f.is_current(now_ms) && f.count > 1) {
            Some(f) => {
                let fewer = Failures {
                    count: f.count - 1,
                    ..f
                };
                self.write(FAILURES, &file, &fewer).await
            }
            None => self.remove(FAILURES, &file).await.map(|_| ()),
        }
    }

    async fn clear_failures(&self, key: &FailureKey) -> Result<(), StoreError> {
        self.remove(FAILURES, &failure_file(key)).await.map(|_| ())
    }

    async fn add_usage(&self, name: &UserName, day: i64, tokens: i64) -> Result<u64, StoreError> {
        let _one = self.writes.lock().await;
        let file = usage_file(name, day);
        let total = self
            .read::<u64>(USAGE, &file)?
            .unwrap_or(0)
            .saturating_add_signed(tokens);
        self.write(USAGE, &file, &total).await?;
        Ok(total)
    }

    async fn usage(&self, name: &UserName, day: i64) -> Result<u64, StoreError> {
        Ok(self.read(USAGE, &usage_file(name, day))?.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_accounts_keep_every_rule() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileAccounts::new(dir.path().join("accounts"));
        super::super::store::contract::run(&store).await;
        // What a second process reading the same folder sees.
        let other = FileAccounts::new(dir.path().join("accounts"));
        let ada = UserName::parse("ada").unwrap();
        assert!(other.user(&ada).await.unwrap().is_some());
        assert_eq!(other.usage(&ada, 7).await.unwrap(), 30);
    }

    #[tokio::test]
    async fn expired_flows_logins_and_failures_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileAccounts::new(dir.path().join("accounts"));
        let login = |expires_ms| Login {
            name: UserName::parse("ada").unwrap(),
            account_id: "a".into(),
            expires_ms,
            started_ms: 0,
        };
        store.put_login("old", &login(1_000)).await.unwrap();
        store.put_login("new", &login(10_000_000)).await.unwrap();
        let flow = |expires_ms| Flow {
            nonce: "n".into(),
            pkce_verifier: "v".into(),
            next: "/".into(),
            expires_ms,
        };
        store.put_flow("old", &flow(1_000)).await.unwrap();
        store.put_flow("new", &flow(10_000_000)).await.unwrap();
        let key = FailureKey::Address("10.0.0.1".parse().unwrap());
        store.fail(&key, 0).await.unwrap();
        let later = parlor_domain::account::LOCKOUT_WINDOW_MS + 5_000;
        assert_eq!(store.sweep(later).await.unwrap(), 3);
        assert!(store.login("new", later).await.unwrap().is_some());
        assert!(store.take_flow("new", later).await.unwrap().is_some());
        assert_eq!(store.sweep(later).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn only_the_owner_may_read_what_accounts_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = FileAccounts::new(dir.path().join("accounts"));
        store
            .add_user(&super::super::store::contract::account("ada"))
            .await
            .unwrap();
        let mut checked = 0;
        let mut folders = vec![dir.path().join("accounts")];
        while let Some(folder) = folders.pop() {
            let mode = std::fs::metadata(&folder).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", folder.display());
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                let mode = std::fs::metadata(&path).unwrap().permissions().mode();
                if path.is_dir() {
                    folders.push(path);
                } else {
                    assert_eq!(mode & 0o777, 0o600, "{} is {mode:o}", path.display());
                    checked += 1;
                }
            }
        }
        assert!(checked >= 1);
    }

    #[tokio::test]
    async fn a_secret_is_never_a_file_name_or_in_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileAccounts::new(dir.path().to_path_buf());
        let secret = "the-login-id-itself";
        let login = Login {
            name: UserName::parse("ada").unwrap(),
            account_id: "x".into(),
            expires_ms: i64::MAX,
            started_ms: 0,
        };
        let hash = super::super::store::hash_secret(secret);
        store.put_login(&hash, &login).await.unwrap();
        for entry in walk(dir.path()) {
            assert!(!entry.to_string_lossy().contains(secret));
            let text = std::fs::read_to_string(&entry).unwrap();
            assert!(!text.contains(secret));
        }
    }

    #[tokio::test]
    async fn what_another_process_changes_is_seen_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let one = FileAccounts::new(dir.path().to_path_buf());
        let two = FileAccounts::new(dir.path().to_path_buf());
        let login = Login {
            name: UserName::parse("ada").unwrap(),
            account_id: "a".into(),
            expires_ms: i64::MAX,
            started_ms: 0,
        };
        one.put_login("h", &login).await.unwrap();
        // Read (and kept) by the other process, then ended by the first.
        assert_eq!(two.login("h", 0).await.unwrap(), Some(login.clone()));
        assert_eq!(two.login("h", 0).await.unwrap(), Some(login.clone()));
        one.end_login("h").await.unwrap();
        assert_eq!(two.login("h", 0).await.unwrap(), None);
        // A replaced record is read again.
        one.put_login("h", &login).await.unwrap();
        let mut later = login.clone();
        later.account_id = "b".into();
        two.login("h", 0).await.unwrap();
        one.put_login("h", &later).await.unwrap();
        assert_eq!(two.login("h", 0).await.unwrap(), Some(later));
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => files.extend(walk(&path)),
                false => files.push(path),
            }
        }
        files
    }
}
