//! History policies: which part of a stored conversation is sent to the model on a turn.
//!
//! A policy decides what is *sent*, never what is *kept*: trimming returns borrowed views
//! into the conversation and leaves the conversation itself untouched.

use crate::message::{Message, Role};
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// How much of the conversation a model sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HistoryPolicy {
    /// The last N user turns, each with everything that followed it.
    #[serde(rename = "lastN")]
    LastN,
    /// Every message, unchanged.
    #[serde(rename = "all")]
    All,
    /// No earlier turns: system messages plus the latest user message.
    #[serde(rename = "none")]
    None,
}

impl HistoryPolicy {
    pub const ALLOWED: &'static str = "lastN, all, none";

    pub fn as_str(self) -> &'static str {
        match self {
            HistoryPolicy::LastN => "lastN",
            HistoryPolicy::All => "all",
            HistoryPolicy::None => "none",
        }
    }
}

impl std::fmt::Display for HistoryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown history policy {0:?} (allowed: lastN, all, none; names are case-sensitive)")]
pub struct UnknownPolicy(pub String);

impl FromStr for HistoryPolicy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lastN" => Ok(HistoryPolicy::LastN),
            "all" => Ok(HistoryPolicy::All),
            "none" => Ok(HistoryPolicy::None),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

/// The number of user turns `lastN` keeps, as configured. Values of 0 or less act as 1:
/// a model always gets at least the turn it is answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HistoryLength(i64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("history length {0:?} is not an integer")]
pub struct BadLength(pub String);

impl HistoryLength {
    pub const DEFAULT: HistoryLength = HistoryLength(20);

    pub fn new(configured: i64) -> Self {
        Self(configured)
    }

    /// The value as configured (may be 0 or negative).
    pub fn configured(self) -> i64 {
        self.0
    }

    /// The number of user turns actually kept.
    pub fn effective(self) -> usize {
        usize::try_from(self.0).unwrap_or(0).max(1)
    }

    /// True when the configured value was raised to the minimum of 1.
    pub fn is_clamped(self) -> bool {
        self.0 < 1
    }
}

impl FromStr for HistoryLength {
    type Err = BadLength;
    /// Accepts an optionally signed decimal integer and nothing else (`20abc`, `5.9` and
    /// `" 5"` are errors, so a typo never silently changes behaviour).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<i64>()
            .map(HistoryLength)
            .map_err(|_| BadLength(s.to_owned()))
    }
}

impl std::fmt::Display for HistoryLength {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A conversation, with the positions of its system messages indexed so trimming never has
/// to scan the messages it drops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conversation {
    messages: Vec<Message>,
    system_at: Vec<usize>,
}

impl Conversation {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, message: Message) {
        if message.role == Role::System {
            self.system_at.push(self.messages.len());
        }
        self.messages.push(message);
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    pub fn into_messages(self) -> Vec<Message> {
        self.messages
    }
}

impl FromIterator<Message> for Conversation {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> Self {
        let mut conversation = Conversation::new();
        for message in iter {
            conversation.push(message);
        }
        conversation
    }
}

impl From<Vec<Message>> for Conversation {
    fn from(messages: Vec<Message>) -> Self {
        let system_at = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::System)
            .map(|(i, _)| i)
            .collect();
        Self {
            messages,
            system_at,
        }
    }
}

/// What a policy selected: borrowed messages in the order the model receives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trimmed<'a> {
    pub messages: Vec<&'a Message>,
    /// The position in the conversation of each selected message, in the same order.
    pub indices: Vec<usize>,
    /// How many messages the conversation held.
    pub stored: usize,
}

impl<'a> Trimmed<'a> {
    /// How many stored messages were not selected.
    pub fn dropped(&self) -> usize {
        self.stored - self.messages.len()
    }

    pub fn to_owned_messages(&self) -> Vec<Message> {
        self.messages.iter().map(|m| (*m).clone()).collect()
    }
}

