//! Accounts, the rules that need no I/O: what a user name and a password may be, when failed
//! logins lock a name or an address out, and which day a daily quota counts.

use serde::{Deserialize, Serialize};

/// The longest user name, in characters.
pub const NAME_MAX: usize = 64;
/// The shortest password, in characters.
pub const PASSWORD_MIN: usize = 10;
/// The longest password, in bytes: a longer one is refused before anything is hashed.
pub const PASSWORD_MAX_BYTES: usize = 1024;
/// Failed logins for one name (or from one address) within [`LOCKOUT_WINDOW_MS`] that lock it.
pub const LOCKOUT_FAILURES: u32 = 5;
/// The window failed logins are counted in, from the first of them.
pub const LOCKOUT_WINDOW_MS: i64 = 15 * 60 * 1000;
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// An account's name: 1 to 64 of `a-z 0-9 . _ - @ +`, starting with a letter or a digit,
/// case-folded
/// (`Ada` and `ada` are one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UserName(String);

/// Why a user name is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a user name must not be empty")]
    Empty,
    #[error("a user name has at most {NAME_MAX} characters")]
    TooLong,
    #[error("a user name holds only a-z, 0-9, '.', '_', '-', '@' and '+' (not {0:?})")]
    Character(char),
    #[error("a user name starts with a letter or a digit")]
    Start,
}

impl UserName {
    /// Reads a name as typed: case-folded, surrounding spaces ignored.
    pub fn parse(raw: &str) -> Result<UserName, NameError> {
        let folded = raw.trim().to_lowercase();
        if folded.is_empty() {
            return Err(NameError::Empty);
        }
        if folded.chars().count() > NAME_MAX {
            return Err(NameError::TooLong);
        }
        if let Some(c) = folded.chars().find(|c| !allowed(*c)) {
            return Err(NameError::Character(c));
        }
        // `.x` is hidden in a listing of files (`.` and `..` are paths), `-x` reads as an
        // option on a command line, `@x` as a mention.
        if !folded.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(NameError::Start);
        }
        Ok(UserName(folded))
    }

    /// An identity (a trusted proxy's header) that is an account's name exactly as it
    /// stands: lower case, no other character, not too long. `None` for anything else
    /// (`Ada`, `Ada!`, ` ada`): the caller gives those a name of their own, so two different
    /// identities are never one account.
    pub fn from_identity(raw: &str) -> Option<UserName> {
        UserName::parse(raw).ok().filter(|name| name.0 == raw)
    }

    /// A name made of what an identity provider or a proxy says (an e-mail address, a
    /// display name): folded, each other character made `-`, cut to [`NAME_MAX`]. `None` when
    /// nothing usable is left.
    pub fn from_claim(raw: &str) -> Option<UserName> {
        let made: String = raw
            .trim()
            .to_lowercase()
            .chars()
            .map(|c| if allowed(c) { c } else { '-' })
            .take(NAME_MAX)
            .collect();
        let made = made.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
        let made = made.trim_end_matches('-');
        UserName::parse(made).ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The longest display name kept, in characters.
pub const DISPLAY_MAX: usize = 128;

/// A name to show someone under, from what an identity provider says: control characters
/// dropped, surrounding spaces trimmed, cut to [`DISPLAY_MAX`] characters.
pub fn display_name(raw: &str) -> String {
    let kept: String = raw.chars().filter(|c| !c.is_control()).collect();
    kept.trim().chars().take(DISPLAY_MAX).collect()
}

fn allowed(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-' | '@' | '+')
}

impl TryFrom<String> for UserName {
    type Error = NameError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        UserName::parse(&value)
    }
}

impl From<UserName> for String {
    fn from(name: UserName) -> String {
        name.0
    }
}

impl std::fmt::Display for UserName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a new password is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("a password has at least {PASSWORD_MIN} characters")]
    TooShort,
    #[error("a password has at most {PASSWORD_MAX_BYTES} bytes")]
    TooLong,
}

/// Whether `password` may be set as one (long enough, not so long that hashing it costs).
pub fn check_new_password(password: &str) -> Result<(), PasswordError> {
    if password.len() > PASSWORD_MAX_BYTES {
        return Err(PasswordError::TooLong);
    }
    match password.chars().count() < PASSWORD_MIN {
        true => Err(PasswordError::TooShort),
        false => Ok(()),
    }
}

/// Failed logins counted for one name or one address: a fixed window from the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failures {
    pub count: u32,
    pub since_ms: i64,
}

impl Failures {
    /// The count after one more failure at `now_ms` (a window that is over starts again).
    pub fn after_failure(previous: Option<Failures>, now_ms: i64) -> Failures {
        match previous.filter(|f| f.is_current(now_ms)) {
            Some(f) => Failures {
                count: f.count.saturating_add(1),
                ..f
            },
            None => Failures {
                count: 1,
                since_ms: now_ms,
            },
        }
    }

    /// Whether the window these failures count in is still open at `now_ms`.
    pub fn is_current(&self, now_ms: i64) -> bool {
        now_ms < self.since_ms.saturating_add(LOCKOUT_WINDOW_MS)
    }

    /// Until when logins are refused, when they are at `now_ms`.
    pub fn locked_until(&self, now_ms: i64) -> Option<i64> {
        (self.is_current(now_ms) && self.count >= LOCKOUT_FAILURES)
            .then(|| self.since_ms + LOCKOUT_WINDOW_MS)
    }
}

