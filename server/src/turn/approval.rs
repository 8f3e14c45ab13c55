//! A call that waits for the user's approval (`confirm`): asked in the stream, answered on
//! this process or, when the history is on Redis, on any process sharing it.

use super::tools::ToolRun;
use crate::store::shared_approvals::SharedWait;
use crate::tools::approval::Answer;
use crate::tools::Outcome;
use parlor_domain::event::ApprovalEvent;
use parlor_domain::message::ToolCall;
use parlor_domain::tool::Confirm;
use parlor_domain::ChatEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

impl ToolRun {
    /// Waits for the user's answer when the call's server asks for one (up to its timeout:
    /// then the call is denied); the error result when it is not approved.
    pub(super) async fn approval(
        &self,
        call: &ToolCall,
        stop: &CancellationToken,
        tx: &mpsc::Sender<ChatEvent>,
    ) -> Result<(), Outcome> {
        let Some(spec) = self.server_of(call).and_then(|s| self.tools.spec(s)) else {
            return Ok(());
        };
        let approved_before = self.approved.lock().is_ok_and(|a| a.contains(&spec.id));
        if !spec.confirm.waits(approved_before) {
            return Ok(());
        }
        let approvals = &self.tools.approvals;
        let mut waiting = approvals.ask(&self.history, &self.session, &call.id);
        let shared = self.shared_wait(&call.id, spec.timeout).await;
        let event = ApprovalEvent {
            id: call.id.clone(),
            tool: call.name.clone(),
            server: spec.id.clone(),
            arguments: call.arguments.clone(),
            timeout_secs: spec.timeout.as_secs(),
            first_use: spec.confirm == Confirm::First,
        };
        let _ = tx.send(ChatEvent::Approval(event)).await;
        let secs = spec.timeout.as_secs();
        let answer = tokio::select! {
            answer = waiting.answered() => answer,
            answer = elsewhere(shared.as_ref()) => Some(answer),
            _ = tokio::time::sleep(spec.timeout) => {
                let why = format!("No one approved {} within {secs} s, so it was denied.", call.name);
                return Err(Outcome::error(why));
            }
            _ = stop.cancelled() => {
                let why = format!("{} was cancelled: the user stopped the turn.", call.name);
                return Err(Outcome::error(why));
            }
        };
        let for_conversation = match answer {
            Some(Answer::Once) => false,
            Some(Answer::Conversation) => spec.confirm == Confirm::First,
            Some(Answer::Deny) | None => {
                let why = format!("The user denied this call of {}.", call.name);
                return Err(Outcome::error(why));
            }
        };
        if for_conversation {
            if let Ok(mut approved) = self.approved.lock() {
                if !approved.contains(&spec.id) {
                    approved.push(spec.id.clone());
                }
            }
        }
        Ok(())
    }

    /// The call's wait as other processes see it (none without Redis, or when Redis is
    /// away: then only this process can answer).
    async fn shared_wait(&self, call: &str, wait: std::time::Duration) -> Option<SharedWait> {
        let redis = self.redis.as_ref()?;
        let opened = SharedWait::open(redis, &self.history, &self.session, call, wait).await;
        opened
            .inspect_err(|e| {
                tracing::warn!("approvals from other processes are off for this call: {e}")
            })
            .ok()
    }
}

/// An answer given on another process (never, without a shared wait).
async fn elsewhere(shared: Option<&SharedWait>) -> Answer {
    match shared {
        Some(shared) => shared.answered().await,
        None => std::future::pending().await,
    }
}
