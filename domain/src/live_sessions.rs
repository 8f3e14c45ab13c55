//! Live sessions: how many conversations are being chatted in, for `max_users`, and which
//! have been idle too long, for the reaper. Times are milliseconds since the epoch, passed
//! in, so the rules are testable without a clock.

use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Session limit reached ({active} active sessions). Try again later.")]
pub struct LimitReached {
    pub active: usize,
}

#[derive(Clone, Debug, Default)]
pub struct LiveSessionTable {
    last_active: HashMap<String, i64>,
}

impl LiveSessionTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `key` active at `now`. A session that is not live yet is admitted only while
    /// fewer than `max_users` are (0: no limit); live ones are always let through, so
    /// lowering the limit never evicts anyone.
    pub fn touch(&mut self, key: &str, now: i64, max_users: usize) -> Result<(), LimitReached> {
        if let Some(at) = self.last_active.get_mut(key) {
            *at = (*at).max(now);
            return Ok(());
        }
        if max_users > 0 && self.last_active.len() >= max_users {
            return Err(LimitReached {
                active: self.last_active.len(),
            });
        }
        self.last_active.insert(key.to_owned(), now);
        Ok(())
    }

    /// Frees the sessions idle for strictly longer than `timeout_ms` (0: none); returns them.
    pub fn reap(&mut self, now: i64, timeout_ms: u64) -> Vec<String> {
        if timeout_ms == 0 {
            return Vec::new();
        }
        let oldest_kept = now.saturating_sub(timeout_ms.min(i64::MAX as u64) as i64);
        let mut reaped = Vec::new();
        self.last_active.retain(|key, at| {
            let keep = *at >= oldest_kept;
            if !keep {
                reaped.push(key.clone());
            }
            keep
        });
        reaped
    }

    pub fn len(&self) -> usize {
        self.last_active.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last_active.is_empty()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.last_active.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_admits_up_to_n_and_refuses_the_next() {
        let mut table = LiveSessionTable::new();
        table.touch("a", 0, 2).unwrap();
        table.touch("b", 0, 2).unwrap();
        assert_eq!(table.touch("c", 0, 2), Err(LimitReached { active: 2 }));
        assert_eq!(
            LimitReached { active: 2 }.to_string(),
            "Session limit reached (2 active sessions). Try again later."
        );
        table.touch("a", 5, 2).unwrap();
        assert!(!table.contains("c"));
    }

    #[test]
    fn lowering_the_limit_keeps_live_sessions_and_zero_means_no_limit() {
        let mut table = LiveSessionTable::new();
        for key in ["a", "b", "c"] {
            table.touch(key, 0, 0).unwrap();
        }
        table.touch("b", 1, 1).unwrap();
        assert!(table.touch("d", 1, 1).is_err());
        assert_eq!(table.len(), 3);
        table.touch("d", 1, 0).unwrap();
    }

    #[test]
    fn the_reaper_frees_sessions_strictly_older_than_the_timeout() {
        let mut table = LiveSessionTable::new();
        table.touch("old", 0, 0).unwrap();
        table.touch("edge", 1_000, 0).unwrap();
        table.touch("new", 1_500, 0).unwrap();
        assert!(table.reap(2_000, 0).is_empty(), "0 disables the reaper");
        assert_eq!(
            table.reap(2_000, 1_000),
            ["old"],
            "exactly the timeout is kept"
        );
        assert!(table.contains("edge"));
        assert_eq!(table.reap(2_001, 1_000), ["edge"]);
        // A reaped session's slot is free again.
        table.touch("x", 2_001, 2).unwrap();
        assert!(table.touch("y", 2_001, 2).is_err());
    }
}
