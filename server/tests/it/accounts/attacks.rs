//! What an outsider tries: forged, expired and revoked cookies and tokens, forms from other
//! sites, guessing passwords, huge inputs, a user header from anyone but the proxy.

use super::*;
use crate::support::TestServer;

#[tokio::test]
async fn forged_expired_and_ended_logins_and_tokens_open_nothing() {
    let server = local(&[]).await;
    let probe = "/api/account";
    let forged = format!("parlor_login={}", "ab".repeat(32));
    assert_eq!(get(&server, probe, &Auth::Cookie(&forged)).await.0, 401);
    assert_eq!(
        get(&server, probe, &Auth::Cookie("parlor_login=")).await.0,
        401
    );
    assert_eq!(
        get(&server, probe, &Auth::Cookie("parlor_login=../../etc"))
            .await
            .0,
        401
    );
    let made_up = format!("parlor_pat_{}", "cd".repeat(32));
    assert_eq!(get(&server, probe, &Auth::Bearer(&made_up)).await.0, 401);
    assert_eq!(get(&server, probe, &Auth::Bearer("")).await.0, 401);
    // An expired login, as the store holds it.
    let accounts = server.services.accounts.clone().unwrap();
    let ada = accounts
        .store()
        .user(&"ada".parse_name())
        .await
        .unwrap()
        .unwrap();
    let (secret, _) = accounts.start_login(&ada, 0).await.unwrap();
    let expired = format!("parlor_login={secret}");
    assert_eq!(get(&server, probe, &Auth::Cookie(&expired)).await.0, 401);
    // A user removed while logged in (and their token) is out at the next request.
    let bob = cookie_of(&server, "bob").await;
    let token = make_token(&server, &bob).await;
    assert_eq!(get(&server, probe, &Auth::Cookie(&bob)).await.0, 200);
    accounts.remove("bob").await.unwrap();
    assert_eq!(get(&server, probe, &Auth::Cookie(&bob)).await.0, 401);
    assert_eq!(get(&server, probe, &Auth::Bearer(&token)).await.0, 401);
    // Made again under the same name, it is a new account: the old login stays dead.
    accounts.add("bob", PASSWORD, false).await.unwrap();
    assert_eq!(get(&server, probe, &Auth::Cookie(&bob)).await.0, 401);
}

#[tokio::test]
async fn a_conversation_id_with_a_dot_is_no_way_past_the_login() {
    let server = local(&[]).await;
    // Made without an owner (as `parlor store import` or an MCP tool makes one).
    let store = server
        .services
        .histories
        .get("default")
        .unwrap()
        .store
        .clone();
    let id = parlor_domain::ConversationId::parse("imported.one").unwrap();
    let info = parlor_server::store::ConversationInfo {
        agent_id: "general".into(),
        ..parlor_server::store::ConversationInfo::bare(&id, Some(1))
    };
    store.put_info(&info).await.unwrap();
    let path = server.url("/api/chat/general/sessions/imported.one");
    let deleted = client()
        .delete(&path)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 401);
    let renamed = client()
        .patch(&path)
        .json(&json!({ "title": "mine now" }))
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), 401);
    assert!(store.info(&id).await.unwrap().is_some(), "still there");
    // The site's files are still served without a login.
    assert_ne!(get(&server, "/favicon.svg", &Auth::None).await.0, 401);
}

