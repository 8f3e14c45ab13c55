//! The daily quota of model tokens (`PARLOR_TOKENS_PER_DAY`): what an account used today,
//! whether it may start another turn, and counting a turn's use.

use super::{Accounts, User};
use crate::store::StoreError;
use parlor_domain::account::{self as rules, UserName};
use std::sync::Arc;

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

    /// Reserves `tokens` of `user`'s quota for a turn about to start, atomically, so that
    /// parallel turns cannot overshoot the quota by more than one turn's estimate: refused
    /// (the quota as it stood) when the day's use had reached the quota already. Admins and
    /// accounts without a quota reserve nothing.
    pub async fn reserve(
        self: &Arc<Self>,
        user: &User,
        tokens: u64,
        now_ms: i64,
    ) -> Result<Option<Reserved>, ReserveError> {
        let per_day = self.config.tokens_per_day;
        if per_day == 0 || user.admin {
            return Ok(None);
        }
        let day = rules::quota_day(now_ms);
        let tokens = tokens.max(1);
        let total = self.store.add_usage(&user.name, day, tokens as i64).await?;
        let before = total.saturating_sub(tokens);
        if !rules::within_quota(before, per_day) {
            let _ = self
                .store
                .add_usage(&user.name, day, -(tokens as i64))
                .await;
            return Err(ReserveError::UsedUp(Quota {
                used: before,
                per_day,
                exempt: false,
                resets_ms: rules::quota_resets_ms(now_ms),
            }));
        }
        Ok(Some(Reserved {
            accounts: self.clone(),
            user: user.clone(),
            day,
            tokens,
            settled: false,
        }))
    }

    /// Counts `tokens` spent for `user` outside a turn (a summary, `!compact`) against
    /// their quota, when they have one.
    pub async fn count(&self, user: &User, tokens: u64) {
        if self.config.tokens_per_day == 0 || user.admin {
            return;
        }
        let day = rules::quota_day(crate::store::now_ms());
        if let Err(e) = self.store.add_usage(&user.name, day, tokens as i64).await {
            tracing::warn!("could not count {}'s use: {e}", user.name);
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

/// Why a turn could not reserve its tokens.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    #[error("the daily quota is used up")]
    UsedUp(Quota),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Tokens reserved for a turn: settled with what it used once it ends, given back if the
/// turn ends without settling (an error before the model was called).
pub struct Reserved {
    accounts: Arc<Accounts>,
    user: User,
    day: i64,
    tokens: u64,
    settled: bool,
}

impl Reserved {
    /// Counts what the turn used in place of the reservation (on the day it was made): the
    /// day's use as it stands then.
    pub async fn settle(mut self, used: u64) -> Option<parlor_domain::meter::DailyUse> {
        self.settled = true;
        let change = used as i64 - self.tokens as i64;
        let store = &self.accounts.store;
        match store.add_usage(&self.user.name, self.day, change).await {
            Ok(used) => Some(parlor_domain::meter::DailyUse {
                used,
                per_day: self.accounts.config.tokens_per_day,
            }),
            Err(e) => {
                tracing::warn!("could not count {}'s use: {e}", self.user.name);
                None
            }
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let (accounts, name, day) = (self.accounts.clone(), self.user.name.clone(), self.day);
        let back = -(self.tokens as i64);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = accounts.store.add_usage(&name, day, back).await {
                    tracing::warn!("could not give back {name}'s reserved tokens: {e}");
                }
            });
        }
    }
}
