//! Keeping the stored versions sound: a version goes with the message it hangs off, the
//! oldest go first past a bound, and what is wrong is named.

use super::{Branch, Branches, VersionFacts, Versioned};
use crate::message::Message;
use std::collections::{HashMap, HashSet};

impl Branches {
    /// After the path's messages at `removed` (indexes in `path`, as it was) were removed
    /// (a pruning pass removes a message left with nothing to send): each version that hung
    /// off one of them hangs off the nearest message before it that stays (`None`: the
    /// start), so no version is left without its parent. `None` when none hung off them.
    pub fn reparented(&self, path: &[Message], removed: &[usize]) -> Option<Branches> {
        let gone: HashSet<usize> = removed.iter().copied().collect();
        let mut new_parent: HashMap<String, Option<String>> = HashMap::new();
        for &at in removed.iter().filter(|&&at| at < path.len()) {
            let before = (0..at).rev().find(|i| !gone.contains(i));
            let parent = before.map(|i| path[i].id().into_owned());
            new_parent.insert(path[at].id().into_owned(), parent);
        }
        let mut changed = false;
        let mut branches = self.clone();
        for branch in &mut branches.branches {
            if let Some(parent) = branch.parent.as_deref().and_then(|p| new_parent.get(p)) {
                branch.parent = parent.clone();
                changed = true;
            }
        }
        changed.then_some(branches)
    }

    /// Drops the branches whose parent is not stored (on `path` or in another kept branch):
    /// a branch goes with the message it hangs off. `roots_gone` (the path's first messages
    /// were trimmed) drops the versions of the first message too. Returns how many messages
    /// went. Linear in what is stored, however deep the versions nest.
    pub fn drop_orphans(&mut self, path: &[Message], roots_gone: bool) -> usize {
        let before = self.messages();
        let branches = std::mem::take(&mut self.branches);
        let mut by_parent: HashMap<Option<String>, Vec<usize>> = HashMap::new();
        for (i, branch) in branches.iter().enumerate() {
            if !(roots_gone && branch.parent.is_none()) {
                by_parent.entry(branch.parent.clone()).or_default().push(i);
            }
        }
        // From the path (and the conversation's start) down every branch reached.
        let mut reached: Vec<Option<String>> = vec![None];
        reached.extend(path.iter().map(|m| Some(m.id().into_owned())));
        let mut keep = vec![false; branches.len()];
        while let Some(parent) = reached.pop() {
            for i in by_parent.remove(&parent).unwrap_or_default() {
                keep[i] = true;
                reached.extend(
                    branches[i]
                        .messages
                        .iter()
                        .map(|m| Some(m.id().into_owned())),
                );
            }
        }
        self.branches = branches
            .into_iter()
            .zip(keep)
            .filter_map(|(branch, kept)| kept.then_some(branch))
            .collect();
        before - self.messages()
    }

    /// The branches a reader is shown: [`Branches::tidy`], without those that do not lead
    /// back to the path.
    pub fn shown(&self, path: &[Message]) -> Branches {
        let mut shown = self.tidy(path);
        shown.drop_orphans(path, false);
        shown
    }

    /// Keeps at most `max` messages in branches, dropping the oldest branches (by their first
    /// message's time) whole, with the branches that hang off them.
    pub fn cap(&mut self, path: &[Message], max: usize) {
        let mut excess = self.messages().saturating_sub(max);
        if excess == 0 {
            return;
        }
        let mut oldest: Vec<usize> = (0..self.branches.len()).collect();
        oldest.sort_by_key(|&i| self.branches[i].messages.first().map(|m| m.ts));
        let mut dropped = vec![false; self.branches.len()];
        for i in oldest {
            if excess == 0 {
                break;
            }
            dropped[i] = true;
            excess = excess.saturating_sub(self.branches[i].messages.len());
        }
        let mut at = 0;
        self.branches.retain(|_| {
            at += 1;
            !dropped[at - 1]
        });
        self.drop_orphans(path, false);
    }

    /// What is wrong with the stored branches, one line each (empty when nothing is):
    /// empty branches, parents that are not stored, branches that do not lead back to the
    /// path (a cycle), ids stored twice.
    pub fn problems(&self, path: &[Message]) -> Vec<String> {
        let mut problems = Vec::new();
        let mut ids: HashMap<String, usize> = HashMap::new();
        for m in path {
            *ids.entry(m.id().into_owned()).or_default() += 1;
        }
        for (i, branch) in self.branches.iter().enumerate() {
            if branch.messages.is_empty() {
                problems.push(format!("branch {i} holds no message"));
            }
            for m in &branch.messages {
                *ids.entry(m.id().into_owned()).or_default() += 1;
            }
        }
        let mut twice: Vec<_> = ids.iter().filter(|(_, n)| **n > 1).collect();
        twice.sort();
        for (id, n) in twice {
            problems.push(format!("message {id} is stored {n} times"));
        }
        let mut reachable = self.clone();
        if reachable.drop_orphans(path, false) > 0 {
            let first = |b: &Branch| b.messages.first().map(|m| m.id().into_owned());
            let kept: HashSet<_> = reachable.branches.iter().map(first).collect();
            for (i, branch) in self.branches.iter().enumerate() {
                if !branch.messages.is_empty() && !kept.contains(&first(branch)) {
                    problems.push(format!(
                        "branch {i} hangs off {:?}, which does not lead back to the path",
                        branch.parent.as_deref().unwrap_or("")
                    ));
                }
            }
        }
        problems
    }

    /// What the debug panel says of the versions beside `path` (`None` when there are none):
    /// how many, and where on the path messages have several (the first [`MOST_SHOWN`]).
    pub fn facts(&self, path: &[Message]) -> Option<VersionFacts> {
        let tidy = self.shown(path);
        if tidy.is_empty() {
            return None;
        }
        let at = tidy
            .versions(path, None)
            .into_iter()
            .enumerate()
            .filter_map(|(index, v)| {
                v.map(|v| Versioned {
                    index,
                    n: v.n,
                    of: v.of,
                })
            })
            .take(MOST_SHOWN)
            .collect();
        Some(VersionFacts {
            path: path.len(),
            branches: tidy.branches.len(),
            off_path: tidy.messages(),
            at,
        })
    }
}

/// How many places with versions the debug panel names.
const MOST_SHOWN: usize = 50;
