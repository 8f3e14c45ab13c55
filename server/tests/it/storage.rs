//! Where conversations live: session-id resolution, safe dialog names, named histories from
//! `parlor.toml`, and a Redis that goes away and comes back, over real HTTP.

use crate::support::{config_file, redis_history, Reply, TestServer};
use fake_llm::redis_server::RedisServer;
use serde_json::{json, Value};

static BROWSER: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::browser("0123456789abcdef0123456789abcdef"));

/// Writes `templates` (id → template JSON) as an agents folder.
fn agents(templates: &[(&str, Value)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (id, template) in templates {
        std::fs::create_dir_all(dir.path().join(id)).unwrap();
        std::fs::write(
            dir.path().join(id).join("template.json"),
            template.to_string(),
        )
        .unwrap();
    }
    dir
}

fn agent<'a>(id: &'a str, history: Option<&str>) -> (&'a str, Value) {
    let mut template = json!({
        "agentId": id,
        "name": id,
        "personality": format!("You are agent {id}."),
        "nodes": ["llm.openai"],
        "nodeConfigurations": {"llm.openai": {"model": "m"}},
    });
    if let Some(history) = history {
        template["chatSettings"] = json!({ "historyId": history });
    }
    (id, template)
}

/// Posts a turn with the given cookies; returns the reply and the `parlor_chat` cookie set.
async fn post(
    server: &TestServer,
    agent: &str,
    body: Value,
    cookies: &[&str],
) -> (Reply, Option<String>) {
    let cookie = (!cookies.is_empty()).then(|| cookies.join("; "));
    let reply = server
        .chat_request(agent, "", body, cookie.as_deref(), &[])
        .await;
    let chat_cookie = reply.chat_cookie();
    (reply, chat_cookie)
}

#[tokio::test]
async fn session_ids_resolve_from_the_body_then_the_cookie_then_a_new_one() {
    let server = TestServer::start(&[]).await;
    let (first, cookie) = post(&server, "general", json!({"message": "one"}), &[]).await;
    let a = first.session_id();
    assert_eq!(cookie.as_deref(), Some(a.as_str()), "the cookie names it");
    let chat_cookie = format!("parlor_chat={a}");

    // No session_id (absent or empty): the cookie's conversation continues.
    for body in [
        json!({"message": "two"}),
        json!({"session_id": "", "message": "three"}),
    ] {
        let (reply, _) = post(&server, "general", body, &[&chat_cookie]).await;
        assert_eq!(reply.session_id(), a);
    }
    assert_eq!(server.stored(&a).len(), 6);

    // The body wins over the cookie, and an API client may name its own session.
    let (reply, cookie) = post(
        &server,
        "general",
        json!({"session_id": "user_123", "message": "hi"}),
        &[&chat_cookie],
    )
    .await;
    assert_eq!(reply.session_id(), "user_123");
    assert_eq!(cookie.as_deref(), Some("user_123"));

    // "New chat" starts over even with the cookie.
    let (reply, _) = post(
        &server,
        "general",
        json!({"message": "fresh", "new_conversation": true}),
        &[&chat_cookie],
    )
    .await;
    assert_ne!(reply.session_id(), a);
    assert_eq!(reply.session_id().len(), 32, "a new unguessable id");

    // A cookie naming another agent's conversation, or another browser's, is not followed.
    let (reply, _) = post(&server, "concise", json!({"message": "x"}), &[&chat_cookie]).await;
    assert_eq!(reply.status, 200);
    assert_ne!(reply.session_id(), a);
    let (owned, _) = post(
        &server,
        "general",
        json!({"message": "mine"}),
        &[BROWSER.as_str()],
    )
    .await;
    let owned_cookie = format!("parlor_chat={}", owned.session_id());
    let (reply, _) = post(
        &server,
        "general",
        json!({"message": "x"}),
        &[&owned_cookie],
    )
    .await;
    assert_ne!(reply.session_id(), owned.session_id());
    assert_eq!(server.stored(&owned.session_id()).len(), 2, "untouched");
}

