//! Calls waiting for the user's approval (`confirm`): the loop asks and waits, the page or an
//! API client answers through `POST …/tool-calls/{call_id}`: deny, allow once, or allow for
//! the rest of the conversation. A call is answered once: after an answer, a timeout or the
//! end of its turn, nothing waits under its id any more. Calls are known by their history,
//! conversation and Parlor's own call id.

use parlor_domain::ConversationId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A history's id, a conversation, a call.
type Key = (String, ConversationId, String);

/// The user's answer to a waiting call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Deny,
    /// This call only.
    Once,
    /// This call, and the server's later calls in the conversation (`confirm = "first"`).
    Conversation,
}

/// Every call waiting for an answer.
#[derive(Default)]
pub struct Approvals {
    pending: Mutex<HashMap<Key, oneshot::Sender<Answer>>>,
}

/// A call's wait: resolves with the answer; dropping it withdraws the question.
pub struct Waiting {
    approvals: Arc<Approvals>,
    key: Key,
    answer: oneshot::Receiver<Answer>,
}

impl Approvals {
    /// Asks about call `call_id` of `session` in history `history`; a question asked again
    /// replaces the first.
    pub fn ask(
        self: &Arc<Self>,
        history: &str,
        session: &ConversationId,
        call_id: &str,
    ) -> Waiting {
        let (tx, answer) = oneshot::channel();
        let key = (history.to_owned(), session.clone(), call_id.to_owned());
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
    pub fn answer(
        &self,
        history: &str,
        session: &ConversationId,
        call_id: &str,
        answer: Answer,
    ) -> bool {
        let key = (history.to_owned(), session.clone(), call_id.to_owned());
        let waiting = self.pending.lock().ok().and_then(|mut p| p.remove(&key));
        waiting.is_some_and(|tx| tx.send(answer).is_ok())
    }

    /// How many calls wait.
    pub fn waiting(&self) -> usize {
        self.pending.lock().map_or(0, |p| p.len())
    }
}

impl Waiting {
    /// The answer (`None` if the question was withdrawn).
    pub async fn answered(&mut self) -> Option<Answer> {
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
        let mut waiting = approvals.ask("default", &session, "c1");
        let other = ConversationId::parse("s2").unwrap();
        assert!(!approvals.answer("default", &other, "c1", Answer::Once));
        assert!(
            !approvals.answer("team", &session, "c1", Answer::Once),
            "another history's conversation of the same name"
        );
        assert!(approvals.answer("default", &session, "c1", Answer::Conversation));
        assert!(
            !approvals.answer("default", &session, "c1", Answer::Deny),
            "answered twice"
        );
        assert_eq!(waiting.answered().await, Some(Answer::Conversation));
        let timed_out = approvals.ask("default", &session, "c2");
        drop(timed_out);
        assert!(
            !approvals.answer("default", &session, "c2", Answer::Once),
            "after its wait ended"
        );
        assert_eq!(approvals.waiting(), 0);
    }
}
