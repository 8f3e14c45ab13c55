//! Branches: every version an edit or a regeneration leaves behind.
//!
//! A conversation is a tree of messages. What a store keeps as the conversation's messages
//! (`messages.json`, the Redis list) is its **chosen path**, from the first message to the
//! chosen leaf, oldest first: each message's parent is the one before it. So everything that
//! reads a conversation (the policy, the chain, the summary, pins, the MCP tools, other
//! tools that share the files) reads the chosen path, and a conversation stored before
//! branches existed is a tree with one path, read unchanged.
//!
//! The other versions are [`Branch`]es: runs of messages that hang off a message by its id
//! (`parent`; `None` beside the first message). Inside a run each message follows the one
//! before it. A message's children are derived: the message after it in the same list, and
//! the first messages of the branches that name it. Which child is chosen is kept the same
//! way: the one after it in its own list (on the chosen path, or in the branch that left the
//! path last), so a reload, another device or another process shows the same path.
//!
//! Moving to another version ([`choose`]) swaps lists: the path's part after the fork point
//! becomes a branch, and the chosen version's lists become the path. A store writes such a
//! [`Rebranch`] so that a crash at any point loses nothing: first the branches with the
//! incoming messages still in them, then the path, then the branches without them. A branch
//! whose first message is on the path is such a leftover and is never shown
//! ([`Branches::tidy`]).

use crate::message::Message;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// The versions of a conversation that are not on its chosen path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branches {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<Branch>,
}

/// A run of messages off the chosen path, each following the one before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branch {
    /// The id of the message the run's first message follows; `None`: it is a version of
    /// the conversation's first message.
    #[serde(default)]
    pub parent: Option<String>,
    pub messages: Vec<Message>,
    /// The rolling summary of the path this branch left, when it covered some of the
    /// branch's messages: it comes back with them ([`Rebranch::move_summary`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<serde_json::Value>,
}

impl Branch {
    pub fn new(parent: Option<String>, messages: Vec<Message>) -> Self {
        Branch {
            parent,
            messages,
            summary: None,
        }
    }
}

/// What a change of the path does to the rolling summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SummaryMove {
    /// It covers only messages the path keeps: it stays.
    Keep,
    /// It covered messages that left the path and went with them; the path's summary is
    /// now this one (the one that came back with the chosen version, or none: a summary
    /// that covers nothing).
    Put(serde_json::Value),
}

/// A change of the chosen path, computed from what was read: keep the path's first `keep`
/// messages, add `suffix` after them, and store `branches` as the versions off the path.
/// Only if the path still holds `total` messages and ends with `last` (nothing was appended,
/// removed or cleared since it was read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rebranch {
    pub keep: usize,
    pub total: usize,
    pub last: Option<Message>,
    pub suffix: Vec<Message>,
    pub branches: Branches,
    /// Which of `branches` holds what left the path (its summary goes with it).
    pub outgoing: Option<usize>,
    /// The summary that comes back with the chosen version.
    pub incoming_summary: Option<serde_json::Value>,
}

impl Rebranch {
    /// Stores `branches` beside `path` as it is (an import).
    pub fn keeping(path: &[Message], branches: Branches) -> Rebranch {
        Rebranch {
            keep: path.len(),
            total: path.len(),
            last: path.last().cloned(),
            suffix: Vec::new(),
            branches,
            outgoing: None,
            incoming_summary: None,
        }
    }

    /// Decides what happens to the path's rolling summary `current`: when it covers messages
    /// that leave the path, it goes with them, and the chosen version's own (or none) is
    /// the path's; otherwise the chosen version's own replaces it only if it covers more. A
    /// summary never describes messages that are not on the path.
    pub fn move_summary(&mut self, current: Option<&serde_json::Value>) -> SummaryMove {
        let covers = current.map(crate::summary::Covers::of).unwrap_or_default();
        if covers.messages <= self.keep {
            // The version's own summary covers the same first messages, and more of it.
            let incoming = self.incoming_summary.take();
            return match incoming {
                Some(s) if crate::summary::Covers::of(&s).messages > covers.messages => {
                    SummaryMove::Put(s)
                }
                _ => SummaryMove::Keep,
            };
        }
        if let Some(branch) = self
            .outgoing
            .and_then(|i| self.branches.branches.get_mut(i))
        {
            branch.summary = current.cloned();
        }
        SummaryMove::Put(
            self.incoming_summary
                .take()
                .unwrap_or_else(|| crate::summary::nothing_covered(covers.spent_nano_usd)),
        )
    }

    /// What the store writes first: the new branches with the incoming suffix still among
    /// them (as a branch off the fork point), so a crash before the path is written loses
    /// none of its messages.
    pub fn interim(&self, path: &[Message]) -> Branches {
        let mut interim = self.branches.clone();
        if !self.suffix.is_empty() {
            interim.branches.push(Branch::new(
                self.keep.checked_sub(1).map(|i| path[i].id().into_owned()),
                self.suffix.clone(),
            ));
        }
        interim
    }

