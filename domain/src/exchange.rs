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

/// The messages of the exchange `index` falls in: its opening message and every `tool`
/// message right after it; just `index` for a message outside any exchange.
pub fn span(messages: &[Message], index: usize) -> std::ops::Range<usize> {
    if index >= messages.len() {
        return index..index;
    }
    let mut start = index;
    while start > 0 && messages[start].tool.is_some() {
        start -= 1;
    }
    if !opens(&messages[start]) {
        return index..index + 1;
    }
    let end = (start + 1..messages.len())
        .find(|&j| messages[j].tool.is_none())
        .unwrap_or(messages.len());
    start..end
}

/// Where a cut that drops the messages before `at` lands so that it splits no exchange:
/// moved past the results of an exchange whose call it drops (they go with their call).
pub fn cut_after(messages: &[Message], at: usize) -> usize {
    let mut at = at.min(messages.len());
    if at == 0 {
        return 0;
    }
    while at < messages.len() && messages[at].tool.is_some() {
        at += 1;
    }
    at
}

/// The length of a prefix of `messages` that keeps at least the first `len` and splits no
/// exchange: extended over the rest of an exchange it would split.
pub fn prefix_end(messages: &[Message], len: usize) -> usize {
    match len {
        0 => 0,
        len if len >= messages.len() => messages.len(),
        len => span(messages, len - 1).end.max(len),
    }
}

/// Where a window of `messages` that begins at `start` begins so that it holds whole
/// exchanges: moved back to the call of results it would begin with. `None` when that call
/// is not in `messages` (read further back).
pub fn window_start(messages: &[Message], start: usize) -> Option<usize> {
    if start >= messages.len() || messages[start].tool.is_none() {
        return Some(start);
    }
    let mut begins = start;
    while begins > 0 && messages[begins].tool.is_some() {
        begins -= 1;
    }
    if opens(&messages[begins]) {
        Some(begins)
    } else if messages[begins].tool.is_some() {
        None
    } else {
        // Results after a message that asked for nothing: no call to find.
        Some(start)
    }
}

/// The longest result text a summary or a flat view shows of one call.
pub const LINE_RESULT_BYTES: usize = 400;

/// A message as one line of text for a summary or a flat view: its text, then, for a tool
/// call, the tools and arguments asked for, and for a result, the tool and the start of what
/// it answered (at most [`LINE_RESULT_BYTES`]).
pub fn line(message: &Message) -> String {
    if let Some(answer) = &message.tool {
        let text: String = message
            .context
            .iter()
            .filter_map(|b| b.part.sent_text())
            .collect::<Vec<_>>()
            .join(" ");
        let verdict = if answer.ok { "answered" } else { "failed" };
        return format!(
            "[{} {verdict}: {}]",
            answer.name,
            cut(&text, LINE_RESULT_BYTES)
        );
    }
    let calls: Vec<String> = message
        .tool_calls
        .iter()
        .map(|c| format!("{} {}", c.name, cut(&c.arguments, LINE_RESULT_BYTES)))
        .collect();
    match (message.text.is_empty(), calls.is_empty()) {
        (_, true) => message.text.clone(),
        (true, false) => format!("[called {}]", calls.join("; ")),
        (false, false) => format!("{} [called {}]", message.text, calls.join("; ")),
    }
}

fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
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

    #[test]
    fn cuts_forks_pins_and_windows_never_split_an_exchange() {
        // 0 user, 1 call(a,b), 2 a, 3 b, 4 assistant, 5 call(c), 6 c
        let messages = vec![
            Message::user("hi", 1),
            call(&["a", "b"], 2),
            answer("a", 3),
            answer("b", 4),
            Message::assistant("done", 5),
            call(&["c"], 6),
            answer("c", 7),
        ];
        assert_eq!(span(&messages, 0), 0..1);
        for i in 1..4 {
            assert_eq!(span(&messages, i), 1..4, "{i}");
        }
        assert_eq!(span(&messages, 6), 5..7);
        // A cap that would keep results without their call drops them too.
        assert_eq!(cut_after(&messages, 2), 4);
        assert_eq!(cut_after(&messages, 3), 4);
        assert_eq!(cut_after(&messages, 1), 1);
        assert_eq!(cut_after(&messages, 0), 0);
        assert!(paired(&messages[cut_after(&messages, 2)..]));
        // A fork through the call, or before one of its results, keeps the exchange whole.
        assert_eq!(prefix_end(&messages, 2), 4);
        assert_eq!(prefix_end(&messages, 3), 4);
        assert_eq!(prefix_end(&messages, 1), 1);
        assert_eq!(prefix_end(&messages, 6), 7);
        for len in 0..=messages.len() {
            assert!(paired(&messages[..prefix_end(&messages, len)]), "{len}");
        }
        // A window beginning with results begins with their call; when it is not loaded,
        // read further.
        assert_eq!(window_start(&messages, 3), Some(1));
        assert_eq!(window_start(&messages, 4), Some(4));
        assert_eq!(window_start(&messages[2..], 0), None);
        // A result without its call (written by another tool) is its own span.
        let orphan = vec![Message::user("x", 1), answer("z", 2)];
        assert_eq!(span(&orphan, 1), 1..2);
    }

    #[test]
    fn a_tool_exchange_reads_as_lines_with_a_bounded_result() {
        let mut asked = call(&["a"], 1);
        asked.text = "Let me look.".into();
        assert_eq!(line(&asked), "Let me look. [called clock__now {}]");
        assert_eq!(line(&call(&["a"], 1)), "[called clock__now {}]");
        assert_eq!(line(&answer("a", 2)), "[clock__now answered: 12:00]");
        let mut long = answer("a", 2);
        long.context[0].part = Part::Text {
            text: "é".repeat(400),
        };
        let shown = line(&long);
        assert!(
            shown.len() < LINE_RESULT_BYTES + 40 && shown.ends_with("…]"),
            "{shown}"
        );
        assert_eq!(line(&Message::user("hi", 1)), "hi");
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
