//! Tool exchanges in what a model receives (spec `tools.md`, "Stored and sent"): an
//! assistant message carrying `tool_calls`, immediately followed by the `tool` messages that
//! answer each call. An exchange is sent whole or not at all; its results may be sent as
//! stubs (retention over, or the token budget) but never without their call.

use crate::block::{ContextBlock, Part};
use crate::message::{Message, Role};

/// What a model receives in place of a result the token budget left out of one request
/// (the stored result stays whole).
pub fn budget_stub(tool: &str, bytes: u64) -> String {
    format!(
        "[result of {tool} left out of this request to fit the token budget: {} bytes]",
        crate::numbers::group_digits(bytes)
    )
}

/// Whether `message` opens an exchange.
pub fn opens(message: &Message) -> bool {
    message.role == Role::Assistant && !message.tool_calls.is_empty()
}

/// Whether a `tool` message's content is a stub (its retention is over).
pub fn is_stub(message: &Message) -> bool {
    message
        .tool
        .as_ref()
        .is_some_and(|t| t.removed_after.is_some())
}

/// `messages` with every exchange whole: an assistant message with tool calls stays only
/// when the messages right after it are `tool` messages answering each of its calls (extra
/// answers of other calls leave); a `tool` message stays only inside such an exchange. A cut
/// that falls inside an exchange therefore drops it whole. A `tool` message without a call
/// id (written by another tool) belongs to no exchange and passes as it is.
pub fn whole<T>(items: Vec<T>, message: impl Fn(&T) -> &Message) -> Vec<T> {
    let mut out = Vec::with_capacity(items.len());
    let mut items = items.into_iter().peekable();
    while let Some(item) = items.next() {
        if message(&item).tool.is_some() {
            continue; // not right after its call: orphaned
        }
        if !opens(message(&item)) {
            out.push(item);
            continue;
        }
        let mut answers = Vec::new();
        while let Some(next) = items.next_if(|m| message(m).tool.is_some()) {
            answers.push(next);
        }
        let calls = message(&item).tool_calls.clone();
        let answered = |id: &str| answers.iter().any(|a| message(a).answers() == Some(id));
        if calls.iter().all(|c| answered(&c.id)) {
            let mut seen = std::collections::BTreeSet::new();
            let own = answers.into_iter().filter(|a| {
                let id = message(a).answers().unwrap_or_default();
                calls.iter().any(|c| c.id == id) && seen.insert(id.to_owned())
            });
            let own: Vec<T> = own.collect();
            out.push(item);
            out.extend(own);
        }
    }
    out
}

/// Replaces a result's content by `stub` (the pairing, `ok` and size stay).
pub fn replace_content(message: &mut Message, stub: String) {
    message.context = vec![ContextBlock {
        part: Part::Text { text: stub },
        retention: None,
    }];
}

/// The `(start, end)` ranges of the exchanges in `messages` (an opening assistant message
/// and the `tool` messages right after it).
pub fn ranges(messages: &[Message]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        if opens(&messages[i]) {
            let end = (i + 1..messages.len())
                .find(|&j| messages[j].tool.is_none())
                .unwrap_or(messages.len());
            out.push((i, end));
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// How an exchange of the stored conversation went into a request.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeSent {
    /// The call and every result, in full.
    Full,
    /// Sent with the stub of a result whose retention is over.
    StubbedByRetention,
    /// Sent with a result the token budget replaced by a stub in this request.
    StubbedByBudget,
    /// Not sent (the policy, the window, a mark or the budget left it out, whole).
    Dropped,
}

/// One exchange of the stored conversation and how it was sent.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExchangeReport {
    /// The stored position of its call.
    pub at: usize,
    /// The tools it called.
    pub tools: Vec<String>,
    pub sent: ExchangeSent,
}

/// How each exchange of `stored` (whose first message is at `offset` in the conversation)
/// went into a request that holds `sent` (stored position, message as sent).
pub fn reports(
    stored: &[Message],
    offset: usize,
    sent: &[(usize, &Message)],
) -> Vec<ExchangeReport> {
    let find = |at: usize| sent.iter().find(|(i, _)| *i == at).map(|(_, m)| *m);
    ranges(stored)
        .into_iter()
        .map(|(start, end)| {
            let tools = stored[start]
                .tool_calls
                .iter()
                .map(|c| c.name.clone())
                .collect();
            let at = offset + start;
            let results = (start + 1..end).map(|j| (&stored[j], find(offset + j)));
            let mut state = ExchangeSent::Full;
            if find(at).is_none() {
                state = ExchangeSent::Dropped;
            } else {
                for (kept, went) in results {
                    if went.is_some_and(|w| w.context != kept.context) {
                        state = ExchangeSent::StubbedByBudget;
                        break;
                    }
                    if is_stub(kept) {
                        state = ExchangeSent::StubbedByRetention;
                    }
                }
            }
            ExchangeReport {
                at,
                tools,
                sent: state,
            }
        })
        .collect()
}