#[tokio::test]
async fn dialog_names_can_never_leave_the_store_folder() {
    let server = TestServer::start(&[]).await;
    let long = "a".repeat(129);
    for bad in [
        "..",
        "../escape",
        "a/b",
        "a\\b",
        "/etc/passwd",
        ".hidden",
        "x\u{0}y",
        "tab\there",
        "%2e%2e%2fx",
        "dialog:1",
        long.as_str(),
    ] {
        let (reply, _) = post(
            &server,
            "general",
            json!({"session_id": bad, "message": "hi"}),
            &[],
        )
        .await;
        assert_eq!(reply.status, 400, "{bad:?}: {}", reply.body);
        if !bad.chars().any(char::is_control) {
            let cookie = format!("parlor_chat={bad}");
            let (reply, _) = post(&server, "general", json!({"message": "hi"}), &[&cookie]).await;
            assert_eq!(reply.status, 200, "a bad cookie is ignored: {bad:?}");
        }
    }
    let made: Vec<String> = std::fs::read_dir(server.data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(made, [".chat-history"], "nothing written beside the store");
    use std::os::unix::fs::PermissionsExt;
    let store = std::fs::metadata(server.data.path().join(".chat-history")).unwrap();
    assert_eq!(
        store.permissions().mode() & 0o777,
        0o700,
        "for Parlor's OS user only"
    );
    for entry in std::fs::read_dir(server.data.path().join(".chat-history")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name == ".locks" || name == ".journal" {
            // The dialogs' lock files (one per server-made id), the journal of new ones.
            continue;
        }
        assert_eq!(name.len(), 32, "only server-made ids: {name}");
    }
    for entry in std::fs::read_dir(server.data.path().join(".chat-history/.locks")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert_eq!(name.len(), 37, "only locks of server-made ids: {name}");
    }
}

#[tokio::test]
async fn agents_use_the_history_their_template_names() {
    let config = config_file(
        r#"
        [[histories]]
        id = "support"
        system_message = "You are the support desk."
        backend = { type = "memory", max_turns = 2 }
        "#,
    );
    let agents = agents(&[
        agent("desk", Some("support")),
        agent("desk2", Some("support")),
        agent("plain", None),
    ]);
    let agents_dir = agents.path().display().to_string();
    let config_path = config.path().display().to_string();
    let (fake, server) = TestServer::with_upstream(&[
        ("PARLOR_AGENTS_DIR", &agents_dir),
        ("PARLOR_CONFIG", &config_path),
    ])
    .await;

    let first = server.chat("desk", json!({"message": "one"})).await;
    let session = first.session_id();
    let second = server
        .chat("desk", json!({"session_id": session, "message": "two"}))
        .await;
    assert_eq!(
        second.meta().history.messages_stored,
        3,
        "max_turns = 2 messages kept, plus the new one"
    );
    let sent = &fake.requests()[1]["messages"];
    assert_eq!(sent[0]["role"], "system");
    assert_eq!(sent[0]["content"], "You are the support desk.");
    assert_eq!(sent[1]["content"], "You are agent desk.");
    assert_eq!(
        sent.as_array().unwrap().len(),
        5,
        "2 system + 3 stored: {sent}"
    );
    assert_eq!(
        server.dialog_count(),
        0,
        "the memory history writes no files"
    );

    server.chat("desk2", json!({"message": "hello"})).await;
    let plain = server.chat("plain", json!({"message": "on disk"})).await;
    assert_eq!(server.stored(&plain.session_id()).len(), 2);
    let sent = &fake.requests()[3]["messages"];
    assert_eq!(
        sent[0]["content"], "You are agent plain.",
        "no history system message"
    );

    // A conversation belongs to its agent even when the history is shared.
    let other = server
        .chat("desk2", json!({"session_id": session, "message": "x"}))
        .await;
    assert_eq!(other.status, 400);
}

#[tokio::test]
async fn when_redis_goes_away_the_user_is_told_and_it_works_again_when_it_returns() {
    let mut redis = RedisServer::start().unwrap();
    let config = redis_history(&redis.url(), "t:");
    let config_path = config.path().display().to_string();
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &config_path),
        ("PARLOR_ADMIN_TOKEN", "ops"),
    ])
    .await;
    let reply = server.chat("general", json!({"message": "before"})).await;
    assert!(reply.done().is_some(), "{}", reply.body);
    assert_eq!(server.dialog_count(), 0, "nothing in files");

    // Anyone learns ready or not; the reasons are the operator's.
    let (status, body) = server.get("/readyz", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, r#"{"ready":true}"#);
    let readyz = || async {
        let response = server
            .http
            .get(server.url("/readyz"))
            .header("x-parlor-admin-token", "ops")
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };
    let (status, body) = readyz().await;
    assert_eq!(status, 200, "{body}");
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["histories"]["default"], "ok");
    assert_eq!(ready["upstream"], "mirror");

    redis.stop();
    // Not ready while Redis is down, though alive; only the admin learns why.
    let (status, body) = server.get("/readyz", None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body, r#"{"ready":false}"#);
    let (status, body) = readyz().await;
    assert_eq!(status, 503, "{body}");
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["ready"], false);
    assert!(
        ready["histories"]["default"]
            .as_str()
            .unwrap()
            .starts_with("Redis"),
        "{body}"
    );
    assert_eq!(server.get("/healthz", None).await.0, 200);
    let reply = server
        .chat("general", json!({"message": "while down"}))
        .await;
    assert_eq!(reply.status, 200);
    let error = reply.error().expect("an error event");
    assert!(
        error.starts_with("history store unavailable, your message was not saved"),
        "{error}"
    );

    redis.restart().unwrap();
    assert_eq!(server.get("/readyz", None).await.0, 200, "ready again");
    // The very next request works, and stores its message once.
    let reply = server.chat("general", json!({"message": "after"})).await;
    assert!(
        reply.done().is_some(),
        "the first request after Redis came back: {}",
        reply.body
    );
    let stored = server
        .services
        .histories
        .get("default")
        .unwrap()
        .store
        .load(&parlor_domain::ConversationId::parse(&reply.session_id()).unwrap())
        .await
        .unwrap();
    let texts: Vec<&str> = stored.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[0], "after");

    // Redis restarts between two requests (nobody noticed it was away): the next request
    // works too, in a new conversation and in the one above.
    redis.stop();
    redis.restart().unwrap();
    let reply = server.chat("general", json!({"message": "again"})).await;
    assert!(
        reply.done().is_some(),
        "after a quiet restart: {}",
        reply.body
    );
    redis.stop();
    redis.restart().unwrap();
    let session = reply.session_id();
    let reply = server
        .chat(
            "general",
            json!({"session_id": session, "message": "and again"}),
        )
        .await;
    assert!(reply.done().is_some(), "continuing: {}", reply.body);
}

