//! Password hashing: Argon2id with OWASP's parameters (19 MiB, 2 passes, 1 lane), stored as
//! a PHC string; and the random secrets of logins and tokens.

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use std::sync::OnceLock;

/// OWASP's Argon2id parameters: memory in KiB, passes, lanes.
pub const MEMORY_KIB: u32 = 19 * 1024;
pub const PASSES: u32 = 2;
pub const LANES: u32 = 1;

fn argon2() -> Argon2<'static> {
    let params =
        Params::new(MEMORY_KIB, PASSES, LANES, None).expect("OWASP's parameters are valid");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// The PHC string of `password` with a new random salt.
pub fn hash(password: &str) -> String {
    let salt = SaltString::generate(&mut OsRng);
    argon2()
        .hash_password(password.as_bytes(), &salt)
        .expect("hashing with valid parameters does not fail")
        .to_string()
}

/// Whether `password` is the one `phc` was made of. A stored string that does not read as
/// a hash matches nothing.
pub fn verify(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => argon2()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// A hash no password is known to match: checked for names that have no password, so a
/// wrong name takes as long to refuse as a wrong password.
pub fn dummy() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash(&random_hex()))
}

/// 256 random bits from the operating system, in hex.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hashes or checks off the async threads (each takes tens of milliseconds of CPU).
pub async fn verify_blocking(password: String, phc: Option<String>) -> bool {
    tokio::task::spawn_blocking(move || {
        let known = phc.is_some();
        let phc = phc.unwrap_or_else(|| dummy().to_owned());
        verify(&password, &phc) && known
    })
    .await
    .unwrap_or(false)
}

pub async fn hash_blocking(password: String) -> String {
    tokio::task::spawn_blocking(move || hash(&password))
        .await
        .expect("hashing does not panic")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_argon2id_with_owasp_parameters_and_checks_its_password_only() {
        let phc = hash("correct horse battery");
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(verify("correct horse battery", &phc));
        assert!(!verify("correct horse batterY", &phc));
        assert!(!verify("anything", "not a hash"));
        assert_ne!(hash("same"), hash("same"), "salted");
    }

    #[tokio::test]
    async fn no_password_matches_a_name_without_one() {
        assert!(!verify_blocking("whatever".into(), None).await);
        assert_eq!(random_hex().len(), 64);
        assert_ne!(random_hex(), random_hex());
    }
}
