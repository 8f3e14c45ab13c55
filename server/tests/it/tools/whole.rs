//! Tool exchanges stay whole wherever messages are cut or chosen, not only in requests: a
//! fork at a call or before one of its results, the `max_turns` cap (files and Redis), a mark
//! on part of an exchange, the MCP history tools' windows; the recall tool never reads what
//! the user marked "Don't send" nor the conversation it is called from.

use super::chat::parlor_with;
use super::storage::{load, reimports, ASK};
use crate::support::{browser, TestServer};
use parlor_domain::exchange::paired;
use parlor_domain::{Message, Role};
use serde_json::json;

/// One turn of `cookie`'s asking for the time: its conversation and what was stored.
async fn tool_turn(server: &TestServer, cookie: &str) -> (String, Vec<Message>) {
    let reply = server
        .chat_with("timekeeper", "", json!({"message": ASK}), Some(cookie))
        .await;
    let session = reply.session_id();
    let stored = load(server, &session).await;
    (session, stored)
}

/// Marks message `id` of `session` as `send` says; the status.
async fn mark(server: &TestServer, cookie: &str, session: &str, id: &str, send: &str) -> u16 {
    server
        .http
        .put(server.url(&format!(
            "/api/chat/timekeeper/sessions/{session}/messages/{id}"
        )))
        .header("cookie", cookie)
        .json(&json!({"send": send}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The first tool result of a turn.
fn result_of(reply: &crate::support::Reply) -> parlor_domain::event::ToolResultEvent {
    reply
        .events
        .iter()
        .find_map(|e| match e {
            parlor_domain::ChatEvent::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .expect("a tool result")
}

fn roles(messages: &[Message]) -> Vec<Role> {
    messages.iter().map(|m| m.role).collect()
}

#[tokio::test]
async fn a_fork_at_a_call_or_before_its_result_takes_the_exchange_whole() {
    let (server, _a, _c) = parlor_with("", "never", 30, &[]).await;
    let alice = browser(&"a".repeat(32));
    let (session, stored) = tool_turn(&server, &alice).await;
    assert_eq!(
        roles(&stored),
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    for at in [
        json!({"through": stored[1].id()}),
        json!({"before": stored[2].id()}),
    ] {
        let forked = server
            .http
            .post(server.url(&format!("/api/chat/timekeeper/sessions/{session}/fork")))
            .header("cookie", &alice)
            .json(&at)
            .send()
            .await
            .unwrap();
        assert_eq!(forked.status(), 201, "{at}");
        let body: serde_json::Value = forked.json().await.unwrap();
        let copy_id = body["session_id"].as_str().unwrap();
        let copy = load(&server, copy_id).await;
        reimports(&server, &alice, copy_id).await;
        assert_eq!(
            roles(&copy),
            [Role::User, Role::Assistant, Role::Tool],
            "{at}"
        );
        assert!(paired(&copy), "{at}");
    }
}

#[tokio::test]
async fn a_mark_on_a_result_marks_its_whole_exchange() {
    let (server, _a, _c) = parlor_with("", "never", 30, &[]).await;
    let alice = browser(&"b".repeat(32));
    let (session, stored) = tool_turn(&server, &alice).await;
    let status = mark(&server, &alice, &session, &stored[2].id(), "always").await;
    assert_eq!(status, 200);
    let marked = load(&server, &session).await;
    let pinned: Vec<bool> = marked.iter().map(|m| m.is_pinned()).collect();
    assert_eq!(
        pinned,
        [false, true, true, false],
        "the call and its result"
    );
}

/// Two tool turns under `max_turns = 6`: the cap would keep a result without its call, so
/// it drops the result too.
async fn capped(history: &str) {
    let (server, _a, _c) = parlor_with(history, "never", 30, &[]).await;
    let alice = browser(&"c".repeat(32));
    let first = server
        .chat_with("timekeeper", "", json!({"message": ASK}), Some(&alice))
        .await;
    let session = first.session_id();
    let body = json!({"message": ASK, "session_id": session});
    let second = server.chat_with("timekeeper", "", body, Some(&alice)).await;
    assert_eq!(second.status, 200, "{}", second.body);
    let stored = load(&server, &session).await;
    assert_eq!(
        roles(&stored),
        [
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ],
        "eight messages capped to six would start with a result: it goes with its call"
    );
    assert!(paired(&stored));
    reimports(&server, &alice, &session).await;
}

#[tokio::test]
async fn max_turns_never_leaves_a_result_without_its_call_in_files() {
    capped("[[histories]]\nid = \"default\"\nbackend = { type = \"file\", max_turns = 6 }\n").await;
}

#[tokio::test]
async fn max_turns_never_leaves_a_result_without_its_call_in_redis() {
    let redis = fake_llm::redis_server::RedisServer::start().unwrap();
    let history = format!(
        "[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\", key_prefix = \"whole:\", max_turns = 6 }}\n",
        redis.url()
    );
    capped(&history).await;
}

#[tokio::test]
async fn the_recall_tool_reads_neither_excluded_messages_nor_the_current_conversation() {
    let (server, _a, _c) = parlor_with("", "never", 30, &[]).await;
    let alice = browser(&"d".repeat(32));
    let earlier = server
        .chat_with(
            "timekeeper",
            "",
            json!({"message": "hello there"}),
            Some(&alice),
        )
        .await;
    let old = earlier.session_id();
    let body = json!({"message": "the vault code is 4711", "session_id": old});
    server.chat_with("timekeeper", "", body, Some(&alice)).await;
    // The secret and the reply that repeats it, marked "Don't send".
    for message in &load(&server, &old).await[2..] {
        assert_eq!(
            mark(&server, &alice, &old, &message.id(), "never").await,
            200
        );
    }
    let read = format!(r#"/tool recall__read_conversation {{"session_id": "{old}"}}"#);
    let reply = server
        .chat_with("timekeeper", "", json!({"message": read}), Some(&alice))
        .await;
    let result = result_of(&reply);
    assert!(result.ok, "{result:?}");
    assert!(result.preview.contains("hello there"), "{}", result.preview);
    assert!(!result.preview.contains("4711"), "{}", result.preview);
    // The conversation the call comes from is not read through the tool.
    let current = reply.session_id();
    let read_self = format!(r#"/tool recall__read_conversation {{"session_id": "{current}"}}"#);
    let body = json!({"message": read_self, "session_id": current});
    let again = server.chat_with("timekeeper", "", body, Some(&alice)).await;
    let refused = result_of(&again);
    assert!(!refused.ok, "{refused:?}");
    assert!(refused
        .error
        .unwrap_or_default()
        .contains("current conversation"));
}

#[tokio::test]
async fn the_mcp_history_tools_return_whole_exchanges_and_show_them() {
    let (server, _a, _c) = parlor_with("", "never", 30, &[]).await;
    let reply = server.chat("timekeeper", json!({"message": ASK})).await;
    let session = reply.session_id();
    let data = server.data.path().to_owned();
    let (detail, since) = tokio::task::spawn_blocking(move || {
        let mut mcp = crate::mcp::Mcp::start(&data, &[]);
        let detail = mcp.ok(
            "history_get_dialog_detail",
            json!({"dialog": session, "recentTurns": 2, "includeSummary": false}),
        );
        let since = mcp.ok(
            "history_get_messages_since",
            json!({"dialog": session, "limit": 2}),
        );
        (detail, since)
    })
    .await
    .unwrap();
    // The last two messages are a result and the reply: the window begins at the call.
    let lines: Vec<&str> = detail.as_str().unwrap().lines().collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].starts_with("A: [called clock__get_current_time {\"timezone\": \"UTC\"}]"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("A: [clock__get_current_time answered: {"),
        "{lines:?}"
    );
    let roles: Vec<&str> = since["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["assistant", "tool", "assistant"]);
}
