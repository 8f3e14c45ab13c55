//! OpenAI-style tool calls, streamed as real providers stream them: the first chunk of a
//! call carries its id and name, its arguments follow in pieces over later chunks, several
//! calls may come in one reply, and the reply ends with `finish_reason: "tool_calls"`.
//!
//! Directives in the last user message, when the request offers tools (and its
//! `tool_choice` is not `"none"`):
//! - `[call:NAME {json}]` asks for NAME with those arguments (several: several calls);
//! - `[call-bad-json:NAME]` asks for NAME with arguments that are not valid JSON;
//! - `[call-forever:NAME]` (or `[call-forever:NAME {json}]`) asks for NAME in every reply,
//!   also after its results;
//! - `[call-many:N:NAME]` asks for N calls of NAME (arguments `{}`) in one reply.
//!
//! After tool results (the request ends with `tool` messages), the fake answers with what
//! they said, unless `[call-forever:…]` asks again.

use super::{chunk, Step};
use serde_json::{json, Value};

/// How many characters of arguments one chunk carries.
const PIECE: usize = 7;

/// One call the fake asks for.
#[derive(Clone, Debug, PartialEq)]
struct Call {
    name: String,
    arguments: String,
}

/// The reply when tools are involved; `None` when the fake answers as usual.
pub(crate) fn steps(model: &str, request: &Value, last_user: &str) -> Option<Vec<Step>> {
    // As providers do, `tool_choice: "none"` means no call, whatever is offered.
    let offered = request["tools"].as_array().is_some_and(|t| !t.is_empty())
        && request["tool_choice"] != "none";
    let forever = directive_names(last_user, "[call-forever:");
    let after_results = last_role(request) == Some("tool");
    if offered && !forever.is_empty() {
        let calls = forever
            .into_iter()
            .map(|entry| match entry.split_once(' ') {
                Some((name, arguments)) => Call {
                    name: name.to_owned(),
                    arguments: arguments.trim().to_owned(),
                },
                None => Call {
                    name: entry,
                    arguments: "{}".into(),
                },
            })
            .collect();
        return Some(call_steps(model, calls));
    }
    if after_results {
        let said = format!("Results: {}", tool_results(request).join("; "));
        return Some(text_steps(model, &said));
    }
    if !forever.is_empty() {
        let names = forever.join(", ");
        let said = format!("No tools were offered, so {names} was not called again.");
        return Some(text_steps(model, &said));
    }
    let calls = requested_calls(last_user);
    (offered && !calls.is_empty()).then(|| call_steps(model, calls))
}

/// The role of the request's last message.
fn last_role(request: &Value) -> Option<&str> {
    request["messages"].as_array()?.last()?["role"].as_str()
}

/// The contents of the `tool` messages that end the request, in order.
fn tool_results(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let mut results: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect();
    results.reverse();
    results
}

/// The names after each `marker` (up to its `]`).
fn directive_names(text: &str, marker: &str) -> Vec<String> {
    text.match_indices(marker)
        .filter_map(|(at, _)| {
            let rest = &text[at + marker.len()..];
            rest.split(']').next().map(str::to_owned)
        })
        .collect()
}

/// The calls `[call:NAME {json}]` and `[call-bad-json:NAME]` ask for, in order.
fn requested_calls(text: &str) -> Vec<Call> {
    let mut calls: Vec<(usize, Call)> = Vec::new();
    for (at, _) in text.match_indices("[call:") {
        let rest = &text[at + "[call:".len()..];
        let Some((name, json)) = rest.split_once(' ') else {
            continue;
        };
        let mut values = serde_json::Deserializer::from_str(json).into_iter::<Value>();
        if let Some(Ok(arguments)) = values.next() {
            let arguments = arguments.to_string();
            calls.push((
                at,
                Call {
                    name: name.to_owned(),
                    arguments,
                },
            ));
        }
    }
    for (at, _) in text.match_indices("[call-bad-json:") {
        let rest = &text[at + "[call-bad-json:".len()..];
        if let Some(name) = rest.split(']').next() {
            let arguments = "{\"timezone\": \"UT".to_owned();
            calls.push((
                at,
                Call {
                    name: name.to_owned(),
                    arguments,
                },
            ));
        }
    }
    for (at, _) in text.match_indices("[call-many:") {
        let rest = &text[at + "[call-many:".len()..];
        let Some((count, name)) = rest.split(']').next().and_then(|d| d.split_once(':')) else {
            continue;
        };
        let count: usize = count.parse().unwrap_or(0);
        let call = Call {
            name: name.to_owned(),
            arguments: "{}".into(),
        };
        calls.extend(std::iter::repeat_n((at, call), count));
    }
    calls.sort_by_key(|(at, _)| *at);
    calls.into_iter().map(|(_, call)| call).collect()
}

