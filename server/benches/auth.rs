//! What accounts add to a request (`make bench`; results in docs/performance.md): the same
//! cheap API request (an unknown agent's debug report: routing, the middleware, a 404 body)
//! through Parlor's whole router, in one run, with `PARLOR_AUTH=none` and with
//! `PARLOR_AUTH=local` carrying a login cookie or a personal token, on a file history and on a
//! real `redis-server`; and the time of one login (`POST /auth/login`, Argon2id with OWASP's
//! parameters). Prints one JSON object per case: the median and p90 of each, and the median
//! of what authenticating added. Also the chat page of a 50-message conversation against
//! `/healthz` in both modes: the time to the page's first byte and its ratio to `/healthz`'s.

use axum::body::Body;
use axum::http::Request;
use fake_llm::redis_server::RedisServer;
use parlor_server::config::agents::AgentCatalog;
use parlor_server::config::Config;
use std::path::Path;
use std::time::Instant;
use tower::ServiceExt;

const REQUESTS: usize = 3000;
const WARM_UP: usize = 200;
const LOGINS: usize = 20;
const PASSWORD: &str = "a long passphrase";
const COOKIE_KEY: &str = "7061726c6f722062656e63686d61726b206b657920666f72206163636f756e74";
const PAGE_TURNS: usize = 25;
const PAGES: usize = 400;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

async fn router(
    vars: &[(&str, &str)],
    data: &Path,
) -> (axum::Router, std::sync::Arc<parlor_server::state::Services>) {
    let agents_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
    let mut env: Vec<(String, String)> = vec![
        ("PARLOR_AGENTS_DIR".into(), agents_dir.display().to_string()),
        ("PARLOR_DATA_DIR".into(), data.display().to_string()),
        ("PARLOR_RATE_LIMIT_CHAT".into(), "0".into()),
        ("PARLOR_RATE_LIMIT_PAGES".into(), "0".into()),
        ("PARLOR_RATE_LIMIT_LOGIN".into(), "0".into()),
        ("PARLOR_COOKIE_KEY".into(), COOKIE_KEY.into()),
        ("PARLOR_MIRROR_DELAY_MS".into(), "0".into()),
    ];
    env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = Config::from_vars(env).expect("config");
    let (agents, _) = AgentCatalog::load_dir(&config.agents_dir).expect("agents");
    let setup = parlor_server::setup(&config, &agents).await.expect("setup");
    let services = parlor_server::services(config, agents, setup);
    let options = leptos::config::LeptosOptions::builder()
        .output_name("parlor")
        .build();
    (parlor_server::router(options, services.clone()), services)
}

/// One request's time, in microseconds.
async fn once(app: &axum::Router, header: Option<(&str, &str)>) -> f64 {
    let mut request = Request::get("/api/chat/no-such-agent/debug");
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    let request = request.body(Body::empty()).expect("request");
    let started = Instant::now();
    let response = app.clone().oneshot(request).await.expect("response");
    let _ = axum::body::to_bytes(response.into_body(), 1 << 20).await;
    started.elapsed().as_secs_f64() * 1e6
}

