//! One test for each hole an outsider's review found in the gate and the accounts, in the
//! language of the attack (raw HTTP where a client library would normalize what is sent).

use super::*;
use crate::gate::raw;
use crate::support::{redis_history, TestServer};
use fake_llm::redis_server::RedisServer;

const SECRET: &str = "SECRET-of-an-orphan-0d1e";

/// A conversation without an owner, as an import or an MCP client makes one.
async fn orphan(server: &TestServer) -> String {
    crate::support::ownerless(server, "an-old-import", SECRET).await
}

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn hole_1_a_dot_segment_renders_no_page_without_a_login() {
    let server = local(&[]).await;
    let session = orphan(&server).await;
    let query = format!("?agent=general&session={session}&debug=true");
    for path in [
        "/auth/%2e%2e/chat",
        "/auth/../chat",
        "/mcp/%2e%2e/chat",
        "/auth/%2E%2E/chat",
    ] {
        let answer = raw(&server, "GET", &format!("{path}{query}"), &[], "").await;
        assert_eq!(answer.status, 400, "{path}: {answer:?}");
        assert!(!answer.body.contains(SECRET), "{path}");
        assert!(!answer.body.contains("<html"), "{path}");
        assert!(!answer.head.contains("set-cookie"), "{path}");
    }
    // Without a login the page itself sends the browser to log in.
    let answer = raw(&server, "GET", &format!("/chat{query}"), &[], "").await;
    assert_eq!(answer.status, 303);
    assert!(!answer.body.contains(SECRET));
}

#[tokio::test]
async fn hole_2_visitors_without_a_login_never_fill_max_users() {
    let config = crate::support::config_file("max_users = 2\n");
    let path = config.path().display().to_string();
    let server = local(&[("PARLOR_CONFIG", &path), ("PARLOR_RATE_LIMIT_PAGES", "0")]).await;
    for n in 0..50 {
        let browser = crate::support::browser(&format!("{n:032x}"));
        for path in ["/auth/x", "/login", "/auth/x", "/login", "/"] {
            let answer = raw(&server, "GET", path, &headers(&[("cookie", &browser)]), "").await;
            assert!(
                !answer.head.contains("set-cookie: parlor_session"),
                "{path}"
            );
        }
    }
    assert_eq!(server.services.live.count().await.unwrap(), 0);
    for name in ["ada", "bob"] {
        let cookie = cookie_of(&server, name).await;
        for _ in 0..2 {
            let (status, body) = get(&server, "/chat?agent=general", &Auth::Cookie(&cookie)).await;
            assert_eq!(status, 200, "{name}: {body}");
        }
    }
    assert_eq!(server.services.live.count().await.unwrap(), 2);
}

