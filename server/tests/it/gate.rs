//! The attack suite, generated from the gate's route table: every route, each method it
//! answers and one it does not, in every auth mode, with each kind of credential and each
//! way of spelling its path, sent as raw HTTP (a client library would normalize the path).
//! What a refused request gets back holds no page, no agent's settings and no conversation,
//! sets no cookie and takes no session slot; what the table admits is served.

use crate::support::TestServer;
use parlor_server::table::{Access, Kind, Limit, Matcher, Route, Verb, When, TABLE};
use std::sync::atomic::{AtomicU32, Ordering};

/// Conversation text only its owner may ever read.
const ADA_SECRET: &str = "SECRET-ada-7f3a";
/// Conversation text of a conversation without an owner (an import's, an MCP dialog's).
const ORPHAN_SECRET: &str = "SECRET-orphan-91c2";
/// The shipped `general` agent's system prompt starts so (its settings are agent data).
const AGENT_DATA: &str = "\"systemPrompt\"";
pub const ADMIN_TOKEN: &str = "admin-token-for-the-attack-suite";
pub const MCP_TOKEN: &str = "mcp-token-for-the-attack-suite";

/// An answer as read off the wire.
pub struct Raw {
    pub status: u16,
    /// The head, lower case.
    pub head: String,
    pub body: String,
}

impl std::fmt::Debug for Raw {
    /// The head and the start of the body (a page would fill the screen).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut: String = self.body.chars().take(400).collect();
        write!(f, "{} {:?} body: {cut:?}", self.status, self.head)
    }
}

impl Raw {
    fn sets_cookie(&self) -> bool {
        self.head.contains("\r\nset-cookie:")
    }
}

/// Sends one request exactly as written: `target` is not resolved or re-encoded.
pub async fn raw(
    server: &TestServer,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &str,
) -> Raw {
    let host = server.addr.to_string();
    raw_to(server, &host, (method, target), headers, body).await
}

/// [`raw`], naming Parlor `host` in the `Host` header.
pub async fn raw_to(
    server: &TestServer,
    host: &str,
    (method, target): (&str, &str),
    headers: &[(String, String)],
    body: &str,
) -> Raw {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut request =
        format!("{method} {target} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || !matches!(method, "GET" | "HEAD") {
        request.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    // A stream that the gate let through may stay open (an event stream): what came in a
    // few seconds is enough to judge it.
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut answer),
    )
    .await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(if read.is_err() { 999 } else { 0 });
    Raw {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    None,
    Local,
    /// Local accounts, with sign-up on.
    Signup,
    Oidc,
    Proxy,
}

/// A credential a request may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cred {
    Nothing,
    /// A login cookie (or, accounts off, a browser cookie) Parlor never issued.
    ForgedCookie,
    /// A personal token Parlor never issued.
    ForgedToken,
    /// A login that expired.
    Expired,
    /// A login that was logged out.
    Ended,
    /// Ada's login (accounts off: her browser's cookie): the owner of [`ADA_SECRET`].
    Ada,
    /// Bob's login (accounts off: another browser's cookie): another account's.
    Bob,
    /// Bob's personal token.
    BobToken,
    /// An admin's login.
    Root,
    /// The operator's admin token.
    AdminToken,
    /// `PARLOR_MCP_TOKEN`.
    McpToken,
    /// The trusted proxy naming bob (proxy mode).
    ProxyBob,
}

const ALL_CREDS: [Cred; 12] = [
    Cred::Nothing,
    Cred::ForgedCookie,
    Cred::ForgedToken,
    Cred::Expired,
    Cred::Ended,
    Cred::Ada,
    Cred::Bob,
    Cred::BobToken,
    Cred::Root,
    Cred::AdminToken,
    Cred::McpToken,
    Cred::ProxyBob,
];

/// A server in one mode, its accounts, credentials and conversations.
struct Target {
    mode: Mode,
    server: TestServer,
    headers: std::collections::HashMap<&'static str, Vec<(String, String)>>,
    ada_conversation: String,
    orphan: String,
    matcher: Matcher,
    server_fn: String,
}