#[tokio::test]
async fn with_redis_a_turn_reads_only_the_window_and_reports_the_whole_conversation() {
    let redis = RedisServer::start().unwrap();
    let config = redis_history(&redis.url(), "parlor:");
    let config_path = config.path().display().to_string();
    let (fake, server) = TestServer::with_upstream(&[("PARLOR_CONFIG", &config_path)]).await;
    // `concise` keeps the last 2 user turns: the turn reads a tail of 4 stored messages.
    let first = server.chat("concise", json!({"message": "u1"})).await;
    let session = first.session_id();
    let mut last = first;
    for text in ["u2", "u3", "u4", "u5"] {
        last = server
            .chat("concise", json!({"session_id": session, "message": text}))
            .await;
    }
    let report = &last.meta().history;
    assert_eq!(report.messages_stored, 9, "the total, not the tail");
    assert_eq!(report.first_sent_index, 6);
    assert_eq!(report.messages_trimmed, 6);
    let sent: Vec<String> = fake.requests().pop().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sent.len(), 4, "system prompt + u4, its reply, u5: {sent:?}");
    assert_eq!(sent[1], "u4");
    assert_eq!(sent[3], "u5");
}

#[tokio::test]
async fn a_request_never_starts_with_a_reply_whose_question_max_turns_dropped() {
    let config = config_file(
        r#"
        [[histories]]
        id = "default"
        backend = { type = "memory", max_turns = 3 }
        "#,
    );
    let agents = agents(&[agent("desk", None)]);
    let agents_dir = agents.path().display().to_string();
    let config_path = config.path().display().to_string();
    let (fake, server) = TestServer::with_upstream(&[
        ("PARLOR_AGENTS_DIR", &agents_dir),
        ("PARLOR_CONFIG", &config_path),
    ])
    .await;
    let session = server
        .chat("desk", json!({"message": "one"}))
        .await
        .session_id();
    server
        .chat("desk", json!({"session_id": session, "message": "two"}))
        .await;
    // Stored now: reply one, two, reply two (the cap dropped "one").
    let third = server
        .chat("desk", json!({"session_id": session, "message": "three"}))
        .await;
    let sent = fake.requests()[2]["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{sent:?}");
    assert_eq!(sent[1]["content"], "two");
    let history = &third.meta().history;
    assert_eq!(history.messages_stored, 4);
    assert_eq!(
        history.first_sent_index, 1,
        "the orphaned reply is not sent"
    );
    assert_eq!(history.chain[0].name, "policy");
    assert_eq!(history.chain[0].removed, 1);
}