#[tokio::test]
async fn hole_3_after_login_only_this_sites_paths_are_followed() {
    let server = local(&[]).await;
    let own = server.url("");
    for (next, expected) in [
        ("/\t/evil.example", "/"),
        ("/\n/evil.example", "/"),
        ("/\r\nset-cookie: stolen=1", "/"),
        ("//evil.example", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
        ("/a/..//evil.example", "/"),
        ("/chat?agent=general", "/chat?agent=general"),
    ] {
        let form: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("username", "ada")
            .append_pair("password", PASSWORD)
            .append_pair("next", next)
            .finish();
        let answer = raw(
            &server,
            "POST",
            "/auth/login",
            &headers(&[
                ("origin", &own),
                ("content-type", "application/x-www-form-urlencoded"),
            ]),
            &form,
        )
        .await;
        assert_eq!(answer.status, 303, "{next:?}: {answer:?}");
        assert!(
            answer
                .head
                .contains(&format!("\r\nlocation: {expected}\r\n")),
            "{next:?}: {answer:?}"
        );
        assert!(!answer.head.contains("stolen"), "{next:?}");
    }
    // A browser already logged in goes on in one click: the same rule.
    let cookie = cookie_of(&server, "ada").await;
    for next in ["/%09/evil.example", "%2F%2Fevil.example", "/%0d%0a/x"] {
        let answer = raw(
            &server,
            "GET",
            &format!("/login?next={next}"),
            &headers(&[("cookie", &cookie)]),
            "",
        )
        .await;
        assert_eq!(answer.status, 303, "{next}: {answer:?}");
        assert!(
            answer.head.contains("\r\nlocation: /\r\n"),
            "{next}: {answer:?}"
        );
    }
}

/// Fifty wrong passwords at once for one name from one address: no more than the lockout
/// allows are checked, whatever the order they arrive in.
async fn parallel_guesses_are_counted_before_they_are_checked(server: &TestServer) {
    let guesses = (0..50).map(|_| {
        login_with(
            server,
            "ada",
            "a wrong guess, sent in parallel",
            &[("x-forwarded-for", "10.0.0.7")],
        )
    });
    let statuses: Vec<u16> = futures::future::join_all(guesses)
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    assert!(
        statuses.iter().all(|s| matches!(s, 401 | 429 | 503)),
        "{statuses:?}"
    );
    // Those the hashing limit turned away (503) were not counted: the guessing goes on
    // until the lockout, and no more than its number is ever checked.
    let mut statuses = statuses;
    for _ in 0..10 {
        let (status, _) = login_with(
            server,
            "ada",
            "one more guess",
            &[("x-forwarded-for", "10.0.0.7")],
        )
        .await;
        statuses.push(status);
    }
    let checked = statuses.iter().filter(|s| **s == 401).count();
    assert_eq!(
        checked,
        parlor_domain::account::LOCKOUT_FAILURES as usize,
        "{statuses:?}"
    );
    // The name is locked from anywhere now, the right password too.
    let (status, _) = login_with(server, "ada", PASSWORD, &[("x-forwarded-for", "10.0.0.8")]).await;
    assert_eq!(status, 429);
    // A right password from another address is not held against that address.
    for _ in 0..8 {
        let (status, _) =
            login_with(server, "bob", PASSWORD, &[("x-forwarded-for", "10.0.0.9")]).await;
        assert_eq!(status, 204);
    }
}

#[tokio::test]
async fn hole_4_parallel_guesses_beat_no_lockout_on_files() {
    // The lockout itself, without the per-address limit on logins in front of it.
    let server = local(&[
        ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
        ("PARLOR_RATE_LIMIT_LOGIN", "0"),
        // As many checks at once as guesses: the count alone must stop them.
        ("PARLOR_PASSWORD_CHECKS", "64"),
    ])
    .await;
    parallel_guesses_are_counted_before_they_are_checked(&server).await;
}

#[tokio::test]
async fn hole_4_parallel_guesses_beat_no_lockout_on_redis() {
    let redis = RedisServer::start().unwrap();
    let config = redis_history(&redis.url(), "h4:");
    let path = config.path().display().to_string();
    let server = local(&[
        ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
        ("PARLOR_RATE_LIMIT_LOGIN", "0"),
        ("PARLOR_PASSWORD_CHECKS", "64"),
        ("PARLOR_CONFIG", &path),
    ])
    .await;
    parallel_guesses_are_counted_before_they_are_checked(&server).await;
}

#[tokio::test]
async fn hole_4_logins_from_one_address_are_limited_before_anything_is_read() {
    let server = local(&[
        ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
        ("PARLOR_RATE_LIMIT_LOGIN", "3"),
    ])
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let (status, _) =
            login_with(&server, "bob", PASSWORD, &[("x-forwarded-for", "10.1.1.1")]).await;
        statuses.push(status);
    }
    assert_eq!(statuses, [204, 204, 204, 429, 429]);
    let (status, _) =
        login_with(&server, "bob", PASSWORD, &[("x-forwarded-for", "10.1.1.2")]).await;
    assert_eq!(status, 204, "another address is not limited");
}

#[tokio::test]
async fn hole_4_password_checks_beyond_the_limit_wait_and_count_nothing() {
    let server = local(&[
        ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
        ("PARLOR_RATE_LIMIT_LOGIN", "0"),
        ("PARLOR_PASSWORD_CHECKS", "1"),
    ])
    .await;
    let url = server.url("/auth/login");
    let logins = (0..6).map(|n| {
        let (from, url) = (format!("10.2.0.{n}"), url.clone());
        async move {
            client()
                .post(url)
                .header("x-forwarded-for", from)
                .json(&json!({ "username": "bob", "password": "not it, in parallel" }))
                .send()
                .await
                .unwrap()
        }
    });
    let answers = futures::future::join_all(logins).await;
    let busy: Vec<_> = answers.iter().filter(|r| r.status() == 503).collect();
    assert!(
        !busy.is_empty(),
        "one check at a time: the others are turned away"
    );
    assert!(busy.iter().all(|r| r.headers().contains_key("retry-after")));
    // Those turned away were not counted: bob is not locked.
    let (status, _) =
        login_with(&server, "bob", PASSWORD, &[("x-forwarded-for", "10.2.1.1")]).await;
    assert_eq!(status, 204);
}

