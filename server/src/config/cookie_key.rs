//! The key that signs browser session cookies (see `crate::ops::browser`), and where the
//! processes of one deployment find the same one.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;

/// Where the key is kept when the operator sets none.
#[derive(Clone)]
pub enum KeyHome<'a> {
    /// In the Redis of the `default` history, under `<prefix><name>` (`cookie-key`).
    Redis(redis::aio::ConnectionManager, &'a str),
    /// In a file of the data folder (`cookie.key`).
    File(&'a std::path::Path),
    /// Nowhere: a new key for this process (the `default` history is in memory).
    Process,
}

/// The secret that signs browser session cookies. Processes that share a history share it:
/// the operator's `PARLOR_COOKIE_KEY`, else kept in Redis when the `default` history is
/// there (`<prefix>cookie-key`), else in the data folder (`cookie.key`), made once by
/// whichever process comes first.
#[derive(Clone)]
pub struct CookieKey(Arc<[u8; 32]>);

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

/// How many hex digits of the signature a cookie carries (128 bits).
const SIGNATURE_HEX: usize = 32;

impl CookieKey {
    /// What a key written by the operator must look like.
    pub const FORMAT: &'static str =
        "must be 64 hex digits (32 random bytes, e.g. `openssl rand -hex 32`)";

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        CookieKey(Arc::new(bytes))
    }

    fn random() -> [u8; 32] {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key
    }

    fn mac(&self, id: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0[..])
            .expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac
    }

    /// The cookie value of session `id`: the id and its signature.
    pub fn sign(&self, id: &str) -> String {
        let tag = self.mac(id).finalize().into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        format!("{id}.{}", &hex[..SIGNATURE_HEX])
    }

    /// The session id of a cookie value this key signed (compared in constant time).
    pub fn verify<'a>(&self, value: &'a str) -> Option<&'a str> {
        let (id, signature) = value.split_once('.')?;
        if !is_well_formed(id) || signature.len() != SIGNATURE_HEX {
            return None;
        }
        let bytes: Vec<u8> = (0..SIGNATURE_HEX / 2)
            .map(|i| u8::from_str_radix(signature.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        self.mac(id).verify_truncated_left(&bytes).ok()?;
        Some(id)
    }

    /// The key the processes of this deployment share (see [`CookieKey`]): the operator's,
    /// else the one kept where the `default` history is.
    pub async fn load(
        configured: Option<&CookieKey>,
        kept: KeyHome<'_>,
    ) -> anyhow::Result<CookieKey> {
        Self::load_named(configured, kept, "cookie-key").await
    }

    /// A key kept the way the cookie key is, under `name` (`cookie-key` in Redis is
    /// `cookie.key` in the data folder): the operator's when set, else made once and shared.
    pub async fn load_named(
        configured: Option<&CookieKey>,
        kept: KeyHome<'_>,
        name: &str,
    ) -> anyhow::Result<CookieKey> {
        if let Some(key) = configured {
            return Ok(key.clone());
        }
        match kept {
            KeyHome::Redis(connection, prefix) => Self::in_redis(connection, prefix, name).await,
            KeyHome::File(dir) => Self::in_file(&dir.join(name.replace('-', "."))),
            // Its conversations end with the process: so may its sessions.
            KeyHome::Process => Ok(CookieKey::from_bytes(Self::random())),
        }
    }

    async fn in_redis(
        mut connection: redis::aio::ConnectionManager,
        prefix: &str,
        name: &str,
    ) -> anyhow::Result<CookieKey> {
        let key = format!("{prefix}{name}");
        let fresh = hex(&Self::random());
        let _: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&fresh)
            .arg("NX")
            .query_async(&mut connection)
            .await?;
        let stored: String = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut connection)
            .await?;
        CookieKey::parse(&stored)
            .ok_or_else(|| anyhow::anyhow!("Redis key {key} does not hold a key (64 hex digits)"))
    }

    fn in_file(path: &std::path::Path) -> anyhow::Result<CookieKey> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if let Ok(text) = std::fs::read_to_string(path) {
            return CookieKey::parse(&text).ok_or_else(|| {
                anyhow::anyhow!("{} does not hold a key (64 hex digits)", path.display())
            });
        }
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        std::fs::create_dir_all(dir)?;
        // Written whole under another name, then linked into place: a process starting at
        // the same moment either links first or reads the key this one linked.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("key");
        let staged = dir.join(format!(".{name}.tmp-{}", uuid::Uuid::new_v4().simple()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            // Only the owner may read it: it signs every browser's session (or seals secrets).
            .mode(0o600)
            .open(&staged)?;
        file.write_all(hex(&Self::random()).as_bytes())?;
        file.sync_all()?;
        let linked = std::fs::hard_link(&staged, path);
        let _ = std::fs::remove_file(&staged);
        match linked {
            // The link is durable once its folder is.
            Ok(()) => std::fs::File::open(dir)?.sync_all()?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        let text = std::fs::read_to_string(path)?;
        CookieKey::parse(&text)
            .ok_or_else(|| anyhow::anyhow!("{} does not hold a key", path.display()))
    }

    /// The key's bytes (for a key used for something else than signing cookies).
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A key written as 64 hex digits.
    pub fn parse(text: &str) -> Option<CookieKey> {
        let text = text.trim();
        if text.len() != 64 {
            return None;
        }
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(CookieKey::from_bytes(key))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_well_formed(value: &str) -> bool {
    value.len() == 32 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_this_key_signed_are_sessions() {
        let key = CookieKey::from_bytes([7; 32]);
        let other = CookieKey::from_bytes([8; 32]);
        let id = "0123456789abcdef0123456789abcdef";
        let signed = key.sign(id);
        assert_eq!(key.verify(&signed), Some(id));
        assert_eq!(other.verify(&signed), None, "another key's signature");
        let (_, tag) = signed.split_once('.').unwrap();
        for forged in [
            id.to_owned(),
            format!("{id}."),
            format!("{id}.{}", "0".repeat(32)),
            format!("{}.{tag}", "f".repeat(32)),
            format!("{id}.{}", &tag[..31]),
            format!("{id}.{tag}0"),
            format!("{}.{tag}", id.to_uppercase()),
            format!("{id}.{}", tag.replace(|c: char| c.is_ascii_digit(), "z")),
            String::new(),
            ".".to_owned(),
        ] {
            assert_eq!(key.verify(&forged), None, "{forged:?}");
        }
    }

    #[test]
    fn processes_on_one_data_folder_share_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cookie.key");
        // Processes starting together: every one ends up with the key one of them made.
        let keys: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| CookieKey::in_file(&path).unwrap().sign("a")))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only the owner reads it");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        std::fs::write(&path, "not a key").unwrap();
        let error = CookieKey::in_file(&path).unwrap_err().to_string();
        assert!(error.contains("cookie.key"), "{error}");
    }

    #[tokio::test]
    async fn processes_on_one_redis_share_one_key() {
        let redis = fake_llm::redis_server::RedisServer::start().unwrap();
        let connect = || async {
            let client = redis::Client::open(redis.url()).unwrap();
            redis::aio::ConnectionManager::new(client).await.unwrap()
        };
        let first = CookieKey::in_redis(connect().await, "p:", "cookie-key")
            .await
            .unwrap();
        let second = CookieKey::in_redis(connect().await, "p:", "cookie-key")
            .await
            .unwrap();
        assert_eq!(first.sign("a"), second.sign("a"));
        let elsewhere = CookieKey::in_redis(connect().await, "q:", "cookie-key")
            .await
            .unwrap();
        assert_ne!(
            first.sign("a"),
            elsewhere.sign("a"),
            "prefixes are separate"
        );
    }
}
