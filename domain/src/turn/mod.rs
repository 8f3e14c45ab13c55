//! A chat turn's decisions, on plain values: the server reads what [`to_read`] asks for,
//! hands it to [`decide`], writes what the [`Decision`] says (in its order: cut, prune,
//! store), then makes the model call [`call::call`] plans. Nothing here touches a store, a
//! clock or the network, so every rule of a turn is tested without them.
//!
//! The tool loop repeats the call step; everything a turn writes before its model call is
//! decided here, once.

pub mod call;
#[cfg(test)]
mod tests;

use crate::context::{self, BlockReport, ContextEntry, ContextReport, Edit, Pruning};
use crate::conversation::{longest_retention, ConversationInfo, Tail};
use crate::history::{suffices, tail_hint};
use crate::message::{title_of, Message, Role};
use crate::settings::HistorySettings;

/// What a turn was asked to do (a `!` command is answered before a turn gets here).
#[derive(Clone, Copy, Debug)]
pub enum Ask<'a> {
    /// A new user message with its context entries (checked), sent at `now_ms`. `edit`: the
    /// id of the last user message it replaces.
    Message {
        text: &'a str,
        entries: &'a [ContextEntry],
        edit: Option<&'a str>,
        now_ms: i64,
    },
    /// Reply again to the last user message (Retry, Regenerate).
    Regenerate,
}

/// What to read of the stored conversation before deciding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Nothing: a new conversation has nothing stored.
    Nothing,
    /// Its last `n` messages (and how many it holds); [`decide`] may ask for the whole.
    Tail(usize),
    /// All of it.
    Whole,
}

/// Why a turn cannot be done as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("there is no user message to reply to")]
    NothingToRegenerate,
    #[error("no message with id {0:?} in this conversation")]
    NoMessage(String),
    #[error("only a user message can be edited")]
    NotUserMessage,
}

/// The first read of a turn. A new message reads only the tail its policy needs, reaching
/// back `context_turns` user messages so that pruning sees every block whose time may be up;
/// an edit or a regeneration reads the whole conversation (it cuts it).
pub fn to_read(
    ask: &Ask<'_>,
    info: &ConversationInfo,
    is_new: bool,
    settings: &HistorySettings,
) -> Read {
    if is_new {
        return Read::Nothing;
    }
    match ask {
        Ask::Message { edit: None, .. } => {
            let reach = info.context_turns as usize;
            tail_hint(settings.policy.value, settings.length.value).map_or(Read::Whole, |n| {
                Read::Tail(n.max(reach.saturating_add(1).saturating_mul(2)))
            })
        }
        _ => Read::Whole,
    }
}

/// What [`decide`] made of a read: another read, or the turn's writes.
#[derive(Debug)]
pub enum Decided {
    /// The tail read was not enough: read this and decide again.
    Read(Read),
    Write(Box<Decision>),
}

/// Everything a turn writes before its model call, in order, and what the call is planned
/// from.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// First, cut the stored conversation (edit, regenerate).
    pub cut: Option<Cut>,
    /// Then the context blocks whose time is up, removed for good.
    pub prune: Option<Prune>,
    /// Then the user's message as stored (its persisted variant); `None` for a regeneration.
    pub store: Option<Message>,
    /// Whether the conversation's details are written before the message (a new
    /// conversation's owner, a longer retention); otherwise the message is appended.
    pub details_first: bool,
    /// The conversation's details after this turn (title, `context_turns`).
    pub info: ConversationInfo,
    pub sent: Sent,
    /// An edit or a regeneration: the ‹ n/m › of the new version, once the cut is written.
    pub versions: Option<crate::branch::Versions>,
}

/// Cut the chosen path to its first `keep` messages, only if it still holds `total` ending
/// with `last` (a message saved since by another tool is never lost); what is cut stays as
/// a version ([`crate::branch`]): `moved`, hanging off `parent`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cut {
    pub keep: usize,
    pub total: usize,
    pub last: Message,
    pub parent: Option<String>,
    pub moved: Vec<Message>,
}

impl Cut {
    /// The change a store makes for this cut, given the versions stored now.
    pub fn rebranch(&self, mut branches: crate::branch::Branches) -> crate::branch::Rebranch {
        branches.branches.push(crate::branch::Branch {
            parent: self.parent.clone(),
            messages: self.moved.clone(),
            summary: None,
        });
        crate::branch::Rebranch {
            keep: self.keep,
            total: self.total,
            last: Some(self.last.clone()),
            suffix: Vec::new(),
            outgoing: Some(branches.branches.len() - 1),
            branches,
            incoming_summary: None,
        }
    }
}