/// Every request comes through the trusted proxy (loopback) from a client address of its
/// own, so the per-address counts (wrong admin tokens) never mix two requests' answers.
fn next_client() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

impl Target {
    async fn start(mode: Mode) -> Target {
        Target::start_limited(mode, "0").await
    }

    /// [`Target::start`] with `per_client` requests a client may make to each limiter
    /// (`0`: no limits).
    async fn start_limited(mode: Mode, per_client: &str) -> Target {
        let mut vars: Vec<(&str, &str)> = vec![
            ("PARLOR_RATE_LIMIT_PAGES", per_client),
            ("PARLOR_RATE_LIMIT_CHAT", per_client),
            ("PARLOR_RATE_LIMIT_LOGIN", per_client),
            ("PARLOR_RATE_LIMIT_SIGNUP", per_client),
            ("PARLOR_TRUSTED_PROXIES", "127.0.0.1"),
            ("PARLOR_ADMIN_TOKEN", ADMIN_TOKEN),
            ("PARLOR_MCP_TOKEN", MCP_TOKEN),
            ("PARLOR_ADMINS", "root"),
        ];
        match mode {
            Mode::None => {}
            Mode::Local => vars.push(("PARLOR_AUTH", "local")),
            Mode::Signup => vars.extend([("PARLOR_AUTH", "local"), ("PARLOR_SIGNUP", "true")]),
            Mode::Proxy => vars.push(("PARLOR_AUTH", "proxy")),
            Mode::Oidc => vars.extend([
                ("PARLOR_AUTH", "oidc"),
                // A stub issuer nobody answers at: the gate needs no provider.
                ("PARLOR_OIDC_ISSUER", "http://127.0.0.1:9/"),
                ("PARLOR_OIDC_CLIENT_ID", "parlor"),
                ("PARLOR_PUBLIC_URL", "http://parlor.test"),
            ]),
        }
        let server = TestServer::start(&vars).await;
        let mut headers = std::collections::HashMap::new();
        let cookie = |value: String| vec![("cookie".to_owned(), value)];
        let bearer = |value: &str| vec![("authorization".to_owned(), format!("Bearer {value}"))];
        headers.insert("nothing", vec![]);
        headers.insert("admin-token", bearer(ADMIN_TOKEN));
        headers.insert("mcp-token", bearer(MCP_TOKEN));
        headers.insert(
            "forged-token",
            bearer(&format!("parlor_pat_{}", "cd".repeat(32))),
        );
        match server.services.accounts.clone() {
            None => {
                headers.insert(
                    "forged-cookie",
                    cookie(format!("parlor_session={}", "ab".repeat(16))),
                );
                headers.insert(
                    "ada",
                    cookie(crate::support::browser("ada0ada0ada0ada0ada0ada0ada0ada0")),
                );
                headers.insert(
                    "bob",
                    cookie(crate::support::browser("b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0")),
                );
            }
            Some(accounts) => {
                for (name, admin) in [("ada", false), ("bob", false), ("root", true)] {
                    accounts
                        .add(name, crate::accounts::PASSWORD, admin)
                        .await
                        .unwrap();
                }
                let account = |name: &'static str| {
                    let accounts = accounts.clone();
                    async move {
                        accounts
                            .store()
                            .user(&parlor_domain::account::UserName::parse(name).unwrap())
                            .await
                            .unwrap()
                            .unwrap()
                    }
                };
                let now = parlor_server::store::now_ms();
                let login = |name: &'static str, at: i64| {
                    let accounts = accounts.clone();
                    async move {
                        let (secret, _) = accounts
                            .start_login(&account(name).await, at)
                            .await
                            .unwrap();
                        format!("parlor_login={secret}")
                    }
                };
                headers.insert(
                    "forged-cookie",
                    cookie(format!("parlor_login={}", "ab".repeat(32))),
                );
                headers.insert("expired", cookie(login("bob", 0).await));
                let ended = login("bob", now).await;
                accounts
                    .end_login(ended.trim_start_matches("parlor_login="))
                    .await
                    .unwrap();
                headers.insert("ended", cookie(ended));
                headers.insert("ada", cookie(login("ada", now).await));
                headers.insert("bob", cookie(login("bob", now).await));
                headers.insert("root", cookie(login("root", now).await));
                let (token, _) = accounts.create_token("bob", "attack suite").await.unwrap();
                headers.insert("bob-token", bearer(&token));
                headers.insert(
                    "proxy-bob",
                    vec![("x-forwarded-user".to_owned(), "bob".to_owned())],
                );
            }
        }
        // Ada's conversation, made as she would make it.
        let ada = headers["ada"].clone();
        let ada_headers: Vec<(&str, &str)> =
            ada.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let reply = server
            .chat_request(
                "general",
                "",
                serde_json::json!({ "message": ADA_SECRET }),
                None,
                &ada_headers,
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let ada_conversation = reply.session_id();
        // A conversation without an owner, as an import or an MCP dialog makes one.
        let orphan = crate::support::ownerless(&server, "imported-orphan", ORPHAN_SECRET).await;
        let accounts_on = mode != Mode::None;
        let matcher = Matcher::new(|when| match when {
            When::Always | When::Mcp => true,
            When::Accounts => accounts_on,
            When::Oidc => mode == Mode::Oidc,
            When::Signup => mode == Mode::Signup,
        });
        let server_fn = leptos::server_fn::axum::server_fn_paths()
            .map(|(path, _)| path.to_owned())
            .find(|p| p.contains("load_chat"))
            .expect("the chat page's data function is registered");
        Target {
            mode,
            server,
            headers,
            ada_conversation,
            orphan,
            matcher,
            server_fn,
        }
    }

    fn accounts_on(&self) -> bool {
        self.mode != Mode::None
    }

    /// The credentials that mean something in this mode.
    fn creds(&self) -> Vec<Cred> {
        ALL_CREDS
            .into_iter()
            .filter(|c| match c {
                Cred::Expired | Cred::Ended | Cred::BobToken | Cred::Root => self.accounts_on(),
                Cred::ProxyBob => self.mode == Mode::Proxy,
                _ => true,
            })
            .collect()
    }

    fn headers_of(&self, cred: Cred) -> Vec<(String, String)> {
        let key = match cred {
            Cred::Nothing => "nothing",
            Cred::ForgedCookie => "forged-cookie",
            Cred::ForgedToken => "forged-token",
            Cred::Expired => "expired",
            Cred::Ended => "ended",
            Cred::Ada => "ada",
            Cred::Bob => "bob",
            Cred::BobToken => "bob-token",
            Cred::Root => "root",
            Cred::AdminToken => "admin-token",
            Cred::McpToken => "mcp-token",
            Cred::ProxyBob => "proxy-bob",
        };
        let mut headers = self.headers[key].clone();
        headers.push(("x-forwarded-for".into(), next_client()));
        headers
    }

    /// `route`'s path with its parameters filled: the conversation is Ada's for reads, one
    /// that does not exist for changes (the suite must not delete what it checks).
    fn fill(&self, route: &Route, verb: Verb) -> String {
        self.fill_with(route, verb, &self.ada_conversation)
    }

    /// The paths of `route` to try: each conversation it can read (Ada's, and the one
    /// without an owner).
    fn paths(&self, route: &Route, verb: Verb) -> Vec<String> {
        let reads_one = verb == Verb::Get
            && (route.path.contains("{session_id}")
                || matches!(route.path, "/chat" | "/api/chat/{agent_id}/debug"));
        let mut paths = vec![self.fill(route, verb)];
        if reads_one {
            paths.push(self.fill_with(route, verb, &self.orphan));
        }
        paths
    }

    fn fill_with(&self, route: &Route, verb: Verb, read: &str) -> String {
        let conversation = match verb {
            Verb::Get => read,
            _ => "no-such-conversation",
        };
        let path = route
            .path
            .replace("{agent_id}", "general")
            .replace("{session_id}", conversation)
            .replace("{message_id}", "m1")
            .replace("{call_id}", "c1")
            .replace("{id}", "t1")
            .replace("{*file}", "parlor.js")
            .replace("{server_fn}", self.server_fn.trim_start_matches("/api/"));
        match route.path {
            "/chat" => format!("/chat?agent=general&session={conversation}&debug=true"),
            "/api/chat/{agent_id}/debug" => format!("{path}?session_id={conversation}"),
            _ => path,
        }
    }

    /// Whether the table admits `cred` to `route` in this mode (before the route's own
    /// checks).
    fn admits(&self, route: &Route, cred: Cred) -> bool {
        let user = matches!(
            cred,
            Cred::Ada | Cred::Bob | Cred::BobToken | Cred::Root | Cred::ProxyBob
        );
        match route.access {
            // The public routes that identify nobody (files, liveness) ignore every
            // credential; the others refuse a personal token that is not one.
            Access::Public => {
                route.limit == Limit::None || !self.accounts_on() || cred != Cred::ForgedToken
            }
            // A personal token is for the API, never the pages and their forms.
            Access::Login => {
                !self.accounts_on()
                    || (user
                        && !(cred == Cred::BobToken
                            && matches!(route.kind, Kind::Page | Kind::ServerFn)))
            }
            Access::Admin => matches!(cred, Cred::AdminToken | Cred::Root),
            Access::McpToken => cred == Cred::McpToken,
        }
    }

    /// Whether the route exists in this mode (the suite's servers turn MCP on).
    fn exists(&self, route: &Route) -> bool {
        match route.when {
            When::Always | When::Mcp => true,
            When::Accounts => self.accounts_on(),
            When::Oidc => self.mode == Mode::Oidc,
            When::Signup => self.mode == Mode::Signup,
        }
    }
}

