//! The daily quota of model tokens (`PARLOR_TOKENS_PER_DAY`): what an account used today,
//! whether it may start another turn, and counting a turn's use.

use super::{Accounts, User};
use crate::store::StoreError;
use parlor_domain::account::{self as rules, UserName};

impl Accounts {
    /// What `name` used today and whether it may start another turn.
    pub async fn quota(&self, user: &User, now_ms: i64) -> Result<Quota, StoreError> {
        let per_day = self.config.tokens_per_day;
        let used = match per_day {
            0 => 0,
            _ => {
                self.store
                    .usage(&user.name, rules::quota_day(now_ms))
                    .await?
            }
        };
        Ok(Quota {
            used,
            per_day,
            exempt: user.admin,
            resets_ms: rules::quota_resets_ms(now_ms),
        })
    }

    /// Counts `tokens` of `user`'s use today: the day's use as it stands then (when a quota
    /// is set and the count could be kept).
    pub async fn count_use(
        &self,
        user: &User,
        tokens: u64,
        now_ms: i64,
    ) -> Option<parlor_domain::meter::DailyUse> {
        let per_day = self.config.tokens_per_day;
        if per_day == 0 {
            return None;
        }
        let day = rules::quota_day(now_ms);
        match self.store.add_usage(&user.name, day, tokens).await {
            Ok(used) => Some(parlor_domain::meter::DailyUse { used, per_day }),
            Err(e) => {
                tracing::warn!("could not count {}'s use: {e}", user.name);
                None
            }
        }
    }

    /// `name`'s use of the daily quota today, when one is set (the chat page's meter).
    pub async fn daily_use(
        &self,
        name: &str,
        now_ms: i64,
    ) -> Option<parlor_domain::meter::DailyUse> {
        let per_day = self.config.tokens_per_day;
        let name = UserName::parse(name).ok().filter(|_| per_day > 0)?;
        let used = self
            .store
            .usage(&name, rules::quota_day(now_ms))
            .await
            .ok()?;
        Some(parlor_domain::meter::DailyUse { used, per_day })
    }
}

/// An account's daily quota as it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub used: u64,
    /// 0: no quota.
    pub per_day: u64,
    /// Admins are.
    pub exempt: bool,
    pub resets_ms: i64,
}

impl Quota {
    pub fn allows_a_turn(&self) -> bool {
        self.exempt || rules::within_quota(self.used, self.per_day)
    }
}
