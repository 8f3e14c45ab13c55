//! The rolling summary in a turn: what is stored of it (read for the call), and the
//! summarizer run after the reply.

use super::{TurnContext, TurnError};
use crate::conversation::summarizer::Payer;
use crate::store::ConversationInfo;
use parlor_domain::turn::call::StoredSummary;
use parlor_domain::{ConversationId, Message};
use std::sync::Arc;

impl TurnContext<'_> {
    /// The rolling summary, when the agent's chain has the `summary` processor and the
    /// conversation has a summary; its maintenance signal counts `pending`, the message
    /// being stored with this turn.
    pub(super) async fn summary(
        &self,
        id: &ConversationId,
        pending: Option<&Message>,
    ) -> Result<Option<StoredSummary>, TurnError> {
        let chain = self.services.chain_for(self.agent);
        if !chain.names().contains(&"summary") {
            return Ok(None);
        }
        let store = &self.history.store;
        let summary = store.summary(id).await?;
        let stats = store.stats(id).await?;
        let pending_bytes = pending.map_or(0, |m| {
            serde_json::to_string(m).map_or(m.text.len(), |json| json.len() + 2)
        });
        let summary_bytes = summary.as_ref().map_or(0, |s| s.to_string().len());
        let bytes = stats.approx_bytes as usize + pending_bytes + summary_bytes;
        let maintenance = parlor_domain::summary::Maintenance::check(
            stats.messages + usize::from(pending.is_some()),
            bytes,
            self.services.config.maintenance,
            self.services.config.backup_retention,
        );
        Ok(Some(StoredSummary {
            summary,
            maintenance,
            failure: self.services.summarizers.failure(&self.history.id, id),
        }))
    }

    /// With the `summary` processor, what runs after the reply: the summarizer, when stored
    /// messages were left out of this call, or will be at the next turn's cut
    /// (`next_window_start`): then the summary is brought up to that cut ahead, so the one
    /// sent changes with the cut rather than a turn after it (one change of the prompt's
    /// prefix, not two).
    pub(super) fn summarize_after(
        &self,
        info: &ConversationInfo,
        first_sent: usize,
        next_window_start: Option<usize>,
    ) -> Option<Box<dyn FnOnce() + Send + Sync>> {
        let chain = self.services.chain_for(self.agent);
        let first_sent = next_window_start.map_or(first_sent, |next| next.max(first_sent));
        if first_sent == 0 || !chain.names().contains(&"summary") {
            return None;
        }
        let (services, history, agent) = (
            self.services.clone(),
            self.history.clone(),
            self.agent.clone(),
        );
        let (id, model) = (info.session_id.clone(), info.model.clone());
        let payer = self.payer();
        Some(Box::new(move || {
            crate::conversation::summarizer::spawn_after_reply(
                &services,
                (&history, &agent),
                id,
                model,
                first_sent,
                payer,
            )
        }))
    }

    /// Where the summaries this turn leads to are counted: the daily quota of the account
    /// chatting, when it has one.
    pub(super) fn payer(&self) -> Option<Arc<dyn Payer>> {
        let accounts = self.services.accounts.clone()?;
        let user = self.user.clone()?;
        Some(Arc::new(QuotaPayer { accounts, user }))
    }
}

/// What keeping the stored summary has cost, in nano-USD (priced models only).
pub(super) fn cost(summary: Option<&StoredSummary>) -> u64 {
    let summary = summary.and_then(|s| s.summary.as_ref());
    summary.map_or(0, |s| parlor_domain::summary::Covers::of(s).spent_nano_usd)
}

/// Counts a summary's model tokens against an account's daily quota.
struct QuotaPayer {
    accounts: Arc<crate::accounts::Accounts>,
    user: crate::accounts::User,
}

#[async_trait::async_trait]
impl Payer for QuotaPayer {
    async fn pay(&self, tokens: u64) {
        self.accounts.count(&self.user, tokens).await;
    }
}
