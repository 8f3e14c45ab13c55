//! Accounts over real HTTP: logins, tokens, the gate, CSRF, lockout, ownership by account,
//! proxy mode, quotas; on file and on Redis (two processes sharing one).

mod attacks;
mod holes;
mod shared;

use crate::support::TestServer;
use serde_json::{json, Value};

/// A client that does not follow redirects (the tests read them).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap()
}

pub const PASSWORD: &str = "correct horse battery";

/// A local-accounts server (with `extra` settings) and accounts `ada` (admin) and `bob`.
pub async fn local(extra: &[(&str, &str)]) -> TestServer {
    let mut vars = vec![("PARLOR_AUTH", "local")];
    vars.extend_from_slice(extra);
    let server = TestServer::start(&vars).await;
    add_users(&server).await;
    server
}

pub async fn add_users(server: &TestServer) {
    let accounts = server.services.accounts.as_ref().expect("accounts on");
    accounts.add("ada", PASSWORD, true).await.unwrap();
    accounts.add("bob", PASSWORD, false).await.unwrap();
}

/// Logs in with JSON (as a script would): the status and the login cookie it set.
pub async fn login_as(server: &TestServer, name: &str, password: &str) -> (u16, Option<String>) {
    login_with(server, name, password, &[]).await
}

pub async fn login_with(
    server: &TestServer,
    name: &str,
    password: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>) {
    let mut request = client()
        .post(server.url("/auth/login"))
        .json(&json!({ "username": name, "password": password }));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let cookie = login_cookie(&response);
    (response.status().as_u16(), cookie)
}

/// The `parlor_login=…` pair a response set (not a cleared one); over https its name is
/// `__Host-parlor_login`.
pub fn login_cookie(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| v.trim_start_matches("__Host-"))
        .find(|v| v.starts_with("parlor_login=") && !v.starts_with("parlor_login=;"))
        .map(|v| v.split(';').next().unwrap().to_owned())
        .map(|pair| {
            match response
                .headers()
                .get_all("set-cookie")
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| v.starts_with("__Host-")))
            {
                true => format!("__Host-{pair}"),
                false => pair,
            }
        })
}

/// Logs in and returns the cookie, or fails the test.
pub async fn cookie_of(server: &TestServer, name: &str) -> String {
    let (status, cookie) = login_as(server, name, PASSWORD).await;
    assert_eq!(status, 204, "login of {name}");
    cookie.expect("a login cookie")
}

/// A GET with a cookie or a bearer token: status and body.
pub async fn get(server: &TestServer, path: &str, auth: &Auth<'_>) -> (u16, String) {
    let response = auth
        .apply(client().get(server.url(path)))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

pub enum Auth<'a> {
    None,
    Cookie(&'a str),
    Bearer(&'a str),
}

impl Auth<'_> {
    pub fn apply(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Auth::None => request,
            Auth::Cookie(c) => request.header("cookie", *c),
            Auth::Bearer(t) => request.header("authorization", format!("Bearer {t}")),
        }
    }
}

/// A chat turn as `auth`: the reply.
pub async fn chat(server: &TestServer, auth: &Auth<'_>, body: Value) -> crate::support::Reply {
    let headers: Vec<(&str, String)> = match auth {
        Auth::None => vec![],
        Auth::Cookie(c) => vec![("cookie", c.to_string())],
        Auth::Bearer(t) => vec![("authorization", format!("Bearer {t}"))],
    };
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    server
        .chat_request("general", "", body, None, &headers)
        .await
}