#[tokio::test]
async fn agent_max_ctx_is_a_ceiling_templates_and_chains_cannot_lift() {
    // Odd windows: the window's cut moves forward to a question, and these conversations
    // alternate question and reply, ending with a question.
    let config = config_file("[history]\nagent_max_ctx = 5\n");
    let mut wide = agent("wide", None);
    wide.1["chatSettings"] = json!({"maxContext": 50, "historyPolicy": "all"});
    let mut narrow = agent("narrow", None);
    narrow.1["chatSettings"] = json!({"maxContext": 3, "historyPolicy": "all"});
    let mut windowless = agent("windowless", None);
    windowless.1["chatSettings"] =
        json!({"historyPolicy": "all", "historyProcessors": ["role_alternation"]});
    let agents = agents(&[wide, narrow, windowless]);
    let agents_dir = agents.path().display().to_string();
    let config_path = config.path().display().to_string();
    let (fake, server) = TestServer::with_upstream(&[
        ("PARLOR_AGENTS_DIR", &agents_dir),
        ("PARLOR_CONFIG", &config_path),
        ("PARLOR_ADMIN_TOKEN", "t"),
    ])
    .await;
    for (agent, window) in [("wide", 5), ("narrow", 3), ("windowless", 5)] {
        let mut session = None;
        let mut last = None;
        for i in 0..5 {
            let mut body = json!({"message": format!("question {i}")});
            if let Some(id) = &session {
                body["session_id"] = json!(id);
            }
            let turn = server.chat(agent, body).await;
            session = Some(turn.session_id());
            last = Some(turn);
        }
        let last = last.unwrap();
        let sent = fake.requests().last().unwrap()["messages"].clone();
        let body = sent.as_array().unwrap().len() - 1;
        assert_eq!(body, window, "{agent}: {sent}");
        assert_eq!(last.meta().history.effective_ctx, window, "{agent}");
        if agent == "windowless" {
            let steps: Vec<&str> = last
                .meta()
                .history
                .chain
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            assert_eq!(steps, ["policy", "max_ctx", "role_alternation"]);
        }
    }
    // !maxctx lowers the ceiling for every agent, also those with their own maxContext.
    let lowered = server
        .chat_request(
            "wide",
            "",
            json!({"message": "!maxctx 3 temp"}),
            None,
            &[("x-parlor-admin-token", "t")],
        )
        .await;
    assert!(lowered.notice().is_some(), "{}", lowered.body);
    for agent in ["wide", "windowless"] {
        let turn = server.chat(agent, json!({"message": "after"})).await;
        assert_eq!(turn.meta().history.effective_ctx, 3, "{agent}");
    }
}

