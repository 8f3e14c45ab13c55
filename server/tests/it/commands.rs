//! The processor chain, `!` commands, model switching, admin commands and session limits,
//! over real HTTP with a real (fake) upstream.

use crate::support::{config_file, TestServer};
use serde_json::json;

const MODELS: &str = r#"
[[models]]
name = "big"
model = "big-upstream"
max_context = 100

[[models]]
name = "small"
model = "small-upstream"
max_context = 2
"#;

async fn server_with(
    config_text: &str,
    extra: &[(&str, &str)],
) -> (fake_llm::FakeLlm, TestServer, tempfile::NamedTempFile) {
    let file = config_file(config_text);
    let path = file.path().display().to_string();
    let mut vars = vec![("PARLOR_CONFIG", path.as_str())];
    vars.extend_from_slice(extra);
    let (fake, server) = TestServer::with_upstream(&vars).await;
    (fake, server, file)
}

#[tokio::test]
async fn switching_model_applies_the_new_window_at_once_and_says_what_was_trimmed() {
    let (fake, server, _config) = server_with(MODELS, &[]).await;
    let first = server.chat("general", json!({"message": "one"})).await;
    let session = first.session_id();
    let say = |text: &str| json!({"session_id": session, "message": text});
    for text in ["two", "three"] {
        server.chat("general", say(text)).await;
    }
    assert_eq!(fake.requests().len(), 3);

    let switched = server.chat("general", say("!model small")).await;
    assert_eq!(
        switched.notice(),
        Some("Model set to 'small'.\nHistory trimmed: 4 message(s) removed (2 kept).")
    );
    assert!(switched.done().is_some());
    assert_eq!(switched.meta().model, "small");
    let window = &switched.meta().history;
    assert_eq!(window.effective_ctx, 2);
    let step = window
        .chain
        .iter()
        .find(|s| s.name == "sliding_window")
        .unwrap();
    assert_eq!(step.removed, 4, "{:?}", window.chain);
    assert_eq!(
        window.first_sent_index, 4,
        "the debug panel dims the first four"
    );
    assert_eq!(fake.requests().len(), 3, "commands never reach the model");
    assert_eq!(
        server.stored(&session).len(),
        6,
        "nor the stored conversation"
    );

    let next = server.chat("general", say("four")).await;
    let request = fake.requests().pop().unwrap();
    assert_eq!(request["model"], "small-upstream");
    let sent: Vec<&str> = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    // The system prompt, then the window of 2 moved forward to start on a user message.
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1], "four");
    assert_eq!(next.meta().history.messages_trimmed, 6);

    let unknown = server.chat("general", say("!model gpt-9")).await;
    assert_eq!(
        unknown.notice(),
        Some("Unknown model 'gpt-9'; nothing changed. Available: gpt-4o-mini, big, small.")
    );
    let current = server.chat("general", say("!model")).await;
    assert!(current
        .notice()
        .unwrap()
        .starts_with("Current model: 'small'."));
    let help = server.chat("general", say("!help")).await;
    assert!(help.notice().unwrap().contains("!model <name>"));

    // Not a command: it goes to the model as text.
    server.chat("general", say("!important: keep this")).await;
    let request = fake.requests().pop().unwrap();
    let last = request["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "!important: keep this");

    // The choice belongs to the conversation and survives in the debug facts.
    let (_, debug) = server
        .get(
            &format!("/api/chat/general/debug?session_id={session}"),
            None,
        )
        .await;
    let debug: serde_json::Value = serde_json::from_str(&debug).unwrap();
    assert_eq!(debug["model"], "small");
}

#[tokio::test]
async fn reset_clears_the_conversation_with_a_backup() {
    let (_fake, server, _config) = server_with("", &[]).await;
    let first = server
        .chat("general", json!({"message": "remember me"}))
        .await;
    let session = first.session_id();
    let reset = server
        .chat(
            "general",
            json!({"session_id": session, "message": "!reset"}),
        )
        .await;
    let notice = reset.notice().unwrap();
    assert!(
        notice.starts_with("Conversation cleared. A backup was kept ("),
        "{notice}"
    );
    assert!(server.stored(&session).is_empty());
    let backups = server
        .data
        .path()
        .join(".chat-history")
        .join(&session)
        .join("backups");
    let backup = std::fs::read_dir(backups).unwrap().next().unwrap().unwrap();
    let saved = std::fs::read_to_string(backup.path().join("messages.json")).unwrap();
    assert!(saved.contains("remember me"));
}

