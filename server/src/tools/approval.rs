//! Calls waiting for the user's approval (`confirm`): the loop asks and waits, the page or an
//! API client answers through `POST …/tool-calls/{call_id}`. A call is answered once: after
//! an answer, a timeout or the end of its turn, nothing waits under its id any more.

use parlor_domain::ConversationId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

type Key = (ConversationId, String);

/// Every call waiting for an answer, by conversation and call id.
#[derive(Default)]
pub struct Approvals {
    pending: Mutex<HashMap<Key, oneshot::Sender<bool>>>,
}

/// A call's wait: resolves with the answer; dropping it withdraws the question.
pub struct Waiting {
    approvals: Arc<Approvals>,
    key: Key,
    answer: oneshot::Receiver<bool>,
}

impl Approvals {
    /// Asks about call `call_id` of `session`; a question asked again replaces the first.
    pub fn ask(self: &Arc<Self>, session: &ConversationId, call_id: &str) -> Waiting {
        let (tx, answer) = oneshot::channel();
        let key = (session.clone(), call_id.to_owned());
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(key.clone(), tx);
        }
        Waiting {
            approvals: self.clone(),
            key,
            answer,
        }
    }

    /// Answers a waiting call; `false` when none waits under that id.
    pub fn answer(&self, session: &ConversationId, call_id: &str, approve: bool) -> bool {
        let key = (session.clone(), call_id.to_owned());
        let waiting = self.pending.lock().ok().and_then(|mut p| p.remove(&key));
        waiting.is_some_and(|tx| tx.send(approve).is_ok())
    }

    /// How many calls wait.
    pub fn waiting(&self) -> usize {
        self.pending.lock().map_or(0, |p| p.len())
    }
}

impl Waiting {
    /// The answer (`None` if the question was withdrawn).
    pub async fn answered(&mut self) -> Option<bool> {
        (&mut self.answer).await.ok()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Ok(mut pending) = self.approvals.pending.lock() {
            pending.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_is_answered_once_and_not_after_its_wait_ends() {
        let approvals = Arc::new(Approvals::default());
        let session = ConversationId::parse("s1").unwrap();
        let mut waiting = approvals.ask(&session, "c1");
        assert!(!approvals.answer(&ConversationId::parse("s2").unwrap(), "c1", true));
        assert!(approvals.answer(&session, "c1", true));
        assert!(!approvals.answer(&session, "c1", false), "answered twice");
        assert_eq!(waiting.answered().await, Some(true));
        let timed_out = approvals.ask(&session, "c2");
        drop(timed_out);
        assert!(
            !approvals.answer(&session, "c2", true),
            "after its wait ended"
        );
        assert_eq!(approvals.waiting(), 0);
    }
}
