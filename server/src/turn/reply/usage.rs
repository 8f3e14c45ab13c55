//! What a reply used: the tokens counted against the account's quota, and the provider's
//! usage in the debug report and the meter.

use super::Reply;
use crate::store::now_ms;
use parlor_domain::DoneEvent;

impl Reply {
    /// The tokens of this call against the account's quota: what the provider reports, else
    /// the estimate of what was sent and of the reply.
    pub(super) async fn count_use(&self, done: &mut DoneEvent) {
        let Some(quota) = &self.quota else {
            return;
        };
        let used = match &done.usage {
            Some(usage) => usage.prompt_tokens + usage.completion_tokens,
            None => {
                let sent = self.info.last_turn.as_ref().map_or(0, |t| t.tokens_sent);
                sent + done.message_tokens.unwrap_or(0)
            }
        };
        let today = quota.accounts.count_use(&quota.user, used, now_ms()).await;
        if done.meter.is_none() && today.is_some() {
            // Without the provider's usage the meter is the turn's own; it carries the day's
            // use too.
            done.meter = self.info.last_turn.as_ref().and_then(|t| t.meter.clone());
        }
        if let Some(meter) = done.meter.as_mut() {
            meter.today = today;
        }
    }

    /// The provider's usage replaces the estimate in the debug report and the meter, which
    /// prices the call when the model has prices; `done` carries the meter.
    pub(super) async fn record_usage(&mut self, done: &mut DoneEvent) {
        let Some(usage) = &done.usage else {
            return;
        };
        let info = &mut self.info;
        if let Some(turn) = info.last_turn.take() {
            let mut turn = Box::new(turn.with_usage(Some(usage)));
            turn.meter = turn
                .meter
                .map(|m| m.with_usage(usage, self.prices, info.spent_nano_usd));
            if let Some(cost) = turn.meter.as_ref().and_then(|m| m.cost) {
                info.spent_nano_usd = cost.conversation_nano_usd;
            }
            done.meter.clone_from(&turn.meter);
            info.last_turn = Some(turn);
        }
        let info = &self.info;
        if let Err(e) = self.history.store.put_info(info).await {
            tracing::error!(
                "could not store the token count of {}: {e}",
                info.session_id
            );
        }
    }
}