#[tokio::test]
async fn a_message_over_the_token_budget_is_refused_clearly_and_kept() {
    let (fake, server, _config) = server_with(
        r#"
        [history]
        chain = ["token_budget"]
        [[models]]
        name = "gpt-4o-mini"
        token_budget = 60
        "#,
        &[],
    )
    .await;
    let ok = server.chat("general", json!({"message": "short"})).await;
    assert!(ok.done().is_some(), "{}", ok.body);
    // Counted with gpt-4o-mini's tokenizer: the report says so.
    assert!(ok.meta().history.estimated_tokens > 0);
    let long = "word ".repeat(200);
    let refused = server
        .chat(
            "general",
            json!({"session_id": ok.session_id(), "message": long}),
        )
        .await;
    let error = refused.error().unwrap();
    assert!(
        error.starts_with("your message is too long for gpt-4o-mini"),
        "{error}"
    );
    assert_eq!(fake.requests().len(), 1, "nothing was sent");
    assert_eq!(
        server.stored(&ok.session_id()).len(),
        3,
        "the message is kept"
    );
}

#[tokio::test]
async fn older_turns_give_way_to_the_token_budget() {
    let (fake, server, _config) = server_with(
        r#"
        [history]
        chain = ["sliding_window", "token_budget"]
        [[models]]
        name = "gpt-4o-mini"
        token_budget = 100
        "#,
        &[],
    )
    .await;
    let first = server
        .chat("general", json!({"message": "alpha ".repeat(60)}))
        .await;
    let session = first.session_id();
    let second = server
        .chat("general", json!({"session_id": session, "message": "beta"}))
        .await;
    let step = second
        .meta()
        .history
        .chain
        .iter()
        .find(|s| s.name == "token_budget")
        .unwrap()
        .clone();
    assert_eq!(
        step.removed,
        2,
        "the first exchange went: {:?}",
        second.meta().history.chain
    );
    let sent = fake.requests().pop().unwrap();
    assert!(!sent.to_string().contains("alpha"));
}

#[tokio::test]
async fn admin_commands_need_the_operators_token() {
    let (_fake, open_server, _c) = server_with("", &[]).await;
    let refused = open_server
        .chat("general", json!({"message": "!maxusers 5"}))
        .await;
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("not allowed"), "{}", refused.body);

    let (_fake, server, config) = server_with(MODELS, &[("PARLOR_ADMIN_TOKEN", "s3cret")]).await;
    let admin = |text: &str, token: &str| {
        let body = json!({"message": text});
        let headers = [("x-parlor-admin-token", token.to_owned())];
        let server = &server;
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server
                .chat_request("general", "", body, None, &headers)
                .await
        }
    };
    let wrong = admin("!maxusers 5", "guess").await;
    assert_eq!(wrong.status, 403);
    let set = admin("!maxusers 5", "s3cret").await;
    let notice = set.notice().unwrap();
    assert!(
        notice.starts_with("max_users set to 5 (saved to "),
        "{notice}"
    );
    let saved = std::fs::read_to_string(config.path()).unwrap();
    assert!(saved.contains("max_users = 5"), "{saved}");
    assert!(
        saved.contains("name = \"small\""),
        "the rest of the file is kept"
    );

    let temporary = admin("!maxctx 3 temp", "s3cret").await;
    assert_eq!(
        temporary.notice(),
        Some("agent_max_ctx set to 3 (until Parlor restarts).")
    );
    assert!(!std::fs::read_to_string(config.path())
        .unwrap()
        .contains("agent_max_ctx"));
    // It applies to every conversation at once.
    let turn = server.chat("general", json!({"message": "hi"})).await;
    assert_eq!(turn.meta().history.effective_ctx, 3);

    let timeout = admin("!sessiontimeout 0", "s3cret").await;
    assert!(timeout.notice().unwrap().contains("never"));
    let usage = admin("!maxusers many", "s3cret").await;
    assert!(usage.notice().unwrap().starts_with("Usage: !maxusers"));
}

/// A browser's cookie (signed, as the server issues it), `n` as its 32 hex digits.
fn browser(n: u8) -> String {
    crate::support::browser(&format!("{n:02x}").repeat(16))
}