/// Makes a personal token through the API as the owner of `cookie`.
pub async fn make_token(server: &TestServer, cookie: &str) -> String {
    let response = client()
        .post(server.url("/api/account/tokens"))
        .header("cookie", cookie)
        .json(&json!({ "label": "script" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    body["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn without_a_login_pages_go_to_the_login_page_and_the_api_answers_401() {
    let server = local(&[]).await;
    let response = client()
        .get(server.url("/chat?agent=general&debug=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()["location"],
        "/login?next=%2Fchat%3Fagent%3Dgeneral%26debug%3Dtrue"
    );
    let (status, body) = get(&server, "/api/conversations/search?q=x", &Auth::None).await;
    assert_eq!(status, 401);
    assert!(body.contains("log in"), "{body}");
    let reply = chat(&server, &Auth::None, json!({ "message": "hello" })).await;
    assert_eq!(reply.status, 401);
    // Open: the login page, health, readiness, static files.
    assert_eq!(get(&server, "/login", &Auth::None).await.0, 200);
    assert_eq!(get(&server, "/healthz", &Auth::None).await.0, 200);
    assert_eq!(get(&server, "/readyz", &Auth::None).await.0, 200);
    assert_ne!(get(&server, "/favicon.svg", &Auth::None).await.0, 401);
    // Sign-up is off unless the operator allows it.
    assert_eq!(get(&server, "/signup", &Auth::None).await.0, 404);
}

#[tokio::test]
async fn a_login_is_a_new_httponly_cookie_each_time_and_logout_ends_it() {
    let server = local(&[]).await;
    let response = client()
        .post(server.url("/auth/login"))
        .json(&json!({ "username": "Ada", "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let set = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Lax"),
        "{set}"
    );
    let first = login_cookie(&response).unwrap();
    let (status, body) = get(&server, "/api/account", &Auth::Cookie(&first)).await;
    assert_eq!(status, 200);
    let me: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (me["name"].as_str(), me["admin"].as_bool()),
        (Some("ada"), Some(true))
    );
    // Logging in again (carrying the old cookie) gives a new id and ends the old one.
    let again = client()
        .post(server.url("/auth/login"))
        .header("cookie", &first)
        .json(&json!({ "username": "ada", "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    let second = login_cookie(&again).unwrap();
    assert_ne!(first, second);
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&first)).await.0,
        401
    );
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&second)).await.0,
        200
    );
    let out = client()
        .post(server.url("/auth/logout"))
        .header("cookie", &second)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    assert_eq!(
        get(&server, "/api/account", &Auth::Cookie(&second)).await.0,
        401
    );
}

#[tokio::test]
async fn a_wrong_name_and_a_wrong_password_get_the_same_answer() {
    let server = local(&[]).await;
    let wrong_password = client()
        .post(server.url("/auth/login"))
        .json(&json!({ "username": "ada", "password": "not the password" }))
        .send()
        .await
        .unwrap();
    let wrong_name = client()
        .post(server.url("/auth/login"))
        .json(&json!({ "username": "nobody", "password": "not the password" }))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_password.status(), 401);
    assert_eq!(wrong_name.status(), 401);
    assert_eq!(
        wrong_password.text().await.unwrap(),
        wrong_name.text().await.unwrap()
    );
}

#[tokio::test]
async fn two_accounts_never_see_each_others_conversations() {
    let server = local(&[]).await;
    let ada = cookie_of(&server, "ada").await;
    let bob = cookie_of(&server, "bob").await;
    let reply = chat(
        &server,
        &Auth::Cookie(&ada),
        json!({ "message": "ada's secret plan" }),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let id = reply.session_id();
    let export = format!("/api/chat/general/sessions/{id}/export");
    assert_eq!(get(&server, &export, &Auth::Cookie(&ada)).await.0, 200);
    assert_eq!(get(&server, &export, &Auth::Cookie(&bob)).await.0, 404);
    // Bob's token is Bob: the same 404.
    let token = make_token(&server, &bob).await;
    assert_eq!(get(&server, &export, &Auth::Bearer(&token)).await.0, 404);
    let search = "/api/conversations/search?q=secret";
    let (_, found) = get(&server, search, &Auth::Cookie(&bob)).await;
    assert!(!found.contains(&id), "{found}");
    let (_, found) = get(&server, search, &Auth::Cookie(&ada)).await;
    assert!(found.contains(&id), "{found}");
    // Bob cannot continue it either, and his own chat is his.
    let theirs = chat(
        &server,
        &Auth::Bearer(&token),
        json!({ "message": "hi", "session_id": id }),
    )
    .await;
    assert_eq!(theirs.status, 404);
    // Ada's token reaches her conversation from anywhere (another device).
    let ada_token = make_token(&server, &ada).await;
    assert_eq!(
        get(&server, &export, &Auth::Bearer(&ada_token)).await.0,
        200
    );
}

#[tokio::test]
async fn a_browsers_conversations_move_to_its_account_at_its_first_login() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().display().to_string();
    let browser = crate::support::browser("0123456789abcdef0123456789abcdef");
    let id = {
        // Before accounts: the browser's cookie owns its conversation.
        let open = TestServer::start(&[("PARLOR_DATA_DIR", &dir)]).await;
        let reply = open
            .chat_with(
                "general",
                "",
                json!({ "message": "my old chat" }),
                Some(&browser),
            )
            .await;
        reply.session_id()
    };
    let server = TestServer::start(&[("PARLOR_DATA_DIR", &dir), ("PARLOR_AUTH", "local")]).await;
    add_users(&server).await;
    let (status, cookie) = login_with(&server, "bob", PASSWORD, &[("cookie", &browser)]).await;
    assert_eq!(status, 204);
    let bob = cookie.unwrap();
    let export = format!("/api/chat/general/sessions/{id}/export");
    assert_eq!(get(&server, &export, &Auth::Cookie(&bob)).await.0, 200);
    // The move changed the owner and kept the rest of the details (the last turn's report,
    // which lists of conversations do not hold).
    let details = data
        .path()
        .join(".chat-history")
        .join(&id)
        .join("conversation.json");
    let details: Value = serde_json::from_slice(&std::fs::read(details).unwrap()).unwrap();
    let by_browser = parlor_server::store::owner_key("0123456789abcdef0123456789abcdef");
    assert!(details["owner"].is_string() && details["owner"] != json!(by_browser));
    assert!(details["last_turn"].is_object(), "{details}");
    let (_, found) = get(
        &server,
        "/api/conversations/search?q=old",
        &Auth::Cookie(&bob),
    )
    .await;
    assert!(found.contains(&id), "{found}");
    // Ada, logging in later from the same browser, finds nothing left to take.
    let (_, cookie) = login_with(&server, "ada", PASSWORD, &[("cookie", &browser)]).await;
    assert_eq!(
        get(&server, &export, &Auth::Cookie(&cookie.unwrap()))
            .await
            .0,
        404
    );
}

#[tokio::test]
async fn a_token_made_in_the_page_acts_as_its_account_until_revoked() {
    let server = local(&[]).await;
    let ada = cookie_of(&server, "ada").await;
    let page = client()
        .post(server.url("/account/tokens"))
        .header("cookie", &ada)
        .header("origin", server.url(""))
        .form(&[("label", "laptop")])
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    let token = html
        .split("<code class=\"token-value\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .expect("the new token on the page")
        .to_owned();
    let reply = chat(
        &server,
        &Auth::Bearer(&token),
        json!({ "message": "from curl" }),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let (_, list) = get(&server, "/api/account/tokens", &Auth::Cookie(&ada)).await;
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list[0]["label"], "laptop");
    assert!(list[0]["last_used_ms"].is_i64(), "{list}");
    assert!(
        !list.to_string().contains(&token),
        "the list never holds the token"
    );
    let id = list[0]["id"].as_str().unwrap();
    let revoked = client()
        .delete(server.url(&format!("/api/account/tokens/{id}")))
        .header("cookie", &ada)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    let reply = chat(
        &server,
        &Auth::Bearer(&token),
        json!({ "message": "again" }),
    )
    .await;
    assert_eq!(reply.status, 401);
}

#[tokio::test]
async fn admins_use_admin_commands_and_metrics_without_the_admin_token() {
    let server = local(&[]).await;
    let ada = cookie_of(&server, "ada").await;
    let bob = cookie_of(&server, "bob").await;
    let reply = chat(
        &server,
        &Auth::Cookie(&bob),
        json!({ "message": "!maxusers 7" }),
    )
    .await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    let reply = chat(
        &server,
        &Auth::Cookie(&ada),
        json!({ "message": "!maxusers 7" }),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(server.services.limits.max_users(), 7);
    assert_eq!(get(&server, "/metrics", &Auth::Cookie(&ada)).await.0, 200);
    assert_ne!(get(&server, "/metrics", &Auth::Cookie(&bob)).await.0, 200);
}

#[tokio::test]
async fn the_daily_quota_refuses_a_turn_beyond_it_and_spares_admins() {
    let server = local(&[("PARLOR_TOKENS_PER_DAY", "5")]).await;
    let bob = cookie_of(&server, "bob").await;
    let first = chat(
        &server,
        &Auth::Cookie(&bob),
        json!({ "message": "one two three four five six" }),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    // The reply's meter shows the day's use against the quota.
    let today = first.done().unwrap().meter.as_ref().unwrap().today.unwrap();
    assert_eq!(today.per_day, 5);
    assert!(today.used >= 5, "{today:?}");
    let (_, me) = get(&server, "/api/account", &Auth::Cookie(&bob)).await;
    let me: Value = serde_json::from_str(&me).unwrap();
    assert!(me["used_today"].as_u64().unwrap() >= 5, "{me}");
    let second = chat(&server, &Auth::Cookie(&bob), json!({ "message": "more" })).await;
    assert_eq!(second.status, 429);
    assert!(
        second.json_error().contains("starts again at"),
        "{}",
        second.body
    );
    let ada = cookie_of(&server, "ada").await;
    for _ in 0..2 {
        let reply = chat(
            &server,
            &Auth::Cookie(&ada),
            json!({ "message": "one two three four five six" }),
        )
        .await;
        assert_eq!(reply.status, 200, "admins are exempt");
    }
}

#[tokio::test]
async fn parallel_turns_reserve_their_tokens_and_cannot_run_far_past_the_quota() {
    let server = local(&[("PARLOR_TOKENS_PER_DAY", "500")]).await;
    let bob = cookie_of(&server, "bob").await;
    let turns = (0..12).map(|i| {
        let (server, bob) = (&server, &bob);
        async move {
            let message = format!("question {i}: one two three four five six");
            chat(server, &Auth::Cookie(bob), json!({ "message": message })).await
        }
    });
    let replies = futures::future::join_all(turns).await;
    let admitted = replies.iter().filter(|r| r.status == 200).count();
    let refused = replies.iter().filter(|r| r.status == 429).count();
    assert_eq!(admitted + refused, 12);
    assert!(admitted >= 1 && refused >= 1, "{admitted} admitted");
    // What the admitted turns used, each counted in place of its reservation: at most one
    // turn's estimate (1,000 tokens for a new conversation) past the quota.
    let (_, me) = get(&server, "/api/account", &Auth::Cookie(&bob)).await;
    let me: Value = serde_json::from_str(&me).unwrap();
    let used = me["used_today"].as_u64().unwrap();
    assert!(used > 0 && used <= 500 + 1_000, "{used} used");
    // A reservation is given back when its turn is refused: nothing is left reserved.
    let again = chat(&server, &Auth::Cookie(&bob), json!({ "message": "more" })).await;
    let (_, after) = get(&server, "/api/account", &Auth::Cookie(&bob)).await;
    let after: Value = serde_json::from_str(&after).unwrap();
    if again.status == 429 {
        assert_eq!(after["used_today"].as_u64().unwrap(), used);
    }
}

/// What `cookie`'s account used today, as `/api/account` says.
/// What the account of login `cookie` used today, as `/api/account` says.
pub async fn used_today(server: &TestServer, cookie: &str) -> u64 {
    let (_, me) = get(server, "/api/account", &Auth::Cookie(cookie)).await;
    let me: Value = serde_json::from_str(&me).unwrap();
    me["used_today"].as_u64().unwrap()
}

#[tokio::test]
async fn a_reply_stopped_midway_still_counts_against_the_quota() {
    let fake = fake_llm::FakeLlm::start().await.unwrap();
    let base = fake.base_url();
    let server = local(&[
        ("PARLOR_TOKENS_PER_DAY", "1000000"),
        ("OPENAI_BASE_URL", &base),
        ("PARLOR_MODEL", "fake-model"),
    ])
    .await;
    let bob = cookie_of(&server, "bob").await;
    let first = chat(&server, &Auth::Cookie(&bob), json!({ "message": "hello" })).await;
    let session = first.session_id();
    let before = used_today(&server, &bob).await;
    // A slow reply (60 words, one every 150 ms), stopped after a second.
    let body = json!({ "message": "[slow] tell me everything", "session_id": session });
    let auth = Auth::Cookie(&bob);
    let slow = chat(&server, &auth, body);
    let stop = async {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        client()
            .post(server.url(&format!("/api/chat/general/sessions/{session}/stop")))
            .header("cookie", &bob)
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .status()
    };
    let (slow, stopped) = tokio::join!(slow, stop);
    assert_eq!(stopped, 200);
    assert!(slow.done().is_none(), "the reply was cut short");
    let after = used_today(&server, &bob).await;
    assert!(
        after > before,
        "the stopped call counts: {before} then {after}"
    );
}

#[tokio::test]
async fn signup_when_allowed_makes_the_first_account_an_admin() {
    let server = TestServer::start(&[("PARLOR_AUTH", "local"), ("PARLOR_SIGNUP", "true")]).await;
    assert_eq!(get(&server, "/signup", &Auth::None).await.0, 200);
    let sign = |name: &'static str, password: &'static str| {
        client()
            .post(server.url("/auth/signup"))
            .json(&json!({ "username": name, "password": password }))
            .send()
    };
    assert_eq!(sign("ada", "short").await.unwrap().status(), 400);
    let first = sign("ada", PASSWORD).await.unwrap();
    assert_eq!(first.status(), 204);
    let cookie = login_cookie(&first).unwrap();
    let (_, me) = get(&server, "/api/account", &Auth::Cookie(&cookie)).await;
    assert!(me.contains("\"admin\":true"), "{me}");
    assert_eq!(sign("ada", PASSWORD).await.unwrap().status(), 409);
    let second = sign("bob", PASSWORD).await.unwrap();
    let cookie = login_cookie(&second).unwrap();
    let (_, me) = get(&server, "/api/account", &Auth::Cookie(&cookie)).await;
    assert!(me.contains("\"admin\":false"), "{me}");
}

#[tokio::test]
async fn each_mode_is_checked_at_startup_naming_the_variable() {
    use parlor_server::config::Config;
    let config = |vars: &[(&str, &str)]| {
        Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    };
    let err = config(&[("PARLOR_AUTH", "ldap")]).unwrap_err().to_string();
    assert!(
        err.contains("PARLOR_AUTH") && err.contains("none, local, oidc, proxy"),
        "{err}"
    );
    let err = config(&[
        ("PARLOR_AUTH", "oidc"),
        ("PARLOR_PUBLIC_URL", "https://chat.example.com"),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("PARLOR_OIDC_ISSUER"), "{err}");
    let err = config(&[("PARLOR_AUTH", "oidc")]).unwrap_err().to_string();
    assert!(err.contains("PARLOR_PUBLIC_URL"), "{err}");
    let err = config(&[("PARLOR_AUTH", "proxy")]).unwrap_err().to_string();
    assert!(err.contains("PARLOR_TRUSTED_PROXIES"), "{err}");
    let err = config(&[("PARLOR_ADMINS", "ada,b b")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("PARLOR_ADMINS"), "{err}");
    assert!(config(&[("PARLOR_AUTH", "local")]).is_ok());
    // Behind a proxy identities are compared exactly: an admin listed as `Ada` would make
    // `ada` the admin, another person. In local mode names are one in any case.
    let proxy = [
        ("PARLOR_AUTH", "proxy"),
        ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
    ];
    let err = config(&[proxy[0], proxy[1], ("PARLOR_ADMINS", "root,Ada")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("PARLOR_ADMINS") && err.contains("exactly"),
        "{err}"
    );
    assert!(config(&[
        proxy[0],
        proxy[1],
        ("PARLOR_ADMINS", "root,ada-99a563ab2f6e")
    ])
    .is_ok());
    assert!(config(&[("PARLOR_AUTH", "local"), ("PARLOR_ADMINS", "Ada")]).is_ok());
    // Accounts are never in memory only.
    let memory = crate::support::config_file(
        "[[histories]]\nid = \"default\"\nbackend = { type = \"memory\" }\n",
    );
    let config = config(&[
        ("PARLOR_AUTH", "local"),
        ("PARLOR_CONFIG", memory.path().to_str().unwrap()),
    ])
    .unwrap();
    let (agents, _) =
        parlor_server::config::agents::AgentCatalog::load_dir(&crate::support::agents_dir())
            .unwrap();
    let err = parlor_server::setup(&config, &agents)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("PARLOR_AUTH=local") && err.contains("memory"),
        "{err}"
    );
}

#[tokio::test]
async fn max_users_counts_accounts_with_a_live_session() {
    let server = local(&[]).await;
    server.services.limits.set_max_users(1);
    let ada = cookie_of(&server, "ada").await;
    let bob = cookie_of(&server, "bob").await;
    let reply = chat(
        &server,
        &Auth::Cookie(&ada),
        json!({ "message": "first in" }),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Ada again, from another device (her token): the same account, the same slot.
    let token = make_token(&server, &ada).await;
    let again = chat(
        &server,
        &Auth::Bearer(&token),
        json!({ "message": "me again" }),
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    let full = chat(&server, &Auth::Cookie(&bob), json!({ "message": "me too" })).await;
    assert_eq!(full.status, 503, "{}", full.body);
}

#[tokio::test]
async fn login_cookies_are_secure_behind_https_and_a_logged_in_login_page_moves_on() {
    let server = local(&[("PARLOR_PUBLIC_URL", "https://chat.example.com")]).await;
    let response = client()
        .post(server.url("/auth/login"))
        .json(&json!({ "username": "ada", "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    let set = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(set.contains("Secure") && set.contains("HttpOnly"), "{set}");
    let cookie = login_cookie(&response).unwrap();
    let page = client()
        .get(server.url("/login?next=%2Fchat%3Fagent%3Dgeneral"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 303);
    assert_eq!(page.headers()["location"], "/chat?agent=general");
}

#[tokio::test]
async fn without_accounts_the_account_api_says_there_are_none() {
    let server = TestServer::start(&[]).await;
    let (status, body) = get(&server, "/api/account", &Auth::None).await;
    assert_eq!(status, 404);
    assert!(body.contains("PARLOR_AUTH=none"), "{body}");
    let (status, _) = login_as(&server, "ada", PASSWORD).await;
    assert_eq!(status, 404);
    // And a login cookie or token means nothing: the browser cookie rules as before.
    let (status, _) = get(
        &server,
        "/chat?agent=general",
        &Auth::Cookie("parlor_login=x"),
    )
    .await;
    assert_eq!(status, 200);
}
