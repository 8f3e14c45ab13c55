//! What a reply used: the tokens counted against the account's quota, and the provider's
//! usage in the debug report and the meter.

use super::super::tools::Spent;
use super::Reply;
use parlor_domain::DoneEvent;

impl Reply {
    /// What the turn's calls used: those that asked for tools, and when the user stopped
    /// the turn (`stopped`) while a call was under way, that call's request and what it
    /// wrote (Stop is no way around the quota).
    pub(super) fn spent(&self, written: &super::Written, stopped: bool) -> Spent {
        let mut spent = written.progress.spent;
        let calls = &written.progress.call_tokens;
        let in_flight = calls.is_empty() || calls.len() > written.progress.round as usize;
        if stopped && in_flight {
            let sent = self.info.last_turn.as_ref().map_or(0, |t| t.tokens_sent);
            spent.prompt += calls.last().copied().unwrap_or(sent);
            let text = parlor_domain::Message::assistant(written.text.as_str(), 0);
            spent.completion += self.tokens.count(&text);
        }
        spent
    }

    /// The tokens of the turn against the account's quota: those of the calls that asked for
    /// tools (`earlier`), and of the last call (`done`, when the turn finished): what the
    /// provider reports, else the estimate of what was sent and of the reply.
    pub(super) async fn count_use(&mut self, done: Option<&mut DoneEvent>, earlier: Spent) {
        let Some(quota) = self.quota.take() else {
            return;
        };
        let earlier = earlier.prompt + earlier.completion;
        let last = match done.as_deref().map(|d| (&d.usage, d.message_tokens)) {
            None => 0,
            Some((Some(usage), _)) => usage.prompt_tokens + usage.completion_tokens,
            Some((None, reply)) => {
                let sent = self.info.last_turn.as_ref().map_or(0, |t| t.tokens_sent);
                // A later call of the turn sent what its own count says.
                let sent = self.last_call_tokens().unwrap_or(sent);
                sent + reply.unwrap_or(0)
            }
        };
        let today = quota.reserved.settle(earlier + last).await;
        let Some(done) = done else {
            return;
        };
        if done.meter.is_none() && today.is_some() {
            // Without the provider's usage the meter is the turn's own; it carries the day's
            // use too.
            done.meter = self.info.last_turn.as_ref().and_then(|t| t.meter.clone());
        }
        if let Some(meter) = done.meter.as_mut() {
            meter.today = today;
        }
    }

    /// The tokens of the turn's last model call, when it made more than one.
    fn last_call_tokens(&self) -> Option<u64> {
        let tools = self.info.last_turn.as_ref()?.tools.as_ref()?;
        tools
            .call_tokens
            .last()
            .copied()
            .filter(|_| tools.call_tokens.len() > 1)
    }

    /// The provider's usage replaces the estimate in the debug report and the meter, which
    /// prices the call when the model has prices; `done` carries the meter.
    /// The calls that asked for tools (`earlier`, as the provider reported them) are priced
    /// into the turn's and the conversation's cost too.
    pub(super) async fn record_usage(&mut self, done: &mut DoneEvent, earlier: Spent) {
        let Some(usage) = &done.usage else {
            return;
        };
        let info = &mut self.info;
        if let Some(turn) = info.last_turn.take() {
            let mut turn = Box::new(turn.with_usage(Some(usage)));
            let last = parlor_domain::cache::CacheUse::of(
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.cache_write_tokens,
            );
            crate::ops::metrics::prompt_tokens(&turn.model, last.plus(earlier.cache()));
            let before = self.prices.map_or(0, |p| {
                p.nano_usd_cached(earlier.cache(), earlier.completion)
            });
            // The summary's cost is shown with the conversation's, and kept with the summary.
            let shown = info.spent_nano_usd + before + self.summary_nano_usd;
            turn.meter = turn.meter.map(|m| m.with_usage(usage, self.prices, shown));
            if let Some(cost) = turn.meter.as_mut().and_then(|m| m.cost.as_mut()) {
                cost.turn_nano_usd = cost.turn_nano_usd.map(|t| t + before);
                info.spent_nano_usd = cost
                    .conversation_nano_usd
                    .saturating_sub(self.summary_nano_usd);
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