#[tokio::test]
async fn hole_4_sign_up_has_its_own_tight_limit() {
    let server = TestServer::start(&[
        ("PARLOR_AUTH", "local"),
        ("PARLOR_SIGNUP", "true"),
        ("PARLOR_RATE_LIMIT_SIGNUP", "3"),
    ])
    .await;
    let mut statuses = Vec::new();
    for n in 0..5 {
        let response = client()
            .post(server.url("/auth/signup"))
            .json(&json!({ "username": format!("user{n}"), "password": PASSWORD }))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [204, 204, 204, 429, 429]);
}

#[tokio::test]
async fn hole_8_an_admins_name_cannot_be_signed_up() {
    let server = TestServer::start(&[
        ("PARLOR_AUTH", "local"),
        ("PARLOR_SIGNUP", "true"),
        ("PARLOR_ADMINS", "root"),
    ])
    .await;
    for name in ["root", "Root", "ROOT", " root "] {
        let response = client()
            .post(server.url("/auth/signup"))
            .json(&json!({ "username": name, "password": PASSWORD }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 409, "{name:?}");
        assert!(login_cookie(&response).is_none());
    }
    let accounts = server.services.accounts.clone().unwrap();
    assert!(accounts.store().users().await.unwrap().is_empty());
}

#[tokio::test]
async fn hole_14_two_first_sign_ups_at_once_make_one_admin() {
    let server = TestServer::start(&[
        ("PARLOR_AUTH", "local"),
        ("PARLOR_SIGNUP", "true"),
        ("PARLOR_RATE_LIMIT_SIGNUP", "0"),
    ])
    .await;
    let sign_ups = (0..8).map(|n| {
        client()
            .post(server.url("/auth/signup"))
            .json(&json!({ "username": format!("early{n}"), "password": PASSWORD }))
            .send()
    });
    for response in futures::future::join_all(sign_ups).await {
        assert_eq!(response.unwrap().status(), 204);
    }
    let accounts = server.services.accounts.clone().unwrap();
    let users = accounts.store().users().await.unwrap();
    assert_eq!(users.len(), 8);
    assert_eq!(users.iter().filter(|a| accounts.is_admin(a)).count(), 1);
}

#[tokio::test]
async fn hole_9_a_new_password_and_log_out_everywhere_end_every_login() {
    let server = local(&[]).await;
    let accounts = server.services.accounts.clone().unwrap();
    let laptop = cookie_of(&server, "bob").await;
    let phone = cookie_of(&server, "bob").await;
    let token = make_token(&server, &laptop).await;
    accounts
        .set_password("bob", "a brand new passphrase")
        .await
        .unwrap();
    for cookie in [&laptop, &phone] {
        assert_eq!(
            get(&server, "/api/account", &Auth::Cookie(cookie)).await.0,
            401
        );
    }
    // Tokens are revoked on their own.
    assert_eq!(
        get(&server, "/api/account", &Auth::Bearer(&token)).await.0,
        200
    );
    // `parlor user logout`.
    let (status, fresh) = login_as(&server, "bob", "a brand new passphrase").await;
    assert_eq!(status, 204);
    let fresh = fresh.unwrap();
    let command = parlor_server::cli::UserCommand::Logout { name: "Bob".into() };
    let said = parlor_server::cli::run_user(command, &accounts, String::new)
        .await
        .unwrap();
    assert!(said.contains("bob"), "{said}");
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&fresh)).await.0,
        401
    );
    // "Log out other sessions": the others end, the browser that asked keeps going.
    let (_, here) = login_as(&server, "bob", "a brand new passphrase").await;
    let (_, there) = login_as(&server, "bob", "a brand new passphrase").await;
    let (here, there) = (here.unwrap(), there.unwrap());
    let response = client()
        .post(server.url("/account/logout-others"))
        .header("cookie", &here)
        .header("origin", server.url(""))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    let renewed = login_cookie(&response).expect("a new login for this browser");
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&renewed))
            .await
            .0,
        200
    );
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&there)).await.0,
        401
    );
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&here)).await.0,
        401
    );
}

