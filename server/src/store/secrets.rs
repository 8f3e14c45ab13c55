//! What each user sets for the `user_secrets` of per-user tool servers (spec `tools.md`,
//! "Added later"): write-only (the page and the API say which names are set, never a value),
//! sealed with XChaCha20-Poly1305 under a key kept like the cookie key
//! (`PARLOR_SECRETS_KEY`, else `<prefix>secrets-key` in the `default` history's Redis, else
//! `secrets.key` in the data folder), each value bound to the user, server and name it was
//! set for (a sealed value copied to another user or name does not open).

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::XChaCha20Poly1305;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;

/// The longest value a user may set, in bytes.
pub const MAX_VALUE_BYTES: usize = 4096;

/// Where sealed values are kept: beside the `default` history.
pub enum Home {
    /// One hash per user, `<prefix>tool-secrets:<user>`, fields `<server>/<NAME>`.
    Redis(redis::aio::ConnectionManager, String),
    /// One file per user, `tool-secrets/<user>.json` in the data folder (0600 in 0700).
    Files(PathBuf),
    /// This process's memory (the `default` history is in memory: so are these).
    Memory(Mutex<HashMap<String, Sealed>>),
}

/// A user's sealed values by `<server>/<NAME>`, each hex of nonce and ciphertext.
type Sealed = BTreeMap<String, String>;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{0}")]
    Input(String),
    #[error("the users' secrets are unavailable: {0}")]
    Unavailable(String),
}

/// The users' secrets (see the module's documentation).
pub struct Secrets {
    cipher: XChaCha20Poly1305,
    home: Home,
    /// One change at a time in this process (a file is read, changed and written whole).
    writing: tokio::sync::Mutex<()>,
}