#[tokio::test]
async fn a_form_from_another_site_or_without_origin_is_refused() {
    let server = local(&[]).await;
    let form = |origin: Option<&str>| {
        let mut request = client().post(server.url("/auth/login")).form(&[
            ("username", "ada"),
            ("password", PASSWORD),
            ("next", "/chat/general"),
        ]);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    assert_eq!(form(None).await.unwrap().status(), 403);
    assert_eq!(form(Some("http://evil.test")).await.unwrap().status(), 403);
    assert_eq!(form(Some("null")).await.unwrap().status(), 403);
    let own = form(Some(&server.url(""))).await.unwrap();
    assert_eq!(own.status(), 303);
    assert_eq!(own.headers()["location"], "/chat/general");
    let cookie = login_cookie(&own).unwrap();
    // A logged-in browser's state change from another site is refused too.
    let foreign = client()
        .post(server.url("/api/account/tokens"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.test")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    let twice = client()
        .post(server.url("/api/account/tokens"))
        .header("cookie", &cookie)
        .header("origin", server.url(""))
        .header("origin", "http://evil.test")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), 403);
    let cross = client()
        .post(server.url("/api/account/tokens"))
        .header("cookie", &cookie)
        .header("sec-fetch-site", "cross-site")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 403);
}

#[tokio::test]
async fn fifty_wrong_passwords_lock_that_name_and_that_address_only() {
    let server = local(&[("PARLOR_TRUSTED_PROXIES", "127.0.0.1")]).await;
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    let mut locked = 0;
    for _ in 0..50 {
        let (status, _) = login_with(&server, "ada", "guess guess guess", &from("10.0.0.1")).await;
        assert!(status == 401 || status == 429, "{status}");
        locked += usize::from(status == 429);
    }
    assert_eq!(locked, 45, "the 6th try onwards is refused unhashed");
    let response = client()
        .post(server.url("/auth/login"))
        .header("x-forwarded-for", "10.0.0.3")
        .json(&json!({ "username": "ada", "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429, "the name is locked from anywhere");
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=900).contains(&retry), "{retry}");
    let (status, _) = login_with(&server, "bob", PASSWORD, &from("10.0.0.1")).await;
    assert_eq!(status, 429, "the address is locked for every name");
    let (status, _) = login_with(&server, "bob", PASSWORD, &from("10.0.0.2")).await;
    assert_eq!(status, 204, "another name from another address logs in");
}

#[tokio::test]
async fn an_over_long_name_or_password_is_a_clear_400() {
    let server = local(&[]).await;
    let huge = "p".repeat(200_000);
    let (status, _) = login_as(&server, "ada", &huge).await;
    assert_eq!(status, 400);
    let (status, _) = login_as(&server, &"a".repeat(10_000), PASSWORD).await;
    assert_eq!(status, 400);
    let response = client()
        .post(server.url("/auth/login"))
        .json(&json!({ "username": "ada", "password": huge }))
        .send()
        .await
        .unwrap();
    let body = response.text().await.unwrap();
    assert!(body.contains("at most 1024 bytes"), "{body}");
    // They did not count as failures: the right password still works.
    assert_eq!(login_as(&server, "ada", PASSWORD).await.0, 204);
}

#[tokio::test]
async fn hole_6_each_identity_a_trusted_proxy_names_is_its_own_account() {
    let trusted = TestServer::start(&[
        ("PARLOR_AUTH", "proxy"),
        ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
        ("PARLOR_ADMINS", "ada"),
    ])
    .await;
    let as_user = |server: &TestServer, headers: &[(&'static str, &'static str)]| {
        let mut request = client().get(server.url("/api/account"));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.send()
    };
    let me = |identity: &'static str| {
        let trusted = &trusted;
        async move {
            let answer = as_user(trusted, &[("x-forwarded-user", identity)])
                .await
                .unwrap();
            assert_eq!(answer.status(), 200, "{identity:?}");
            answer.json::<Value>().await.unwrap()
        }
    };
    let ada = me("ada").await;
    assert_eq!(
        (&ada["name"], &ada["display"]),
        (&json!("ada"), &json!("ada"))
    );
    assert_eq!(ada["admin"], true, "PARLOR_ADMINS names the proxy's admins");
    // One identity, one account: a look-alike of `ada` is never folded into her (an admin),
    // nor into each other; each keeps the identity as sent as the name it is shown under.
    // (HTTP itself drops the spaces around a header's value.)
    let mut names = vec![ada["name"].clone()];
    // Sent first, the name `Ada`'s account will be made under is someone else's identity:
    // it gets a name of its own, and neither takes Ada's account nor locks her out.
    let shaped = me("ada-99a563ab2f6e").await;
    assert_ne!(shaped["name"], "ada-99a563ab2f6e", "{shaped}");
    assert_eq!(shaped["admin"], false);
    for look_alike in ["Ada", "ADA", "Ada!", "ada@", "a da", ".ada", "ada/", "@@@"] {
        let account = me(look_alike).await;
        assert_eq!(account["display"], look_alike);
        assert_eq!(account["admin"], false, "{look_alike:?} is not ada");
        assert!(
            !names.contains(&account["name"]),
            "{look_alike:?}: {account}"
        );
        assert_eq!(
            me(look_alike).await["name"],
            account["name"],
            "the same one again"
        );
        names.push(account["name"].clone());
    }
    // The name made for `Ada`, sent before her, was not taken as sent: she has it.
    assert_eq!(me("Ada").await["name"], "ada-99a563ab2f6e");
    let mixed = me("Ada@Example.com").await;
    assert_ne!(mixed["name"], "ada@example.com");
    assert_eq!(mixed["display"], "Ada@Example.com");
    // What cannot be one identity is refused: a control character, a value too long.
    let long: &'static str = Box::leak("a".repeat(257).into_boxed_str());
    for refused in ["a\tda", long] {
        let answer = as_user(&trusted, &[("x-forwarded-user", refused)])
            .await
            .unwrap();
        assert_eq!(answer.status(), 401, "{refused:?}");
    }
    assert_eq!(as_user(&trusted, &[]).await.unwrap().status(), 401);
    let twice = [("x-forwarded-user", "ada"), ("x-forwarded-user", "bob")];
    assert_eq!(as_user(&trusted, &twice).await.unwrap().status(), 401);
    let untrusted = TestServer::start(&[
        ("PARLOR_AUTH", "proxy"),
        ("PARLOR_TRUSTED_PROXIES", "10.9.9.9"),
    ])
    .await;
    let refused = as_user(&untrusted, &[("x-forwarded-user", "ada")])
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let body = refused.text().await.unwrap();
    assert!(body.contains("trusted proxy"), "{body}");
}