/// Selects the messages a model receives under `policy`.
///
/// * `LastN`: from the N-th last user message onward (N ≤ 0 acts as 1), with everything that
///   follows each kept user message. With at most N user messages nothing is dropped.
/// * `All`: every message, unchanged.
/// * `None`: the latest user message and anything after it.
///
/// Under `LastN` and `None`, system messages are kept and placed first in their original
/// order when `preserve_system` is set, and dropped otherwise.
///
/// Cost: walks back from the end, so it is O(messages kept) plus a binary search over the
/// system-message index; no message text is copied.
pub fn trim_for_model<'a>(
    conversation: &'a Conversation,
    policy: HistoryPolicy,
    length: HistoryLength,
    preserve_system: bool,
) -> Trimmed<'a> {
    let messages = conversation.messages();
    let stored = messages.len();
    let indices: Vec<usize> = match policy {
        HistoryPolicy::All => (0..stored).collect(),
        HistoryPolicy::LastN | HistoryPolicy::None => {
            let start = if policy == HistoryPolicy::LastN {
                start_of_last_user_turns(messages, length.effective())
            } else {
                messages
                    .iter()
                    .rposition(|m| m.role == Role::User)
                    .unwrap_or(stored)
            };
            let mut picked = Vec::with_capacity(stored - start + conversation.system_at.len());
            if preserve_system {
                picked.extend_from_slice(&conversation.system_at);
            }
            picked.extend((start..stored).filter(|&i| messages[i].role != Role::System));
            picked
        }
    };
    Trimmed {
        messages: indices.iter().map(|&i| &messages[i]).collect(),
        indices,
        stored,
    }
}

/// The index of the `turns`-th last user message, or 0 when there are at most `turns` user
/// messages (then nothing is dropped, not even messages before the first user message).
/// Walks back over the kept messages and the gap to the previous user message only.
fn start_of_last_user_turns(messages: &[Message], turns: usize) -> usize {
    let mut seen = 0;
    let mut cut = 0;
    for (index, message) in messages.iter().enumerate().rev() {
        if message.role == Role::User {
            if seen == turns {
                return cut;
            }
            seen += 1;
            cut = index;
        }
    }
    0
}

/// How many of a conversation's last messages a turn should read from a store that can read
/// a tail cheaply: enough for `policy` in the common case (`None`: all of them). Whether
/// that turned out to be enough is for [`tail_suffices`] to say.
pub fn tail_hint(policy: HistoryPolicy, length: HistoryLength) -> Option<usize> {
    match policy {
        HistoryPolicy::All => None,
        // A turn is usually a user message and one reply.
        HistoryPolicy::LastN => Some(length.effective().saturating_mul(2)),
        HistoryPolicy::None => Some(2),
    }
}

/// Whether trimming `tail` (the last messages of a longer conversation, ending with the new
/// user message) sends exactly what trimming the whole conversation would. Stored system
/// messages before the tail are not seen; Parlor never stores system messages (they come
/// from the agent and the history at call time).
pub fn tail_suffices(tail: &[Message], policy: HistoryPolicy, length: HistoryLength) -> bool {
    let users = tail.iter().filter(|m| m.role == Role::User).count();
    let opens_with_user = tail.first().is_some_and(|m| m.role == Role::User);
    suffices(users, opens_with_user, policy, length)
}