/// The JSON body a state-changing request carries (from Parlor's own page).
fn own_page(target: &Target) -> Vec<(String, String)> {
    // With a public URL, that is the page's origin; else the address it was reached at.
    let origin = match target.mode {
        Mode::Oidc => "http://parlor.test".to_owned(),
        _ => format!("http://{}", target.server.addr),
    };
    vec![
        ("origin".into(), origin),
        ("content-type".into(), "application/json".into()),
    ]
}

/// What must hold of every answer to `cred`: no conversation it may not read, and, when
/// refused, nothing at all.
fn check(target: &Target, what: &str, cred: Cred, refused: bool, answer: &Raw) {
    let text = format!("{}\n{}", answer.head, answer.body);
    if cred != Cred::Ada {
        assert!(
            !text.contains(ADA_SECRET),
            "{what}: Ada's conversation leaked: {answer:?}"
        );
    }
    let sees_orphans = !target.accounts_on() || matches!(cred, Cred::Root | Cred::AdminToken);
    if !sees_orphans {
        assert!(
            !text.contains(ORPHAN_SECRET),
            "{what}: an orphan leaked: {answer:?}"
        );
    }
    if refused {
        assert!(
            !answer.sets_cookie(),
            "{what}: a refusal set a cookie: {answer:?}"
        );
        let lower = answer.body.to_ascii_lowercase();
        assert!(
            !lower.contains("<html") && !lower.contains("<!doctype"),
            "{what}: a refusal rendered a page: {answer:?}"
        );
        assert!(!text.contains(AGENT_DATA), "{what}: agent data: {answer:?}");
        assert!(
            !text.contains(ADA_SECRET) && !text.contains(ORPHAN_SECRET),
            "{what}: {answer:?}"
        );
    }
}