/// Whether `user` is a user key as stores record owners (64 lowercase hex digits): the
/// only form that names a file or Redis key.
fn is_user(user: &str) -> bool {
    user.len() == 64
        && user
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn field(server: &str, name: &str) -> String {
    format!("{server}/{name}")
}

#[async_trait::async_trait]
impl crate::tools::UserValues for Secrets {
    async fn values(&self, user: &str, server: &str) -> Result<BTreeMap<String, String>, String> {
        Secrets::values(self, user, server)
            .await
            .map_err(|e| e.to_string())
    }
}

fn unavailable(e: impl std::fmt::Display) -> SecretError {
    SecretError::Unavailable(e.to_string())
}

impl Secrets {
    pub fn new(key: &[u8; 32], home: Home) -> Secrets {
        Secrets {
            cipher: XChaCha20Poly1305::new(key.into()),
            home,
            writing: Default::default(),
        }
    }

    /// Kept in this process only (tests, and a `default` history in memory).
    pub fn in_memory(key: &[u8; 32]) -> Secrets {
        Secrets::new(key, Home::Memory(Default::default()))
    }

    /// What sealing binds a value to: who, which server, which name.
    fn bound(user: &str, field: &str) -> String {
        format!("parlor tool secret\n{user}\n{field}")
    }

    fn seal(&self, user: &str, field: &str, value: &str) -> Result<String, SecretError> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = Self::bound(user, field);
        let payload = Payload {
            msg: value.as_bytes(),
            aad: aad.as_bytes(),
        };
        let sealed = self.cipher.encrypt(&nonce, payload).map_err(unavailable)?;
        Ok(hex(nonce.as_slice()) + &hex(&sealed))
    }

    fn open(&self, user: &str, field: &str, sealed: &str) -> Option<String> {
        let bytes = unhex(sealed)?;
        if bytes.len() < 24 {
            return None;
        }
        let (nonce, text) = bytes.split_at(24);
        let aad = Self::bound(user, field);
        let payload = Payload {
            msg: text,
            aad: aad.as_bytes(),
        };
        let opened = self.cipher.decrypt(nonce.into(), payload).ok()?;
        String::from_utf8(opened).ok()
    }

    async fn read(&self, user: &str) -> Result<Sealed, SecretError> {
        if !is_user(user) {
            return Err(SecretError::Input("not a user".into()));
        }
        match &self.home {
            Home::Memory(map) => Ok(map
                .lock()
                .map_err(unavailable)?
                .get(user)
                .cloned()
                .unwrap_or_default()),
            Home::Files(dir) => {
                let path = dir.join(format!("{user}.json"));
                match tokio::fs::read(&path).await {
                    Ok(bytes) => serde_json::from_slice(&bytes).map_err(unavailable),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Sealed::new()),
                    Err(e) => Err(unavailable(e)),
                }
            }
            Home::Redis(connection, prefix) => {
                let mut connection = connection.clone();
                redis::cmd("HGETALL")
                    .arg(format!("{prefix}tool-secrets:{user}"))
                    .query_async(&mut connection)
                    .await
                    .map_err(unavailable)
            }
        }
    }

    /// The names `user` has set, as `(server, NAME)`.
    pub async fn names(&self, user: &str) -> Result<Vec<(String, String)>, SecretError> {
        let sealed = self.read(user).await?;
        Ok(sealed
            .keys()
            .filter_map(|k| k.split_once('/'))
            .map(|(s, n)| (s.to_owned(), n.to_owned()))
            .collect())
    }

    /// The values `user` set for `server`, opened (a value that does not open, sealed under
    /// another key or for someone else, is left out: as if never set).
    pub async fn values(
        &self,
        user: &str,
        server: &str,
    ) -> Result<BTreeMap<String, String>, SecretError> {
        let sealed = self.read(user).await?;
        let prefix = format!("{server}/");
        Ok(sealed
            .iter()
            .filter_map(|(k, v)| {
                let name = k.strip_prefix(&prefix)?;
                let value = self.open(user, k, v);
                if value.is_none() {
                    tracing::warn!("a tool secret of {server:?} does not open (another key?)");
                }
                Some((name.to_owned(), value?))
            })
            .collect())
    }

    /// Sets (or, with `None`, forgets) `user`'s value of `name` for `server`.
    pub async fn set(
        &self,
        user: &str,
        server: &str,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), SecretError> {
        if let Some(value) = value {
            check_value(value)?;
        }
        let field = field(server, name);
        let sealed = value.map(|v| self.seal(user, &field, v)).transpose()?;
        let _writing = self.writing.lock().await;
        match &self.home {
            Home::Redis(connection, prefix) => {
                let mut connection = connection.clone();
                let key = format!("{prefix}tool-secrets:{user}");
                let mut command = match &sealed {
                    Some(_) => redis::cmd("HSET"),
                    None => redis::cmd("HDEL"),
                };
                command.arg(&key).arg(&field);
                if let Some(sealed) = &sealed {
                    command.arg(sealed);
                }
                command
                    .query_async::<()>(&mut connection)
                    .await
                    .map_err(unavailable)
            }
            _ => {
                let mut all = self.read(user).await?;
                match sealed {
                    Some(sealed) => all.insert(field, sealed),
                    None => all.remove(&field),
                };
                self.write(user, all)
            }
        }
    }

    /// Forgets every value of `user` (an account removed).
    pub async fn forget(&self, user: &str) -> Result<(), SecretError> {
        if !is_user(user) {
            return Ok(());
        }
        let _writing = self.writing.lock().await;
        match &self.home {
            Home::Redis(connection, prefix) => {
                let mut connection = connection.clone();
                redis::cmd("DEL")
                    .arg(format!("{prefix}tool-secrets:{user}"))
                    .query_async::<()>(&mut connection)
                    .await
                    .map_err(unavailable)
            }
            Home::Files(dir) => match std::fs::remove_file(dir.join(format!("{user}.json"))) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(unavailable(e)),
                _ => Ok(()),
            },
            Home::Memory(_) => self.write(user, Sealed::new()),
        }
    }

    fn write(&self, user: &str, all: Sealed) -> Result<(), SecretError> {
        match &self.home {
            Home::Memory(map) => {
                map.lock()
                    .map_err(unavailable)?
                    .insert(user.to_owned(), all);
                Ok(())
            }
            Home::Files(dir) => {
                let bytes = serde_json::to_vec(&all).map_err(unavailable)?;
                crate::store::atomic::write_privately(dir, &format!("{user}.json"), &bytes)
                    .map_err(unavailable)
            }
            Home::Redis(..) => Err(unavailable("written with HSET")),
        }
    }
}