    /// Whether `path` is still what the change was computed from.
    pub fn still_fits(&self, path: &[Message]) -> bool {
        path.len() == self.total
            && match (&self.last, path.last()) {
                (None, None) => true,
                (Some(a), Some(b)) => a.role == b.role && a.ts == b.ts && a.text == b.text,
                _ => false,
            }
    }

    /// The path after the change.
    pub fn apply(&self, path: &mut Vec<Message>) {
        path.truncate(self.keep);
        path.extend(self.suffix.iter().cloned());
    }
}

/// Why a version cannot be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BranchError {
    #[error("no message with id {0:?} in this conversation")]
    NoMessage(String),
    #[error(
        "the version with message {0:?} does not lead back to the conversation's first \
         message (its stored branches are damaged; `parlor store check` reports them)"
    )]
    Unreachable(String),
}

/// The ‹ n/m › of a message on the chosen path that has other versions.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    /// This version's place among its siblings, from 1, oldest first.
    pub n: usize,
    /// How many versions there are.
    pub of: usize,
    /// The id to choose for the previous version (none for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
    /// The id to choose for the next version (none for the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// The versions of a conversation, as the debug panel shows them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionFacts {
    /// How many messages the chosen path (what the model receives) holds.
    pub path: usize,
    /// How many other versions there are, and the messages they hold.
    pub branches: usize,
    pub off_path: usize,
    /// Where on the path a message has several versions (the first 50).
    pub at: Vec<Versioned>,
}

/// A message of the chosen path with several versions: its position and ‹ n/m ›.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versioned {
    pub index: usize,
    pub n: usize,
    pub of: usize,
}

/// The answer to choosing a version: the message chosen, how long the chosen path is now,
/// and what happened to the rolling summary (`kept`, `restored`: the version's own came
/// back, `set aside`: it described messages that left the path and went with them).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChooseReply {
    pub id: String,
    pub messages: usize,
    pub summary: String,
}

/// Moves the path's messages after the first `keep` into a branch (an edit: the old
/// question and what followed; a regeneration: the old reply). `None` when nothing follows.
pub fn branch_off(path: &[Message], keep: usize, mut branches: Branches) -> Option<Rebranch> {
    let last = path.last().filter(|_| keep < path.len())?;
    branches.branches.push(Branch::new(
        keep.checked_sub(1).map(|i| path[i].id().into_owned()),
        path[keep..].iter().cloned().map(with_id).collect(),
    ));
    Some(Rebranch {
        keep,
        total: path.len(),
        last: Some(last.clone()),
        suffix: Vec::new(),
        outgoing: Some(branches.branches.len() - 1),
        branches,
        incoming_summary: None,
    })
}

fn with_id(mut message: Message) -> Message {
    message.ensure_id();
    message
}

/// An id as an error names it: at most 64 characters (a request may send a long one).
pub fn shortened(id: &str) -> String {
    let mut chars = id.chars();
    let mut short: String = chars.by_ref().take(64).collect();
    if chars.next().is_some() {
        short.push('…');
    }
    short
}

/// Where a message is: on the path (at its index) or in a branch (its index, the message's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Path(usize),
    Branch(usize, usize),
}

/// Makes the version holding message `target` the chosen path (up to it, and after it what
/// was chosen there last). `Ok(None)` when it already is on the path.
pub fn choose(
    path: &[Message],
    branches: &Branches,
    target: &str,
) -> Result<Option<Rebranch>, BranchError> {
    let branches = branches.tidy(path);
    let places = places(path, &branches);
    let Some(&found) = places.get(target) else {
        return Err(BranchError::NoMessage(shortened(target)));
    };
    let At::Branch(run, _) = found else {
        return Ok(None);
    };
    let (climb, fork) = climb(&branches, &places, run)
        .ok_or_else(|| BranchError::Unreachable(shortened(target)))?;
    let keep = fork.map_or(0, |i| i + 1);
    let mut kept = Branches::default();
    let taken: HashSet<usize> = climb.iter().map(|(r, _)| *r).collect();
    for (i, branch) in branches.branches.iter().enumerate() {
        if !taken.contains(&i) {
            kept.branches.push(branch.clone());
        }
    }
    let mut suffix = Vec::new();
    for &(run, take) in climb.iter().rev() {
        let messages = &branches.branches[run].messages;
        suffix.extend(messages[..take].iter().cloned());
        // What followed in that branch stays a branch of its own, off the last message taken.
        if take < messages.len() {
            kept.branches.push(Branch::new(
                Some(messages[take - 1].id().into_owned()),
                messages[take..].to_vec(),
            ));
        }
    }
    let mut outgoing = None;
    if keep < path.len() {
        kept.branches.push(Branch::new(
            fork.map(|i| path[i].id().into_owned()),
            path[keep..].iter().cloned().map(with_id).collect(),
        ));
        outgoing = Some(kept.branches.len() - 1);
    }
    // The branch that hangs off the fork brings back the summary it left with.
    let top = climb.last().map(|&(run, _)| run);
    Ok(Some(Rebranch {
        keep,
        total: path.len(),
        last: path.last().cloned(),
        suffix,
        branches: kept,
        outgoing,
        incoming_summary: top.and_then(|run| branches.branches[run].summary.clone()),
    }))
}

