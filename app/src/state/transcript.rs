//! The transcript: the messages on screen, each with its own signals, and where each stands
//! in the stored conversation.

use crate::api::StoredMessage;
use leptos::prelude::*;
use parlor_domain::context::Chip;
use parlor_domain::{ReplyStatus, Role, SendMark};

#[derive(Clone, Copy)]
pub struct UiMessage {
    pub key: u64,
    pub role: Role,
    /// The raw text (what Copy copies).
    pub text: RwSignal<String>,
    /// Sanitized HTML for the first `rendered_len` bytes of `text` (assistant replies).
    pub html: RwSignal<String>,
    pub rendered_len: RwSignal<usize>,
    pub status: RwSignal<Option<ReplyStatus>>,
    pub streaming: RwSignal<bool>,
    /// Parlor's answer to a `!` command, shown as a notice (not stored).
    pub notice: RwSignal<bool>,
    /// A user message's context, one chip per source.
    pub chips: StoredValue<Vec<Chip>>,
    /// The stored message's id, once known (from the page, `meta` or `done`).
    pub id: RwSignal<Option<String>>,
    /// Pinned or excluded.
    pub send: RwSignal<Option<SendMark>>,
    /// Its tokens (shown with the debug panel).
    pub tokens: RwSignal<Option<u64>>,
    /// An assistant message that asked for tools (shown by their cards alone when it has
    /// no text).
    pub calls: RwSignal<bool>,
    /// A tool call and its result (`tool` messages).
    pub card: RwSignal<Option<crate::api::ToolCard>>,
    /// The call waits for the user's approval.
    pub waiting: RwSignal<Option<Waiting>>,
    /// Its ‹ n/m › when it has other versions.
    pub versions: RwSignal<Option<parlor_domain::branch::Versions>>,
}

/// A tool call waiting for the user's answer: whether it may be approved for the
/// conversation (`confirm = "first"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub first_use: bool,
}

/// Where a message of the transcript stands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Position {
    key: u64,
    /// Its stored position (`None`: a command or its notice, which are not stored).
    index: Option<usize>,
    /// The user turns sent after it.
    later_turns: usize,
}

/// The messages on screen.
#[derive(Clone, Copy)]
pub struct Transcript {
    pub messages: RwSignal<Vec<UiMessage>>,
    /// Each message's stored position and the user turns after it, kept once for the whole
    /// transcript (each message reading the list itself would cost the page O(n²)).
    positions: Memo<Vec<Position>>,
    /// The stored position of the first message shown (0: the whole conversation is).
    pub first_index: RwSignal<usize>,
    /// How many of the first stored messages the rolling summary covers.
    pub summarized: RwSignal<usize>,
    next_key: StoredValue<u64>,
    /// The chat view's reactive owner. Signals made during a turn belong to it, not to the
    /// button that started the turn: that button (a suggestion, Retry, Regenerate) is often
    /// removed by the turn itself, and its signals would be disposed with it.
    owner: StoredValue<Option<Owner>>,
}

/// Each message's position: `(key, stored, is a user message)` in transcript order, the
/// first stored one at `first_index`.
fn positions(list: &[(u64, bool, bool)], first_index: usize) -> Vec<Position> {
    let mut index = first_index;
    let mut out: Vec<Position> = list
        .iter()
        .map(|&(key, stored, user)| {
            let at = stored.then_some(index);
            index += usize::from(stored);
            Position {
                key,
                index: at,
                // For now: whether it is itself a user turn.
                later_turns: usize::from(stored && user),
            }
        })
        .collect();
    let mut later = 0;
    for position in out.iter_mut().rev() {
        let turn = position.later_turns;
        position.later_turns = later;
        later += turn;
    }
    out
}

impl Transcript {
    pub fn new(first_index: usize, summarized: usize) -> Self {
        let messages = RwSignal::new(Vec::<UiMessage>::new());
        let first_index = RwSignal::new(first_index);
        let positions = Memo::new(move |_| {
            let list: Vec<_> = messages.with(|list| {
                list.iter()
                    .map(|m| (m.key, !m.notice.get(), m.role == Role::User))
                    .collect()
            });
            positions(&list, first_index.get())
        });
        Transcript {
            messages,
            positions,
            first_index,
            summarized: RwSignal::new(summarized),
            next_key: StoredValue::new(0),
            owner: StoredValue::new(Owner::current()),
        }
    }

