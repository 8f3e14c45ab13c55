use super::*;
use crate::llm::offered;
use futures::StreamExt;
use parlor_domain::block::ContextBlock;
use parlor_domain::message::{ToolAnswer, ToolCall};
use std::time::Duration;

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "claude-test".into(),
        messages,
        temperature: Some(1.5),
        max_tokens: None,
        tools: Vec::new(),
        tool_choice: None,
    }
}

fn answer(id: &str, ok: bool, text: &str) -> Message {
    let answer = ToolAnswer {
        tool_call_id: id.into(),
        name: "clock__now".into(),
        ok,
        ms: 1,
        bytes: text.len() as u64,
        removed_after: None,
    };
    let part = Part::Text { text: text.into() };
    Message::tool_result(answer, vec![part], None, 3)
}

#[test]
fn the_body_puts_the_system_apart_alternates_and_maps_exchanges() {
    let mut ask = Message::user("look", 1);
    ask.context.push(ContextBlock {
        part: Part::Image {
            url: "data:image/png;base64,iVBORw0KGgo=".into(),
        },
        retention: None,
    });
    let mut asked = Message::assistant("checking", 2);
    asked.tool_calls = vec![
        ToolCall {
            id: "t1".into(),
            name: "clock__now".into(),
            arguments: r#"{"tz":"UTC"}"#.into(),
        },
        ToolCall {
            id: "t2".into(),
            name: "clock__now".into(),
            arguments: "not json".into(),
        },
    ];
    let messages = vec![
        Message::assistant("a greeting before any user message", 0),
        Message::new(Role::System, "be brief", 0),
        ask,
        Message::user("and quickly", 1),
        asked,
        answer("t1", true, "12:00"),
        answer("t2", false, "bad arguments"),
    ];
    let mut request = request(messages);
    request.tools = vec![offered("clock__now")];
    request.tool_choice = Some(ToolChoice::Required);
    let body = request_body(&request);
    assert_eq!(body["system"][0]["text"], "be brief");
    assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(body["temperature"], 1.0, "held to the API's range");
    let turns = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap()).collect();
    // The leading reply cannot be placed; the two user messages are one turn.
    assert_eq!(roles, ["user", "assistant", "user"]);
    let first = turns[0]["content"].as_array().unwrap();
    assert_eq!(first[1]["source"]["media_type"], "image/png");
    assert_eq!(first[1]["source"]["data"], "iVBORw0KGgo=");
    assert_eq!(first[2]["text"], "and quickly");
    let uses = &turns[1]["content"];
    assert_eq!(uses[1]["type"], "tool_use");
    assert_eq!(uses[1]["input"]["tz"], "UTC");
    assert_eq!(uses[2]["input"]["arguments"], "not json");
    let results = &turns[2]["content"];
    assert_eq!(results[0]["tool_use_id"], "t1");
    assert_eq!(results[0]["content"][0]["text"], "12:00");
    assert_eq!(results[1]["is_error"], true);
    assert_eq!(
        body["tools"][0]["input_schema"]["properties"]["tz"]["type"],
        "string"
    );
    assert_eq!(body["tool_choice"]["type"], "any");
}

#[test]
fn breakpoints_close_tools_system_the_previous_request_and_the_newest_message() {
    let mut request = request(vec![
        Message::new(Role::System, "be brief", 0),
        Message::user("one", 1),
        Message::assistant("a", 2),
        Message::user("two", 3),
        Message::assistant("b", 4),
        Message::user("three", 5),
    ]);
    request.tools = vec![offered("clock__now"), offered("clock__convert")];
    let body = request_body(&request);
    let marked = |v: &Value| v.get("cache_control").is_some();
    assert!(marked(&body["tools"][1]) && !marked(&body["tools"][0]));
    assert!(marked(&body["system"][0]));
    let turns = body["messages"].as_array().unwrap();
    let marks: Vec<bool> = turns.iter().map(|t| marked(&t["content"][0])).collect();
    // "two" ended the previous call; "three" is the newest.
    assert_eq!(marks, [false, false, true, false, true]);
    assert_eq!(body.to_string().matches("cache_control").count(), 4);
}

fn event(data: Value) -> eventsource_stream::Event {
    eventsource_stream::Event {
        data: data.to_string(),
        ..Default::default()
    }
}

#[test]
fn a_stream_of_text_and_tool_use_becomes_deltas_calls_and_usage() {
    let mut reader = Events::default();
    let mut said = String::new();
    let feed = [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 20,
            "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 30, "output_tokens": 1}}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hidden"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "clock__now", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"tz\":"}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"UTC\"}"}}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "clock__now", "input": {}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 42}}),
    ];
    for data in feed {
        match reader.read(&event(data)) {
            Piece::Text(text) => said.push_str(&text),
            Piece::Nothing => {}
            Piece::Last(last) => panic!("ended early: {last:?}"),
        }
    }
    assert_eq!(said, "Let me");
    let Piece::Last(Ok(LlmEvent::Finished {
        reason,
        usage,
        tool_calls,
    })) = reader.read(&event(json!({"type": "message_stop"})))
    else {
        panic!("no finish")
    };
    assert_eq!(reason, "tool_calls");
    assert_eq!(tool_calls[0].arguments, r#"{"tz":"UTC"}"#);
    assert_eq!(tool_calls[1].arguments, "{}", "a call without input");
    let usage = usage.unwrap();
    assert_eq!(usage.prompt_tokens, 1050);
    assert_eq!(usage.cached_tokens, Some(1000));
    assert_eq!(usage.cache_write_tokens, Some(30));
    assert_eq!(usage.completion_tokens, 42);
}