/// A refusal the gate makes for access: a page's GET goes to the login page, the rest 401
/// or 403 (an admin route for a user), or 404 for a route that does not exist.
fn is_refusal(route: &Route, verb: Verb, answer: &Raw) -> bool {
    let to_login = route.kind == Kind::Page
        && verb == Verb::Get
        && answer.status == 303
        && answer.head.contains("\r\nlocation: /login?next=");
    to_login || matches!(answer.status, 401 | 403)
}

async fn attack(mode: Mode) -> usize {
    let target = Target::start(mode).await;
    let live = || async { target.server.services.live.count().await.unwrap() };
    let mut sent = 0;
    for route in TABLE {
        let allowed: Vec<Verb> = route.verbs.to_vec();
        let refused_verb = Verb::ALL
            .into_iter()
            .find(|v| !allowed.contains(v))
            .unwrap();
        for verb in allowed.iter().copied().chain([refused_verb]) {
            for (cred, path) in target
                .creds()
                .into_iter()
                .flat_map(|c| target.paths(route, verb).into_iter().map(move |p| (c, p)))
            {
                // Logging out a login the suite still uses would end it (each has its own
                // test).
                let ends_logins = matches!(route.path, "/auth/logout" | "/account/logout-others");
                if ends_logins && verb == Verb::Post && target.admits(route, cred) {
                    continue;
                }
                let what = format!("{mode:?} {} {path} as {cred:?}", verb.name());
                let mut headers = target.headers_of(cred);
                let body = match verb {
                    Verb::Get => "",
                    _ => {
                        headers.extend(own_page(&target));
                        "{}"
                    }
                };
                let before = live().await;
                let answer = raw(&target.server, verb.name(), &path, &headers, body).await;
                sent += 1;
                if !target.exists(route) {
                    assert_eq!(answer.status, 404, "{what}: {answer:?}");
                    assert!(answer.body.contains("no such page"), "{what}: {answer:?}");
                    check(&target, &what, cred, true, &answer);
                    assert_eq!(live().await, before, "{what}: took a session slot");
                    continue;
                }
                if verb == refused_verb {
                    assert_eq!(answer.status, 405, "{what}: {answer:?}");
                    check(&target, &what, cred, true, &answer);
                    assert_eq!(live().await, before, "{what}: took a session slot");
                    continue;
                }
                // The one refusal past the gate a credential the table admits may get: a
                // personal token may not make tokens.
                let token_makes_token = cred == Cred::BobToken
                    && route.path.ends_with("/account/tokens")
                    && verb == Verb::Post
                    && answer.status == 403;
                if target.admits(route, cred) {
                    assert!(
                        !is_refusal(route, verb, &answer)
                            || route.access == Access::Public
                            || token_makes_token,
                        "{what}: the table admits this, the gate refused: {answer:?}"
                    );
                    assert_ne!(answer.status, 405, "{what}: not served: {answer:?}");
                    assert!(
                        !(answer.status == 404 && answer.body.is_empty()),
                        "{what}: no router serves this declared route: {answer:?}"
                    );
                    check(&target, &what, cred, false, &answer);
                } else {
                    assert!(
                        is_refusal(route, verb, &answer),
                        "{what}: the table refuses this, the gate let it in: {answer:?}"
                    );
                    check(&target, &what, cred, true, &answer);
                    assert_eq!(live().await, before, "{what}: took a session slot");
                }
                // HEAD is answered as GET is, without a body, and refused alike (but by
                // `/mcp`, a protocol's endpoint whose SDK answers HEAD with 405: the gate
                // lets it through only with the MCP token, as GET).
                if verb == Verb::Get && route.path != "/mcp" {
                    let before = live().await;
                    let head = raw(&target.server, "HEAD", &path, &headers, "").await;
                    sent += 1;
                    let what = format!("{what}, as HEAD");
                    assert_eq!(
                        head.status, answer.status,
                        "{what}: {head:?} / GET {answer:?}"
                    );
                    assert!(head.body.is_empty(), "{what}: {head:?}");
                    if !target.admits(route, cred) {
                        check(&target, &what, cred, true, &head);
                        assert_eq!(live().await, before, "{what}: took a session slot");
                    }
                }
                // A browser's state change from another site, with a login it would send
                // (accounts off: also without any, a page driving a Parlor on the user's
                // machine); with a public URL, a plain-http page of its name is another site.
                let browser = matches!(cred, Cred::Ada | Cred::Root)
                    || (target.mode == Mode::None && cred == Cred::Nothing);
                if verb.changes_state() && route.csrf && browser {
                    let others: &[&str] = match target.mode {
                        Mode::Oidc => &["http://evil.test", "https://parlor.test"],
                        _ => &["http://evil.test"],
                    };
                    for other in others {
                        let mut foreign = target.headers_of(cred);
                        foreign.push(("origin".into(), (*other).into()));
                        foreign.push(("content-type".into(), "application/json".into()));
                        let answer = raw(&target.server, verb.name(), &path, &foreign, "{}").await;
                        sent += 1;
                        let what = format!("{what} from {other}");
                        if target.admits(route, cred) {
                            assert_eq!(answer.status, 403, "{what}: {answer:?}");
                        }
                        check(&target, &what, cred, true, &answer);
                    }
                }
                // Under a name that is not Parlor's (DNS rebinding), nothing it protects.
                if verb == route.verbs[0] && cred == Cred::Ada {
                    let (host, request) = ("evil.test:80", (verb.name(), path.as_str()));
                    let body = if verb.changes_state() { "{}" } else { "" };
                    let answer = raw_to(&target.server, host, request, &headers, body).await;
                    sent += 1;
                    let what = format!("{what} named {host}");
                    let open = route.access == Access::Public && route.limit == Limit::None;
                    assert_eq!(answer.status == 421, !open, "{what}: {answer:?}");
                    check(&target, &what, cred, !open, &answer);
                    // The same name in an absolute-form target, beside Parlor's own Host.
                    let own = target.server.addr.to_string();
                    let absolute = format!("http://evil.test{path}");
                    let request = (verb.name(), absolute.as_str());
                    let answer = raw_to(&target.server, &own, request, &headers, body).await;
                    sent += 1;
                    let what = format!("{what}, as {absolute}");
                    assert_eq!(answer.status == 421, !open, "{what}: {answer:?}");
                }
            }
        }
        sent += spellings(&target, route).await;
    }
    sent += unknown_paths(&target).await;
    sent
}