    /// The stored position of the message `key` (`None` for commands and their notices).
    pub fn index_of(&self, key: u64) -> Option<usize> {
        self.positions
            .with(|list| list.iter().find(|p| p.key == key).and_then(|p| p.index))
    }

    /// The user turns sent after the message `key`.
    pub fn later_turns(&self, key: u64) -> usize {
        self.positions.with(|list| {
            list.iter()
                .find(|p| p.key == key)
                .map_or(0, |p| p.later_turns)
        })
    }

    /// Runs `f` under the chat view's owner.
    pub(super) fn owned<T>(&self, f: impl FnOnce() -> T) -> T {
        match self.owner.get_value() {
            Some(owner) => owner.with(f),
            None => f(),
        }
    }

    /// A fresh key, for a message or an attachment.
    pub(super) fn next_key(&self) -> u64 {
        let key = self.next_key.get_value();
        self.next_key.set_value(key + 1);
        key
    }

    pub(super) fn make(&self, role: Role, text: String, status: Option<ReplyStatus>) -> UiMessage {
        let key = self.next_key();
        self.owned(|| UiMessage {
            key,
            role,
            text: RwSignal::new(text),
            html: RwSignal::new(String::new()),
            rendered_len: RwSignal::new(0),
            status: RwSignal::new(status),
            streaming: RwSignal::new(false),
            notice: RwSignal::new(false),
            chips: StoredValue::new(Vec::new()),
            id: RwSignal::new(None),
            send: RwSignal::new(None),
            tokens: RwSignal::new(None),
            calls: RwSignal::new(false),
            card: RwSignal::new(None),
            waiting: RwSignal::new(None),
            versions: RwSignal::new(None),
        })
    }

    /// A stored message (its reply's HTML as the server rendered it) for the transcript.
    pub(super) fn stored(&self, m: StoredMessage, html: String) -> UiMessage {
        let message = self.make(m.role, m.text, m.status);
        message.chips.set_value(m.context);
        message.id.set(Some(m.id));
        message.send.set(m.send);
        message.tokens.set(m.tokens);
        message.calls.set(m.calls);
        message.card.set(m.card);
        message.versions.set(m.versions);
        if m.role == Role::Assistant {
            message
                .rendered_len
                .set(message.text.with_untracked(String::len));
            message.html.set(html);
        }
        message
    }

    /// A message shown just before the one with `key` (at the end when it is gone).
    pub(super) fn insert_before(&self, key: u64, role: Role, text: String) -> UiMessage {
        let message = self.make(role, text, None);
        self.messages.update(|list| {
            let at = list.iter().position(|m| m.key == key).unwrap_or(list.len());
            list.insert(at, message);
        });
        message
    }

    pub(super) fn push(&self, role: Role, text: String) -> UiMessage {
        let message = self.make(role, text, None);
        self.messages.update(|list| list.push(message));
        message
    }

    pub(super) fn remove(&self, key: u64) {
        self.messages.update(|list| list.retain(|m| m.key != key));
    }

    /// The message `key`, when it is still shown.
    pub(super) fn find(&self, key: u64) -> Option<UiMessage> {
        self.messages
            .with_untracked(|list| list.iter().find(|m| m.key == key).copied())
    }

    /// Drops the messages after the one with `key` (and it too unless `keep`).
    pub(super) fn keep_until(&self, key: u64, keep: bool) {
        self.messages.update(|list| {
            if let Some(at) = list.iter().position(|m| m.key == key) {
                list.truncate(at + usize::from(keep));
            }
        });
    }

    /// Drops what follows the last user message (the reply to write again).
    pub(super) fn drop_last_reply(&self) {
        self.messages.update(|list| {
            while list.last().is_some_and(|m| m.role != Role::User) {
                list.pop();
            }
        });
    }