#[test]
fn error_events_and_a_stream_cut_short_are_errors_without_the_key() {
    let mut reader = Events {
        key: Some(ApiKey::new("sk-ant-secret-123456".into())),
        ..Events::default()
    };
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error",
        "message": "Overloaded (key sk-ant-secret-123456)"}});
    let Piece::Last(Err(LlmError::Upstream { message })) = reader.read(&event(overloaded)) else {
        panic!("not an error")
    };
    assert!(message.contains("Overloaded") && message.contains("overloaded_error"));
    assert!(!message.contains("secret-123456"), "{message}");
    // Usage beyond reason is held, not added up into an overflow.
    let mut huge = Events::default();
    let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": u64::MAX, "output_tokens": u64::MAX,
            "cache_read_input_tokens": u64::MAX}});
    huge.read(&event(delta));
    let Piece::Last(Ok(LlmEvent::Finished { usage, .. })) =
        huge.read(&event(json!({"type": "message_stop"})))
    else {
        panic!("no finish")
    };
    let usage = usage.unwrap();
    let cap = parlor_domain::meter::MAX_REPORTED_TOKENS;
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (cap, cap));
    // Odd numbers (negative, fractions, text) read as 0 or rounded down: the reply is kept.
    let mut odd = Events::default();
    let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": -5, "output_tokens": 5.5, "cache_read_input_tokens": "x"}});
    assert!(matches!(odd.read(&event(delta)), Piece::Nothing));
    let Piece::Last(Ok(LlmEvent::Finished { usage, .. })) =
        odd.read(&event(json!({"type": "message_stop"})))
    else {
        panic!("no finish")
    };
    let usage = usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (0, 5));
    // Closed before message_stop: dropped.
    assert!(matches!(Events::default().closed(), Err(LlmError::Dropped)));
    let Piece::Last(Err(LlmError::Malformed { .. })) =
        Events::default().read(&eventsource_stream::Event {
            data: "{not json".into(),
            ..Default::default()
        })
    else {
        panic!("not malformed")
    };
}

async fn reply(
    client: &AnthropicClient,
    request: ModelRequest,
) -> Result<(String, LlmEvent), LlmError> {
    let mut stream = client.stream(request).await?;
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        match event? {
            LlmEvent::Delta(piece) => text.push_str(&piece),
            finished => return Ok((text, finished)),
        }
    }
    panic!("no finished event")
}

#[tokio::test]
async fn against_the_fake_a_tool_exchange_and_the_cache_and_the_errors() {
    let upstream = fake_llm::FakeLlm::start().await.unwrap();
    let key = Some(ApiKey::new("sk-ant-test".into()));
    let client = AnthropicClient::new(upstream.base_url(), key, Duration::from_secs(10));
    let ask = Message::user(r#"what time? [call:clock__now {"tz":"UTC"}]"#, 1);
    let mut first = request(vec![Message::new(Role::System, "be brief", 0), ask.clone()]);
    first.tools = vec![offered("clock__now")];
    let (_, finished) = reply(&client, first.clone()).await.unwrap();
    let LlmEvent::Finished {
        reason,
        tool_calls,
        usage,
    } = finished
    else {
        unreachable!()
    };
    assert_eq!(reason, "tool_calls");
    assert_eq!(tool_calls[0].arguments, r#"{"tz":"UTC"}"#);
    assert_eq!(usage.unwrap().cached_tokens, Some(0));
    assert_eq!(upstream.authorizations()[0].as_deref(), Some("sk-ant-test"));
    // The results go back as the fake (checking as the API does) accepts, and the prefix
    // written by the first call is read back.
    let mut asked = Message::assistant("", 2);
    asked.tool_calls = tool_calls.clone();
    let mut second = first.clone();
    second
        .messages
        .extend([asked, answer(&tool_calls[0].id, true, "12:00 UTC")]);
    let (text, finished) = reply(&client, second).await.unwrap();
    assert_eq!(text, "Results: 12:00 UTC");
    let LlmEvent::Finished { usage, .. } = finished else {
        unreachable!()
    };
    let usage = usage.unwrap();
    assert!(usage.cached_tokens.unwrap() > 0, "{usage:?}");
    // Errors: a rate limit names when to retry, overload says so, a cut stream is dropped.
    let with = |text: &str| request(vec![Message::user(text, 1)]);
    let limited = reply(&client, with("[status:429]")).await.unwrap_err();
    assert!(limited.to_string().contains("retry after 7 s"), "{limited}");
    let overloaded = reply(&client, with("[status:529]")).await.unwrap_err();
    assert!(
        overloaded.to_string().contains("overloaded"),
        "{overloaded}"
    );
    assert!(matches!(
        reply(&client, with("[drop]")).await,
        Err(LlmError::Dropped)
    ));
    let midway = reply(&client, with("[error-event]")).await.unwrap_err();
    assert!(midway.to_string().contains("Overloaded"), "{midway}");
}
