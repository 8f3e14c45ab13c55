//! Approval of tool calls (`confirm`): the stream asks, the API answers, with the
//! conversation's ownership rules; a call answered twice, by another owner, or after its
//! timeout is refused; `first` asks until allowed for the conversation.

use crate::support::{browser, parse_events, TestServer};
use parlor_domain::ChatEvent;
use serde_json::json;

/// A turn being streamed: the events read so far.
pub(super) struct Streaming {
    response: reqwest::Response,
    buffer: Vec<u8>,
    events: Vec<ChatEvent>,
}

impl Streaming {
    pub(super) async fn start(
        server: &TestServer,
        body: serde_json::Value,
        cookie: &str,
    ) -> Streaming {
        let response = server
            .http
            .post(server.url("/api/chat/timekeeper"))
            .header("cookie", cookie)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        Streaming {
            response,
            buffer: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Reads the rest of the stream (it must end); every event read.
    pub(super) async fn rest(mut self) -> Vec<ChatEvent> {
        while let Some(chunk) = self.response.chunk().await.unwrap() {
            self.buffer.extend_from_slice(&chunk);
        }
        self.events.extend(parse_events(&self.buffer));
        self.events
    }

    /// Reads until an event named `name` arrives; returns it.
    pub(super) async fn until(&mut self, name: &str) -> ChatEvent {
        loop {
            if let Some(found) = self.events.iter().find(|e| e.name() == name) {
                return found.clone();
            }
            let chunk = self
                .response
                .chunk()
                .await
                .unwrap()
                .expect("the stream ended early");
            self.buffer.extend_from_slice(&chunk);
            if let Some(end) = self.buffer.windows(2).rposition(|w| w == b"\n\n") {
                let complete: Vec<u8> = self.buffer.drain(..end + 2).collect();
                self.events.extend(parse_events(&complete));
            }
        }
    }

    pub(super) fn session_id(&self) -> String {
        match &self.events[0] {
            ChatEvent::Meta(meta) => meta.session_id.clone(),
            other => panic!("first event {other:?}"),
        }
    }

    fn result(&self) -> parlor_domain::event::ToolResultEvent {
        self.events
            .iter()
            .find_map(|e| match e {
                ChatEvent::ToolResult(r) => Some(r.clone()),
                _ => None,
            })
            .unwrap()
    }
}

async fn answer(
    server: &TestServer,
    session: &str,
    call: &str,
    body: serde_json::Value,
    cookie: &str,
) -> (u16, String) {
    let response = server
        .http
        .post(server.url(&format!(
            "/api/chat/timekeeper/sessions/{session}/tool-calls/{call}"
        )))
        .header("cookie", cookie)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

const ASK: &str = r#"/tool clock__get_current_time {"timezone": "UTC"}"#;

#[tokio::test]
async fn an_always_server_waits_for_each_answer_from_the_owner_only() {
    let (server, _a, _c) = parlor_with_tools_confirming("always", 20).await;
    let (alice, bob) = (browser(&"a".repeat(32)), browser(&"b".repeat(32)));
    let mut turn = Streaming::start(&server, json!({"message": ASK}), &alice).await;
    let ChatEvent::Approval(asked) = turn.until("approval").await else {
        unreachable!()
    };
    assert_eq!((asked.server.as_str(), asked.first_use), ("clock", false));
    let session = turn.session_id();
    // Another owner cannot answer; the owner can, once.
    let (status, _) = answer(&server, &session, &asked.id, json!({"approve": true}), &bob).await;
    assert_eq!(status, 404);
    assert_eq!(
        answer(
            &server,
            &session,
            &asked.id,
            json!({"approve": true}),
            &alice
        )
        .await
        .0,
        200
    );
    let (status, body) = answer(
        &server,
        &session,
        &asked.id,
        json!({"approve": false}),
        &alice,
    )
    .await;
    assert_eq!(status, 404, "answered twice: {body}");
    turn.until("done").await;
    assert!(turn.result().ok);
    // A denial is a result for the model.
    let body = json!({"message": ASK, "session_id": session});
    let mut denied = Streaming::start(&server, body, &alice).await;
    let ChatEvent::Approval(asked) = denied.until("approval").await else {
        unreachable!()
    };
    assert_eq!(
        answer(
            &server,
            &session,
            &asked.id,
            json!({"approve": false}),
            &alice
        )
        .await
        .0,
        200
    );
    denied.until("done").await;
    let result = denied.result();
    assert!(!result.ok && result.error.unwrap().contains("denied"));
}

#[tokio::test]
async fn an_unanswered_call_is_denied_at_its_timeout_and_cannot_be_answered_after() {
    let (server, _a, _c) = parlor_with_tools_confirming("always", 1).await;
    let alice = browser(&"a".repeat(32));
    let mut turn = Streaming::start(&server, json!({"message": ASK}), &alice).await;
    let ChatEvent::Approval(asked) = turn.until("approval").await else {
        unreachable!()
    };
    turn.until("done").await;
    let result = turn.result();
    assert!(!result.ok && result.error.unwrap().contains("within 1 s"));
    let (status, _) = answer(
        &server,
        &turn.session_id(),
        &asked.id,
        json!({"approve": true}),
        &alice,
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_first_server_is_allowed_once_or_for_the_conversation() {
    let (server, _a, _c) = parlor_with_tools_confirming("first", 20).await;
    let alice = browser(&"a".repeat(32));
    let mut turn = Streaming::start(&server, json!({"message": ASK}), &alice).await;
    let ChatEvent::Approval(asked) = turn.until("approval").await else {
        unreachable!()
    };
    assert!(asked.first_use);
    assert!(
        asked.id.starts_with("call_"),
        "Parlor's own id: {}",
        asked.id
    );
    let session = turn.session_id();
    // Allowed once: the next call asks again.
    let once = json!({"approve": true, "scope": "once"});
    assert_eq!(
        answer(&server, &session, &asked.id, once, &alice).await.0,
        200
    );
    turn.until("done").await;
    let body = json!({"message": ASK, "session_id": session});
    let mut second = Streaming::start(&server, body.clone(), &alice).await;
    let ChatEvent::Approval(again) = second.until("approval").await else {
        unreachable!()
    };
    assert_ne!(again.id, asked.id, "a new id for a new call");
    // Allowed for the conversation: later calls run without asking.
    let always = json!({"approve": true, "scope": "conversation"});
    let (status, recorded) = answer(&server, &session, &again.id, always, &alice).await;
    assert_eq!(status, 200);
    assert!(
        recorded.contains("\"scope\":\"conversation\""),
        "{recorded}"
    );
    second.until("done").await;
    let third = server.chat_with("timekeeper", "", body, Some(&alice)).await;
    assert!(third.events.iter().all(|e| e.name() != "approval"));
    assert!(third
        .events
        .iter()
        .any(|e| matches!(e, ChatEvent::ToolResult(r) if r.ok)));
    // Another conversation asks again.
    let mut other = Streaming::start(&server, json!({"message": ASK}), &alice).await;
    other.until("approval").await;
}

async fn parlor_with_tools_confirming(
    confirm: &str,
    timeout: u64,
) -> (TestServer, tempfile::TempDir, tempfile::NamedTempFile) {
    super::chat::parlor_with_tools_as(confirm, timeout).await
}

#[tokio::test]
async fn an_answer_reaching_another_process_on_one_redis_is_given_to_the_waiting_call() {
    let redis = fake_llm::redis_server::RedisServer::start().unwrap();
    let extra = format!(
        "[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\", key_prefix = \"ap:\" }}\n",
        redis.url()
    );
    let (one, _a1, _c1) = super::chat::parlor_with(&extra, "always", 20, &[]).await;
    let (two, _a2, _c2) = super::chat::parlor_with(&extra, "always", 20, &[]).await;
    let (alice, bob) = (browser(&"a".repeat(32)), browser(&"b".repeat(32)));
    let mut turn = Streaming::start(&one, json!({"message": ASK}), &alice).await;
    let ChatEvent::Approval(asked) = turn.until("approval").await else {
        unreachable!()
    };
    let session = turn.session_id();
    let yes = json!({"approve": true});
    // The other process applies the conversation's rule, then reaches the waiting call.
    assert_eq!(
        answer(&two, &session, &asked.id, yes.clone(), &bob).await.0,
        404
    );
    let unknown = answer(
        &two,
        &session,
        "call_000000000000000000000000",
        yes.clone(),
        &alice,
    );
    assert_eq!(unknown.await.0, 404, "no call waits under that id");
    let (status, body) = answer(&two, &session, &asked.id, yes.clone(), &alice).await;
    assert_eq!(status, 200, "{body}");
    for server in [&two, &one] {
        let again = answer(server, &session, &asked.id, yes.clone(), &alice).await;
        assert_eq!(again.0, 404, "answered once: {}", again.1);
    }
    let events = turn.rest().await;
    let ran = events
        .iter()
        .any(|e| matches!(e, ChatEvent::ToolResult(r) if r.ok));
    assert!(ran, "{events:?}");
}