/// Whether every `tool` message of `messages` follows its call and every call is answered:
/// what every request Parlor sends satisfies.
pub fn paired(messages: &[Message]) -> bool {
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if m.tool.is_some() {
            return false;
        }
        i += 1;
        if !opens(m) {
            continue;
        }
        let start = i;
        while i < messages.len() && messages[i].tool.is_some() {
            i += 1;
        }
        let answers = &messages[start..i];
        let all_answered = m
            .tool_calls
            .iter()
            .all(|c| answers.iter().any(|a| a.answers() == Some(c.id.as_str())));
        let all_asked = answers.iter().all(|a| {
            m.tool_calls
                .iter()
                .any(|c| a.answers() == Some(c.id.as_str()))
        });
        if !(all_answered && all_asked) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ToolAnswer, ToolCall};

    pub(crate) fn call(ids: &[&str], ts: i64) -> Message {
        let mut m = Message::assistant("", ts);
        m.tool_calls = ids
            .iter()
            .map(|id| ToolCall {
                id: (*id).into(),
                name: "clock__now".into(),
                arguments: "{}".into(),
            })
            .collect();
        m
    }

    pub(crate) fn answer(id: &str, ts: i64) -> Message {
        let answer = ToolAnswer {
            tool_call_id: id.into(),
            name: "clock__now".into(),
            ok: true,
            ms: 3,
            bytes: 5,
            removed_after: None,
        };
        let text = Part::Text {
            text: "12:00".into(),
        };
        Message::tool_result(answer, vec![text], None, ts)
    }

    use crate::chain::Outgoing;

    fn kept(messages: Vec<Outgoing>) -> Vec<Outgoing> {
        whole(messages, |m| &m.message)
    }

    fn sent(messages: Vec<Message>) -> Vec<Outgoing> {
        messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| Outgoing::stored(m, i))
            .collect()
    }

    fn roles(messages: &[Outgoing]) -> String {
        messages
            .iter()
            .map(|m| m.message.role.as_str().chars().next().unwrap())
            .collect()
    }

    #[test]
    fn a_whole_exchange_stays_and_a_broken_one_leaves_whole() {
        let full = vec![
            Message::user("q", 1),
            call(&["a", "b"], 2),
            answer("b", 3),
            answer("a", 3),
            Message::assistant("done", 4),
        ];
        assert_eq!(roles(&kept(sent(full.clone()))), "uatta");
        // One answer missing: the call and the other answer go.
        let mut broken = full.clone();
        broken.remove(2);
        assert_eq!(roles(&kept(sent(broken))), "ua");
        // An answer without its call goes.
        let mut orphan = full.clone();
        orphan.remove(1);
        assert_eq!(roles(&kept(sent(orphan))), "ua");
        // An answer to another call, or the same call twice, does not ride along.
        let mut extra = full;
        extra.insert(3, answer("z", 3));
        extra.insert(3, answer("a", 3));
        let kept = self::kept(sent(extra));
        assert_eq!(roles(&kept), "uatta");
        assert!(paired(
            &kept.into_iter().map(|m| m.message).collect::<Vec<_>>()
        ));
    }

    #[test]
    fn pairing_is_checked_both_ways() {
        assert!(paired(&[
            Message::user("q", 1),
            call(&["a"], 2),
            answer("a", 3)
        ]));
        assert!(!paired(&[Message::user("q", 1), answer("a", 3)]));
        assert!(!paired(&[call(&["a", "b"], 2), answer("a", 3)]));
        assert!(!paired(&[
            call(&["a"], 2),
            Message::user("q", 1),
            answer("a", 3)
        ]));
        let msgs = [
            Message::user("q", 1),
            call(&["a"], 2),
            answer("a", 3),
            call(&["b"], 4),
        ];
        assert_eq!(ranges(&msgs), [(1, 3), (3, 4)]);
    }

    #[test]
    fn the_budget_stubs_old_results_before_it_drops_a_turn() {
        use crate::chain::{ChainContext, EstimatedTokens, HistoryProcessor, ModelLimits};
        use crate::chain::{RoleAlternation, TokenBudget};
        let mut big = answer("a", 3);
        big.tool.as_mut().unwrap().bytes = 4000;
        big.context = vec![ContextBlock {
            part: Part::Text {
                text: "r".repeat(4000),
            },
            retention: None,
        }];
        let messages = vec![
            Message::user("q", 1),
            call(&["a"], 2),
            big,
            Message::assistant("done", 4),
            Message::user("next", 5),
        ];
        let model = ModelLimits {
            name: "m".into(),
            token_budget: Some(200),
            ..Default::default()
        };
        let ctx = ChainContext {
            model: &model,
            effective_ctx: 50,
            tokens: &EstimatedTokens,
            summary: None,
        };
        let sent = TokenBudget.process(sent(messages.clone()), &ctx).unwrap();
        assert_eq!(roles(&sent), "uatau", "the whole turn stays");
        let stub: String = sent[2].message.texts().collect();
        assert_eq!(
            stub,
            "[result of clock__now left out of this request to fit the token budget: 4,000 bytes]"
        );
        // Role alternation leaves the exchange as it is.
        let alternated = RoleAlternation.process(sent, &ctx).unwrap();
        assert_eq!(roles(&alternated), "uatau");
    }
}
