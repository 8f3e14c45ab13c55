//! The server-rendered pages: agents, the chat page, sessions, compression.

use crate::support::TestServer;
use serde_json::json;

#[tokio::test]
async fn home_lists_the_agents_and_says_the_mirror_is_in_use() {
    let server = TestServer::start(&[]).await;
    let (_, html) = server.get("/", None).await;
    for needle in [
        "General Assistant",
        "Concise Coder",
        "Stateless Translator",
        "/chat?agent=general",
        "mirror",
    ] {
        assert!(html.contains(needle), "{needle} missing");
    }
}

#[tokio::test]
async fn chat_page_renders_agent_conversation_and_composer_on_the_server() {
    let server = TestServer::start(&[]).await;
    let empty = server
        .http
        .get(server.url("/chat?agent=general"))
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 200);
    let cookie = empty
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("parlor_session="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let html = empty.text().await.unwrap();
    // The page is streamed: its head, with the agent's name as the title, is decided first.
    let head = &html[..html.find("</head>").expect("a head")];
    assert!(
        head.contains("<title>General Assistant · Parlor</title>"),
        "{head}"
    );
    // Its script, WASM and stylesheet are this build's: `/pkg/{build}/…`, one build for all.
    let builds: std::collections::BTreeSet<&str> = ["parlor.js", "parlor.wasm", "parlor.css"]
        .iter()
        .map(|file| {
            let at = head
                .find(&format!("/{file}\""))
                .unwrap_or_else(|| panic!("{file}: {head}"));
            let path = &head[..at];
            let build = &path[path.rfind('/').unwrap() + 1..];
            assert!(path.ends_with(&format!("/pkg/{build}")), "{path}");
            build
        })
        .collect();
    assert_eq!(builds.len(), 1, "{builds:?}");
    assert!(builds.iter().all(|b| b.len() == 16), "{builds:?}");
    assert!(html.contains("General Assistant"));
    assert!(html.contains("<textarea"), "composer");
    assert!(
        html.contains("Hello! I&#x27;m the general assistant")
            || html.contains("Hello! I'm the general assistant")
    );
    assert!(
        html.contains("Write a Markdown table of three planets"),
        "chat prompts"
    );
    assert!(
        html.contains("Offline mode"),
        "the page says the mirror model is in use"
    );

    let browser = cookie.split(';').next().unwrap().to_owned();
    let reply = server
        .chat_with(
            "general",
            "",
            json!({"message": "Render <b>this</b> safely"}),
            Some(&browser),
        )
        .await;
    let session = reply.session_id();
    let (_, html) = server
        .get(
            &format!("/chat?agent=general&session={session}"),
            Some(&browser),
        )
        .await;
    assert!(
        html.contains("Render &lt;b&gt;this&lt;/b&gt; safely"),
        "user text is escaped"
    );
    assert!(!html.contains("<b>this</b>"));
    assert!(
        html.contains("I received <strong>2 messages</strong>"),
        "markdown rendered"
    );
    assert!(
        html.contains(&format!("session={session}")),
        "sidebar links the conversation"
    );
    let head = &html[..html.find("</head>").expect("a head")];
    assert!(head.contains("<title>General Assistant · Parlor</title>"));
}

#[tokio::test]
async fn unknown_agents_and_pages_are_404() {
    let server = TestServer::start(&[]).await;
    let (status, page) = server.get("/chat?agent=nobody", None).await;
    assert_eq!(status, 404);
    assert!(page.contains("Unknown agent"));
    let (status, _) = server.get("/no/such/page", None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn pages_are_compressed_when_the_browser_accepts_it() {
    let server = TestServer::start(&[]).await;
    for encoding in ["br", "gzip"] {
        let response = server
            .http
            .get(server.url("/chat?agent=general"))
            .header("accept-encoding", encoding)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.headers().get("content-encoding").unwrap(),
            encoding
        );
    }
}

#[test]
fn leptos_toml_agrees_with_the_cargo_leptos_metadata() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let leptos_toml = std::fs::read_to_string(root.join("Leptos.toml")).unwrap();
    let cargo_toml = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let value = |text: &str, key: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{key} missing"))
            .trim()
            .to_owned()
    };
    for key in [
        "output-name",
        "site-root",
        "site-pkg-dir",
        "site-addr",
        "reload-port",
    ] {
        assert_eq!(value(&leptos_toml, key), value(&cargo_toml, key), "{key}");
    }
    // Plain cargo builds (the tests' server) must name the WASM file as cargo-leptos does.
    let cargo_config = std::fs::read_to_string(root.join(".cargo/config.toml")).unwrap();
    assert_eq!(
        value(&cargo_config, "LEPTOS_OUTPUT_NAME"),
        value(&cargo_toml, "output-name")
    );
}

