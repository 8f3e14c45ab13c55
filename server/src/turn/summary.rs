//! The rolling summary in a turn: what is stored of it, what the debug panel says of it,
//! and the summarizer run after the reply.

use super::{TurnContext, TurnError};
use crate::models::{token_counter, ModelSpec};
use crate::store::ConversationInfo;
use parlor_domain::plan::Plan;
use parlor_domain::{Message, Role, SessionId};

/// A conversation's rolling summary and its maintenance signal.
pub(crate) struct StoredSummary {
    /// `None` while there is none yet (the maintenance signal is still reported).
    pub(super) summary: Option<serde_json::Value>,
    pub(super) maintenance: Option<parlor_domain::summary::Maintenance>,
}

impl TurnContext<'_> {
    /// The rolling summary, when the agent's chain has the `summary` processor and the
    /// conversation has a summary; its maintenance signal counts `pending`, the message
    /// being stored with this turn.
    pub(super) async fn summary(
        &self,
        id: &SessionId,
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
        }))
    }

    /// What the debug panel says of the summary on this call.
    pub(super) fn summary_report(
        &self,
        stored: &StoredSummary,
        plan: &Plan,
        model: Option<&ModelSpec>,
        info: &ConversationInfo,
    ) -> parlor_domain::summary::SummaryReport {
        use parlor_domain::summary::{SummaryReport, SUMMARY_LABEL};
        let failure = self
            .services
            .summarizers
            .failure(&self.history.id, &info.session_id);
        let Some(summary) = &stored.summary else {
            return SummaryReport {
                failure,
                maintenance: stored.maintenance.clone(),
                ..SummaryReport::default()
            };
        };
        let sent = plan
            .messages
            .iter()
            .find(|m| m.role == Role::System && m.text.starts_with(SUMMARY_LABEL));
        let tokens = token_counter(model.map(|m| m.upstream.as_str()).unwrap_or_default());
        let text = Message::system(parlor_domain::summary::for_model(summary), 0);
        let tokens = tokens.count(sent.unwrap_or(&text));
        SummaryReport {
            maintenance: stored.maintenance.clone(),
            ..SummaryReport::new(summary, sent.is_some(), tokens, failure)
        }
    }

    /// With the `summary` processor, what runs after the reply: the summarizer, when stored
    /// messages were left out of this call.
    pub(super) fn summarize_after(
        &self,
        info: &ConversationInfo,
        first_sent: usize,
    ) -> Option<Box<dyn FnOnce() + Send + Sync>> {
        let chain = self.services.chain_for(self.agent);
        if first_sent == 0 || !chain.names().contains(&"summary") {
            return None;
        }
        let (services, history, agent) = (
            self.services.clone(),
            self.history.clone(),
            self.agent.clone(),
        );
        let (id, model) = (info.session_id.clone(), info.model.clone());
        Some(Box::new(move || {
            crate::summarizer::spawn_after_reply(&services, &history, &agent, id, model, first_sent)
        }))
    }
}