#[tokio::test]
async fn hole_10_a_conversation_without_an_owner_is_an_admins_until_given_one() {
    let server = local(&[]).await;
    let session = orphan(&server).await;
    let path = format!("/api/chat/general/sessions/{session}/export");
    let ada = cookie_of(&server, "ada").await; // an admin
    let bob = cookie_of(&server, "bob").await;
    assert_eq!(get(&server, &path, &Auth::Cookie(&bob)).await.0, 404);
    let (status, body) = get(&server, &path, &Auth::Cookie(&ada)).await;
    assert_eq!(status, 200);
    assert!(body.contains(SECRET));
    // The operator gives it to bob.
    let store = server.services.accounts.clone().unwrap();
    let command = parlor_server::cli::StoreCommand::Own {
        target: parlor_server::cli::Target {
            session: session.clone(),
            history: "default".into(),
        },
        owner: "bob".into(),
    };
    let said = parlor_server::cli::run_store(
        command,
        &server.services.histories,
        &server.services.config,
        Some(store.store()),
    )
    .await
    .unwrap();
    assert!(said.contains("bob"), "{said}");
    let (status, body) = get(&server, &path, &Auth::Cookie(&bob)).await;
    assert_eq!(status, 200);
    assert!(body.contains(SECRET));
    assert_eq!(get(&server, &path, &Auth::Cookie(&ada)).await.0, 404);
}

#[tokio::test]
async fn hole_10_an_import_is_given_its_owner_or_refused() {
    let server = local(&[]).await;
    let ada = cookie_of(&server, "ada").await; // an admin
    let bob = cookie_of(&server, "bob").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("old.json");
    let messages = json!([
        {"role": "user", "content": format!("keep {SECRET}")},
        {"role": "assistant", "content": "kept"}
    ]);
    std::fs::write(&file, messages.to_string()).unwrap();
    let import = |owner: &str| parlor_server::cli::StoreCommand::Import {
        file: file.clone(),
        agent: Some("general".into()),
        history: "default".into(),
        owner: Some(owner.into()),
    };
    let accounts = server.services.accounts.clone().unwrap();
    let run = |command| {
        parlor_server::cli::run_store(
            command,
            &server.services.histories,
            &server.services.config,
            Some(accounts.store()),
        )
    };
    // An account that does not exist owns nothing: refused, nothing stored.
    let store = &server.services.histories.get("default").unwrap().store;
    let before = store.list().await.unwrap().len();
    let refused = run(import("nobody")).await.unwrap_err().to_string();
    assert!(refused.contains("nobody"), "{refused}");
    assert_eq!(store.list().await.unwrap().len(), before);
    // Imported for bob: his, and not an admin's to read (it has an owner).
    let said = run(import("bob")).await.unwrap();
    let session = said
        .split(" as ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no id in {said:?}"))
        .to_string();
    let path = format!("/api/chat/general/sessions/{session}/export");
    let (status, body) = get(&server, &path, &Auth::Cookie(&bob)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(SECRET));
    assert_eq!(get(&server, &path, &Auth::Cookie(&ada)).await.0, 404);
}