/// Each way of spelling a route's path that is not the path: what is not refused as a
/// spelling is a path the table names or a plain 404.
async fn spellings(target: &Target, route: &Route) -> usize {
    let verb = route.verbs[0];
    let filled = target.fill(route, verb);
    let (path, query) = match filled.split_once('?') {
        Some((path, query)) => (path.to_owned(), format!("?{query}")),
        None => (filled.clone(), String::new()),
    };
    let bad = [
        format!("/auth/..{path}"),
        format!("/auth/%2e%2e{path}"),
        format!("/auth/%2E%2E{path}"),
        format!("/auth/.%2e{path}"),
        format!("/mcp/%2e%2e{path}"),
        format!("/pkg/..{path}"),
        format!("/pkg/%2e%2e{path}"),
        format!("/.{path}"),
        format!("{path}/.."),
        format!("/{path}"),
        format!("/auth/{path}"),
        format!("/auth\\..\\..{path}"),
        format!("/auth%5c..%5c..{path}"),
        format!("/auth%2f..%2f..{path}"),
        format!("{path}%00"),
        format!("{path}%0d%0aset-cookie:%20x=y"),
    ];
    let other = [
        format!("{path}/"),
        format!("/auth{path}"),
        format!("/mcp{path}"),
        format!("/pkg{path}"),
        format!("/api{path}"),
        path.to_ascii_uppercase(),
    ];
    let mut sent = 0;
    for cred in [Cred::Nothing, Cred::Ada] {
        for (spelling, must_be_bad) in bad
            .iter()
            .map(|s| (s, true))
            .chain(other.iter().map(|s| (s, false)))
        {
            let target_path = format!("{spelling}{query}");
            let mut headers = target.headers_of(cred);
            let body = match verb {
                Verb::Get => "",
                _ => {
                    headers.extend(own_page(target));
                    "{}"
                }
            };
            let what = format!(
                "{:?} {} {target_path} (for {}) as {cred:?}",
                target.mode,
                verb.name(),
                route.path
            );
            let before = target.server.services.live.count().await.unwrap();
            let answer = raw(&target.server, verb.name(), &target_path, &headers, body).await;
            sent += 1;
            if must_be_bad {
                assert_eq!(answer.status, 400, "{what}: {answer:?}");
            } else if target.matcher.find(spelling).is_none() {
                assert!(matches!(answer.status, 400 | 404), "{what}: {answer:?}");
            } else {
                // Another declared route: the main loop checks it as itself.
                continue;
            }
            check(target, &what, cred, true, &answer);
            let after = target.server.services.live.count().await.unwrap();
            assert_eq!(after, before, "{what}: took a session slot");
        }
    }
    sent
}