struct Case {
    app: axum::Router,
    header: Option<(&'static str, String)>,
    times: Vec<f64>,
}

/// The cases measured in turns, request by request, so drift on a shared machine hits each
/// alike.
async fn interleaved(cases: &mut [Case]) {
    for i in 0..WARM_UP + REQUESTS {
        for case in cases.iter_mut() {
            let header = case.header.as_ref().map(|(k, v)| (*k, v.as_str()));
            let t = once(&case.app, header).await;
            if i >= WARM_UP {
                case.times.push(t);
            }
        }
    }
}

/// Time to a response's first byte, in microseconds.
async fn first_byte(app: &axum::Router, path: &str, cookie: Option<&str>) -> f64 {
    use futures::StreamExt;
    let mut request = Request::get(path);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let request = request.body(Body::empty()).expect("request");
    let started = Instant::now();
    let response = app.clone().oneshot(request).await.expect("response");
    let mut body = response.into_body().into_data_stream();
    let _ = body.next().await;
    let elapsed = started.elapsed().as_secs_f64() * 1e6;
    while body.next().await.is_some() {}
    elapsed
}

/// A conversation of `PAGE_TURNS` turns with the mirror, by `cookie`: its page's path.
async fn conversation(app: &axum::Router, cookie: &str) -> String {
    let mut session = String::new();
    for i in 0..PAGE_TURNS {
        let body = match session.is_empty() {
            true => format!("{{\"message\":\"message {i}\"}}"),
            false => format!("{{\"message\":\"message {i}\",\"session_id\":\"{session}\"}}"),
        };
        let request = Request::post("/api/chat/general")
            .header("content-type", "application/json")
            .header("cookie", cookie)
            .body(Body::from(body))
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("chat");
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
            .await
            .expect("body");
        let text = String::from_utf8_lossy(&bytes);
        if session.is_empty() {
            let at = text.find("\"session_id\":\"").expect("a session id") + 14;
            session = text[at..].split('"').next().expect("id").to_owned();
        }
    }
    format!("/chat?agent=general&session={session}")
}

/// The page's and `/healthz`'s first byte, alternating: their medians and ratio.
async fn page_ratio(app: &axum::Router, cookie: &str) -> (f64, f64, f64) {
    let path = conversation(app, cookie).await;
    let (mut page, mut health) = (Vec::new(), Vec::new());
    for i in 0..PAGES + 20 {
        let p = first_byte(app, &path, Some(cookie)).await;
        let h = first_byte(app, "/healthz", None).await;
        if i >= 20 {
            page.push(p);
            health.push(h);
        }
    }
    page.sort_by(f64::total_cmp);
    health.sort_by(f64::total_cmp);
    let (p, h) = (percentile(&page, 0.5), percentile(&health, 0.5));
    (p, h, p / h)
}

async fn logged_in(vars: &[(&str, &str)], data: &Path) -> (axum::Router, String, String, Vec<f64>) {
    let (app, services) = router(vars, data).await;
    let accounts = services.accounts.clone().expect("accounts on");
    accounts.add("ada", PASSWORD, false).await.expect("user");
    let mut logins = Vec::new();
    let mut cookie = String::new();
    for _ in 0..LOGINS {
        let request = Request::post("/auth/login")
            .header("content-type", "application/json")
            .body(Body::from(format!(
                "{{\"username\":\"ada\",\"password\":\"{PASSWORD}\"}}"
            )))
            .expect("request");
        let started = Instant::now();
        let response = app.clone().oneshot(request).await.expect("login");
        logins.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(response.status(), 204);
        cookie = response.headers()["set-cookie"]
            .to_str()
            .expect("cookie")
            .split(';')
            .next()
            .expect("pair")
            .to_owned();
    }
    let (token, _) = accounts.create_token("ada", "bench").await.expect("token");
    (app, cookie, format!("Bearer {token}"), logins)
}

async fn run(backend: &str, extra: &[(&str, &str)]) {
    let data = tempfile::tempdir().expect("data");
    let (none, _) = router(extra, data.path()).await;
    let key = parlor_server::ops::browser::CookieKey::parse(COOKIE_KEY).expect("key");
    let browser = format!(
        "parlor_session={}",
        key.sign("0123456789abcdef0123456789abcdef")
    );
    let (none_page, none_health, none_ratio) = page_ratio(&none, &browser).await;
    let mut vars = vec![("PARLOR_AUTH", "local")];
    vars.extend_from_slice(extra);
    let (local, cookie, bearer, mut logins) = logged_in(&vars, data.path()).await;
    let (local_page, local_health, local_ratio) = page_ratio(&local, &cookie).await;
    let mut cases = [
        Case {
            app: none,
            header: None,
            times: Vec::new(),
        },
        Case {
            app: local.clone(),
            header: Some(("cookie", cookie)),
            times: Vec::new(),
        },
        Case {
            app: local,
            header: Some(("authorization", bearer)),
            times: Vec::new(),
        },
    ];
    interleaved(&mut cases).await;
    let mut medians = Vec::new();
    for case in cases.iter_mut() {
        case.times.sort_by(f64::total_cmp);
        medians.push(percentile(&case.times, 0.5));
    }
    logins.sort_by(f64::total_cmp);
    println!(
        "{{\"bench\":\"auth\",\"backend\":\"{backend}\",\"requests\":{REQUESTS},\
         \"none_us_p50\":{:.1},\"none_us_p90\":{:.1},\
         \"cookie_us_p50\":{:.1},\"cookie_us_p90\":{:.1},\
         \"token_us_p50\":{:.1},\"token_us_p90\":{:.1},\
         \"cookie_added_us_p50\":{:.1},\"token_added_us_p50\":{:.1},\
         \"login_ms_p50\":{:.1},\"login_ms_max\":{:.1},\
         \"page_none_us_p50\":{none_page:.0},\"healthz_none_us_p50\":{none_health:.0},\"ratio_none\":{none_ratio:.2},\
         \"page_local_us_p50\":{local_page:.0},\"healthz_local_us_p50\":{local_health:.0},\"ratio_local\":{local_ratio:.2}}}",
        medians[0],
        percentile(&cases[0].times, 0.9),
        medians[1],
        percentile(&cases[1].times, 0.9),
        medians[2],
        percentile(&cases[2].times, 0.9),
        medians[1] - medians[0],
        medians[2] - medians[0],
        percentile(&logins, 0.5),
        logins.last().copied().unwrap_or_default(),
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        run("file", &[]).await;
        let redis = RedisServer::start().expect("redis-server");
        let config = tempfile::NamedTempFile::new().expect("config");
        std::fs::write(
            config.path(),
            format!(
                "[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\", key_prefix = \"bench:\" }}\n",
                redis.url()
            ),
        )
        .expect("write config");
        let path = config.path().display().to_string();
        run("redis", &[("PARLOR_CONFIG", path.as_str())]).await;
    });
}