/// A reply that asks for `calls`: each call's id and name, then its arguments in pieces.
fn call_steps(model: &str, calls: Vec<Call>) -> Vec<Step> {
    let mut steps = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let opening = json!({"index": index, "id": format!("call_{}", index + 1), "type": "function",
            "function": {"name": call.name, "arguments": ""}});
        steps.push(Step::Data(tool_chunk(model, opening)));
        let chars: Vec<char> = call.arguments.chars().collect();
        for piece in chars.chunks(PIECE) {
            let piece: String = piece.iter().collect();
            let delta = json!({"index": index, "function": {"arguments": piece}});
            steps.push(Step::Data(tool_chunk(model, delta)));
        }
    }
    steps.push(Step::Data(chunk(model, None, Some("tool_calls"))));
    steps.push(Step::Raw("data: [DONE]\n\n".into()));
    steps
}

fn tool_chunk(model: &str, call: Value) -> Value {
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
        "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}, "finish_reason": null}],
    })
}

/// A plain streamed answer.
fn text_steps(model: &str, text: &str) -> Vec<Step> {
    vec![
        Step::Data(chunk(model, Some(text), None)),
        Step::Data(chunk(model, None, Some("stop"))),
        Step::Raw("data: [DONE]\n\n".into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &str = r#"[{"type": "function", "function": {"name": "clock__now"}}]"#;

    fn request(messages: Value, tools: bool) -> Value {
        let tools: Value = match tools {
            true => serde_json::from_str(TOOLS).unwrap(),
            false => json!([]),
        };
        json!({"model": "m", "messages": messages, "stream": true, "tools": tools})
    }

    /// The calls a client assembles from the streamed chunks, and the finish reason.
    fn assemble(steps: &[Step]) -> (Vec<(String, String, String)>, Option<String>, String) {
        let mut calls: Vec<(String, String, String)> = Vec::new();
        let (mut finish, mut text) = (None, String::new());
        for step in steps {
            let Step::Data(chunk) = step else { continue };
            let choice = &chunk["choices"][0];
            if let Some(reason) = choice["finish_reason"].as_str() {
                finish = Some(reason.to_owned());
            }
            if let Some(content) = choice["delta"]["content"].as_str() {
                text.push_str(content);
            }
            for call in choice["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let index = call["index"].as_u64().unwrap() as usize;
                if calls.len() <= index {
                    calls.resize(index + 1, Default::default());
                }
                if let Some(id) = call["id"].as_str() {
                    calls[index].0 = id.to_owned();
                }
                if let Some(name) = call["function"]["name"].as_str() {
                    calls[index].1 = name.to_owned();
                }
                if let Some(piece) = call["function"]["arguments"].as_str() {
                    calls[index].2.push_str(piece);
                }
            }
        }
        (calls, finish, text)
    }

    fn user(text: &str) -> Value {
        json!([{"role": "user", "content": text}])
    }

    #[test]
    fn two_calls_in_one_reply_with_arguments_in_pieces() {
        let text = r#"time? [call:clock__now {"timezone": "Europe/Paris"}] and [call:clock__convert {"from": "UTC", "to": "Asia/Tokyo"}]"#;
        let steps = steps("m", &request(user(text), true), text).expect("tool calls");
        let (calls, finish, _) = assemble(&steps);
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].0, "call_1");
        assert_eq!(calls[0].1, "clock__now");
        let args: Value = serde_json::from_str(&calls[0].2).unwrap();
        assert_eq!(args["timezone"], "Europe/Paris");
        assert_eq!(calls[1].1, "clock__convert");
        // The arguments really arrive in pieces, as providers send them.
        let pieces = steps
            .iter()
            .filter(|s| matches!(s, Step::Data(c) if c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0))
            .count();
        assert!(pieces >= 3, "{pieces} chunks for the first call");
    }

    #[test]
    fn malformed_arguments_forever_and_results() {
        let text = "[call-bad-json:clock__now]";
        let (calls, ..) = assemble(&steps("m", &request(user(text), true), text).unwrap());
        assert!(serde_json::from_str::<Value>(&calls[0].2).is_err());
        // Asked for forever: again after its results while tools are offered.
        let text = "[call-forever:clock__now]";
        let after = json!([{"role": "user", "content": text},
            {"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "12:00"}]);
        let (calls, ..) = assemble(&steps("m", &request(after.clone(), true), text).unwrap());
        assert_eq!(calls[0].1, "clock__now");
        // The results are described once no call is asked for.
        let text = "[call:clock__now {}]";
        let after = json!([{"role": "user", "content": text},
            {"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "12:00"},
            {"role": "tool", "content": "13:00"}]);
        let (calls, finish, said) = assemble(&steps("m", &request(after, true), text).unwrap());
        assert!(calls.is_empty());
        assert_eq!(finish.as_deref(), Some("stop"));
        assert_eq!(said, "Results: 12:00; 13:00");
        // Without tools offered, a directive is not a call.
        let plain = json!({"model": "m", "messages": user("[call:x {}]")});
        assert!(steps("m", &plain, "[call:x {}]").is_none());
    }
}