/// Paths no route names: a plain 404, whatever the method and credential.
async fn unknown_paths(target: &Target) -> usize {
    let mut sent = 0;
    for path in [
        "/nothing",
        "/chat/general",
        "/auth/x",
        "/mcp/x",
        "/x.php",
        "/api/nothing",
        "/api/chat",
        "/account",
        "/.env",
        "/readyz/",
    ] {
        for cred in [Cred::Nothing, Cred::Ada, Cred::AdminToken] {
            for method in ["GET", "HEAD", "POST", "OPTIONS"] {
                let answer = raw(&target.server, method, path, &target.headers_of(cred), "").await;
                sent += 1;
                let what = format!("{:?} {method} {path} as {cred:?}", target.mode);
                assert_eq!(answer.status, 404, "{what}: {answer:?}");
                check(target, &what, cred, true, &answer);
            }
        }
    }
    sent
}

/// Each route's limiter is the table's: with one request allowed per client and limiter,
/// a route's second request from one address is a 429 (with `Retry-After`) exactly when the
/// table names a limiter for it; a route without one is never limited. Each route is asked
/// from an address of its own, with no credential (limits are counted before access).
async fn limits_hold(mode: Mode) -> usize {
    let target = Target::start_limited(mode, "1").await;
    let mut checked = 0;
    for route in TABLE.iter().filter(|r| target.exists(r)) {
        let verb = route.verbs[0];
        let path = target.fill(route, verb);
        let mut headers = target.headers_of(Cred::Nothing);
        let body = match verb {
            Verb::Get => "",
            _ => {
                headers.extend(own_page(&target));
                "{}"
            }
        };
        let what = format!("{mode:?} {} {path} ({:?})", verb.name(), route.limit);
        let first = raw(&target.server, verb.name(), &path, &headers, body).await;
        assert_ne!(first.status, 429, "{what}: the first request: {first:?}");
        let second = raw(&target.server, verb.name(), &path, &headers, body).await;
        let limited = matches!(
            route.limit,
            Limit::Pages | Limit::Chat | Limit::Login | Limit::Signup
        );
        if limited {
            assert_eq!(second.status, 429, "{what}: not limited: {second:?}");
            assert!(
                second.head.contains("\r\nretry-after:"),
                "{what}: {second:?}"
            );
        } else {
            assert_ne!(second.status, 429, "{what}: limited: {second:?}");
        }
        checked += 1;
    }
    checked
}

