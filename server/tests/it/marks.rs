//! Pins and exclusions, on file and Redis histories: a pinned message is sent even when the
//! policy and the window leave it out (only the token budget may drop it), an excluded one
//! never reaches the model; the API to set them keeps the conversation's access rules.

use crate::support::{config_file, redis_history, TestServer};
use fake_llm::redis_server::RedisServer;
use fake_llm::FakeLlm;
use parlor_domain::{ConversationId, Message, Role};
use serde_json::{json, Value};

static ALICE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::browser("a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"));
static BOB: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::browser("b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"));

async fn stored(server: &TestServer, session: &str) -> Vec<Message> {
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(session).unwrap();
    history.store.load(&id).await.unwrap()
}

/// The id of the stored message with this text.
async fn id_of(server: &TestServer, session: &str, text: &str) -> String {
    stored(server, session)
        .await
        .iter()
        .find(|m| m.text == text)
        .unwrap_or_else(|| panic!("no message {text:?}"))
        .id()
        .into_owned()
}

async fn mark(
    server: &TestServer,
    session: &str,
    message: &str,
    body: Value,
    cookie: Option<&str>,
) -> (u16, Value) {
    let mut request = server
        .http
        .put(server.url(&format!(
            "/api/chat/concise/sessions/{session}/messages/{message}"
        )))
        .json(&body);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The user texts of the fake upstream's last request.
fn sent_user_texts(fake: &FakeLlm) -> Vec<String> {
    let requests = fake.requests();
    let last = requests.last().unwrap();
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn pins_and_exclusions(config: Option<tempfile::NamedTempFile>) {
    let fake = FakeLlm::start().await.unwrap();
    let base = fake.base_url();
    let path = config.as_ref().map(|c| c.path().display().to_string());
    let mut vars = vec![("OPENAI_BASE_URL", base.as_str())];
    if let Some(path) = &path {
        vars.push(("PARLOR_CONFIG", path));
    }
    let server = TestServer::start(&vars).await;
    // `concise` sends the last two turns. Eight turns: the tail a turn reads no longer
    // holds the first ones.
    let first = server
        .chat_with(
            "concise",
            "",
            json!({"message": "turn 0"}),
            Some(ALICE.as_str()),
        )
        .await;
    let session = first.session_id();
    for i in 1..8 {
        let reply = server
            .chat_with(
                "concise",
                "",
                json!({"message": format!("turn {i}"), "session_id": session}),
                Some(ALICE.as_str()),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    // New messages are stored with their ids.
    assert!(stored(&server, &session)
        .await
        .iter()
        .all(|m| m.id.is_some()));

    let pinned = id_of(&server, &session, "turn 0").await;
    let excluded = id_of(&server, &session, "turn 7").await;
    let (status, reply) = mark(
        &server,
        &session,
        &pinned,
        json!({"send": "always"}),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply, json!({"id": pinned, "send": "always", "pinned": 1}));
    let (status, _) = mark(
        &server,
        &session,
        &excluded,
        json!({"send": "never"}),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 200);

    let turn = server
        .chat_with(
            "concise",
            "",
            json!({"message": "turn 8", "session_id": session}),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(sent_user_texts(&fake), ["turn 0", "turn 8"]);
    let history = &turn.meta().history;
    let marks = history.marks.clone().expect("the marks are reported");
    assert_eq!(
        (marks.pinned_sent, marks.pinned_dropped, marks.excluded),
        (1, 0, 1)
    );
    let step = history
        .chain
        .iter()
        .find(|s| s.name == "marks")
        .expect("a marks step");
    assert_eq!(step.added, 1);
    // The pinned message is sent on its own; turn 7 is excluded and its reply, which would
    // now open the request, left out: the sent part starts at the new message.
    assert_eq!(history.first_sent_index, 16);
    assert_eq!(step.removed, 2);
    let marks_stored: Vec<(String, Option<parlor_domain::SendMark>)> = stored(&server, &session)
        .await
        .into_iter()
        .filter(|m| m.send.is_some())
        .map(|m| (m.text, m.send))
        .collect();
    assert_eq!(marks_stored.len(), 2, "{marks_stored:?}");

    // Clearing the marks sends the window as before.
    for id in [&pinned, &excluded] {
        let (status, reply) = mark(
            &server,
            &session,
            id,
            json!({"send": null}),
            Some(ALICE.as_str()),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
    }
    server
        .chat_with(
            "concise",
            "",
            json!({"message": "turn 9", "session_id": session}),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(sent_user_texts(&fake), ["turn 8", "turn 9"]);

    // Another browser cannot see the conversation; bad requests say what is wrong.
    let (status, _) = mark(
        &server,
        &session,
        &pinned,
        json!({"send": "always"}),
        Some(BOB.as_str()),
    )
    .await;
    assert_eq!(status, 404);
    let (status, reply) = mark(
        &server,
        &session,
        "h0000000000000000",
        json!({"send": "always"}),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 404, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("no message"),
        "{reply}"
    );
    let (status, reply) = mark(
        &server,
        &session,
        &pinned,
        json!({"send": "sometimes"}),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 400, "{reply}");
    let (status, _) = mark(
        &server,
        &session,
        &pinned,
        json!({"pin": true}),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = mark(
        &server,
        "not a session",
        &pinned,
        json!({}),
        Some(ALICE.as_str()),
    )
    .await;
    assert!(status == 400 || status == 404, "{status}");
    assert!(
        stored(&server, &session)
            .await
            .iter()
            .all(|m| m.send.is_none()),
        "refusals change nothing"
    );
    assert!(stored(&server, &session)
        .await
        .iter()
        .all(|m| m.role != Role::System));
}

#[tokio::test]
async fn pins_and_exclusions_on_file_histories() {
    pins_and_exclusions(None).await;
}

#[tokio::test]
async fn pins_and_exclusions_on_redis_histories() {
    let redis = RedisServer::start().unwrap();
    pins_and_exclusions(Some(redis_history(&redis.url(), "marks:"))).await;
}

#[tokio::test]
async fn only_the_token_budget_drops_a_pinned_message() {
    let config = config_file(
        "[history]\nchain = [\"sliding_window\", \"token_budget\"]\n\n[[models]]\nname = \"tight\"\nmodel = \"gpt-4o-mini\"\ntoken_budget = 60\n",
    );
    let path = config.path().display().to_string();
    let (fake, server) = TestServer::with_upstream(&[("PARLOR_CONFIG", &path)]).await;
    let long = format!("an early note {}", "word ".repeat(150));
    let first = server.chat("concise", json!({"message": long})).await;
    let session = first.session_id();
    for i in 1..4 {
        server
            .chat(
                "concise",
                json!({"message": format!("t{i}"), "session_id": session}),
            )
            .await;
    }
    let pinned = id_of(&server, &session, &long).await;
    let (status, _) = mark(&server, &session, &pinned, json!({"send": "always"}), None).await;
    assert_eq!(status, 200);
    // Within the default budget the pinned note is sent; with `tight` it no longer fits.
    server
        .chat("concise", json!({"message": "t4", "session_id": session}))
        .await;
    assert_eq!(sent_user_texts(&fake)[0], long);
    server
        .chat(
            "concise",
            json!({"message": "!model tight", "session_id": session}),
        )
        .await;
    let turn = server
        .chat("concise", json!({"message": "t5", "session_id": session}))
        .await;
    assert!(!sent_user_texts(&fake).contains(&long));
    let marks = turn.meta().history.marks.clone().unwrap();
    assert_eq!((marks.pinned_sent, marks.pinned_dropped), (0, 1));
}
