//! Tool exchanges on every backend: stored with their ids (file and Redis histories),
//! exported and imported whole, and results kept as the server's `save` says.

use super::chat::parlor_with;
use crate::support::{browser, TestServer};
use parlor_domain::{ConversationId, Message, Role};
use serde_json::json;

pub(super) const ASK: &str = r#"/tool clock__get_current_time {"timezone": "UTC"}"#;

pub(super) async fn load(server: &TestServer, session: &str) -> Vec<Message> {
    let store = &server.services.histories.get("default").unwrap().store;
    store
        .load(&ConversationId::parse(session).unwrap())
        .await
        .unwrap()
}

/// Exports `session` (as `cookie`), imports the export, and checks the copy is what was
/// stored: any conversation Parlor keeps imports again.
pub(super) async fn reimports(server: &TestServer, cookie: &str, session: &str) {
    let stored = load(server, session).await;
    let path = format!("/api/chat/timekeeper/sessions/{session}/export");
    let (status, export) = server.get(&path, Some(cookie)).await;
    assert_eq!(status, 200, "{export}");
    let imported = server
        .http
        .post(server.url("/api/chat/timekeeper/sessions/import"))
        .header("cookie", cookie)
        .header("content-type", "application/json")
        .body(export)
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status(), 201, "{}", imported.text().await.unwrap());
    let imported: serde_json::Value = imported.json().await.unwrap();
    let copy = load(server, imported["session_id"].as_str().unwrap()).await;
    assert_eq!(copy, stored, "imported as it was stored");
}

async fn round_trip(server: &TestServer) {
    let alice = browser(&"a".repeat(32));
    let reply = server
        .chat_with("timekeeper", "", json!({"message": ASK}), Some(&alice))
        .await;
    let session = reply.session_id();
    let stored = load(server, &session).await;
    let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert!(stored.iter().all(|m| m.id.is_some()));
    let export = server
        .get(
            &format!("/api/chat/timekeeper/sessions/{session}/export"),
            Some(&alice),
        )
        .await;
    assert_eq!(export.0, 200);
    let imported = server
        .http
        .post(server.url("/api/chat/timekeeper/sessions/import"))
        .header("cookie", &alice)
        .header("content-type", "application/json")
        .body(export.1.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status(), 201);
    let imported: serde_json::Value = imported.json().await.unwrap();
    let copy = load(server, imported["session_id"].as_str().unwrap()).await;
    assert_eq!(copy, stored, "the exchange comes back whole, ids and all");
    let (status, markdown) = server
        .get(
            &format!("/api/chat/timekeeper/sessions/{session}/export?format=md"),
            Some(&alice),
        )
        .await;
    assert_eq!(status, 200);
    assert!(
        markdown.contains("Calls `clock__get_current_time` with"),
        "{markdown}"
    );
    assert!(
        markdown.contains("`clock__get_current_time` result:"),
        "{markdown}"
    );
}

#[tokio::test]
async fn exchanges_are_stored_exported_and_imported_whole_in_files() {
    let (server, _a, _c) = parlor_with("", "never", 30, &[]).await;
    round_trip(&server).await;
}

#[tokio::test]
async fn exchanges_are_stored_exported_and_imported_whole_in_redis() {
    let redis = fake_llm::redis_server::RedisServer::start().unwrap();
    let history = format!(
        "[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\", key_prefix = \"tools:\" }}\n",
        redis.url()
    );
    let (server, _a, _c) = parlor_with(&history, "never", 30, &[]).await;
    round_trip(&server).await;
}

#[tokio::test]
async fn results_are_kept_as_save_says_and_then_stubbed_with_their_pairing() {
    // `save = 1`: sent in full on the next turn, then replaced by a stub.
    let (server, _a, _c) = super::chat::parlor_with_save("1").await;
    let reply = server.chat("timekeeper", json!({"message": ASK})).await;
    let session = reply.session_id();
    let full = load(&server, &session).await[2].clone();
    assert!(full.texts().collect::<String>().contains("UTC"));
    let next = server
        .chat(
            "timekeeper",
            json!({"message": "and now?", "session_id": session}),
        )
        .await;
    assert!(
        next.text().contains("UTC"),
        "sent in full on the next turn: {}",
        next.text()
    );
    let later = server
        .chat(
            "timekeeper",
            json!({"message": "later", "session_id": session}),
        )
        .await;
    let stored = load(&server, &session).await;
    let stub = stored[2].texts().collect::<String>();
    assert!(
        stub.starts_with("[result of clock__get_current_time removed after 1 turn:"),
        "{stub}"
    );
    assert_eq!(stored[2].answers(), full.answers(), "the pairing stays");
    assert!(
        later.text().contains("removed after 1 turn"),
        "{}",
        later.text()
    );
    // `save = false`: stored as a stub at once.
    let (server, _a, _c) = super::chat::parlor_with_save("false").await;
    let reply = server.chat("timekeeper", json!({"message": ASK})).await;
    assert!(reply.text().contains("UTC"), "sent in full in its own turn");
    let stored = load(&server, &reply.session_id()).await;
    let stub = stored[2].texts().collect::<String>();
    assert!(
        stub.starts_with("[result of clock__get_current_time not kept:"),
        "{stub}"
    );
}