#[tokio::test]
async fn each_routes_limiter_is_the_tables_without_accounts() {
    assert!(limits_hold(Mode::None).await > 10);
}

#[tokio::test]
async fn each_routes_limiter_is_the_tables_with_local_accounts() {
    assert!(limits_hold(Mode::Local).await > 10);
}

#[tokio::test]
async fn each_routes_limiter_is_the_tables_with_sign_up_on() {
    assert!(limits_hold(Mode::Signup).await > 10);
}

#[tokio::test]
async fn the_table_holds_with_sign_up_on() {
    let sent = attack(Mode::Signup).await;
    assert!(sent > 500, "{sent}");
}

#[tokio::test]
async fn the_table_holds_without_accounts() {
    let sent = attack(Mode::None).await;
    assert!(sent > 500, "{sent}");
}

#[tokio::test]
async fn the_table_holds_with_local_accounts() {
    let sent = attack(Mode::Local).await;
    assert!(sent > 500, "{sent}");
}

#[tokio::test]
async fn the_table_holds_with_openid_accounts() {
    let sent = attack(Mode::Oidc).await;
    assert!(sent > 500, "{sent}");
}

#[tokio::test]
async fn the_table_holds_behind_a_proxy() {
    let sent = attack(Mode::Proxy).await;
    assert!(sent > 500, "{sent}");
}

#[test]
fn every_route_a_router_serves_is_in_the_table() {
    // Mounting a path the table does not name stops the server at startup.
    use parlor_server::table::Mount;
    let undeclared = std::panic::catch_unwind(|| {
        axum::Router::<()>::new().mount("/undeclared", axum::routing::get(|| async { "" }))
    });
    assert!(undeclared.is_err());
    let declared = std::panic::catch_unwind(|| {
        axum::Router::<()>::new().mount("/healthz", axum::routing::get(|| async { "" }))
    });
    assert!(declared.is_ok());
}