/// A pruning pass's edits, the first message they count from at `offset`.
#[derive(Clone, Debug, PartialEq)]
pub struct Prune {
    pub offset: usize,
    pub edits: Vec<Edit>,
    pub expired: Vec<BlockReport>,
}

impl Prune {
    /// How many messages the pass removes (the others it rewrites).
    pub fn removed(&self) -> usize {
        self.edits.iter().filter(|e| e.new.is_none()).count()
    }
}

/// What the model call is planned from.
#[derive(Clone, Debug, PartialEq)]
pub struct Sent {
    /// The stored messages the plan needs, pruned, ending with the message sent now (its
    /// displayed variant).
    pub tail: Vec<Message>,
    /// How many messages the conversation holds in all, this one included.
    pub total: usize,
    pub context: Option<ContextReport>,
    /// The pinned messages stored before `tail`, with their positions (read beside a tail).
    pub older_pins: Vec<(usize, Message)>,
}

/// Decides a turn from what was read (`read`, as [`to_read`] or an earlier [`Decided::Read`]
/// asked, and beside a tail the conversation's pinned messages with their positions when the
/// store could find them: `pins`) and the conversation's details (touched for this turn).
pub fn decide(
    ask: &Ask<'_>,
    info: &ConversationInfo,
    is_new: bool,
    read: Tail,
    pins: Option<Vec<(usize, Message)>>,
    settings: &HistorySettings,
) -> Result<Decided, Refusal> {
    match *ask {
        Ask::Regenerate => regenerate(info.clone(), read).map(decided),
        Ask::Message {
            text,
            entries,
            edit,
            now_ms,
        } => {
            let built = built(text, entries, now_ms);
            let (history, offset, cut, older) = match edit {
                Some(id) => {
                    let (history, offset, cut) = edited(read, id)?;
                    (history, offset, cut, Vec::new())
                }
                None => {
                    let older = older_pins(&read, pins, info);
                    let enough = read.is_whole()
                        || (older.is_some()
                            && tail_is_enough(&read, &built.display, info, settings));
                    if !enough {
                        return Ok(Decided::Read(Read::Whole));
                    }
                    let offset = read.total - read.messages.len();
                    (read.messages, offset, None, older.unwrap_or_default())
                }
            };
            let total = offset + history.len();
            let mut decision = message(
                info.clone(),
                is_new,
                history,
                total,
                offset,
                cut,
                built,
                entries,
            );
            decision.sent.older_pins = older;
            Ok(decided(decision))
        }
    }
}

/// The pinned messages stored before the tail: none needed when nothing is pinned; `None`
/// when they are not known (the store could not find them, or found another number than the
/// details count), and then the whole conversation is read.
fn older_pins(
    read: &Tail,
    pins: Option<Vec<(usize, Message)>>,
    info: &ConversationInfo,
) -> Option<Vec<(usize, Message)>> {
    if info.pinned == 0 || read.is_whole() {
        return Some(Vec::new());
    }
    let pins = pins.filter(|p| p.len() == info.pinned as usize)?;
    let offset = read.total - read.messages.len();
    Some(pins.into_iter().filter(|(at, _)| *at < offset).collect())
}

fn decided(decision: Decision) -> Decided {
    Decided::Write(Box::new(decision))
}

/// The user's message: stored and displayed variants sharing one id.
fn built(text: &str, entries: &[ContextEntry], now_ms: i64) -> context::Built {
    let mut built = context::build(text, entries, now_ms);
    built.persisted.ensure_id();
    built.display.id.clone_from(&built.persisted.id);
    built
}

/// Whether a tail holds all a new message's turn needs: what the policy sends, the user
/// messages a context block may still be kept for (pinned messages before it are read
/// beside it: [`older_pins`]).
fn tail_is_enough(
    read: &Tail,
    new: &Message,
    info: &ConversationInfo,
    settings: &HistorySettings,
) -> bool {
    let users = read
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .count();
    // The tail as the policy reads it: the new message after it (not copied to say so).
    let first = read.messages.first().unwrap_or(new);
    let (policy, length) = (settings.policy.value, settings.length.value);
    let with_new = users + usize::from(new.role == Role::User);
    suffices(with_new, first.role == Role::User, policy, length)
        && users > info.context_turns as usize
}