#[tokio::test]
async fn a_reply_being_written_locks_the_conversation_for_every_process_on_one_redis() {
    let redis = RedisServer::start().unwrap();
    let config = redis_history(&redis.url(), "lk:");
    let config_path = config.path().display().to_string();
    let (_fake, one) = TestServer::with_upstream(&[("PARLOR_CONFIG", &config_path)]).await;
    let fake_url = _fake.base_url();
    let two = TestServer::start(&[
        ("PARLOR_CONFIG", &config_path),
        ("OPENAI_BASE_URL", &fake_url),
    ])
    .await;
    let session = one
        .chat("general", json!({"message": "hello"}))
        .await
        .session_id();

    // A slow reply on the first process…
    let slow = {
        // Longer than the 2.5 s a request waits for another process's lock.
        let body = json!({"session_id": session, "message": "[words:60] take your time"});
        let url = one.url("/api/chat/general");
        let http = one.http.clone();
        tokio::spawn(async move {
            http.post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .text()
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    // …and the second process refuses another in the same conversation.
    let refused = two
        .chat(
            "general",
            json!({"session_id": session, "message": "me too"}),
        )
        .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused
        .json_error()
        .contains("a reply is already being written"));
    let finished = slow.await.unwrap().unwrap();
    assert!(finished.contains("event: done"), "{finished}");
    // Once the reply is stored, the very next request, on either process, goes through.
    let after = two
        .chat("general", json!({"session_id": session, "message": "now?"}))
        .await;
    assert!(after.done().is_some(), "{}", after.body);

    // A lock of another live process (its heartbeat present) keeps the conversation busy;
    // once that process is gone (no heartbeat), its lock is taken over at once.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("lk:default:{session}:writing");
    let alive = "lk:default:@alive:other";
    for (k, v) in [(key.as_str(), "other:token"), (alive, "1")] {
        let () = redis::cmd("SET")
            .arg(k)
            .arg(v)
            .arg("PX")
            .arg(30_000)
            .query_async(&mut connection)
            .await
            .unwrap();
    }
    let busy = one
        .chat(
            "general",
            json!({"session_id": session, "message": "blocked"}),
        )
        .await;
    assert_eq!(busy.status, 409);
    let () = redis::cmd("DEL")
        .arg(alive)
        .query_async(&mut connection)
        .await
        .unwrap();
    let taken_over = one
        .chat(
            "general",
            json!({"session_id": session, "message": "taken over"}),
        )
        .await;
    assert!(taken_over.done().is_some(), "{}", taken_over.body);
    let lock: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(lock, None, "released when the reply ended");
}

/// The model call starts while the turn's message is being made durable; when it cannot be
/// stored, the turn is refused before anything is acknowledged, and nothing of the reply is
/// ever stored.
#[tokio::test]
async fn a_turn_whose_message_cannot_be_stored_is_refused_and_its_reply_never_kept() {
    let (fake, server) = TestServer::with_upstream(&[]).await;
    // The journal of new conversations cannot be made (a file holds its name): a new
    // conversation's first write fails, reads work.
    let journal = server.data.path().join(".chat-history").join(".journal");
    std::fs::write(&journal, "").unwrap();
    let reply = server
        .chat(
            "general",
            json!({"session_id": "blocked", "message": "[words:3] keep me"}),
        )
        .await;
    assert!(
        !reply.events.iter().any(|e| matches!(
            e,
            parlor_domain::ChatEvent::Meta(_) | parlor_domain::ChatEvent::Delta { .. }
        )),
        "nothing acknowledged: {}",
        reply.body
    );
    let error = reply.error().unwrap_or_else(|| reply.json_error().leak());
    assert!(
        error.starts_with("history store unavailable, your message was not saved"),
        "{error}"
    );
    // Writes work again at once; long after the model would have answered (three words,
    // 80 ms apart), nothing of the turn is stored: the reply was dropped with it.
    std::fs::remove_file(&journal).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert!(server.stored("blocked").is_empty());
    assert!(!server
        .data
        .path()
        .join(".chat-history/blocked/info.json")
        .exists());
    // The next turn in another conversation works as ever.
    let next = server.chat("general", json!({"message": "fine"})).await;
    assert!(next.done().is_some(), "{}", next.body);
    assert!(fake.requests().len() <= 2, "one call per turn at most");
}

/// A new conversation is acknowledged once its journal record is synced; when its folder
/// cannot be made right after (here its lock file cannot be opened), the first message is
/// not lost: the next operation on the conversation makes the folder before anything else.
#[tokio::test]
async fn a_new_conversation_whose_folder_cannot_be_made_yet_keeps_its_first_message() {
    let (_fake, server) = TestServer::with_upstream(&[]).await;
    let locks = server.data.path().join(".chat-history").join(".locks");
    std::fs::create_dir_all(locks.join("later.lock")).unwrap();
    let first = server
        .chat(
            "general",
            json!({"session_id": "later", "message": "[words:2] keep me"}),
        )
        .await;
    assert!(
        first
            .events
            .iter()
            .any(|e| matches!(e, parlor_domain::ChatEvent::Meta(_))),
        "acknowledged: {}",
        first.body
    );
    assert!(server.stored("later").is_empty(), "no folder yet");
    std::fs::remove_dir(locks.join("later.lock")).unwrap();
    let next = server
        .chat(
            "general",
            json!({"session_id": "later", "message": "and me"}),
        )
        .await;
    assert!(next.done().is_some(), "{}", next.body);
    let texts: Vec<String> = server.stored("later").into_iter().map(|m| m.text).collect();
    assert_eq!(texts.first().map(String::as_str), Some("[words:2] keep me"));
    assert!(texts.iter().any(|t| t == "and me"), "{texts:?}");
}
