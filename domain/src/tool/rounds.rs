//! Every model call of a turn within the budget, not only the first: the tools' definitions
//! take room in each request (counted here as the model would read them), and before each
//! later call the results of this turn's earlier rounds give way, oldest first, as stubs,
//! when the request would not fit. The newest round's results are what the model asked
//! for just now, so they stay.

use super::Offered;
use crate::chain::TokenCounter;
use crate::message::Message;

/// The tokens the definitions of `tools` take in a request (each as the JSON a provider is
/// given, counted as one message's text).
pub fn definition_tokens(tools: &[Offered], tokens: &dyn TokenCounter) -> u64 {
    tools
        .iter()
        .map(|tool| {
            let definition = serde_json::json!({
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            });
            tokens.count(&Message::system(definition.to_string(), 0))
        })
        .sum()
}

/// What fitting a later call of the turn did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fitted {
    /// The request's tokens: the rounds' and `before`.
    pub tokens: u64,
    /// Results of earlier rounds replaced by stubs in this request.
    pub stubbed: usize,
}

/// Fits a later call of a turn into `budget` (`None`: no budget, only counted): `messages`
/// is the request, this turn's rounds begin at `rounds_from` and the newest at `newest_from`;
/// `before` is what the request takes besides the rounds (the planned messages before
/// `rounds_from`, as the plan counted them, and the tools' definitions), so only the rounds
/// are counted here. Results of the earlier rounds are stubbed, oldest first, while the
/// request is over the budget.
pub fn fit(
    messages: &mut [Message],
    rounds_from: usize,
    newest_from: usize,
    budget: Option<u64>,
    before: u64,
    tokens: &dyn TokenCounter,
) -> Fitted {
    let rounds = &messages[rounds_from.min(messages.len())..];
    let mut used = before + rounds.iter().map(|m| tokens.count(m)).sum::<u64>();
    let mut stubbed = 0;
    let end = newest_from.min(messages.len());
    for message in messages[rounds_from.min(end)..end].iter_mut() {
        if budget.is_none_or(|b| used <= b) {
            break;
        }
        let Some(answer) = message.tool.as_ref() else {
            continue;
        };
        let stub = crate::exchange::budget_stub(&answer.name, answer.bytes);
        let already = message.context.len() == 1
            && message.context[0]
                .part
                .sent_text()
                .is_some_and(|t| t == stub);
        if crate::exchange::is_stub(message) || already {
            continue;
        }
        let before = tokens.count(message);
        crate::exchange::replace_content(message, stub);
        used = (used + tokens.count(message)).saturating_sub(before);
        stubbed += 1;
    }
    Fitted {
        tokens: used,
        stubbed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Part;
    use crate::chain::EstimatedTokens;
    use crate::message::{ToolAnswer, ToolCall};

    fn result(id: &str, text: &str) -> Message {
        let answer = ToolAnswer {
            tool_call_id: id.into(),
            name: "fetch__page".into(),
            ok: true,
            ms: 1,
            bytes: text.len() as u64,
            removed_after: None,
        };
        Message::tool_result(answer, vec![Part::Text { text: text.into() }], None, 1)
    }

    fn call(id: &str) -> Message {
        let mut m = Message::assistant("", 1);
        m.tool_calls = vec![ToolCall {
            id: id.into(),
            name: "fetch__page".into(),
            arguments: "{}".into(),
        }];
        m
    }

    fn request() -> Vec<Message> {
        let page = "x".repeat(4000);
        vec![
            Message::user("read three pages", 1),
            call("a"),
            result("a", &page),
            call("b"),
            result("b", &page),
            call("c"),
            result("c", &page),
        ]
    }

    #[test]
    fn earlier_rounds_give_way_oldest_first_and_the_newest_round_stays() {
        let tokens = EstimatedTokens;
        let mut messages = request();
        let whole: u64 = messages.iter().map(|m| tokens.count(m)).sum();
        // Room for all but one page, with 300 tokens of definitions.
        let budget = whole + 300 - 900;
        let before = tokens.count(&messages[0]) + 300;
        let fitted = fit(&mut messages, 1, 5, Some(budget), before, &tokens);
        assert_eq!(fitted.stubbed, 1);
        assert!(fitted.tokens <= budget);
        let text = |m: &Message| {
            m.context[0]
                .part
                .sent_text()
                .unwrap_or_default()
                .into_owned()
        };
        assert!(text(&messages[2]).starts_with("[result of fetch__page left out"));
        assert_eq!(text(&messages[4]).len(), 4000, "the next oldest is kept");
        assert_eq!(text(&messages[6]).len(), 4000, "the newest round stays");
        // Fitting again stubs nothing more.
        assert_eq!(
            fit(&mut messages, 1, 5, Some(budget), before, &tokens).stubbed,
            0
        );
        // A budget nothing fits: every earlier round is stubbed, never the newest.
        let mut messages = request();
        let fitted = fit(&mut messages, 1, 5, Some(10), before, &tokens);
        assert_eq!(fitted.stubbed, 2);
        assert_eq!(text(&messages[6]).len(), 4000);
        // No budget: only counted.
        let mut messages = request();
        assert_eq!(
            fit(&mut messages, 1, 5, None, before, &tokens).tokens,
            whole + 300
        );
    }

    #[test]
    fn definitions_are_counted_as_the_provider_reads_them() {
        let tool = Offered {
            name: "clock__now".into(),
            server: "clock".into(),
            tool: "now".into(),
            description: "The time.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
        };
        let one = definition_tokens(std::slice::from_ref(&tool), &EstimatedTokens);
        assert!(one > 10, "{one}");
        assert_eq!(
            definition_tokens(&[tool.clone(), tool], &EstimatedTokens),
            one * 2
        );
        assert_eq!(definition_tokens(&[], &EstimatedTokens), 0);
    }
}