/// A branch by index, and how many of its first messages a path takes.
type Taken = (usize, usize);

/// From branch `run` up to the path: each branch on the way with how many of its messages
/// lead down (the first, `run`, whole), and the path's message they hang off (`None`: the
/// first message's place). `None` when they do not lead back to the path.
fn climb(
    branches: &Branches,
    places: &HashMap<String, At>,
    mut run: usize,
) -> Option<(Vec<Taken>, Option<usize>)> {
    let mut climb = vec![(run, branches.branches[run].messages.len())];
    let mut seen = HashSet::from([run]);
    loop {
        let Some(parent) = branches.branches[run].parent.as_deref() else {
            return Some((climb, None));
        };
        match places.get(parent)? {
            At::Path(i) => return Some((climb, Some(*i))),
            At::Branch(r, i) => {
                if !seen.insert(*r) {
                    return None;
                }
                run = *r;
                climb.push((run, i + 1));
            }
        }
    }
}

/// Every message's place, by id (the path's first where an id repeats).
fn places(path: &[Message], branches: &Branches) -> HashMap<String, At> {
    let mut places = HashMap::new();
    for (r, branch) in branches.branches.iter().enumerate() {
        for (i, m) in branch.messages.iter().enumerate() {
            places.insert(m.id().into_owned(), At::Branch(r, i));
        }
    }
    for (i, m) in path.iter().enumerate() {
        places.insert(m.id().into_owned(), At::Path(i));
    }
    places
}

impl Branches {
    /// The ‹ n/m › of a new message after `parent` (`None`: a new first message), which is
    /// the newest of its versions; `None` when it has no other.
    pub fn newest(&self, parent: Option<&str>) -> Option<Versions> {
        let mut others: Vec<&Message> = self
            .branches
            .iter()
            .filter(|b| b.parent.as_deref() == parent)
            .filter_map(|b| b.messages.first())
            .collect();
        others.sort_by(|a, b| (a.ts, a.id()).cmp(&(b.ts, b.id())));
        let prev = others.last()?;
        Some(Versions {
            n: others.len() + 1,
            of: others.len() + 1,
            prev: Some(prev.id().into_owned()),
            next: None,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.branches.is_empty()
    }

    /// How many messages the branches hold.
    pub fn messages(&self) -> usize {
        self.branches.iter().map(|b| b.messages.len()).sum()
    }

    /// The branches without the leftovers of an interrupted change: empty ones, and those
    /// whose first message is on `path` (it was moved there).
    pub fn tidy(&self, path: &[Message]) -> Branches {
        let on_path: HashSet<_> = path.iter().map(|m| m.id()).collect();
        let mut seen = HashSet::new();
        Branches {
            branches: self
                .branches
                .iter()
                .filter(|b| {
                    b.messages.first().is_some_and(|first| {
                        let id = first.id();
                        !on_path.contains(&id) && seen.insert(id.into_owned())
                    })
                })
                .cloned()
                .collect(),
        }
    }

    /// The ‹ n/m › of each message of `window`, a part of the chosen path whose first
    /// message follows `before` (`None`: the window starts the conversation).
    pub fn versions(&self, window: &[Message], before: Option<&Message>) -> Vec<Option<Versions>> {
        if self.is_empty() {
            return vec![None; window.len()];
        }
        let mut off: HashMap<Option<String>, Vec<&Message>> = HashMap::new();
        for branch in &self.branches {
            if let Some(first) = branch.messages.first() {
                off.entry(branch.parent.clone()).or_default().push(first);
            }
        }
        let parents = std::iter::once(before).chain(window.iter().map(Some));
        window
            .iter()
            .zip(parents)
            .map(|(message, parent)| {
                let others = off.get(&parent.map(|p| p.id().into_owned()))?;
                versions_of(message, others)
            })
            .collect()
    }
}

/// The ‹ n/m › of `message` among itself and `others` (its siblings' first messages),
/// ordered by time then id; `None` when it has no sibling.
fn versions_of(message: &Message, others: &[&Message]) -> Option<Versions> {
    let id = message.id();
    let mut all: Vec<&Message> = others.iter().copied().filter(|m| m.id() != id).collect();
    if all.is_empty() {
        return None;
    }
    all.push(message);
    all.sort_by(|a, b| (a.ts, a.id()).cmp(&(b.ts, b.id())));
    let at = all.iter().position(|m| m.id() == id)?;
    Some(Versions {
        n: at + 1,
        of: all.len(),
        prev: at.checked_sub(1).map(|i| all[i].id().into_owned()),
        next: all.get(at + 1).map(|m| m.id().into_owned()),
    })
}

mod care;
#[cfg(test)]
mod tests;
