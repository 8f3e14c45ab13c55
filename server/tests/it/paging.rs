//! Long conversations open at their latest messages: the chat page renders the last page
//! only, and older pages come from `GET …/sessions/{id}/messages?before=…` (what the page
//! fetches as the reader scrolls up), on file and Redis histories, with the conversation's
//! access rules.

use crate::support::{redis_history, TestServer};
use fake_llm::redis_server::RedisServer;
use parlor_domain::{ConversationId, Message};
use serde_json::{json, Value};

static ALICE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::browser("a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"));
static BOB: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::browser("b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"));

/// Imports a conversation of `turns` questions ("question 007") and answers ("answer
/// **7**") for Alice: its session id.
async fn long_conversation(server: &TestServer, turns: usize) -> String {
    let messages: Vec<Value> = (0..turns)
        .flat_map(|i| {
            [
                json!({"role": "user", "content": format!("question {i:03}")}),
                json!({"role": "assistant", "content": format!("answer **{i}**")}),
            ]
        })
        .collect();
    let response = server
        .http
        .post(server.url("/api/chat/general/sessions/import"))
        .header("cookie", ALICE.as_str())
        .json(&messages)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    body["session_id"].as_str().unwrap().to_owned()
}

async fn stored(server: &TestServer, session: &str) -> Vec<Message> {
    let history = server.services.histories.get("default").unwrap();
    history
        .store
        .load(&ConversationId::parse(session).unwrap())
        .await
        .unwrap()
}

async fn older(server: &TestServer, session: &str, query: &str, cookie: &str) -> (u16, Value) {
    let path = format!("/api/chat/general/sessions/{session}/messages?{query}");
    let (status, body) = server.get(&path, Some(cookie)).await;
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn texts(page: &Value) -> Vec<String> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect()
}

async fn pages(config: Option<tempfile::NamedTempFile>) {
    let path = config.as_ref().map(|c| c.path().display().to_string());
    let mut vars = Vec::new();
    if let Some(path) = &path {
        vars.push(("PARLOR_CONFIG", path.as_str()));
    }
    let server = TestServer::start(&vars).await;
    let session = long_conversation(&server, 50).await;
    let all = stored(&server, &session).await;
    assert_eq!(all.len(), 100);

    // The page shows the latest 40 messages (questions 030 to 049) and says how many more
    // there are; the rest is not rendered.
    let (status, page) = server
        .get(
            &format!("/chat?agent=general&session={session}"),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(page.matches("<article data-role=").count(), 40);
    assert!(page.contains("question 030") && page.contains("question 049"));
    assert!(
        !page.contains("question 029"),
        "older messages are not rendered"
    );
    assert!(page.contains("Show earlier messages (60 more)"));

    // The page before the first one shown: messages 20..60, replies rendered as HTML.
    let query = format!("before=60&before_id={}", all[60].id());
    let (status, first) = older(&server, &session, &query, ALICE.as_str()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["first_index"], 20);
    let expected: Vec<_> = all[20..60].iter().map(|m| m.text.clone()).collect();
    assert_eq!(texts(&first), expected);
    assert_eq!(first["messages"][0]["id"], all[20].id().as_ref());
    assert_eq!(first["html"][0], "", "questions have no HTML");
    assert_eq!(first["html"][1], "<p>answer <strong>10</strong></p>\n");

    // Then the first 20, which start the conversation.
    let query = format!("before=20&before_id={}", all[20].id());
    let (_, second) = older(&server, &session, &query, ALICE.as_str()).await;
    assert_eq!(second["first_index"], 0);
    assert_eq!(texts(&second).len(), 20);
    assert_eq!(texts(&second)[0], "question 000");

    // A conversation that lost its oldest messages since the page was opened: the message
    // is no longer at `before`, the page still ends right before it.
    let query = format!("before=61&before_id={}", all[60].id());
    let (_, moved) = older(&server, &session, &query, ALICE.as_str()).await;
    assert_eq!(texts(&moved), expected);
    // A message that is gone: nothing older to show.
    let (status, gone) = older(
        &server,
        &session,
        "before=60&before_id=nope",
        ALICE.as_str(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(texts(&gone).is_empty());

    // Another browser does not see it, bad queries are refused clearly.
    let query = format!("before=60&before_id={}", all[60].id());
    let (status, body) = older(&server, &session, &query, BOB.as_str()).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = older(&server, &session, "before=many&before_id=x", ALICE.as_str()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("before"), "{body}");

    // A conversation shorter than a page is shown whole, without the button.
    let short = long_conversation(&server, 20).await;
    let (_, page) = server
        .get(
            &format!("/chat?agent=general&session={short}"),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(page.matches("<article data-role=").count(), 40);
    assert!(!page.contains("Show earlier messages"));
}

#[tokio::test]
async fn long_conversations_open_at_the_latest_page_on_file_histories() {
    pages(None).await;
}

#[tokio::test]
async fn long_conversations_open_at_the_latest_page_on_redis_histories() {
    let redis = RedisServer::start().unwrap();
    pages(Some(redis_history(&redis.url(), "paging:"))).await;
}