    /// Puts a fetched older page before the messages shown: its messages with their HTML,
    /// the stored position of its first, and what the summary covers.
    pub(super) fn prepend(&self, messages: Vec<StoredMessage>, html: Vec<String>, first: usize) {
        let older: Vec<UiMessage> = messages
            .into_iter()
            .zip(html.into_iter().chain(std::iter::repeat(String::new())))
            .map(|(m, html)| self.stored(m, html))
            .collect();
        self.first_index.set(first);
        self.messages.update(|list| {
            list.splice(0..0, older);
        });
    }

    /// Empties the transcript (a new conversation).
    pub(super) fn clear(&self) {
        self.messages.set(Vec::new());
        self.first_index.set(0);
        self.summarized.set(0);
    }

    /// The id of the first stored message shown.
    pub(super) fn first_stored_id(&self) -> Option<String> {
        self.messages.with_untracked(|list| {
            list.iter()
                .find(|m| !m.notice.get_untracked())
                .and_then(|m| m.id.get_untracked())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(t: &Transcript) -> Vec<String> {
        t.messages
            .with_untracked(|l| l.iter().map(|m| m.text.get_untracked()).collect())
    }

    fn stored(id: &str, role: Role, text: &str) -> StoredMessage {
        StoredMessage {
            id: id.into(),
            role,
            text: text.into(),
            send: None,
            html: None,
            status: None,
            context: Vec::new(),
            tokens: None,
            calls: false,
            card: None,
            versions: None,
        }
    }

    #[test]
    fn positions_count_stored_messages_and_later_turns() {
        super::super::tests::reactive();
        // user, reply, command, its notice, user, reply; the first stored one is at 10.
        let list = [
            (0, true, true),
            (1, true, false),
            (2, false, true),
            (3, false, false),
            (4, true, true),
            (5, true, false),
        ];
        let p = positions(&list, 10);
        let index: Vec<_> = p.iter().map(|p| p.index).collect();
        assert_eq!(index, [Some(10), Some(11), None, None, Some(12), Some(13)]);
        let later: Vec<_> = p.iter().map(|p| p.later_turns).collect();
        // The command is not a turn: only the stored user message at 12 counts.
        assert_eq!(later, [1, 1, 1, 1, 0, 0]);
    }

    #[test]
    fn the_transcript_follows_pushes_notices_and_removals() {
        super::super::tests::reactive();
        let t = Transcript::new(4, 0);
        let q = t.push(Role::User, "question".into());
        let r = t.push(Role::Assistant, "answer".into());
        assert_eq!((t.index_of(q.key), t.index_of(r.key)), (Some(4), Some(5)));
        let command = t.push(Role::User, "!help".into());
        command.notice.set(true);
        assert_eq!(t.index_of(command.key), None);
        let q2 = t.push(Role::User, "again".into());
        assert_eq!(t.index_of(q2.key), Some(6));
        assert_eq!(t.later_turns(q.key), 1);
        t.remove(command.key);
        assert_eq!(texts(&t), ["question", "answer", "again"]);
        t.keep_until(r.key, false);
        assert_eq!(texts(&t), ["question"]);
    }

    #[test]
    fn a_regeneration_keeps_the_transcript_up_to_the_last_question() {
        super::super::tests::reactive();
        let t = Transcript::new(0, 0);
        t.push(Role::User, "q".into());
        t.push(Role::Assistant, "a".into());
        t.push(Role::Assistant, "partial".into());
        t.drop_last_reply();
        assert_eq!(texts(&t), ["q"]);
    }

    #[test]
    fn an_older_page_goes_above_what_is_shown() {
        super::super::tests::reactive();
        let t = Transcript::new(2, 0);
        t.push(Role::User, "newer".into());
        t.prepend(
            vec![
                stored("a", Role::User, "old q"),
                stored("b", Role::Assistant, "old a"),
            ],
            vec![String::new(), "<p>old a</p>".into()],
            0,
        );
        assert_eq!(texts(&t), ["old q", "old a", "newer"]);
        assert_eq!(t.first_index.get_untracked(), 0);
        assert_eq!(t.first_stored_id().as_deref(), Some("a"));
        let reply = t.messages.with_untracked(|l| l[1]);
        assert_eq!(reply.html.get_untracked(), "<p>old a</p>");
        assert_eq!(reply.rendered_len.get_untracked(), "old a".len());
        t.clear();
        assert!(texts(&t).is_empty());
    }
}
