//! A conversation's details besides its messages, and the rules about them that every
//! path shares: who may see a conversation ([`ConversationInfo::visible_to`]) and how far
//! back a turn must read to prune its context blocks ([`longest_retention`]).
//!
//! The MCP tools call a conversation a *dialog*; a store of conversations is a *history*.

pub use crate::conversation_id::{ConversationId, ConversationIdError, MAX_CONVERSATION_ID_LEN};

use crate::context::Edit;
use crate::event::TurnReport;
use crate::message::Message;
use crate::transfer::ForkLink;
use serde::{Deserialize, Serialize};

/// What Parlor knows about a conversation besides its messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationInfo {
    pub session_id: ConversationId,
    pub agent_id: String,
    /// A hash of the browser session that started it (the server derives it from the browser's cookie); `None` for
    /// conversations started by API clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// A title taken from the first user message.
    pub title: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// What the last model call was sent, for the debug panel. Boxed: it is most of the
    /// details' size, and indexes keep many details without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<Box<TurnReport>>,
    /// The model chosen with `!model`; `None` uses the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The longest retention, in turns, of a context block that may still be stored: a turn
    /// reads at least this many user messages back, so pruning sees every block whose time
    /// may be up (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_turns: u32,
    /// How many messages were pinned after the last change of a mark: a turn reads pinned
    /// messages from before its tail only when there are some (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pinned: u32,
    /// Where the pinned messages were after the last change of a mark: where a store that
    /// cannot search its messages (Redis) looks for them (and checks what it finds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned_at: Vec<usize>,
    /// The conversation and message this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// What its model calls cost, in billionths of a US dollar (calls of priced models
    /// whose provider reported usage).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub spent_nano_usd: u64,
    /// The tool servers with `confirm = "first"` the user approved in this conversation:
    /// their calls no longer wait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_tools: Vec<String>,
}

/// Where a fork came from: its conversation and the last message it copied (`None` when it
/// copied none, e.g. an edit of the first message).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    pub session_id: ConversationId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

impl ForkOrigin {
    /// As the export and the debug panel show it.
    pub fn link(&self) -> ForkLink {
        ForkLink {
            session_id: self.session_id.to_string(),
            message_id: self.message_id.clone(),
        }
    }
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Why a request may not see a conversation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessDenied {
    /// It belongs to another browser: to the requester it does not exist.
    #[error("conversation not found")]
    NotFound,
    #[error("this conversation belongs to agent {0:?}")]
    OtherAgent(String),
}

/// Who asks for a conversation, as [`ConversationInfo::visible_to`] needs to know them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Viewer {
    /// The requester's owner key (their browser's, or their account's), if any.
    pub owner: Option<String>,
    /// Whether conversations without an owner are reachable by this requester.
    pub unowned: bool,
}

impl ConversationInfo {
    /// The details of a conversation written without them (by `parlor mcp` or by hand): no
    /// agent, no owner, no title.
    pub fn bare(id: &ConversationId, last_ts: Option<i64>) -> Self {
        let ts = last_ts.unwrap_or_default();
        Self {
            session_id: id.clone(),
            agent_id: String::new(),
            owner: None,
            title: String::new(),
            created_ms: ts,
            updated_ms: ts,
            last_turn: None,
            model: None,
            context_turns: 0,
            pinned: 0,
            pinned_at: Vec::new(),
            forked_from: None,
            spent_nano_usd: 0,
            approved_tools: Vec::new(),
        }
    }

    /// Notes where the pinned messages of `messages` (the whole conversation) are; whether
    /// that changed what the details say.
    pub fn note_pins(&mut self, messages: &[Message]) -> bool {
        let at: Vec<usize> = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_pinned())
            .map(|(at, _)| at)
            .collect();
        let pinned = u32::try_from(at.len()).unwrap_or(u32::MAX);
        let changed = self.pinned != pinned || self.pinned_at != at;
        self.pinned = pinned;
        self.pinned_at = at;
        changed
    }

    /// The access rule, for every path that reads or continues a conversation: one started
    /// in a browser (or by an account) is visible only to that owner (`viewer.owner`, the
    /// requester's owner key); one without an owner (an API client's, an import's, an MCP
    /// dialog's) is reachable by its id alone by a viewer who may see those
    /// (`viewer.unowned`: everyone while accounts are off, admins only while they are on);
    /// and it is always read through its own agent.
    pub fn visible_to(&self, viewer: &Viewer, agent_id: &str) -> Result<(), AccessDenied> {
        match &self.owner {
            Some(expected) if viewer.owner.as_deref() != Some(expected.as_str()) => {
                return Err(AccessDenied::NotFound);
            }
            None if !viewer.unowned => return Err(AccessDenied::NotFound),
            _ => {}
        }
        if self.agent_id != agent_id {
            return Err(AccessDenied::OtherAgent(self.agent_id.clone()));
        }
        Ok(())
    }
}

/// The last messages of a conversation and how many it holds in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tail {
    pub messages: Vec<Message>,
    pub total: usize,
}

impl Tail {
    /// Whether the tail is the whole conversation.
    pub fn is_whole(&self) -> bool {
        self.messages.len() == self.total
    }
}

/// The longest retention, in turns, of a context block in `messages` (0: none).
pub fn longest_retention(messages: &[Message]) -> u32 {
    messages
        .iter()
        .flat_map(|m| &m.context)
        .filter_map(|b| b.retention)
        .map(|n| n.get())
        .max()
        .unwrap_or(0)
}

/// Applies a pruning pass's edits (see [`crate::context::prune`]) to stored messages, the
/// first edit counting from `offset`; an edit whose message changed since is skipped.
/// Returns how many were applied.
pub fn apply_edits(messages: &mut Vec<Message>, offset: usize, edits: &[Edit]) -> usize {
    let mut applied = 0;
    // From the end, so that a removal does not move the messages still to edit.
    for edit in edits.iter().rev() {
        let at = offset + edit.index;
        if messages.get(at) != Some(&edit.old) {
            continue;
        }
        match &edit.new {
            Some(new) => messages[at] = new.clone(),
            None => {
                messages.remove(at);
            }
        }
        applied += 1;
    }
    applied
}
