//! Prompt caching: where a request asks the provider to cache its prefix, how much of a
//! prompt was served from the cache, and why a turn's prefix differs from the last one's.
//!
//! A provider caches a request's prefix up to a breakpoint; the next request reads it back
//! only if it starts with exactly the same bytes. Parlor places the breakpoints (on the
//! system prompt and tools, on the end of the previous call's request, on the newest
//! message) and keeps the prefix stable by cutting history in steps
//! ([`crate::chain::Step`]).

use crate::message::{Message, Role};
use serde::{Deserialize, Serialize};

/// The most breakpoints a request may carry (Anthropic allows four).
pub const MAX_BREAKPOINTS: usize = 4;

/// The messages (indices into `messages`, system messages included) that end a part to
/// cache, oldest first: the end of what the previous call of this conversation sent (the
/// message before the newest reply, when it is not a system message), and the newest
/// message. The system prompt and the tools take the other two of
/// [`MAX_BREAKPOINTS`], placed by the adapter.
pub fn message_breakpoints(messages: &[Message]) -> Vec<usize> {
    let Some(last) = messages.len().checked_sub(1) else {
        return Vec::new();
    };
    let previous_end = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .and_then(|reply| reply.checked_sub(1))
        .filter(|&end| messages[end].role != Role::System && end < last);
    previous_end.into_iter().chain([last]).collect()
}

/// What happened to a turn's prompt at the provider's cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CacheUse {
    /// Prompt tokens read from the cache.
    pub read: u64,
    /// Prompt tokens written to it (Anthropic reports these; others write silently).
    pub written: u64,
    /// Prompt tokens neither read nor written: sent and processed afresh.
    pub fresh: u64,
}

impl CacheUse {
    /// From a call's usage: `prompt` tokens in all, of which `read` came from the cache and
    /// `written` went into it.
    pub fn of(prompt: u64, read: Option<u64>, written: Option<u64>) -> CacheUse {
        let read = read.unwrap_or(0).min(prompt);
        let written = written.unwrap_or(0).min(prompt - read);
        CacheUse {
            read,
            written,
            fresh: prompt - read - written,
        }
    }

    /// Two calls' use together.
    pub fn plus(self, other: CacheUse) -> CacheUse {
        CacheUse {
            read: self.read.saturating_add(other.read),
            written: self.written.saturating_add(other.written),
            fresh: self.fresh.saturating_add(other.fresh),
        }
    }

    pub fn prompt(&self) -> u64 {
        self.read
            .saturating_add(self.written)
            .saturating_add(self.fresh)
    }

    /// The share of the prompt read from the cache, in percent (0 for an empty prompt).
    pub fn read_percent(&self) -> u64 {
        let share = u128::from(self.read) * 100 / u128::from(self.prompt().max(1));
        share as u64
    }
}

/// Why the part of history sent this turn does not start as the last turn's did: the first
/// difference found, in the order a person would look for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum PrefixChange {
    /// The system prompt or a system message changed.
    System,
    /// The rolling summary was written or rewritten.
    Summary,
    /// The policy, the window or the budget left out `dropped` older messages; `by` names
    /// the chain step that set where the sent part starts (see [`PrefixChange::cut_by`]).
    Cut {
        dropped: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// A pin, a "Don't send" mark or a deletion changed which messages are sent.
    Marks,
    /// A context block expired, or a tool result was stubbed.
    Expired,
    /// A message sent last turn was edited.
    Edited,
}

impl PrefixChange {
    /// A cut, told which step made it: the last of the chain's steps that drop older
    /// messages (the policy, the window, the budget) that removed any on this call, as that
    /// one decided where the sent part starts. Any other change is returned as it is.
    pub fn cut_by(self, steps: &[crate::chain::StepReport]) -> PrefixChange {
        const CUTTERS: [&str; 3] = [crate::chain::POLICY_STEP, "sliding_window", "token_budget"];
        match self {
            PrefixChange::Cut { dropped, .. } => PrefixChange::Cut {
                dropped,
                by: steps
                    .iter()
                    .rev()
                    .find(|s| s.removed > 0 && CUTTERS.contains(&s.name.as_str()))
                    .map(|s| s.name.clone()),
            },
            other => other,
        }
    }

