//! Keeping the stored versions sound: a version goes with the message it hangs off, the
//! oldest go first past a bound, and what is wrong is named.

use super::{Branch, Branches, VersionFacts, Versioned};
use crate::message::Message;
use std::collections::{HashMap, HashSet};

impl Branches {
    /// Drops the branches whose parent is not stored (on `path` or in another kept branch):
    /// a branch goes with the message it hangs off. `roots_gone` (the path's first messages
    /// were trimmed) drops the versions of the first message too. Returns how many messages
    /// went.
    pub fn drop_orphans(&mut self, path: &[Message], roots_gone: bool) -> usize {
        let before = self.messages();
        let mut known: HashSet<String> = path.iter().map(|m| m.id().into_owned()).collect();
        let mut kept = Vec::new();
        let mut pending: Vec<Branch> = std::mem::take(&mut self.branches)
            .into_iter()
            .filter(|b| !(roots_gone && b.parent.is_none()))
            .collect();
        loop {
            let (ready, waiting): (Vec<_>, Vec<_>) = pending
                .into_iter()
                .partition(|b| b.parent.as_ref().is_none_or(|p| known.contains(p)));
            if ready.is_empty() {
                break;
            }
            for branch in ready {
                known.extend(branch.messages.iter().map(|m| m.id().into_owned()));
                kept.push(branch);
            }
            pending = waiting;
        }
        self.branches = kept;
        before - self.messages()
    }

    /// Keeps at most `max` messages in branches, dropping the oldest branches (by their first
    /// message's time) whole, with the branches that hang off them.
    pub fn cap(&mut self, path: &[Message], max: usize) {
        while self.messages() > max {
            let Some(oldest) = (0..self.branches.len())
                .min_by_key(|&i| self.branches[i].messages.first().map(|m| m.ts))
            else {
                return;
            };
            self.branches.remove(oldest);
            self.drop_orphans(path, false);
        }
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
        let tidy = self.tidy(path);
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