/// A value a user may set: 1 to [`MAX_VALUE_BYTES`] bytes, no control characters (it
/// becomes an environment variable or a header).
pub fn check_value(value: &str) -> Result<(), SecretError> {
    if value.is_empty() || value.len() > MAX_VALUE_BYTES {
        return Err(SecretError::Input(format!(
            "a value must be 1 to {MAX_VALUE_BYTES} bytes"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(SecretError::Input(
            "a value must not hold control characters (line breaks, tabs)".into(),
        ));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(c: char) -> String {
        c.to_string().repeat(64)
    }

    async fn round_trip(secrets: &Secrets) {
        let (a, b) = (user('a'), user('b'));
        secrets.set(&a, "gh", "TOKEN", Some("alpha")).await.unwrap();
        secrets.set(&b, "gh", "TOKEN", Some("beta")).await.unwrap();
        assert_eq!(secrets.values(&a, "gh").await.unwrap()["TOKEN"], "alpha");
        assert_eq!(secrets.values(&b, "gh").await.unwrap()["TOKEN"], "beta");
        assert!(secrets.values(&a, "other").await.unwrap().is_empty());
        assert_eq!(
            secrets.names(&a).await.unwrap(),
            vec![("gh".to_owned(), "TOKEN".to_owned())]
        );
        secrets.set(&a, "gh", "TOKEN", None).await.unwrap();
        assert!(secrets.values(&a, "gh").await.unwrap().is_empty());
        secrets.forget(&b).await.unwrap();
        assert!(secrets.names(&b).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn values_are_kept_per_user_and_server_in_files() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = Secrets::new(&[1; 32], Home::Files(dir.path().join("s")));
        round_trip(&secrets).await;
        // What is on disk is sealed, and only the owner reads it.
        secrets
            .set(&user('c'), "gh", "TOKEN", Some("plain-words"))
            .await
            .unwrap();
        let path = dir.path().join("s").join(format!("{}.json", user('c')));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("plain-words"), "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Another key opens nothing.
        let other = Secrets::new(&[2; 32], Home::Files(dir.path().join("s")));
        assert!(other.values(&user('c'), "gh").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn values_are_kept_per_user_and_server_in_redis() {
        let redis = fake_llm::redis_server::RedisServer::start().unwrap();
        let client = redis::Client::open(redis.url()).unwrap();
        let connection = redis::aio::ConnectionManager::new(client).await.unwrap();
        let secrets = Secrets::new(&[1; 32], Home::Redis(connection, "p:".into()));
        round_trip(&secrets).await;
    }

    #[tokio::test]
    async fn a_sealed_value_moved_to_another_user_or_name_does_not_open() {
        let secrets = Secrets::in_memory(&[3; 32]);
        let (a, b) = (user('a'), user('b'));
        secrets.set(&a, "gh", "TOKEN", Some("alpha")).await.unwrap();
        let sealed = secrets.read(&a).await.unwrap()["gh/TOKEN"].clone();
        let moved = |user: &str, field: &str| {
            secrets.write(user, Sealed::from([(field.to_owned(), sealed.clone())]))
        };
        moved(&b, "gh/TOKEN").unwrap();
        assert!(secrets.values(&b, "gh").await.unwrap().is_empty());
        moved(&a, "gh/OTHER").unwrap();
        assert!(secrets.values(&a, "gh").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn bad_users_and_values_are_refused() {
        let secrets = Secrets::in_memory(&[3; 32]);
        for bad_user in ["", "../x", &"A".repeat(64), &"a".repeat(63)] {
            assert!(
                secrets.values(bad_user, "gh").await.is_err(),
                "{bad_user:?}"
            );
        }
        let a = user('a');
        for bad in ["", "line\nbreak", "tab\t", &"x".repeat(MAX_VALUE_BYTES + 1)] {
            let refused = secrets.set(&a, "gh", "T", Some(bad)).await;
            assert!(matches!(refused, Err(SecretError::Input(_))), "{bad:?}");
        }
    }
}
