//! The loop's limits and Stop, with the test upstream streaming tool calls as providers do:
//! a model that asks forever, one that asks for a thousand calls in one reply, and a user
//! who stops the turn during a slow call.

use super::chat::parlor_with;
use super::servers::Everything;
use crate::support::TestServer;
use parlor_domain::tool::LimitReached;
use parlor_domain::{ChatEvent, ReplyStatus, Role};
use serde_json::json;

async fn with_upstream(
    extra: &str,
) -> (
    fake_llm::FakeLlm,
    TestServer,
    tempfile::TempDir,
    tempfile::NamedTempFile,
) {
    let fake = fake_llm::FakeLlm::start().await.unwrap();
    let base = fake.base_url();
    let limits = "[tools]\nmax_rounds = 3\nmax_calls = 5\n";
    let (server, agents, config) = parlor_with(
        &format!("{limits}\n{extra}"),
        "never",
        30,
        &[("OPENAI_BASE_URL", &base), ("PARLOR_MODEL", "fake-model")],
    )
    .await;
    (fake, server, agents, config)
}

fn limit_of(events: &[ChatEvent]) -> Option<(LimitReached, u32)> {
    events.iter().find_map(|e| match e {
        ChatEvent::Limit(l) => Some((l.reached, l.limit)),
        _ => None,
    })
}

/// A model that asks forever stops at `max_rounds`; the last call keeps the tools with
/// `tool_choice: "none"`, or, with `without_tools`, goes without them.
async fn asking_forever(extra: &str) -> Vec<serde_json::Value> {
    let (fake, server, _a, _c) = with_upstream(extra).await;
    let ask = "[call-forever:clock__get_current_time]";
    let reply = server.chat("timekeeper", json!({"message": ask})).await;
    assert_eq!(
        limit_of(&reply.events),
        Some((LimitReached::MaxRounds, 3)),
        "{}",
        reply.body
    );
    // The last call answers with what the results said.
    assert!(reply.text().starts_with("Results: "), "{}", reply.text());
    let requests = fake.requests();
    assert_eq!(requests.len(), 4, "3 rounds, then the last call");
    assert!(requests[..3].iter().all(|r| r["tools"].is_array()));
    assert!(requests[..3].iter().all(|r| r.get("tool_choice").is_none()));
    let stored = server.stored(&reply.session_id());
    assert_eq!(stored.iter().filter(|m| m.role == Role::Tool).count(), 3);
    assert!(parlor_domain::exchange::paired(&stored[1..]));
    requests
}

#[tokio::test]
async fn a_model_asking_forever_stops_at_max_rounds_with_a_last_call_that_may_not_ask() {
    let requests = asking_forever("").await;
    assert!(requests[3]["tools"].is_array(), "the tools stay");
    assert_eq!(requests[3]["tool_choice"], "none");
    let without = "[[models]]\nname = \"fake-model\"\nlast_call = \"without_tools\"\n";
    let requests = asking_forever(without).await;
    assert!(
        requests[3].get("tools").is_none() && requests[3].get("tool_choice").is_none(),
        "the last call offers no tools"
    );
}

#[tokio::test]
async fn a_model_entry_chooses_the_first_call_of_a_turn() {
    let forced = "[[models]]\nname = \"fake-model\"\ntool_choice = \"clock__get_current_time\"\n";
    let (fake, server, _a, _c) = with_upstream(forced).await;
    server
        .chat("timekeeper", json!({"message": "what time is it?"}))
        .await;
    let requests = fake.requests();
    assert_eq!(
        requests[0]["tool_choice"],
        json!({"type": "function", "function": {"name": "clock__get_current_time"}})
    );
    let required = "[[models]]\nname = \"fake-model\"\ntool_choice = \"required\"\n";
    let (fake, server, _a, _c) = with_upstream(required).await;
    server
        .chat(
            "timekeeper",
            json!({"message": "[call:clock__get_current_time {\"timezone\": \"UTC\"}]"}),
        )
        .await;
    let requests = fake.requests();
    assert_eq!(requests[0]["tool_choice"], "required");
    assert!(
        requests[1].get("tool_choice").is_none(),
        "later calls are the model's own"
    );
}

#[tokio::test]
async fn a_thousand_calls_in_one_reply_run_up_to_max_calls_each_answered() {
    let (_fake, server, _a, _c) = with_upstream("").await;
    let ask = "[call-many:1000:clock__get_current_time]";
    let reply = server.chat("timekeeper", json!({"message": ask})).await;
    assert_eq!(limit_of(&reply.events), Some((LimitReached::MaxCalls, 5)));
    let results: Vec<_> = reply
        .events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolResult(r) => Some(r),
            _ => None,
        })
        .collect();
    // The model's calls lack the tool's required argument: run, and answered with its error.
    let not_run = |r: &parlor_domain::event::ToolResultEvent| {
        r.error
            .as_deref()
            .unwrap_or_default()
            .contains("limit of 5 tool calls")
    };
    assert_eq!(results.iter().filter(|r| !not_run(r)).count(), 5);
    assert!(results[5..].iter().all(|r| not_run(r)));
    assert_eq!(results.len(), parlor_domain::tool::calls::MAX_CALLS_HELD);
    assert!(reply.done().is_some());
    let stored = server.stored(&reply.session_id());
    assert!(
        parlor_domain::exchange::paired(&stored[1..]),
        "every call answered"
    );
}

#[tokio::test]
async fn stop_during_a_slow_call_cancels_it_and_keeps_the_exchange_paired() {
    let everything = Everything::start_http();
    let Transport::Http { url, .. } = everything.transport() else {
        unreachable!()
    };
    let extra = format!("[[mcp_servers]]\nid = \"everything\"\nurl = {url:?}\n");
    let (_fake, server, _a, _c) = with_upstream(&extra).await;
    let ask = r#"[call:everything__trigger-long-running-operation {"duration": 30, "steps": 3}]"#;
    let mut response = server
        .http
        .post(server.url("/api/chat/timekeeper"))
        .json(&json!({"message": ask}))
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    while !seen.contains("event: tool_call") {
        let chunk = response.chunk().await.unwrap().expect("stream ended");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let session = seen
        .split("\"session_id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let stopped_at = std::time::Instant::now();
    drop(response);
    let stored = server
        .stored_eventually(&session, |messages| messages.len() >= 3)
        .await;
    assert!(
        stopped_at.elapsed().as_secs() < 10,
        "cancelled, not waited out"
    );
    assert_eq!(stored[1].tool_calls.len(), 1);
    let answer = stored[2].tool.as_ref().unwrap();
    assert!(!answer.ok);
    assert!(stored[2].texts().collect::<String>().contains("cancelled"));
    assert_eq!(stored[1].status(), Some(ReplyStatus::Stopped));
}

use parlor_server::tools::spec::Transport;
