//! The chat API over real HTTP: streaming from the mirror model and from a real
//! OpenAI-compatible upstream, every upstream fault, and every kind of bad input.

use crate::support::TestServer;
use parlor_domain::{ChatEvent, ReplyStatus, Role};
use serde_json::json;

#[tokio::test]
async fn mirror_model_streams_a_description_of_what_it_received() {
    let server = TestServer::start(&[]).await;
    let first = server
        .chat("general", json!({"message": "Hello there"}))
        .await;
    assert_eq!(first.status, 200);
    assert!(first.content_type.starts_with("text/event-stream"));
    let meta = first.meta();
    assert_eq!(meta.model, "mirror");
    assert_eq!(meta.history.messages_sent, 2, "system prompt + the message");
    let deltas = first
        .events
        .iter()
        .filter(|e| matches!(e, ChatEvent::Delta { .. }))
        .count();
    assert!(deltas > 10, "streams word by word, got {deltas} deltas");
    let html = first
        .done()
        .unwrap()
        .html
        .clone()
        .expect("the final rendering");
    assert!(
        html.contains("I received <strong>2 messages</strong>"),
        "{html}"
    );
    assert!(
        first.events.iter().any(|e| matches!(
            e,
            ChatEvent::Delta {
                rendered: Some(_),
                ..
            }
        )),
        "completed blocks arrive rendered while streaming"
    );
    let text = first.text();
    assert!(text.contains("I received **2 messages**"), "{text}");
    assert!(text.contains("`user`: “Hello there”"), "{text}");
    assert!(
        text.contains("System prompt: “You are Parlor's general assistant."),
        "{text}"
    );
    assert_eq!(first.done().unwrap().finish_reason, "stop");
    assert!(matches!(first.events.last(), Some(ChatEvent::Done(_))));

    let session = first.session_id();
    let second = server
        .chat(
            "general",
            json!({"session_id": session, "message": "And again"}),
        )
        .await;
    assert_eq!(second.session_id(), session);
    assert!(
        second.text().contains("I received **4 messages**"),
        "{}",
        second.text()
    );
    let stored = server.stored(&session);
    let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::Assistant]
    );
    assert_eq!(stored[2].text, "And again");
}

#[tokio::test]
async fn replies_stream_from_an_openai_compatible_upstream() {
    let (fake, server) = TestServer::with_upstream(&[("OPENAI_API_KEY", "sk-test-123")]).await;
    let reply = server
        .chat("general", json!({"message": "hello world"}))
        .await;
    assert_eq!(reply.text(), "Echo: hello world");
    assert_eq!(reply.meta().model, "gpt-4o-mini");
    let done = reply.done().expect("done event");
    assert_eq!(done.finish_reason, "stop");
    assert!(
        done.usage.as_ref().is_some_and(|u| u.total_tokens > 0),
        "usage is passed on"
    );

    let sent = &fake.requests()[0];
    assert_eq!(sent["model"], "gpt-4o-mini");
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["messages"][0]["role"], "system");
    assert_eq!(
        sent["messages"][1],
        json!({"role": "user", "content": "hello world"})
    );
    assert_eq!(sent["temperature"], 0.7);
    assert_eq!(sent["max_tokens"], 1024);
    assert_eq!(
        fake.authorizations()[0].as_deref(),
        Some("Bearer sk-test-123")
    );

    let stored = server.stored(&reply.session_id());
    assert_eq!(stored[1].text, "Echo: hello world");
    assert_eq!(
        stored[1].status(),
        None,
        "a complete reply carries no status"
    );
}

#[tokio::test]
async fn parlor_model_overrides_every_agents_model() {
    let (fake, server) = TestServer::with_upstream(&[("PARLOR_MODEL", "llama3.2")]).await;
    let reply = server.chat("concise", json!({"message": "hi"})).await;
    assert_eq!(reply.meta().model, "llama3.2");
    assert_eq!(fake.requests()[0]["model"], "llama3.2");
}

#[tokio::test]
async fn history_reaching_the_upstream_is_trimmed_by_the_agents_policy() {
    // `concise` keeps the last 2 user turns.
    let (fake, server) = TestServer::with_upstream(&[]).await;
    let mut session = None;
    for i in 1..=3 {
        let reply = server
            .chat(
                "concise",
                json!({"session_id": session, "message": format!("q{i}")}),
            )
            .await;
        session = Some(reply.session_id());
        if i == 3 {
            let report = &reply.meta().history;
            assert_eq!(report.messages_stored, 5);
            assert_eq!(report.messages_sent, 4, "system + q2, its reply, q3");
            assert_eq!(report.messages_trimmed, 2);
            assert_eq!(report.first_sent_index, 2);
        }
    }
    let sent = &fake.requests()[2]["messages"];
    let contents: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents[1..], ["q2", "Echo: q2", "q3"]);
    assert_eq!(
        server.stored(session.as_deref().unwrap()).len(),
        6,
        "storage is never trimmed"
    );
}