/// [`tail_suffices`] for a tail of which only these are known: how many user messages it
/// holds, and whether it starts with one.
pub fn suffices(
    users: usize,
    opens_with_user: bool,
    policy: HistoryPolicy,
    length: HistoryLength,
) -> bool {
    match policy {
        HistoryPolicy::All => false,
        // The cut falls at the N-th last user message when there are more than N. The tail
        // must hold that message and, if it holds exactly N, start with it (else the tail
        // would keep what precedes its first user message, as a short conversation does).
        HistoryPolicy::LastN => {
            let n = length.effective();
            users > n || (users == n && opens_with_user)
        }
        HistoryPolicy::None => users >= 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(roles: &str) -> Conversation {
        crate::message::from_roles(roles).into()
    }

    fn picked(t: &Trimmed<'_>) -> Vec<usize> {
        t.messages.iter().map(|m| m.text.parse().unwrap()).collect()
    }

    #[test]
    fn last_n_keeps_the_last_n_user_turns_with_their_replies() {
        // The reference diagram: system + 4 exchanges, historyLength=3.
        let c = conv("suauauaua");
        let t = trim_for_model(&c, HistoryPolicy::LastN, HistoryLength::new(3), true);
        assert_eq!(picked(&t), vec![0, 3, 4, 5, 6, 7, 8]);
        assert_eq!(t.dropped(), 2);
    }

    #[test]
    fn last_n_keeps_tool_and_other_messages_after_a_kept_user_message() {
        let c = conv("uatauta");
        let t = trim_for_model(&c, HistoryPolicy::LastN, HistoryLength::new(1), true);
        assert_eq!(picked(&t), vec![4, 5, 6]);
    }

    #[test]
    fn consecutive_user_messages_each_count_as_a_turn() {
        let c = conv("uauuu");
        let t = trim_for_model(&c, HistoryPolicy::LastN, HistoryLength::new(2), true);
        assert_eq!(picked(&t), vec![3, 4]);
    }

    #[test]
    fn nothing_is_dropped_with_at_most_n_user_messages() {
        let c = conv("auaua");
        let t = trim_for_model(&c, HistoryPolicy::LastN, HistoryLength::new(2), true);
        assert_eq!(picked(&t), vec![0, 1, 2, 3, 4]);
        assert_eq!(t.dropped(), 0);
    }

    #[test]
    fn a_sufficient_tail_trims_exactly_like_the_whole_conversation() {
        let whole = conv("uauaauauuaua");
        for policy in [
            HistoryPolicy::LastN,
            HistoryPolicy::None,
            HistoryPolicy::All,
        ] {
            for n in 1..6 {
                let length = HistoryLength::new(n);
                let full = trim_for_model(&whole, policy, length, true);
                for k in 1..whole.len() {
                    let tail: Conversation = whole.messages()[whole.len() - k..]
                        .iter()
                        .cloned()
                        .collect();
                    if tail_suffices(tail.messages(), policy, length) {
                        let part = trim_for_model(&tail, policy, length, true);
                        assert_eq!(picked(&part), picked(&full), "{policy} {n} tail {k}");
                    }
                }
            }
        }
        assert_eq!(tail_hint(HistoryPolicy::All, HistoryLength::new(3)), None);
        assert_eq!(
            tail_hint(HistoryPolicy::LastN, HistoryLength::new(0)),
            Some(2)
        );
    }

    #[test]
    fn zero_and_negative_lengths_act_as_one() {
        let c = conv("suaua");
        for n in [0, -5] {
            let t = trim_for_model(&c, HistoryPolicy::LastN, HistoryLength::new(n), true);
            assert_eq!(picked(&t), vec![0, 3, 4], "length {n}");
        }
        assert!(HistoryLength::new(0).is_clamped());
        assert_eq!(HistoryLength::new(0).effective(), 1);
    }

    #[test]
    fn system_messages_move_first_in_their_order_under_last_n_and_none() {
        let c = conv("uasuasu");
        let t = trim_for_model(&c, HistoryPolicy::LastN, HistoryLength::new(1), true);
        assert_eq!(picked(&t), vec![2, 5, 6]);
        let t = trim_for_model(&c, HistoryPolicy::None, HistoryLength::new(9), true);
        assert_eq!(picked(&t), vec![2, 5, 6]);
    }

    #[test]
    fn system_messages_are_dropped_when_not_preserved() {
        let c = conv("suasu");
        let t = trim_for_model(&c, HistoryPolicy::LastN, HistoryLength::new(5), false);
        assert_eq!(picked(&t), vec![1, 2, 4]);
        let t = trim_for_model(&c, HistoryPolicy::None, HistoryLength::new(5), false);
        assert_eq!(picked(&t), vec![4]);
    }

    #[test]
    fn all_sends_every_message_unchanged_and_in_order() {
        let c = conv("uasuat");
        let t = trim_for_model(&c, HistoryPolicy::All, HistoryLength::new(1), false);
        assert_eq!(picked(&t), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn none_sends_the_latest_user_message_and_what_follows() {
        let c = conv("suauat");
        let t = trim_for_model(&c, HistoryPolicy::None, HistoryLength::new(20), true);
        assert_eq!(picked(&t), vec![0, 3, 4, 5]);
    }

    #[test]
    fn none_drops_everything_before_the_latest_user_message() {
        let c = conv("aua");
        let t = trim_for_model(&c, HistoryPolicy::None, HistoryLength::new(1), true);
        assert_eq!(picked(&t), vec![1, 2]);
        let c = conv("sa");
        let t = trim_for_model(&c, HistoryPolicy::None, HistoryLength::new(1), true);
        assert_eq!(
            picked(&t),
            vec![0],
            "no user message: only system messages remain"
        );
    }

    #[test]
    fn trimming_never_changes_the_conversation() {
        let c = conv("suauauaua");
        let before = c.clone();
        let _ = trim_for_model(&c, HistoryPolicy::None, HistoryLength::new(1), true);
        assert_eq!(c, before);
    }

    #[test]
    fn policy_names_are_exact_and_case_sensitive() {
        assert_eq!("lastN".parse(), Ok(HistoryPolicy::LastN));
        assert_eq!("all".parse(), Ok(HistoryPolicy::All));
        assert_eq!("none".parse(), Ok(HistoryPolicy::None));
        for bad in ["lastn", "LASTN", "All", " none", ""] {
            assert!(bad.parse::<HistoryPolicy>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lengths_must_be_plain_integers() {
        assert_eq!("0".parse(), Ok(HistoryLength::new(0)));
        assert_eq!("-3".parse(), Ok(HistoryLength::new(-3)));
        for bad in ["20abc", "5.9", "", " 5", "1e3"] {
            assert!(bad.parse::<HistoryLength>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn conversation_from_vec_indexes_system_messages() {
        let a = Conversation::from(conv("usau").into_messages());
        let b = conv("usau");
        assert_eq!(a, b);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn role() -> impl Strategy<Value = Role> {
        prop_oneof![
            1 => Just(Role::System),
            4 => Just(Role::User),
            4 => Just(Role::Assistant),
            1 => Just(Role::Tool),
        ]
    }

    fn conversation() -> impl Strategy<Value = Conversation> {
        prop::collection::vec(role(), 0..60).prop_map(|roles| {
            roles
                .into_iter()
                .enumerate()
                .map(|(i, r)| Message::new(r, i.to_string(), i as i64))
                .collect()
        })
    }

    fn policy() -> impl Strategy<Value = HistoryPolicy> {
        prop_oneof![
            Just(HistoryPolicy::LastN),
            Just(HistoryPolicy::All),
            Just(HistoryPolicy::None)
        ]
    }

    proptest! {
        #[test]
        fn selection_is_system_first_then_a_suffix_in_order(
            c in conversation(), p in policy(), n in -3i64..30, preserve in any::<bool>()
        ) {
            let t = trim_for_model(&c, p, HistoryLength::new(n), preserve);
            prop_assert_eq!(t.stored, c.len());
            if p == HistoryPolicy::All {
                prop_assert_eq!(t.to_owned_messages(), c.messages().to_vec());
                return Ok(());
            }
            let systems: Vec<&Message> = c.messages().iter().filter(|m| m.role == Role::System).collect();
            let split = t.messages.iter().take_while(|m| m.role == Role::System).count();
            let (head, tail) = t.messages.split_at(split);
            prop_assert!(tail.iter().all(|m| m.role != Role::System));
            if preserve {
                prop_assert_eq!(head.to_vec(), systems);
            } else {
                prop_assert!(head.is_empty());
            }
            // The rest is the conversation's non-system messages from some point on.
            let non_system: Vec<&Message> = c.messages().iter().filter(|m| m.role != Role::System).collect();
            prop_assert_eq!(tail, &non_system[non_system.len() - tail.len()..]);
        }

        #[test]
        fn the_latest_user_message_always_reaches_the_model(
            c in conversation(), p in policy(), n in -3i64..30, preserve in any::<bool>()
        ) {
            let t = trim_for_model(&c, p, HistoryLength::new(n), preserve);
            if let Some(last_user) = c.messages().iter().rev().find(|m| m.role == Role::User) {
                prop_assert!(t.messages.iter().any(|m| std::ptr::eq(*m, last_user)));
            }
        }

        #[test]
        fn last_n_keeps_exactly_min_n_user_turns(c in conversation(), n in -3i64..30) {
            let length = HistoryLength::new(n);
            let t = trim_for_model(&c, HistoryPolicy::LastN, length, true);
            let users = c.messages().iter().filter(|m| m.role == Role::User).count();
            let kept = t.messages.iter().filter(|m| m.role == Role::User).count();
            prop_assert_eq!(kept, users.min(length.effective()));
            if users <= length.effective() {
                prop_assert_eq!(t.dropped(), 0, "nothing is dropped with at most N user messages");
            }
        }
    }
}