#[tokio::test]
async fn the_session_limit_refuses_new_sessions_only() {
    let (_fake, server, _config) =
        server_with("max_users = 2\n", &[("PARLOR_ADMIN_TOKEN", "t")]).await;
    let (a, b, c) = (browser(1), browser(2), browser(3));
    let chat = |cookie: String, body: serde_json::Value| {
        let server = &server;
        async move { server.chat_with("general", "", body, Some(&cookie)).await }
    };
    let first = chat(a.clone(), json!({"message": "a"})).await;
    let second = chat(b.clone(), json!({"message": "b"})).await;
    let refused = chat(c.clone(), json!({"message": "c"})).await;
    assert_eq!(refused.status, 503);
    assert!(
        refused
            .body
            .contains("Session limit reached (2 active sessions). Try again later."),
        "{}",
        refused.body
    );
    // A browser cannot name a new conversation (only the server makes its ids).
    let named = chat(c.clone(), json!({"session_id": "mine", "message": "c"})).await;
    assert_eq!(named.status, 404);
    assert!(
        server.stored("mine").is_empty(),
        "nothing stored for a refused session"
    );

    // Lowering the limit evicts no one.
    let headers = [("x-parlor-admin-token", "t")];
    let lowered = server
        .chat_request(
            "general",
            "",
            json!({"message": "!maxusers 1"}),
            Some(&c),
            &headers,
        )
        .await;
    assert!(
        lowered.notice().is_some(),
        "admins get in even at the limit"
    );
    for (cookie, turn) in [(a, &first), (b, &second)] {
        let again = chat(
            cookie,
            json!({"session_id": turn.session_id(), "message": "still here"}),
        )
        .await;
        assert!(again.done().is_some(), "{}", again.body);
    }
    // 0 means no limit.
    server
        .chat_request(
            "general",
            "",
            json!({"message": "!maxusers 0"}),
            None,
            &headers,
        )
        .await;
    let fresh = chat(browser(4), json!({"message": "d"})).await;
    assert!(fresh.done().is_some());
}

#[tokio::test]
async fn probes_bots_static_files_and_api_scripts_never_take_a_browsers_slot() {
    let (_fake, server, _config) = server_with("max_users = 1\n", &[]).await;
    for i in 0..50 {
        // First visits without a cookie: uptime probes, crawlers, curl.
        let (status, _) = server
            .get(
                if i % 2 == 0 {
                    "/"
                } else {
                    "/chat?agent=general"
                },
                None,
            )
            .await;
        assert_eq!(status, 200);
        // Scripts posting new API conversations.
        let turn = server
            .chat("general", json!({"message": format!("script {i}")}))
            .await;
        assert!(turn.done().is_some(), "{}", turn.body);
    }
    let (status, _) = server.get("/healthz", None).await;
    assert_eq!(status, 200);
    // A crawler that keeps its cookie, and static files fetched with one.
    let crawler = server
        .http
        .get(server.url("/chat?agent=general"))
        .header("cookie", browser(9))
        .header("user-agent", "Mozilla/5.0 (compatible; Googlebot/2.1)")
        .send()
        .await
        .unwrap();
    assert_eq!(crawler.status(), 200);
    let (status, _) = server.get("/favicon.svg", Some(&browser(8))).await;
    assert_ne!(status, 503);
    assert_eq!(
        server.services.live.count().await.unwrap(),
        0,
        "none of them is a live session"
    );

    // A real browser comes back with its cookie: it gets the one slot.
    let (status, _) = server.get("/chat?agent=general", Some(&browser(1))).await;
    assert_eq!(status, 200);
    let turn = server
        .chat_with("general", "", json!({"message": "hi"}), Some(&browser(1)))
        .await;
    assert!(turn.done().is_some(), "{}", turn.body);
    // The next returning browser is told the limit is reached.
    let (status, _) = server.get("/chat?agent=general", Some(&browser(2))).await;
    assert_eq!(status, 503);
}

#[tokio::test]
async fn with_redis_every_process_counts_the_same_sessions() {
    let redis = fake_llm::redis_server::RedisServer::start().unwrap();
    let text = format!(
        "max_users = 1\n[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\" }}\n",
        redis.url()
    );
    let file = config_file(&text);
    let path = file.path().display().to_string();
    let one = TestServer::start(&[("PARLOR_CONFIG", &path)]).await;
    let two = TestServer::start(&[("PARLOR_CONFIG", &path)]).await;
    let first = one
        .chat_with("general", "", json!({"message": "hi"}), Some(&browser(1)))
        .await;
    assert!(first.done().is_some());
    let refused = two
        .chat_with(
            "general",
            "",
            json!({"message": "me too"}),
            Some(&browser(2)),
        )
        .await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    let continued = two
        .chat_with(
            "general",
            "",
            json!({"session_id": first.session_id(), "message": "same session"}),
            Some(&browser(1)),
        )
        .await;
    assert!(continued.done().is_some(), "{}", continued.body);
}