#[tokio::test]
async fn hole_11_the_chat_cookie_never_claims_an_mcp_dialog() {
    let server = TestServer::start(&[]).await;
    let store = &server.services.histories.get("default").unwrap().store;
    let dialog = parlor_domain::ConversationId::parse("an-mcp-dialog").unwrap();
    store
        .put_summary(&dialog, &json!({ "facts": ["the MCP client's secret"] }))
        .await
        .unwrap();
    let browser = crate::support::browser("11111111111111111111111111111111");
    let cookie = format!("{browser}; parlor_chat=an-mcp-dialog");
    let reply = server
        .chat_with(
            "general",
            "",
            json!({ "message": "!summary" }),
            Some(&cookie),
        )
        .await;
    assert_ne!(reply.session_id(), "an-mcp-dialog");
    assert!(
        !reply.body.contains("the MCP client's secret"),
        "{}",
        reply.body
    );
    // Nor did it become the browser's.
    assert!(store.info(&dialog).await.unwrap().is_none());
    let (status, body) = server
        .get(
            "/api/chat/general/sessions/an-mcp-dialog/export",
            Some(&browser),
        )
        .await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn hole_12_parallel_admin_token_guesses_are_counted_first() {
    let server = TestServer::start(&[("PARLOR_ADMIN_TOKEN", "the-right-token")]).await;
    let guesses = (0..40).map(|n| {
        server
            .http
            .get(server.url("/metrics"))
            .bearer_auth(format!("guess-{n}"))
            .send()
    });
    let statuses: Vec<u16> = futures::future::join_all(guesses)
        .await
        .into_iter()
        .map(|r| r.unwrap().status().as_u16())
        .collect();
    let checked = statuses.iter().filter(|s| **s == 401).count();
    assert!(
        checked <= parlor_server::METRICS_FAILURES_PER_MINUTE as usize,
        "{statuses:?}"
    );
    assert!(statuses.iter().all(|s| matches!(s, 401 | 429)));
    // The same count covers the admin token sent to the chat API.
    let chat = server
        .http
        .post(server.url("/api/chat/general"))
        .header("x-parlor-admin-token", "the-right-token")
        .json(&json!({ "message": "!sessions" }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        chat.status(),
        429,
        "a right token waits too, once guessing began"
    );
    let other = TestServer::start(&[("PARLOR_ADMIN_TOKEN", "the-right-token")]).await;
    let mut statuses = Vec::new();
    for n in 0..12 {
        let chat = other
            .http
            .post(other.url("/api/chat/general"))
            .header("x-parlor-admin-token", format!("guess-{n}"))
            .json(&json!({ "message": "hello" }))
            .send()
            .await
            .unwrap();
        statuses.push(chat.status().as_u16());
    }
    assert_eq!(&statuses[10..], [429, 429], "{statuses:?}");
}

#[tokio::test]
async fn hole_13_a_name_starting_with_a_dot_is_refused() {
    let server = TestServer::start(&[("PARLOR_AUTH", "local"), ("PARLOR_SIGNUP", "true")]).await;
    for name in [".hidden", "..", "-rf", "@ada"] {
        let response = client()
            .post(server.url("/auth/signup"))
            .json(&json!({ "username": name, "password": PASSWORD }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{name:?}");
    }
    let accounts = server.services.accounts.clone().unwrap();
    assert!(accounts.add(".x", PASSWORD, true).await.is_err());
    assert!(accounts.store().users().await.unwrap().is_empty());
}

#[tokio::test]
async fn hole_14_the_login_page_says_only_its_own_words() {
    let server = local(&[]).await;
    let (status, body) = get(
        &server,
        "/login?error=Your+account+is+locked.+Call+%2B1-555-0100",
        &Auth::None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(!body.contains("Call"), "{body}");
    assert!(!body.contains("locked"), "{body}");
}

#[tokio::test]
async fn hole_14_over_https_the_login_cookie_is_host_only() {
    let server = local(&[("PARLOR_PUBLIC_URL", "https://chat.example.com")]).await;
    let response = client()
        .post(server.url("/auth/login"))
        .json(&json!({ "username": "bob", "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let set = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|v| v.contains("parlor_login="))
        .unwrap();
    assert!(set.starts_with("__Host-parlor_login="), "{set}");
    assert!(set.contains("Secure") && set.contains("Path=/"), "{set}");
    assert!(!set.to_ascii_lowercase().contains("domain="), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&cookie)).await.0,
        200
    );
    // The plain name means nothing there.
    let plain = cookie.trim_start_matches("__Host-");
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(plain)).await.0,
        401
    );
}

#[tokio::test]
async fn hole_14_a_personal_token_cannot_make_tokens() {
    let server = local(&[]).await;
    let cookie = cookie_of(&server, "bob").await;
    let token = make_token(&server, &cookie).await;
    let response = client()
        .post(server.url("/api/account/tokens"))
        .bearer_auth(&token)
        .json(&json!({ "label": "successor" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    // Nor through the pages' forms, nor by trading itself for a login.
    for path in ["/account/tokens", "/account/logout-others"] {
        let answer = raw(
            &server,
            "POST",
            path,
            &headers(&[
                ("authorization", &format!("Bearer {token}")),
                ("content-type", "application/x-www-form-urlencoded"),
            ]),
            "label=successor",
        )
        .await;
        assert_eq!(answer.status, 403, "{path}: {answer:?}");
        assert!(!answer.head.contains("set-cookie"), "{path}");
        assert!(!answer.body.contains("parlor_pat_"), "{path}");
    }
    let accounts = server.services.accounts.clone().unwrap();
    let bob = parlor_domain::account::UserName::parse("bob").unwrap();
    assert_eq!(accounts.store().tokens(&bob).await.unwrap().len(), 1);
    // The cookie bob logged in with still works: nothing ended it.
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&cookie)).await.0,
        200
    );
}

#[tokio::test]
async fn hole_14_a_proxys_user_gets_no_login_cookie_to_go_around_the_proxy() {
    let server = TestServer::start(&[
        ("PARLOR_AUTH", "proxy"),
        ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
    ])
    .await;
    let answer = raw(
        &server,
        "POST",
        "/account/logout-others",
        &headers(&[
            ("x-forwarded-user", "ada"),
            ("origin", &server.url("")),
            ("content-type", "application/x-www-form-urlencoded"),
        ]),
        "",
    )
    .await;
    assert_eq!(answer.status, 303, "{answer:?}");
    assert!(!answer.head.contains("parlor_login"), "{answer:?}");
}

#[tokio::test]
async fn hole_15_head_answers_as_get_and_dropped_requests_panic_nothing() {
    // Panics of the page's context, wherever they happen in this process, are counted.
    static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static DISPOSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info.to_string();
        if text.contains("expected context") {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        if text.contains("already been disposed") {
            DISPOSED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        previous(info);
    }));
    let server = TestServer::start(&[("PARLOR_RATE_LIMIT_PAGES", "0")]).await;
    for path in [
        "/chat?agent=general&session=no-such-conversation",
        "/chat?agent=nobody",
        "/chat?agent=general",
        "/",
    ] {
        let get = raw(&server, "GET", path, &[], "").await;
        let head = raw(&server, "HEAD", path, &[], "").await;
        assert_eq!(head.status, get.status, "{path}");
        assert!(head.body.is_empty(), "{path}");
    }
    // HEAD in parallel (the connection drops a HEAD's body at once): 8 clients, 40 each.
    let heads = (0..8).map(|_| {
        let server = &server;
        async move {
            for _ in 0..40 {
                let head = raw(server, "HEAD", "/chat?agent=general", &[], "").await;
                assert_eq!(head.status, 200);
            }
        }
    });
    futures::future::join_all(heads).await;
    assert_eq!(
        DISPOSED.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a page's reactive state read after it was disposed"
    );
    // Clients that leave mid-answer, many times over. (Hundreds at once still make Leptos
    // read a page's state after its disposal at times, in a task of its own: a known gap,
    // see docs/security.md; the context panic of this hole must not happen.)
    use tokio::io::AsyncWriteExt;
    for n in 0..200 {
        let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        let path = match n % 3 {
            0 => "/chat?agent=general&session=gone",
            1 => "/chat?agent=general",
            _ => "/",
        };
        let request = format!("GET {path} HTTP/1.1\r\nhost: {}\r\n\r\n", server.addr);
        stream.write_all(request.as_bytes()).await.unwrap();
        if n % 2 == 0 {
            tokio::task::yield_now().await;
        }
        drop(stream);
    }
    assert_eq!(server.get("/healthz", None).await.0, 200);
    assert_eq!(
        server.get("/chat?agent=general", None).await.0,
        200,
        "still serving pages"
    );
    assert_eq!(PANICS.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn over_http2_parlors_own_page_is_still_its_own() {
    // HTTP/2 names the host in `:authority`: the cross-site check must read it there.
    let server = local(&[]).await;
    let cookie = cookie_of(&server, "bob").await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let own = h2
        .post(server.url("/api/account/tokens"))
        .header("cookie", &cookie)
        .header("origin", server.url(""))
        .json(&json!({ "label": "over h2" }))
        .send()
        .await
        .unwrap();
    assert_eq!(own.version(), reqwest::Version::HTTP_2);
    assert_eq!(own.status(), 201);
    let foreign = h2
        .post(server.url("/api/account/tokens"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.test")
        .json(&json!({ "label": "from elsewhere" }))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
}

#[tokio::test]
async fn hole_15_clients_that_leave_mid_render_panic_nothing() {
    // A render the connection dropped halfway read the page's state after its disposal.
    static DISPOSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.to_string().contains("already been disposed") {
            DISPOSED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        previous(info);
    }));
    let server = TestServer::start(&[("PARLOR_RATE_LIMIT_PAGES", "0")]).await;
    // Six hundred at once, GET and HEAD, each leaving right after asking.
    let leaving = (0..600).map(|n| {
        let server = &server;
        async move {
            use tokio::io::AsyncWriteExt;
            let path = [
                "/chat?agent=general&session=gone",
                "/chat?agent=general",
                "/",
            ][n % 3];
            let method = if n % 4 == 0 { "HEAD" } else { "GET" };
            let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
            let request = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\n\r\n", server.addr);
            stream.write_all(request.as_bytes()).await.unwrap();
            if n % 2 == 0 {
                tokio::task::yield_now().await;
            }
            drop(stream);
        }
    });
    futures::future::join_all(leaving).await;
    // Their renders finish on their own.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(server.get("/healthz", None).await.0, 200);
    assert_eq!(DISPOSED.load(std::sync::atomic::Ordering::SeqCst), 0);
}