/// Posts `body` (with `content_type`) to a server function: (status, body).
async fn post_raw(
    server: &TestServer,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let response = server
        .http
        .post(server.url(path))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("an answer, not a dropped connection");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn bad_input_to_server_functions_is_a_client_error_never_a_crash() {
    use leptos::server_fn::ServerFn;
    let server = TestServer::start(&[]).await;
    let load_chat = <parlor_app::pages::chat::LoadChat as ServerFn>::PATH;
    let load_home = <parlor_app::pages::home::LoadHome as ServerFn>::PATH;
    let form = "application/x-www-form-urlencoded";
    for (path, content_type, body) in [
        (load_chat, form, b"".to_vec()),
        (
            load_chat,
            form,
            b"query[agent]=general&query[debug]=maybe".to_vec(),
        ),
        (load_chat, form, b"query=%FF%FE".to_vec()),
        (load_chat, form, vec![0xff, 0xfe, 0x00]),
        (load_chat, "application/json", b"{\"query\": 5}".to_vec()),
        (load_home, "application/json", b"[1, 2".to_vec()),
        ("/api/load_nothing", form, b"".to_vec()),
    ] {
        let (status, text) = post_raw(&server, path, content_type, body.clone()).await;
        assert!(
            (400..500).contains(&status),
            "{path} {:?}: {status} {text}",
            String::from_utf8_lossy(&body)
        );
    }
    // A well-formed call still works.
    let (status, _) = post_raw(
        &server,
        load_chat,
        form,
        b"query[agent]=general&query[debug]=false".to_vec(),
    )
    .await;
    assert_eq!(status, 200);
    // Pages the router does not know are a 404 page, not a closed connection.
    for path in ["/chat/", "/nope", "/chat/x/y"] {
        let (status, _) = server.get(path, None).await;
        assert_eq!(status, 404, "{path}");
    }
}

#[tokio::test]
async fn cookies_are_secure_when_parlor_is_served_over_https() {
    for (vars, secure) in [
        (vec![], false),
        (
            vec![("PARLOR_PUBLIC_URL", "https://chat.example.com")],
            true,
        ),
        (vec![("PARLOR_PUBLIC_URL", "http://10.0.0.5:3000")], false),
        (vec![("PARLOR_COOKIE_SECURE", "true")], true),
        (
            vec![
                ("PARLOR_PUBLIC_URL", "https://chat.example.com"),
                ("PARLOR_COOKIE_SECURE", "false"),
            ],
            false,
        ),
    ] {
        let server = TestServer::start(&vars).await;
        let page = server.http.get(server.url("/")).send().await.unwrap();
        let session = page.headers()["set-cookie"].to_str().unwrap().to_owned();
        let chat = server.chat("general", json!({"message": "hi"})).await;
        let chat_cookie = chat.set_cookies.join("; ");
        for cookie in [&session, &chat_cookie] {
            assert!(
                cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
                "{cookie}"
            );
            assert_eq!(cookie.contains("Secure"), secure, "{vars:?}: {cookie}");
        }
        assert!(session.contains("Max-Age=31536000"), "{session}");
        assert!(chat_cookie.contains("Path=/api/chat"), "{chat_cookie}");
    }
}

#[tokio::test]
async fn pages_allow_only_their_own_scripts_and_every_response_has_the_security_headers() {
    let server = TestServer::start(&[]).await;
    let page = server
        .http
        .get(server.url("/chat?agent=general"))
        .send()
        .await
        .unwrap();
    let headers = page.headers().clone();
    let html = page.text().await.unwrap();
    let policy = headers["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    let nonce = policy
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("a nonce in the policy");
    assert!(nonce.len() >= 16, "{nonce}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    // Every inline script of the page carries this response's nonce. (The chat island's
    // data is a JSON data block, which browsers never run: it needs none.)
    let data_blocks = html.matches("<script type=\"application/json\"").count();
    assert_eq!(data_blocks, 1, "{html}");
    let scripts = html.matches("<script").count() - data_blocks;
    assert!(scripts > 0);
    assert_eq!(
        html.matches(&format!("<script type=\"module\" nonce=\"{nonce}\""))
            .count()
            + html.matches(&format!("<script nonce=\"{nonce}\"")).count(),
        scripts,
        "{html}"
    );
    // A new nonce for every response.
    let again = server.http.get(server.url("/")).send().await.unwrap();
    assert!(!again.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains(nonce));
    for path in ["/", "/healthz", "/pkg/parlor.css", "/api/chat/nope/debug"] {
        let response = server.http.get(server.url(path)).send().await.unwrap();
        let h = response.headers();
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "same-origin", "{path}");
        assert!(h.contains_key("content-security-policy"), "{path}");
    }
}