    /// What happened, in words (the debug panel's).
    pub fn describe(&self) -> String {
        match self {
            PrefixChange::System => "the system prompt changed".into(),
            PrefixChange::Summary => "the rolling summary was rewritten".into(),
            PrefixChange::Cut { dropped, by } => match by.as_deref() {
                Some(crate::chain::POLICY_STEP) => {
                    format!("the history policy left out {dropped} older message(s)")
                }
                Some("sliding_window") => format!("the window cut {dropped} older message(s)"),
                Some("token_budget") => {
                    format!("the token budget cut {dropped} older message(s)")
                }
                _ => format!("{dropped} older message(s) were left out"),
            },
            PrefixChange::Marks => {
                "a pin, a \"Don't send\" mark or a deletion changed what is sent".into()
            }
            PrefixChange::Expired => "a context block expired or a tool result was stubbed".into(),
            PrefixChange::Edited => "a message sent last turn was edited".into(),
        }
    }
}

/// One sent message, as [`prefix_change`] compares them. Kept with the conversation's
/// last turn, so stored compactly: `[at, summary, text, whole]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "SentRow", from = "SentRow")]
pub struct Sent {
    /// Its stored position; `None` for system messages added at call time.
    pub at: Option<usize>,
    pub summary: bool,
    /// A hash of its own text, and of everything sent for it (its blocks too).
    pub text: u32,
    pub whole: u32,
}

type SentRow = (Option<usize>, bool, u32, u32);

impl From<Sent> for SentRow {
    fn from(s: Sent) -> SentRow {
        (s.at, s.summary, s.text, s.whole)
    }
}

impl From<SentRow> for Sent {
    fn from((at, summary, text, whole): SentRow) -> Sent {
        Sent {
            at,
            summary,
            text,
            whole,
        }
    }
}

/// What a request's history was, in the terms [`prefix_change`] compares.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prefix(pub Vec<Sent>);

impl Prefix {
    pub fn of<'a>(messages: impl IntoIterator<Item = (Option<usize>, &'a Message)>) -> Prefix {
        Prefix(
            messages
                .into_iter()
                .map(|(at, m)| Sent {
                    at,
                    summary: m.role == Role::System
                        && m.text.starts_with(crate::summary::SUMMARY_LABEL),
                    text: fingerprint([m.text.as_str().into()].into_iter(), 0),
                    whole: fingerprint(m.texts(), m.images()),
                })
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn hashes(&self, pick: impl Fn(&Sent) -> bool) -> Vec<u32> {
        self.0.iter().filter(|s| pick(s)).map(|s| s.whole).collect()
    }
}

/// A stable hash of texts and an image count (FNV-1a, folded to 32 bits: a diagnostic,
/// where a rare collision only hides one reason).
fn fingerprint<'a>(texts: impl Iterator<Item = std::borrow::Cow<'a, str>>, images: usize) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash = hash.wrapping_mul(0x0100_0000_01b3) ^ 0xff;
    };
    for text in texts {
        feed(text.as_bytes());
    }
    feed(&(images as u64).to_le_bytes());
    (hash ^ (hash >> 32)) as u32
}

/// Why `now` does not extend `before` (the previous turn's request): `None` when every
/// message `before` sent is sent again, unchanged and in the same order.
pub fn prefix_change(before: &Prefix, now: &Prefix) -> Option<PrefixChange> {
    let system = |s: &Sent| s.at.is_none() && !s.summary;
    if before.hashes(system) != now.hashes(system) {
        return Some(PrefixChange::System);
    }
    let summary = |s: &Sent| s.summary;
    if before.hashes(summary) != now.hashes(summary) {
        return Some(PrefixChange::Summary);
    }
    let stored =
        |p: &Prefix| -> Vec<Sent> { p.0.iter().filter(|s| s.at.is_some()).copied().collect() };
    let (old, new) = (stored(before), stored(now));
    let first_new = new.first()?.at;
    let dropped = old.iter().filter(|s| s.at < first_new).count();
    let kept = old.iter().filter(|s| s.at >= first_new);
    for (i, was) in kept.enumerate() {
        match new.get(i) {
            Some(is) if is.at == was.at && is.whole == was.whole => {}
            Some(is) if is.at == was.at && is.text == was.text => {
                return Some(PrefixChange::Expired)
            }
            Some(is) if is.at == was.at => return Some(PrefixChange::Edited),
            _ => return Some(PrefixChange::Marks),
        }
    }
    (dropped > 0).then_some(PrefixChange::Cut { dropped, by: None })
}

#[cfg(test)]
mod tests;
