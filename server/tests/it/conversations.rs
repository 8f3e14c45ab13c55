//! Whole conversations over HTTP, on file and Redis histories: fork (what it copies, what it
//! does not), edit, rename, delete, export and import (round trip, bad input stores
//! nothing), search; each with the conversation's access rules.

use crate::support::{redis_history, TestServer};
use fake_llm::redis_server::RedisServer;
use fake_llm::FakeLlm;
use parlor_domain::transfer::Export;
use parlor_domain::{ConversationId, Message, SendMark};
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

async fn info(
    server: &TestServer,
    session: &str,
) -> Option<parlor_server::store::ConversationInfo> {
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(session).unwrap();
    history.store.info(&id).await.unwrap()
}

/// Sends a request with an optional JSON body and cookie: the status and the body as JSON
/// (or as a string when it is not JSON).
async fn call(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    cookie: Option<&str>,
) -> (u16, Value) {
    let mut request = server.http.request(method, server.url(path));
    if let Some(body) = body {
        request = request.json(&body);
    }
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn import(server: &TestServer, body: &str, cookie: Option<&str>) -> (u16, Value) {
    let mut request = server
        .http
        .post(server.url("/api/chat/general/sessions/import"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn search(server: &TestServer, query: &str, cookie: &str) -> Vec<Value> {
    let (status, body) = call(
        server,
        reqwest::Method::GET,
        &format!("/api/conversations/search?q={query}"),
        None,
        Some(cookie),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["results"].as_array().unwrap().clone()
}

/// The user texts of the fake upstream's last request.
fn sent_user_texts(fake: &FakeLlm) -> Vec<String> {
    let requests = fake.requests();
    requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| match m["content"].as_array() {
            // Content parts (a message with context blocks): the user's own text first.
            Some(parts) => parts[0]["text"].as_str().unwrap_or_default().to_owned(),
            None => m["content"].as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

async fn manage(config: Option<tempfile::NamedTempFile>, backups: bool) {
    let fake = FakeLlm::start().await.unwrap();
    let base = fake.base_url();
    let path = config.as_ref().map(|c| c.path().display().to_string());
    let mut vars = vec![("OPENAI_BASE_URL", base.as_str())];
    if let Some(path) = &path {
        vars.push(("PARLOR_CONFIG", path));
    }
    let server = TestServer::start(&vars).await;
    use reqwest::Method;

    // Alice's conversation: three turns; the first question pinned (with a context block
    // kept for good), the first reply excluded.
    let first = server
        .chat_with(
            "general",
            "",
            json!({"message": "alpha question", "context": [
                {"source": "notes.md", "save": true, "blocks": [{"type": "text", "text": "the notes"}]}
            ]}),
            Some(ALICE.as_str()),
        )
        .await;
    let session = first.session_id();
    for text in ["beta question", "gamma question"] {
        let reply = server
            .chat_with(
                "general",
                "",
                json!({"message": text, "session_id": session}),
                Some(ALICE.as_str()),
            )
            .await;
        assert!(reply.done().is_some(), "{}", reply.body);
    }
    let original = stored(&server, &session).await;
    assert_eq!(original.len(), 6);
    assert!(!original[0].context.is_empty(), "the block is stored");
    let id = |i: usize| original[i].id().into_owned();
    let base_path = format!("/api/chat/general/sessions/{session}");
    for (message, send) in [(id(0), "always"), (id(1), "never")] {
        let (status, body) = call(
            &server,
            Method::PUT,
            &format!("{base_path}/messages/{message}"),
            Some(json!({"send": send})),
            Some(ALICE.as_str()),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let original = stored(&server, &session).await;
    let history = server.services.histories.get("default").unwrap();
    history
        .store
        .put_summary(
            &ConversationId::parse(&session).unwrap(),
            &json!({"summary": "they talked", "summarized_through": 1}),
        )
        .await
        .unwrap();

    // Fork: only Alice, one of `through` / `before`, a message of this conversation.
    let fork_path = format!("{base_path}/fork");
    let through = json!({"through": id(3)});
    let (status, _) = call(
        &server,
        Method::POST,
        &fork_path,
        Some(through.clone()),
        Some(BOB.as_str()),
    )
    .await;
    assert_eq!(status, 404);
    let (status, body) = call(
        &server,
        Method::POST,
        &fork_path,
        Some(json!({})),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let both = json!({"through": id(3), "before": id(3)});
    let (status, _) = call(
        &server,
        Method::POST,
        &fork_path,
        Some(both),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 400);
    let (status, body) = call(
        &server,
        Method::POST,
        &fork_path,
        Some(json!({"through": "nope"})),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, fork) = call(
        &server,
        Method::POST,
        &fork_path,
        Some(through),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["title"], "Fork of alpha question");
    assert_eq!(fork["messages"], 4);
    let fork_id = fork["session_id"].as_str().unwrap().to_owned();
    // Exactly the messages up to the one forked at, ids and marks included; not the summary.
    assert_eq!(stored(&server, &fork_id).await, original[..4].to_vec());
    let fork_info = info(&server, &fork_id).await.unwrap();
    let origin = fork_info.forked_from.clone().unwrap();
    assert_eq!(origin.session_id.as_str(), session);
    assert_eq!(origin.message_id.as_deref(), Some(id(3).as_str()));
    assert_eq!(
        fork_info.owner,
        info(&server, &session).await.unwrap().owner
    );
    assert_eq!(fork_info.pinned, 1);
    // The link to its origin is in its export (JSON and Markdown) and its debug facts.
    let export_of = |format: &'static str| {
        let path = format!("/api/chat/general/sessions/{fork_id}/export?format={format}");
        let server = &server;
        async move { server.get(&path, Some(ALICE.as_str())).await.1 }
    };
    let exported: serde_json::Value = serde_json::from_str(&export_of("json").await).unwrap();
    assert_eq!(exported["forked_from"]["session_id"], session.as_str());
    assert_eq!(exported["forked_from"]["message_id"], id(3).as_str());
    assert!(export_of("md")
        .await
        .contains(&format!("Forked from conversation `{session}`")));
    let (_, debug) = server
        .get(
            &format!("/api/chat/general/debug?session_id={fork_id}"),
            Some(ALICE.as_str()),
        )
        .await;
    let debug: serde_json::Value = serde_json::from_str(&debug).unwrap();
    assert_eq!(
        debug["forked_from"]["session_id"],
        session.as_str(),
        "{debug}"
    );
    let (_, page) = server
        .get(
            &format!("/chat?agent=general&session={fork_id}"),
            Some(ALICE.as_str()),
        )
        .await;
    assert!(
        page.contains(&format!(
            "href=\"/chat?agent=general&amp;session={session}\""
        )) || page.contains(&format!("href=\"/chat?agent=general&session={session}\"")),
        "the page links to the origin"
    );
    assert!(
        page.contains("forked from “alpha question”"),
        "the origin's title"
    );
    let fork_sid = ConversationId::parse(&fork_id).unwrap();
    assert_eq!(history.store.summary(&fork_sid).await.unwrap(), None);
    // The original is unchanged; the fork goes on by itself, with its marks applied.
    assert_eq!(stored(&server, &session).await, original);
    let turn = server
        .chat_with(
            "general",
            "?historyPolicy=lastN&historyLength=1",
            json!({"message": "delta question", "session_id": fork_id}),
            Some(ALICE.as_str()),
        )
        .await;
    assert!(turn.done().is_some(), "{}", turn.body);
    assert_eq!(sent_user_texts(&fake), ["alpha question", "delta question"]);
    // The pinned question went with its context block, copied into the fork.
    let request = fake.requests().last().unwrap().to_string();
    assert!(request.contains("the notes"), "{request}");
    assert_eq!(stored(&server, &session).await, original);
    // A fork before the first message holds nothing yet.
    let (status, empty) = call(
        &server,
        Method::POST,
        &fork_path,
        Some(json!({"before": id(0)})),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 201, "{empty}");
    assert_eq!(empty["messages"], 0);

    // Edit: any user message gets a new version; a reply cannot be edited.
    let edit = |message: String, text: &str| json!({"session_id": session, "message": text, "edit": message});
    let refused = server
        .chat_with("general", "", edit(id(3), "x"), Some(ALICE.as_str()))
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.json_error().contains("only a user message"));
    let unknown = server
        .chat_with(
            "general",
            "",
            edit("nope".into(), "x"),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(unknown.status, 404);
    let no_session = server
        .chat_with(
            "general",
            "",
            json!({"message": "x", "edit": id(4)}),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(no_session.status, 400);
    assert_eq!(stored(&server, &session).await, original);
    // An earlier question: it and what followed stay as the first version.
    let earlier = server
        .chat_with(
            "general",
            "",
            edit(id(2), "beta edited"),
            Some(ALICE.as_str()),
        )
        .await;
    assert!(earlier.done().is_some(), "{}", earlier.body);
    let versions = earlier.meta().versions.clone().expect("a new version");
    assert_eq!((versions.n, versions.of), (2, 2));
    assert_eq!(versions.prev, Some(id(2)));
    let branched = stored(&server, &session).await;
    assert_eq!(branched[..2], original[..2]);
    assert_eq!(branched.len(), 4);
    assert_eq!(branched[2].text, "beta edited");
    // Choosing the first version brings the whole original path back.
    let (status, chosen) = call(
        &server,
        Method::POST,
        &format!("{base_path}/messages/{}/choose", id(2)),
        Some(json!({})),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 200, "{chosen}");
    assert_eq!(chosen["messages"], original.len());
    assert_eq!(stored(&server, &session).await, original);
    let (status, _) = call(
        &server,
        Method::POST,
        &format!("{base_path}/messages/{}/choose", id(2)),
        Some(json!({})),
        Some(BOB.as_str()),
    )
    .await;
    assert_eq!(status, 404, "another browser cannot choose");
    let edited = server
        .chat_with(
            "general",
            "",
            edit(id(4), "gamma edited"),
            Some(ALICE.as_str()),
        )
        .await;
    assert!(edited.done().is_some(), "{}", edited.body);
    let after_edit = stored(&server, &session).await;
    assert_eq!(after_edit[..4], original[..4]);
    assert_eq!(after_edit.len(), 6);
    assert_eq!(after_edit[4].text, "gamma edited");
    assert_ne!(after_edit[4].id(), original[4].id());
    assert_ne!(after_edit[5].text, original[5].text);

    // Rename.
    let (status, _) = call(
        &server,
        Method::PATCH,
        &base_path,
        Some(json!({"title": "x"})),
        Some(BOB.as_str()),
    )
    .await;
    assert_eq!(status, 404);
    for bad in [
        json!({"title": "   "}),
        json!({"title": "x".repeat(201)}),
        json!({"name": "x"}),
    ] {
        let (status, body) = call(
            &server,
            Method::PATCH,
            &base_path,
            Some(bad),
            Some(ALICE.as_str()),
        )
        .await;
        assert_eq!(status, 400, "{body}");
    }
    let (status, renamed) = call(
        &server,
        Method::PATCH,
        &base_path,
        Some(json!({"title": "  My \n notes "})),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(renamed["title"], "My notes");
    assert_eq!(info(&server, &session).await.unwrap().title, "My notes");

    // A fork copies the chosen path up to its message, not the version beside it.
    let (status, fork) = call(
        &server,
        Method::POST,
        &fork_path,
        Some(json!({"through": after_edit[5].id()})),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 201, "{fork}");
    let forked = fork["session_id"].as_str().unwrap().to_owned();
    assert_eq!(stored(&server, &forked).await, after_edit);
    let forked_id = ConversationId::parse(&forked).unwrap();
    assert!(history.store.branches(&forked_id).await.unwrap().is_empty());

    // Export: JSON is the stored form, Markdown reads well; only Alice.
    let export_path = format!("{base_path}/export");
    let (status, _) = server.get(&export_path, Some(BOB.as_str())).await;
    assert_eq!(status, 404);
    let (status, _) = server
        .get(&format!("{export_path}?format=pdf"), Some(ALICE.as_str()))
        .await;
    assert_eq!(status, 400);
    let response = server
        .http
        .get(server.url(&export_path))
        .header("cookie", ALICE.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let disposition = response.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        disposition.starts_with("attachment; filename=\"parlor-general-"),
        "{disposition}"
    );
    let exported_text = response.text().await.unwrap();
    let exported: Export = serde_json::from_str(&exported_text).unwrap();
    assert_eq!(exported.title, "My notes");
    assert_eq!(exported.agent_id, "general");
    assert_eq!(exported.messages, after_edit);
    let (status, markdown) = server
        .get(&format!("{export_path}?format=md"), Some(ALICE.as_str()))
        .await;
    assert_eq!(status, 200);
    assert!(markdown.starts_with("# My notes\n"), "{markdown}");
    assert!(
        markdown.contains(" · always sent\n\nalpha question\n"),
        "{markdown}"
    );
    assert!(markdown.contains("## User · "), "{markdown}");
    // Markdown and the OpenAI-style export give the chosen path: the edited question, not
    // the version it replaced (which the JSON export keeps among its branches).
    assert!(markdown.contains("\ngamma edited\n"), "{markdown}");
    assert!(!markdown.contains(&original[4].text), "{markdown}");
    assert!(
        exported
            .branches
            .iter()
            .flat_map(|b| &b.messages)
            .any(|m| m.text == original[4].text),
        "{exported_text}"
    );
    let (status, openai) = server
        .get(
            &format!("{export_path}?format=openai"),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(status, 200, "{openai}");
    let openai: Value = serde_json::from_str(&openai).unwrap();
    let sent: Vec<(&str, &str)> = openai
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(sent.len(), after_edit.len(), "{openai}");
    for ((role, content), stored) in sent.iter().zip(&after_edit) {
        assert_eq!(*role, stored.role.as_str());
        assert!(content.starts_with(&stored.text), "{openai}");
    }
    // A user message's text context follows its text, as the model received it.
    assert!(sent[0].1.ends_with("\n\nthe notes"), "{openai}");
    assert_eq!(sent[4].1, "gamma edited");
    let (status, _) = server
        .get(&format!("{export_path}?format=xml"), Some(ALICE.as_str()))
        .await;
    assert_eq!(status, 400);

    // Import: an export comes back as a new conversation of this browser, message for message.
    let (status, imported) = import(&server, &exported_text, Some(ALICE.as_str())).await;
    assert_eq!(status, 201, "{imported}");
    let imported_id = imported["session_id"].as_str().unwrap().to_owned();
    assert_ne!(imported_id, session);
    assert_eq!(imported["title"], "My notes");
    assert_eq!(stored(&server, &imported_id).await, after_edit);
    let imported_info = info(&server, &imported_id).await.unwrap();
    assert_eq!(
        imported_info.owner,
        info(&server, &session).await.unwrap().owner
    );
    assert_eq!(imported_info.pinned, 1);
    let (status, _) = server
        .get(
            &format!("/api/chat/general/sessions/{imported_id}/export"),
            Some(BOB.as_str()),
        )
        .await;
    assert_eq!(status, 404);
    let (status, openai) = import(
        &server,
        r#"[{"role": "system", "content": "Be kind."}, {"role": "user", "content": "epsilon?"}, {"role": "assistant", "content": "Yes."}]"#,
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 201, "{openai}");
    assert_eq!(openai["messages"], 3);
    assert_eq!(openai["title"], "epsilon?");
    let alice = imported_info.owner.clone().unwrap();
    let owned_before = history.store.list_owned(&alice).await.unwrap().len();
    let listed_before = history.store.list().await.unwrap().len();
    for (bad, says) in [
        ("{not json", "not JSON"),
        (r#"{"title": "x"}"#, "not a conversation"),
        (
            r#"[{"role": "user", "content": "ok"}, {"role": "tool", "content": "no"}]"#,
            "message 2: a tool message answers call \"\", which no assistant message",
        ),
        ("[]", "no messages"),
    ] {
        let (status, body) = import(&server, bad, Some(ALICE.as_str())).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(says),
            "{bad}: {body}"
        );
    }
    let owned_after = history.store.list_owned(&alice).await.unwrap().len();
    assert_eq!(owned_after, owned_before, "a refused import stored nothing");
    assert_eq!(history.store.list().await.unwrap().len(), listed_before);

    // Search: this browser's conversations only, with the matching line.
    let hits = search(&server, "GAMMA%20edited", ALICE.as_str()).await;
    let sessions: Vec<&str> = hits
        .iter()
        .map(|h| h["session_id"].as_str().unwrap())
        .collect();
    assert!(
        sessions.contains(&session.as_str()) && sessions.contains(&imported_id.as_str()),
        "{hits:?}"
    );
    let hit = hits
        .iter()
        .find(|h| h["session_id"] == session.as_str())
        .unwrap();
    assert_eq!(hit["line"], "gamma edited");
    assert_eq!(hit["role"], "user");
    assert_eq!(hit["message_id"], after_edit[4].id().as_ref());
    assert!(search(&server, "gamma", BOB.as_str()).await.is_empty());
    let titled = search(&server, "notes", ALICE.as_str()).await;
    assert!(
        titled.iter().any(|h| h["session_id"] == session.as_str()
            && h["line"] == "My notes"
            && h.get("message_id").is_none()),
        "{titled:?}"
    );
    assert!(search(&server, "zeta", ALICE.as_str()).await.is_empty());

    // Delete: only Alice; gone from every list, backed up where the backend keeps backups.
    let (status, _) = call(
        &server,
        Method::DELETE,
        &base_path,
        None,
        Some(BOB.as_str()),
    )
    .await;
    assert_eq!(status, 404);
    let (status, deleted) = call(
        &server,
        Method::DELETE,
        &base_path,
        None,
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["session_id"], session.as_str());
    assert_eq!(deleted.get("backup").is_some(), backups, "{deleted}");
    assert!(info(&server, &session).await.is_none());
    assert!(stored(&server, &session).await.is_empty());
    let (status, _) = server.get(&export_path, Some(ALICE.as_str())).await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &server,
        Method::DELETE,
        &base_path,
        None,
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 404);
    assert!(!search(&server, "gamma%20edited", ALICE.as_str())
        .await
        .iter()
        .any(|h| h["session_id"] == session.as_str()));
    let (status, page) = server
        .get(
            &format!("/chat?agent=general&session={session}"),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(status, 404, "{page}");
    // The fork is untouched by its origin's deletion.
    assert_eq!(stored(&server, &fork_id).await.len(), 6);
    assert_eq!(
        stored(&server, &fork_id).await[0].send,
        Some(SendMark::Always)
    );
}

#[tokio::test]
async fn conversations_are_managed_on_file_histories() {
    manage(None, true).await;
}

#[tokio::test]
async fn conversations_are_managed_on_redis_histories() {
    let redis = RedisServer::start().unwrap();
    manage(Some(redis_history(&redis.url(), "conv:")), false).await;
}

#[tokio::test]
async fn a_conversation_is_not_renamed_or_deleted_while_a_reply_is_written() {
    let fake = FakeLlm::start().await.unwrap();
    let base = fake.base_url();
    let server = TestServer::start(&[("OPENAI_BASE_URL", base.as_str())]).await;
    let first = server
        .chat_with(
            "general",
            "",
            json!({"message": "hello"}),
            Some(ALICE.as_str()),
        )
        .await;
    let session = first.session_id();
    let slow = {
        let body = json!({"session_id": session, "message": "[words:20] take your time"});
        let request = server
            .http
            .post(server.url("/api/chat/general"))
            .header("cookie", ALICE.as_str())
            .json(&body);
        tokio::spawn(async move { request.send().await.unwrap().text().await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let path = format!("/api/chat/general/sessions/{session}");
    let (status, body) = call(
        &server,
        reqwest::Method::DELETE,
        &path,
        None,
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = call(
        &server,
        reqwest::Method::PATCH,
        &path,
        Some(json!({"title": "t"})),
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 409);
    let finished = slow.await.unwrap().unwrap();
    assert!(finished.contains("event: done"), "{finished}");
    assert_eq!(stored(&server, &session).await.len(), 4);
    let (status, _) = call(
        &server,
        reqwest::Method::DELETE,
        &path,
        None,
        Some(ALICE.as_str()),
    )
    .await;
    assert_eq!(status, 200);
}