trait ParseName {
    fn parse_name(&self) -> parlor_domain::account::UserName;
}

impl ParseName for str {
    fn parse_name(&self) -> parlor_domain::account::UserName {
        parlor_domain::account::UserName::parse(self).unwrap()
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_read_in_any_case_and_private_answers_are_not_cached() {
    let admin = "attack-admin-token-0123456789";
    let server = local(&[("PARLOR_ADMIN_TOKEN", admin)]).await;
    let cookie = cookie_of(&server, "ada").await;
    let token = make_token(&server, &cookie).await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let metrics = client()
            .get(server.url("/metrics"))
            .header("authorization", format!("{scheme} {admin}"))
            .send()
            .await
            .unwrap();
        assert_eq!(metrics.status(), 200, "{scheme} on /metrics");
        let me = client()
            .get(server.url("/api/account"))
            .header("authorization", format!("{scheme} {token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(me.status(), 200, "{scheme} with a personal token");
        assert_eq!(
            me.headers()["cache-control"],
            "no-store",
            "an account's answer"
        );
    }
    let page = client()
        .get(server.url("/chat?agent=general"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(
        page.headers()["cache-control"],
        "no-store",
        "a logged-in page"
    );
    // Readiness, whose details depend on who asks, and a login's answer, which sets its
    // cookie, are not kept either.
    let ready = client().get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.headers()["cache-control"], "no-store");
    let login = client()
        .post(server.url("/auth/login"))
        .json(&serde_json::json!({ "username": "ada", "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    assert!(login_cookie(&login).is_some(), "logged in");
    assert_eq!(login.headers()["cache-control"], "no-store");
}