/// For an edit: the messages before the user message `id`; it and what follows it become a
/// version beside the edited text.
fn edited(read: Tail, id: &str) -> Result<(Vec<Message>, usize, Option<Cut>), Refusal> {
    let mut stored = read.messages;
    let index = stored
        .iter()
        .position(|m| m.id() == id)
        .ok_or_else(|| Refusal::NoMessage(crate::branch::shortened(id)))?;
    if stored[index].role != Role::User {
        return Err(Refusal::NotUserMessage);
    }
    let cut = cut_to(&stored, index);
    stored.truncate(index);
    Ok((stored, 0, cut))
}

/// Cuts `stored` (the whole chosen path) to `keep` messages: `None` when nothing follows.
fn cut_to(stored: &[Message], keep: usize) -> Option<Cut> {
    let last = stored.last().filter(|_| keep < stored.len())?;
    let moved = stored[keep..].iter().cloned().map(|mut m| {
        m.ensure_id();
        m
    });
    Some(Cut {
        keep,
        total: stored.len(),
        last: last.clone(),
        parent: keep.checked_sub(1).map(|i| stored[i].id().into_owned()),
        moved: moved.collect(),
    })
}

/// A new message's turn: prunes `history` (the stored messages before it, the first at
/// `offset`, `total` in all), and keeps the longest retention durable before the message.
#[allow(clippy::too_many_arguments)]
fn message(
    mut info: ConversationInfo,
    is_new: bool,
    history: Vec<Message>,
    total: usize,
    offset: usize,
    cut: Option<Cut>,
    built: context::Built,
    entries: &[ContextEntry],
) -> Decision {
    let pruning = context::prune(history);
    let context_turns = longest_retention(&pruning.messages)
        .max(longest_retention(std::slice::from_ref(&built.persisted)));
    // A longer retention is durable before the message: a later turn must read back far
    // enough to prune it.
    let details_first = is_new || context_turns > info.context_turns;
    info.context_turns = context_turns;
    let context = Some(ContextReport::new(entries, &pruning)).filter(|r| !r.is_empty());
    let (mut tail, prune) = split(pruning, offset);
    let total = total - prune.as_ref().map_or(0, Prune::removed) + 1;
    tail.push(built.display);
    titled(&mut info, &tail);
    Decision {
        cut,
        prune,
        store: Some(built.persisted),
        details_first,
        info,
        sent: Sent {
            tail,
            total,
            context,
            older_pins: Vec::new(),
        },
        versions: None,
    }
}

/// Retry and Regenerate: drops what follows the last user message (the reply written
/// again) and prunes what precedes it.
fn regenerate(mut info: ConversationInfo, read: Tail) -> Result<Decision, Refusal> {
    let mut stored = read.messages;
    let last_user = stored
        .iter()
        .rposition(|m| m.role == Role::User)
        .ok_or(Refusal::NothingToRegenerate)?;
    let cut = cut_to(&stored, last_user + 1);
    stored.truncate(last_user + 1);
    let current = stored.pop().ok_or(Refusal::NothingToRegenerate)?;
    let pruning = context::prune(stored);
    let context = Some(ContextReport::new(&[], &pruning)).filter(|r| !r.is_empty());
    let (mut tail, prune) = split(pruning, 0);
    let total = last_user + 1 - prune.as_ref().map_or(0, Prune::removed);
    tail.push(current);
    titled(&mut info, &tail);
    Ok(Decision {
        cut,
        prune,
        store: None,
        details_first: false,
        info,
        sent: Sent {
            tail,
            total,
            context,
            older_pins: Vec::new(),
        },
        versions: None,
    })
}

/// The pruned messages, and the edits to store when there are any.
fn split(pruning: Pruning, offset: usize) -> (Vec<Message>, Option<Prune>) {
    let Pruning {
        messages,
        edits,
        expired,
    } = pruning;
    let prune = (!edits.is_empty()).then_some(Prune {
        offset,
        edits,
        expired,
    });
    (messages, prune)
}

/// A conversation without a title takes its first user message's.
fn titled(info: &mut ConversationInfo, tail: &[Message]) {
    if info.title.is_empty() {
        if let Some(first) = tail.iter().find(|m| m.role == Role::User) {
            info.title = title_of(&first.text);
        }
    }
}