#[tokio::test]
async fn reaping_frees_idle_sessions_slots_and_keeps_their_conversations() {
    let (_fake, server, _config) = server_with(
        "max_users = 1\nsession_idle_timeout_minutes = 10\n",
        &[("PARLOR_ADMIN_TOKEN", "t")],
    )
    .await;
    let now = parlor_server::store::now_ms();
    let minutes = |n: i64| now + n * 60_000;
    let a = &crate::support::browser("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    let a = a.as_str();
    let b = &crate::support::browser("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    let b = b.as_str();
    let first = server
        .chat_with("general", "", json!({"message": "still here?"}), Some(a))
        .await;
    assert!(first.done().is_some(), "{}", first.body);
    let (status, _) = server.get("/chat?agent=general", Some(b)).await;
    assert_eq!(status, 503, "the one slot is taken");

    // Ten minutes after `now`, the session (active a moment after `now`) has been idle just
    // under the timeout: it stays.
    let reap = |at: i64| parlor_server::reap_idle_sessions(&server.services, at);
    assert_eq!(reap(minutes(10)).await.unwrap(), 0);
    let (status, _) = server.get("/chat?agent=general", Some(b)).await;
    assert_eq!(status, 503);

    // Past it, the slot is freed: the other browser gets in.
    assert_eq!(reap(minutes(11)).await.unwrap(), 1);
    let (status, _) = server.get("/chat?agent=general", Some(b)).await;
    assert_eq!(status, 200, "the freed slot is taken by the next browser");
    // The reaped browser's conversation is still stored, but the slot is gone: it waits.
    assert_eq!(server.stored(&first.session_id()).len(), 2);
    let (status, _) = server.get("/chat?agent=general", Some(a)).await;
    assert_eq!(status, 503);

    // A timeout of 0 never reaps, whatever the idle time; the change applies at once.
    let headers = [("x-parlor-admin-token", "t")];
    let off = server
        .chat_request(
            "general",
            "",
            json!({"message": "!sessiontimeout 0"}),
            Some(b),
            &headers,
        )
        .await;
    assert!(off.notice().is_some(), "{}", off.body);
    assert_eq!(reap(minutes(100_000)).await.unwrap(), 0);
}

#[tokio::test]
async fn a_browser_is_one_session_however_many_conversations_it_starts() {
    let (_fake, server, _config) = server_with("max_users = 1\n", &[]).await;
    let a = &crate::support::browser("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    let a = a.as_str();
    let b = &crate::support::browser("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    let b = b.as_str();
    let (status, _) = server.get("/chat?agent=general", Some(a)).await;
    assert_eq!(status, 200);
    for text in ["first chat", "second chat", "third chat"] {
        let turn = server
            .chat_with(
                "general",
                "",
                json!({"message": text, "new_conversation": true}),
                Some(a),
            )
            .await;
        assert!(turn.done().is_some(), "{}", turn.body);
    }
    // Another browser, on the page or in the chat, is told the limit is reached.
    let (status, page) = server.get("/chat?agent=general", Some(b)).await;
    assert_eq!(status, 503);
    assert!(
        page.contains("Session limit reached (1 active sessions). Try again later."),
        "{page}"
    );
    let (status, _) = server.get("/", None).await;
    assert_eq!(status, 200, "a first visit takes no slot");
    let refused = server
        .chat_with("general", "", json!({"message": "hi"}), Some(b))
        .await;
    assert_eq!(refused.status, 503);
    let (status, _) = server.get("/chat?agent=general", Some(a)).await;
    assert_eq!(status, 200, "the live browser keeps working");
}

#[tokio::test]
async fn metrics_are_for_the_operator_and_count_turns_errors_latency_sessions_and_limits() {
    let (_fake, server, _config) = server_with(
        "",
        &[
            ("PARLOR_ADMIN_TOKEN", "s3cret"),
            ("PARLOR_RATE_LIMIT_PAGES", "1"),
        ],
    )
    .await;
    let get = |token: Option<&'static str>| {
        let mut request = server.http.get(server.url("/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    assert_eq!(get(None).await.unwrap().status(), 401);
    assert_eq!(get(Some("wrong")).await.unwrap().status(), 401);

    let browser = &crate::support::browser("abababababababababababababababab");
    let browser = browser.as_str();
    let turn = server
        .chat_with("general", "", json!({"message": "hi"}), Some(browser))
        .await;
    assert!(turn.done().is_some());
    let failed = server
        .chat("general", json!({"message": "x [status:500]"}))
        .await;
    assert!(failed.error().is_some());
    server.chat("general", json!({"message": "!help"})).await;
    server.get("/", None).await;
    let (status, _) = server.get("/", None).await;
    assert_eq!(status, 429);

    let response = get(Some("s3cret")).await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    for line in [
        "parlor_turns_total{outcome=\"done\"}",
        "parlor_turns_total{outcome=\"error\"}",
        "parlor_turns_total{outcome=\"command\"}",
        "parlor_upstream_errors_total{kind=\"http\"}",
        "parlor_first_token_seconds_bucket",
        "parlor_reply_seconds_count",
        "parlor_store_seconds_bucket{backend=\"file\",op=\"append\"",
        "parlor_live_sessions",
        "parlor_rate_limited_total{route=\"pages\"}",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    let live: f64 = text
        .lines()
        .find(|l| l.starts_with("parlor_live_sessions "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(live >= 1.0, "the chatting browser is live");

    // Without an admin token the route is off.
    let (_fake, open, _config) = server_with("", &[]).await;
    let (status, _) = open.get("/metrics", None).await;
    assert_eq!(status, 404);
}