#[tokio::test]
async fn upstream_http_errors_become_readable_error_events_and_keep_the_message() {
    let (_fake, server) = TestServer::with_upstream(&[("OPENAI_API_KEY", "sk-secret-key")]).await;
    for (code, words) in [(401, "HTTP 401"), (500, "HTTP 500"), (429, "HTTP 429")] {
        let message = format!("hi [status:{code}]");
        let reply = server.chat("general", json!({"message": message})).await;
        assert_eq!(reply.status, 200);
        let error = reply.error().expect("error event");
        assert!(error.contains(words), "{error}");
        assert!(
            error.contains("The fake model was told to fail."),
            "{error}"
        );
        assert!(!reply.body.contains("sk-secret-key"));
        assert!(matches!(reply.events.last(), Some(ChatEvent::Error { .. })));
        // (The new conversation's folder is made just after its journal record.)
        let stored = server
            .stored_eventually(&reply.session_id(), |m| !m.is_empty())
            .await;
        assert_eq!(stored.len(), 1, "the user's message stays, no empty reply");
        assert_eq!(stored[0].text, message);
    }
}

#[tokio::test]
async fn an_unreachable_upstream_is_reported_and_the_server_stays_up() {
    // A port that was free a moment ago: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let server = TestServer::start(&[("OPENAI_BASE_URL", &base)]).await;
    let reply = server.chat("general", json!({"message": "anyone?"})).await;
    let error = reply.error().expect("error event");
    assert!(
        error.contains("Could not reach the model server"),
        "{error}"
    );
    assert!(error.contains("connection refused"), "{error}");
    let stored = server
        .stored_eventually(&reply.session_id(), |m| !m.is_empty())
        .await;
    assert_eq!(stored.len(), 1);
    let (status, _) = server.get("/healthz", None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_silent_upstream_times_out() {
    let (_fake, server) = TestServer::with_upstream(&[("PARLOR_LLM_TIMEOUT_SECS", "1")]).await;
    let reply = server.chat("general", json!({"message": "[hang]"})).await;
    assert!(
        reply
            .error()
            .unwrap()
            .contains("did not respond within 1 s"),
        "{:?}",
        reply.error()
    );

    let reply = server.chat("general", json!({"message": "[stall]"})).await;
    assert_eq!(reply.text(), "Waiting");
    assert!(reply.error().unwrap().contains("did not respond"));
    let stored = server.stored(&reply.session_id());
    assert_eq!(stored[1].text, "Waiting", "what arrived is kept");
    assert_eq!(stored[1].status(), Some(ReplyStatus::Incomplete));
}

#[tokio::test]
async fn malformed_and_dropped_streams_keep_the_partial_reply_marked_incomplete() {
    let (_fake, server) = TestServer::with_upstream(&[]).await;
    let reply = server
        .chat("general", json!({"message": "[malformed]"}))
        .await;
    assert!(
        reply.error().unwrap().contains("could not read"),
        "{:?}",
        reply.error()
    );
    let stored = server.stored(&reply.session_id());
    assert_eq!(
        (stored[1].text.as_str(), stored[1].status()),
        ("Hello", Some(ReplyStatus::Incomplete))
    );

    let reply = server.chat("general", json!({"message": "[drop]"})).await;
    assert_eq!(reply.text(), "Partial reply");
    assert!(
        reply
            .error()
            .unwrap()
            .contains("connection to the model server was lost"),
        "{:?}",
        reply.error()
    );
    let stored = server.stored(&reply.session_id());
    assert_eq!(stored[1].text, "Partial reply");
    assert_eq!(stored[1].status(), Some(ReplyStatus::Incomplete));
}

/// A model that never stops talking is cut at Parlor's bound, and what arrived is kept.
#[tokio::test]
async fn a_reply_past_the_bound_is_cut_and_kept_as_incomplete() {
    let (_fake, server) = TestServer::with_upstream(&[]).await;
    let reply = server.chat("general", json!({"message": "[flood]"})).await;
    let error = reply.error().unwrap_or_default();
    assert!(error.contains("passed 2 MiB"), "{error}");
    let stored = server.stored(&reply.session_id());
    assert!(stored[1].text.starts_with("flood flood"));
    assert!(stored[1].text.len() <= parlor_server::llm::MAX_REPLY_BYTES);
    assert_eq!(stored[1].status(), Some(ReplyStatus::Incomplete));
}

#[tokio::test]
async fn retry_after_an_error_replies_to_the_same_message_once() {
    let (fake, server) = TestServer::with_upstream(&[]).await;
    let first = server
        .chat("general", json!({"message": "please [fail-once]"}))
        .await;
    assert!(first.error().unwrap().contains("HTTP 503"));
    let session = first.session_id();
    let retry = server
        .chat(
            "general",
            json!({"session_id": session, "regenerate": true}),
        )
        .await;
    assert_eq!(retry.text(), "Echo: please [fail-once]");
    let stored = server.stored(&session);
    assert_eq!(stored.len(), 2, "one user message, one reply: {stored:?}");
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn regenerate_replaces_the_last_reply() {
    let server = TestServer::start(&[]).await;
    let first = server.chat("general", json!({"message": "one"})).await;
    let session = first.session_id();
    let again = server
        .chat(
            "general",
            json!({"session_id": session, "regenerate": true}),
        )
        .await;
    assert!(
        again.text().contains("I received **2 messages**"),
        "the old reply is not sent"
    );
    let stored = server.stored(&session);
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1].role, Role::Assistant);
}

#[tokio::test]
async fn closing_the_stream_stops_the_reply_and_keeps_what_arrived() {
    let (_fake, server) = TestServer::with_upstream(&[]).await;
    let mut response = server
        .http
        .post(server.url("/api/chat/general"))
        .json(&json!({"message": "[slow] go"}))
        .send()
        .await
        .unwrap();
    let mut decoder = parlor_domain::event::SseDecoder::default();
    let mut session = None;
    let mut deltas = 0;
    while deltas < 2 {
        let chunk = response.chunk().await.unwrap().expect("stream continues");
        for data in decoder.push(&chunk) {
            match serde_json::from_str::<ChatEvent>(&data).unwrap() {
                ChatEvent::Meta(meta) => session = Some(meta.session_id),
                ChatEvent::Delta { .. } => deltas += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    drop(response); // what the browser's Stop does
    let session = session.unwrap();
    let stored = server.stored_eventually(&session, |m| m.len() == 2).await;
    assert_eq!(stored[1].status(), Some(ReplyStatus::Stopped));
    assert!(
        stored[1].text.starts_with("word0 word1"),
        "{}",
        stored[1].text
    );
    assert!(
        !stored[1].text.contains("word59"),
        "the reply was cut short"
    );
}

#[tokio::test]
async fn a_second_turn_while_one_is_streaming_is_refused() {
    let (_fake, server) = TestServer::with_upstream(&[]).await;
    let mut response = server
        .http
        .post(server.url("/api/chat/general"))
        .json(&json!({"message": "[slow]"}))
        .send()
        .await
        .unwrap();
    let chunk = response.chunk().await.unwrap().unwrap();
    let events = crate::support::parse_events(&chunk);
    let ChatEvent::Meta(meta) = &events[0] else {
        panic!("meta first")
    };
    let busy = server
        .chat(
            "general",
            json!({"session_id": meta.session_id, "message": "hello?"}),
        )
        .await;
    assert_eq!(busy.status, 409);
    assert!(busy.json_error().contains("already being written"));
}

#[tokio::test]
async fn bad_input_gets_a_clear_json_error_and_stores_nothing() {
    let server = TestServer::start(&[("PARLOR_MAX_MESSAGE_CHARS", "20")]).await;
    let post = |body: &'static str, agent: &'static str| {
        let request = server
            .http
            .post(server.url(&format!("/api/chat/{agent}")))
            .header("content-type", "application/json")
            .body(body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let json: serde_json::Value = response.json().await.expect("JSON error body");
            (
                status,
                json["error"].as_str().unwrap_or_default().to_owned(),
            )
        }
    };
    let cases = [
        ("nope", r#"{"message":"hi"}"#, 404, "unknown agent"),
        ("general", r#"{"message": "#, 400, "invalid JSON"),
        ("general", r#"["message"]"#, 400, "invalid JSON"),
        ("general", r#"{"message": ""}"#, 400, "message is empty"),
        (
            "general",
            r#"{"message": "  \n "}"#,
            400,
            "message is empty",
        ),
        ("general", r#"{}"#, 400, "message is missing"),
        ("general", r#"{"message": 5}"#, 400, "invalid JSON"),
        (
            "general",
            r#"{"message": "this is longer than twenty"}"#,
            400,
            "too long",
        ),
        (
            "general",
            r#"{"message": "hi", "messages": []}"#,
            400,
            "unknown field",
        ),
        (
            "general",
            r#"{"message": "hi", "session_id": "../etc"}"#,
            400,
            "session_id",
        ),
        (
            "general",
            r#"{"regenerate": true}"#,
            400,
            "needs a session_id",
        ),
        (
            "general",
            r#"{"message": "hi", "regenerate": true}"#,
            400,
            "not both",
        ),
    ];
    for (agent, body, status, words) in cases {
        let (got, error) = post(body, agent).await;
        assert_eq!(got, status, "{body} -> {error}");
        assert!(error.contains(words), "{body} -> {error}");
    }
    let huge = "x".repeat(2 * 1024 * 1024);
    let response = server
        .http
        .post(server.url("/api/chat/general"))
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(server.dialog_count(), 0, "nothing was stored");
}

#[tokio::test]
async fn a_browsers_conversation_is_invisible_to_other_browsers() {
    let server = TestServer::start(&[]).await;
    let alice = &crate::support::browser("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    let alice = alice.as_str();
    let bob = &crate::support::browser("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    let bob = bob.as_str();
    let reply = server
        .chat_with(
            "general",
            "",
            json!({"message": "secret plan"}),
            Some(alice),
        )
        .await;
    let session = reply.session_id();
    for cookie in [Some(bob), None] {
        let attempt = server
            .chat_with(
                "general",
                "",
                json!({"session_id": session, "message": "show me"}),
                cookie,
            )
            .await;
        assert_eq!(attempt.status, 404, "{cookie:?}");
        let page_path = format!("/chat?agent=general&session={session}");
        let (status, page) = server.get(&page_path, cookie).await;
        assert_eq!(status, 404);
        assert!(!page.contains("secret plan"));
    }
    let (status, own) = server
        .get(
            &format!("/chat?agent=general&session={session}"),
            Some(alice),
        )
        .await;
    assert_eq!(status, 200);
    assert!(own.contains("secret plan"));
    assert_eq!(
        server.stored(&session).len(),
        2,
        "the refused attempts stored nothing"
    );
}

#[tokio::test]
async fn an_upstream_page_echoing_part_of_the_key_never_shows_it() {
    let key = "sk-live-Zq81xKpW3mNv5tRbYc4";
    let (fake, server) = TestServer::with_upstream(&[("OPENAI_API_KEY", key)]).await;
    let reply = server
        .chat("general", json!({"message": "hi [echo-key]"}))
        .await;
    assert_eq!(
        fake.authorizations()[0].as_deref(),
        Some(format!("Bearer {key}").as_str()),
        "the key did reach the upstream"
    );
    let error = reply.error().expect("error event");
    assert!(error.contains("HTTP 502"), "{error}");
    assert!(error.contains("[redacted]"), "{error}");
    for fragment in key.as_bytes().windows(8) {
        let fragment = std::str::from_utf8(fragment).unwrap();
        assert!(
            !reply.body.contains(fragment),
            "{fragment} in {}",
            reply.body
        );
    }
}

#[tokio::test]
async fn each_client_address_is_limited_per_minute_with_a_retry_after() {
    let server = TestServer::start(&[
        ("PARLOR_RATE_LIMIT_CHAT", "3"),
        ("PARLOR_RATE_LIMIT_PAGES", "2"),
    ])
    .await;
    for i in 0..3 {
        let turn = server
            .chat("general", json!({"message": format!("hi {i}")}))
            .await;
        assert_eq!(turn.status, 200, "{}", turn.body);
    }
    let limited = server
        .http
        .post(server.url("/api/chat/general"))
        .json(&json!({"message": "one more"}))
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), 429);
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let body: serde_json::Value = limited.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("Too many requests"),
        "{body}"
    );

    // Pages have their own limit, answered as a page; health checks and static files none.
    for _ in 0..2 {
        assert_eq!(server.get("/", None).await.0, 200);
    }
    let page = server.http.get(server.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 429);
    assert!(page.headers().contains_key("retry-after"));
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    // A path that only looks like a file renders the 404 page: limited like a page.
    assert_eq!(server.get("/x.php", None).await.0, 429);
    for _ in 0..5 {
        assert_eq!(server.get("/healthz", None).await.0, 200);
        assert_ne!(server.get("/favicon.svg", None).await.0, 429);
        assert_ne!(server.get("/pkg/parlor.js", None).await.0, 429);
    }
}

#[tokio::test]
async fn forwarded_addresses_count_only_behind_a_trusted_proxy() {
    let post = |server: &TestServer, client: &str| {
        server
            .http
            .post(server.url("/api/chat/general"))
            .header("x-forwarded-for", client.to_owned())
            .json(&json!({"message": "hi"}))
            .send()
    };
    // Behind a trusted proxy (the test client is 127.0.0.1): each forwarded client has its
    // own allowance.
    let trusted = TestServer::start(&[
        ("PARLOR_RATE_LIMIT_CHAT", "1"),
        ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
    ])
    .await;
    assert_eq!(post(&trusted, "198.51.100.1").await.unwrap().status(), 200);
    assert_eq!(post(&trusted, "198.51.100.2").await.unwrap().status(), 200);
    assert_eq!(post(&trusted, "198.51.100.1").await.unwrap().status(), 429);
    // A client that forges a first line, with a proxy that adds its own line (HAProxy), or
    // that appends `ip:port`: the proxy's entry counts, not the forged one.
    let lines = |lines: &[&str]| {
        let mut request = trusted
            .http
            .post(trusted.url("/api/chat/general"))
            .json(&json!({"message": "hi"}));
        for line in lines {
            request = request.header("x-forwarded-for", line.to_string());
        }
        request.send()
    };
    assert_eq!(
        lines(&["203.0.113.50", "198.51.100.1"])
            .await
            .unwrap()
            .status(),
        429
    );
    assert_eq!(
        lines(&["198.51.100.9, 198.51.100.1:4711"])
            .await
            .unwrap()
            .status(),
        429
    );
    // An IPv6 client counts by its /64: another address in it shares the allowance.
    assert_eq!(
        post(&trusted, "2001:db8:1:2::1").await.unwrap().status(),
        200
    );
    assert_eq!(
        post(&trusted, "2001:db8:1:2::ffff").await.unwrap().status(),
        429
    );
    // Without trust, the header is the client's word and changes nothing.
    let direct = TestServer::start(&[("PARLOR_RATE_LIMIT_CHAT", "1")]).await;
    assert_eq!(post(&direct, "198.51.100.1").await.unwrap().status(), 200);
    assert_eq!(post(&direct, "198.51.100.2").await.unwrap().status(), 429);
}

#[tokio::test]
async fn the_openapi_document_describes_every_route_and_every_chat_event() {
    let server = TestServer::start(&[]).await;
    let (status, body) = server.get("/api/openapi.json", None).await;
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    // Every route the table says is documented, with each of its methods, and nothing else.
    let served: Vec<(&str, String)> = parlor_server::table::TABLE
        .iter()
        .filter(|route| route.documented)
        .flat_map(|route| {
            route
                .verbs
                .iter()
                .map(|verb| (route.path, verb.name().to_ascii_lowercase()))
        })
        .collect();
    assert!(served.len() > 10, "{served:?}");
    // And those are the ones the API's routers mount (the same lists build them).
    let mut mounted: Vec<(&str, String)> = parlor_server::routes::ALL_ROUTES
        .iter()
        .flat_map(|list| list.iter().map(|(p, m)| (*p, m.to_string())))
        .collect();
    let mut expected = served.clone();
    mounted.sort();
    expected.sort();
    assert_eq!(mounted, expected);
    for (path, method) in &served {
        assert!(
            doc["paths"][path][method.as_str()].is_object(),
            "{method} {path} missing"
        );
    }
    let documented = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |method| (path.clone(), method.clone()))
        })
        .count();
    assert_eq!(
        documented,
        served.len(),
        "documented routes that are not served"
    );
    // The chat stream: server-sent events whose data is a ChatEvent.
    let stream = &doc["paths"]["/api/chat/{agent_id}"]["post"]["responses"]["200"]["content"]
        ["text/event-stream"]["schema"]["$ref"];
    assert_eq!(stream, "#/components/schemas/ChatEvent");
    let event = doc["components"]["schemas"]["ChatEvent"].to_string();
    for kind in ["meta", "delta", "done", "error", "notice"] {
        assert!(
            event.contains(&format!("\"{kind}\"")),
            "{kind} missing: {event}"
        );
    }
    for schema in [
        "ChatRequest",
        "MetaEvent",
        "HistoryReport",
        "DoneEvent",
        "ApiError",
        "DebugInfo",
    ] {
        assert!(
            doc["components"]["schemas"][schema].is_object(),
            "{schema} missing"
        );
    }
    // Every status the README lists for the chat API is documented.
    let responses = &doc["paths"]["/api/chat/{agent_id}"]["post"]["responses"];
    for status in ["200", "400", "403", "404", "409", "413", "429", "503"] {
        assert!(responses[status].is_object(), "{status} missing");
    }
}
