//! The built-in `parlor` tool server's tools, for one turn: search and read the
//! conversations of the current conversation's owner, never another's. A conversation
//! without an owner (an API client's) can recall nothing.

use crate::state::Services;
use crate::tools::builtin::{READ, SEARCH};
use crate::tools::{Arguments, Outcome, Recall};
use parlor_domain::block::Part;
use parlor_domain::{ConversationId, Message, SendMark};
use std::sync::Arc;

/// The most messages `read_conversation` returns.
const MAX_LAST: u64 = 50;
const DEFAULT_LAST: u64 = 10;

/// The built-in tools as the owner of one conversation may use them.
pub struct OwnerRecall {
    pub services: Arc<Services>,
    /// The owner of the conversation whose turn calls the tools.
    pub owner: Option<String>,
    /// That conversation: not among the earlier ones a search finds.
    pub current: ConversationId,
}

#[async_trait::async_trait]
impl Recall for OwnerRecall {
    async fn call(&self, tool: &str, arguments: Arguments) -> Outcome {
        let Some(owner) = self.owner.as_deref() else {
            return Outcome::error(
                "This conversation has no owner, so there are no earlier conversations to recall.",
            );
        };
        let text = |key: &str| {
            arguments
                .get(key)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        match tool {
            SEARCH => self.search(owner, &text("query")).await,
            READ => {
                let last = arguments
                    .get("last")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(DEFAULT_LAST);
                self.read(owner, &text("session_id"), last.clamp(1, MAX_LAST))
                    .await
            }
            other => Outcome::error(format!("The parlor server has no tool {other:?}.")),
        }
    }
}

fn answer(text: String) -> Outcome {
    Outcome {
        ok: true,
        bytes: text.len() as u64,
        content: vec![Part::Text { text }],
        ms: 0,
        waited_us: 0,
    }
}

impl OwnerRecall {
    async fn search(&self, owner: &str, query: &str) -> Outcome {
        if query.trim().is_empty() {
            return Outcome::error("Give a query: the words to look for.");
        }
        let found = super::search_owned(&self.services.histories, owner, query).await;
        let earlier = found.map(|hits| {
            let current = self.current.as_str();
            hits.into_iter()
                .filter(|h| h.session_id != current)
                .collect::<Vec<_>>()
        });
        match earlier {
            Ok(hits) if hits.is_empty() => answer(format!("No conversation mentions {query:?}.")),
            Ok(hits) => {
                let lines: Vec<String> = hits
                    .iter()
                    .map(|h| format!("- session_id {}: {:?}: {}", h.session_id, h.title, h.line))
                    .collect();
                answer(lines.join("\n"))
            }
            Err(e) => Outcome::error(format!("The search failed: {e}")),
        }
    }

    async fn read(&self, owner: &str, session_id: &str, last: u64) -> Outcome {
        let not_found = || Outcome::error(format!("No conversation {session_id:?} of this user."));
        let Ok(id) = ConversationId::parse(session_id) else {
            return not_found();
        };
        if id == self.current {
            // What of it is sent is the policy's and the user's marks' to say, not a tool's.
            return Outcome::error(
                "That is the current conversation: what of it the model receives is already here.",
            );
        }
        for history_id in self.services.histories.ids() {
            let Some(history) = self.services.histories.get(history_id) else {
                continue;
            };
            let Ok(Some(info)) = history.store.info(&id).await else {
                continue;
            };
            // Another owner's conversation is as absent as one that does not exist.
            if info.owner.as_deref() != Some(owner) {
                return not_found();
            }
            return match history.store.load_tail(&id, last as usize).await {
                Ok(mut tail) => {
                    // A message the user marked "Don't send" is not sent this way either.
                    tail.messages.retain(|m| m.send != Some(SendMark::Never));
                    answer(transcript(&info.title, &tail.messages))
                }
                Err(e) => Outcome::error(format!("The conversation could not be read: {e}")),
            };
        }
        not_found()
    }
}

/// Messages as lines a model reads: `role: text`, a tool call or result named.
fn transcript(title: &str, messages: &[Message]) -> String {
    let mut out = format!(
        "Conversation {title:?}, its last {} messages:\n",
        messages.len()
    );
    for m in messages {
        let text: String = m.texts().collect::<Vec<_>>().concat();
        let line = match (&m.tool, m.tool_calls.first()) {
            (Some(answer), _) => format!("tool ({}): {text}", answer.name),
            (None, Some(_)) => {
                let names: Vec<&str> = m.tool_calls.iter().map(|c| c.name.as_str()).collect();
                format!("{}: [asked for {}] {text}", m.role, names.join(", "))
            }
            _ => format!("{}: {text}", m.role),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}