/// Whole seconds from `now_ms` to `until_ms`, at least 1 (a `Retry-After`).
pub fn seconds_until(now_ms: i64, until_ms: i64) -> u64 {
    let ms = until_ms.saturating_sub(now_ms).max(1);
    (ms as u64).div_ceil(1000)
}

/// The day (UTC, counted from the Unix epoch) a daily quota at `now_ms` counts in.
pub fn quota_day(now_ms: i64) -> i64 {
    now_ms.div_euclid(DAY_MS)
}

/// When the quota counted at `now_ms` starts again: the next UTC midnight.
pub fn quota_resets_ms(now_ms: i64) -> i64 {
    (quota_day(now_ms) + 1) * DAY_MS
}

/// Whether an account that used `used` tokens today may start another turn under a daily
/// quota of `per_day` tokens (0: no quota).
pub fn within_quota(used: u64, per_day: u64) -> bool {
    per_day == 0 || used < per_day
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_folded_and_checked() {
        assert_eq!(UserName::parse(" Ada.L ").unwrap().as_str(), "ada.l");
        assert_eq!(UserName::parse(""), Err(NameError::Empty));
        assert_eq!(UserName::parse("   "), Err(NameError::Empty));
        assert_eq!(UserName::parse("a b"), Err(NameError::Character(' ')));
        assert_eq!(UserName::parse("ada/.."), Err(NameError::Character('/')));
        assert!(UserName::parse(&"a".repeat(64)).is_ok());
        assert_eq!(UserName::parse(&"a".repeat(65)), Err(NameError::TooLong));
        // Serialized names are checked when read back.
        assert!(serde_json::from_str::<UserName>("\"../etc\"").is_err());
        // A leading dot hides a file and makes `.` and `..`.
        for hidden in [".ada", ".", "..", "-ada", "_ada", "@ada", "+1", "@@@"] {
            assert_eq!(UserName::parse(hidden), Err(NameError::Start), "{hidden}");
        }
        assert!(UserName::parse("ada.").is_ok());
        assert_eq!(
            UserName::parse("ada@example.com").unwrap().as_str(),
            "ada@example.com"
        );
    }

    #[test]
    fn an_identity_is_a_name_only_exactly_as_it_stands() {
        let id = |raw: &str| UserName::from_identity(raw).map(|n| n.0);
        assert_eq!(id("ada").as_deref(), Some("ada"));
        assert_eq!(id("ada@example.com").as_deref(), Some("ada@example.com"));
        // Nothing is changed to make a name, not even the case: these are not `ada`.
        for other in [
            "Ada", "ADA", "Ada!", "ada ", " ada", "ada\t", "a da", "ada/", ".ada", "", "ädä",
        ] {
            assert_eq!(id(other), None, "{other:?}");
        }
        assert_eq!(id(&"a".repeat(65)), None);
    }

    #[test]
    fn a_display_name_is_one_bounded_line() {
        assert_eq!(display_name("  Ada Lovelace "), "Ada Lovelace");
        assert_eq!(display_name("Ada\n<b>\u{1b}[31m"), "Ada<b>[31m");
        assert_eq!(display_name(&"é".repeat(500)).chars().count(), DISPLAY_MAX);
    }

    #[test]
    fn a_claim_becomes_a_usable_name() {
        let name = UserName::from_claim("Ada.Lovelace@Example.com").unwrap();
        assert_eq!(name.as_str(), "ada.lovelace@example.com");
        assert_eq!(UserName::from_claim(".hidden").unwrap().as_str(), "hidden");
        assert_eq!(UserName::from_claim("Zoë Ö").unwrap().as_str(), "zo");
        assert_eq!(UserName::from_claim("!!!"), None);
        assert_eq!(UserName::from_claim("@@@"), None);
        assert_eq!(
            UserName::from_claim(&"x".repeat(100))
                .unwrap()
                .as_str()
                .len(),
            64
        );
    }

    #[test]
    fn passwords_have_a_floor_and_a_ceiling() {
        assert_eq!(check_new_password("short"), Err(PasswordError::TooShort));
        assert!(check_new_password("ten chars!").is_ok());
        assert_eq!(
            check_new_password(&"x".repeat(PASSWORD_MAX_BYTES + 1)),
            Err(PasswordError::TooLong)
        );
    }

    #[test]
    fn five_failures_in_the_window_lock_until_it_ends() {
        let mut failures = None;
        for i in 0..4 {
            failures = Some(Failures::after_failure(failures, 1_000 + i));
        }
        let four = failures.unwrap();
        assert_eq!(four.locked_until(2_000), None);
        let five = Failures::after_failure(failures, 3_000);
        assert_eq!(five.locked_until(3_000), Some(1_000 + LOCKOUT_WINDOW_MS));
        assert_eq!(five.locked_until(1_000 + LOCKOUT_WINDOW_MS), None);
        // After the window, counting starts again.
        let later = Failures::after_failure(Some(five), 1_000 + LOCKOUT_WINDOW_MS);
        assert_eq!(later.count, 1);
        assert_eq!(seconds_until(0, 1), 1);
        assert_eq!(seconds_until(0, 1_001), 2);
    }

    #[test]
    fn the_quota_counts_per_utc_day() {
        assert_eq!(quota_day(DAY_MS - 1), 0);
        assert_eq!(quota_day(DAY_MS), 1);
        assert_eq!(quota_resets_ms(DAY_MS + 5), 2 * DAY_MS);
        assert!(within_quota(10, 0));
        assert!(within_quota(9, 10));
        assert!(!within_quota(10, 10));
    }
}
