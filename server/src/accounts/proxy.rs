//! Accounts named by a trusted proxy's header (`PARLOR_AUTH=proxy`): one identity, one
//! account. An identity that is a user name exactly as it stands is that account; any other
//! (`Ada`, `Ada!`, `ada smith`) gets a name of its own, made from it and a digest of the
//! identity as sent, and keeps the identity as its display name. Nothing is folded: `Ada`,
//! `ada` and `Ada!` are three people until the operator says otherwise.

use super::{password, Account, Accounts, User};
use crate::store::StoreError;
use parlor_domain::account::{UserName, NAME_MAX};

/// The longest identity taken from the header, in bytes; a longer one is refused.
pub const IDENTITY_MAX_BYTES: usize = 256;
/// Hex digits of the identity's digest in a made name (48 bits).
const DIGEST_HEX: usize = 12;

/// The account name of `identity`, and the display name it is kept under when the two
/// differ. `None` when the identity is refused: empty, longer than
/// [`IDENTITY_MAX_BYTES`], with a control character or with spaces around it.
pub fn name_of(identity: &str) -> Option<(UserName, Option<String>)> {
    let usable = !identity.is_empty()
        && identity.len() <= IDENTITY_MAX_BYTES
        && identity.trim() == identity
        && !identity.chars().any(char::is_control);
    if !usable {
        return None;
    }
    // A name shaped as a made one is never taken as sent: it could be another identity's
    // (`ada-99a563ab2f6e` is `Ada`'s), sent first to take its account or its admin rights.
    let made_shape = identity.rsplit_once('-').is_some_and(|(_, tail)| {
        tail.len() == DIGEST_HEX && tail.bytes().all(|b| b.is_ascii_hexdigit())
    });
    if let Some(name) = UserName::from_identity(identity).filter(|_| !made_shape) {
        return Some((name, None));
    }
    let digest = super::store::hash_secret(identity);
    let base = UserName::from_claim(identity);
    let base = base.as_ref().map_or("user", UserName::as_str);
    let cut: String = base.chars().take(NAME_MAX - DIGEST_HEX - 1).collect();
    let made = format!("{}-{}", cut.trim_end_matches('-'), &digest[..DIGEST_HEX]);
    let name = UserName::parse(&made).ok()?;
    Some((name, Some(identity.to_owned())))
}

impl Accounts {
    /// The account a trusted proxy names (see [`name_of`]), made at its first visit. An
    /// account found under the name that belongs to another identity (a digest's clash, or
    /// a local account of that name) is refused, never shared.
    pub async fn of_proxy(&self, identity: &str) -> Result<Option<User>, StoreError> {
        let Some((name, display)) = name_of(identity) else {
            return Ok(None);
        };
        let is_this = |account: &Account| account.display == display;
        if let Some(account) = self.store.user(&name).await? {
            return Ok(is_this(&account).then(|| self.user_of(&account)));
        }
        let account = Account {
            name: name.clone(),
            id: password::random_hex(),
            admin: false,
            created_ms: crate::store::now_ms(),
            password: None,
            subject: None,
            logins_after_ms: None,
            display: display.clone(),
        };
        self.store.add_user(&account).await?;
        // Another process may have made it first: theirs is the one.
        let account = self.store.user(&name).await?;
        Ok(account.filter(|a| is_this(a)).map(|a| self.user_of(&a)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(identity: &str) -> Option<(String, Option<String>)> {
        name_of(identity).map(|(n, d)| (n.to_string(), d))
    }

    #[test]
    fn an_identity_that_is_a_name_is_that_account() {
        assert_eq!(name("ada"), Some(("ada".into(), None)));
        assert_eq!(
            name("ada@example.com"),
            Some(("ada@example.com".into(), None))
        );
    }

    #[test]
    fn other_identities_get_names_of_their_own() {
        let identities = ["Ada", "ADA", "Ada!", "a da", ".ada", "ädä", "@@@"];
        let mut names: Vec<String> = Vec::new();
        for identity in identities {
            let (made, display) = name(identity).unwrap();
            assert_eq!(display.as_deref(), Some(identity));
            assert_ne!(made, "ada", "{identity}");
            assert!(!names.contains(&made), "{identity} took {made}");
            // The same identity is the same account every time.
            assert_eq!(name(identity).unwrap().0, made);
            names.push(made);
        }
        // As the README shows it.
        assert_eq!(names[0], "ada-99a563ab2f6e");
        assert!(names[6].starts_with("user-"), "{}", names[6]);
        let long = name(&"Ä".repeat(100)).unwrap().0;
        assert!(long.chars().count() <= NAME_MAX, "{long}");
    }

    #[test]
    fn a_name_shaped_as_a_made_one_never_takes_it() {
        let (ada, _) = name("Ada").unwrap();
        assert_eq!(ada, "ada-99a563ab2f6e");
        let (sent_first, display) = name("ada-99a563ab2f6e").unwrap();
        assert_ne!(sent_first, ada);
        assert_eq!(display.as_deref(), Some("ada-99a563ab2f6e"));
        // A name that only ends in a short number is taken as sent.
        assert_eq!(name("ada-2").unwrap(), ("ada-2".into(), None));
    }

    #[test]
    fn what_cannot_be_one_identity_is_refused() {
        let long = "a".repeat(IDENTITY_MAX_BYTES + 1);
        for refused in [
            "",
            " ada",
            "ada ",
            "ada\t",
            "a\u{7f}da",
            "a\nda",
            long.as_str(),
        ] {
            assert_eq!(name(refused), None, "{refused:?}");
        }
        assert!(name(&"A".repeat(IDENTITY_MAX_BYTES)).is_some());
    }
}
