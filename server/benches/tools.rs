//! Parlor's own time per tool round (`make bench`; results in docs/performance.md), beyond
//! the model's and the tool's, on loopback: a loopback MCP echo server (npm server-everything,
//! over stdio and streamable HTTP) and the test upstream (in process).
//!
//! Printed per transport, medians and p99 of 1,000 runs after 50 warm-up runs, in ms:
//! - `direct`: the same `echo` call with the `rmcp` client alone;
//! - `parlor_call`: the call through Parlor's tools (`Tools::call`: the tool looked up, its
//!   arguments read, the timeout and Stop watched, the result read and cut);
//! - `upstream`: one streamed call of the test upstream with a plain `reqwest` client;
//! - `turn_plain`: a turn whose model answers at once (`turn::start` to the stored reply,
//!   on an in-memory history);
//! - `turn_round`: the same turn when the model first asks for one echo call;
//! - `round_own`: Parlor's own time in the round, measured inside the process by the turn
//!   itself (from the model's asking to the next call's request, less the wait for the
//!   server's answer; reported per round in the turn's debug report, `own_us`): a figure a
//!   difference of medians of noisy loopback calls cannot resolve;
//! - `round_own_first`: the same for the very first round of a fresh Parlor (new services,
//!   a tool server just started, nothing of the round's code run before in this process
//!   for the first transport): the cold case, one figure per run.

use parlor_domain::message::ToolCall;
use parlor_domain::ChatEvent;
use parlor_server::config::agents::AgentCatalog;
use parlor_server::config::Config;
use parlor_server::tools::spec::{ServerSpec, ToolSpecs, Transport};
use parlor_server::tools::{Arguments, Outcome, Recall, Tools};
use parlor_server::turn::{start, TurnInput};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const RUNS: usize = 1000;
const WARM_UP: usize = 50;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// Median and p99 of `f`'s run time, in ms.
async fn timed<F, Fut>(mut f: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::with_capacity(RUNS);
    for i in 0..WARM_UP + RUNS {
        let begin = Instant::now();
        f(i).await;
        if i >= WARM_UP {
            times.push(begin.elapsed().as_secs_f64() * 1000.0);
        }
    }
    times.sort_by(f64::total_cmp);
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn everything() -> String {
    root()
        .join("end2end/node_modules/.bin/mcp-server-everything")
        .display()
        .to_string()
}

fn path_env() -> std::collections::BTreeMap<String, String> {
    std::iter::once(("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())).collect()
}

/// server-everything over streamable HTTP on a free port (killed on drop).
struct HttpServer(std::process::Child, u16);

impl HttpServer {
    fn start() -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut child = std::process::Command::new(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("server-everything");
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return HttpServer(child, port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("server-everything did not listen");
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct NoRecall;

#[async_trait::async_trait]
impl Recall for NoRecall {
    async fn call(&self, _: &str, _: Arguments) -> Outcome {
        Outcome::error("none")
    }
}

fn spec(transport: Transport) -> ServerSpec {
    ServerSpec {
        id: "echo".into(),
        transport,
        timeout: Duration::from_secs(30),
        max_result_bytes: 65536,
        max_read_bytes: parlor_server::tools::spec::DEFAULT_MAX_READ_BYTES,
        max_result_items: parlor_server::tools::spec::DEFAULT_MAX_RESULT_ITEMS,
        confirm: parlor_domain::tool::Confirm::Never,
        allow: Some(vec!["echo".into()]),
        save: parlor_domain::context::Save::Always,
        scope: parlor_server::tools::spec::Scope::Shared,
    }
}

/// The direct rmcp client of `transport`.
async fn direct_client(
    transport: &Transport,
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::ServiceExt;
    match transport {
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).env_clear().envs(env);
            let (child, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn");
            ().serve(child).await.expect("serve")
        }
        Transport::Http { url, .. } => {
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let t = rmcp::transport::StreamableHttpClientTransport::from_config(config);
            ().serve(t).await.expect("serve")
        }
        Transport::Builtin => unreachable!(),
    }
}

async fn wait_ready(tools: &Tools) {
    for _ in 0..600 {
        if tools
            .statuses()
            .iter()
            .all(|(_, s)| s.to_string().starts_with("ready"))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not ready: {:?}", tools.statuses());
}

/// `direct` and `parlor_call` for one transport.
async fn calls(name: &str, transport: Transport) -> (f64, f64, f64, f64) {
    let client = direct_client(&transport).await;
    let arguments: Arguments = serde_json::from_str(r#"{"message":"hello"}"#).expect("json");
    let direct = timed(|_| {
        let params =
            rmcp::model::CallToolRequestParams::new("echo").with_arguments(arguments.clone());
        let peer = client.peer().clone();
        async move {
            peer.call_tool(params).await.expect("echo");
        }
    })
    .await;
    let _ = client.cancel().await;
    let tools = Tools::start(ToolSpecs {
        servers: vec![spec(transport)],
        ..Default::default()
    });
    wait_ready(&tools).await;
    let json =
        serde_json::json!({"agentId": "b", "name": "B", "chatSettings": {"tools": ["echo"]}});
    let agent = parlor_domain::Agent::from_json(&json.to_string())
        .expect("agent")
        .0;
    let offered = tools.offered(&agent, None);
    let call = ToolCall {
        id: "c".into(),
        name: "echo__echo".into(),
        arguments: r#"{"message":"hello"}"#.into(),
    };
    let stop = CancellationToken::new();
    let parlor = timed(|_| {
        let (tools, call, offered, stop) = (&tools, &call, &offered, &stop);
        async move {
            let outcome = tools.call(call, (offered, None), stop, &NoRecall).await;
            assert!(outcome.ok, "{outcome:?}");
        }
    })
    .await;
    tools.shutdown().await;
    eprintln!("{name}: direct {direct:?}, parlor {parlor:?}");
    (direct.0, direct.1, parlor.0, parlor.1)
}

/// One streamed call of the test upstream with a plain client.
async fn upstream(base: &str) -> (f64, f64) {
    let http = reqwest::Client::new();
    let body = serde_json::json!({"model": "m", "stream": true,
        "messages": [{"role": "user", "content": "hello"}]});
    timed(|_| {
        let (http, body) = (&http, &body);
        async move {
            let text = http
                .post(format!("{base}/chat/completions"))
                .json(body)
                .send()
                .await
                .expect("upstream")
                .text()
                .await
                .expect("body");
            assert!(text.contains("[DONE]"));
        }
    })
    .await
}

/// A turn through Parlor's pipeline with `message`, to its stored reply: its median and p99
/// in ms, and those of Parlor's own time per tool round (when the turn made any).
async fn turns(
    transport: Transport,
    base: &str,
    data: &Path,
    message: &str,
) -> ((f64, f64), Option<(f64, f64)>, Option<f64>) {
    let dir = tempfile::tempdir_in(data).expect("dir");
    let config = dir.path().join("parlor.toml");
    let declared = match &transport {
        Transport::Stdio { command, args, .. } => format!("command = {command:?}\nargs = {args:?}"),
        Transport::Http { url, .. } => format!("url = {url:?}"),
        Transport::Builtin => unreachable!(),
    };
    std::fs::write(
        &config,
        // An in-memory history: the turn's writes cost no fsync, whose time would hide the
        // round's (the model call overlaps the write of the user's message).
        format!(
            "[[histories]]\nid = \"default\"\nbackend = {{ type = \"memory\" }}\n\n\
             [[mcp_servers]]\nid = \"echo\"\n{declared}\nallow = [\"echo\"]\n"
        ),
    )
    .expect("config");
    let agents = dir.path().join("agents/bench");
    std::fs::create_dir_all(&agents).expect("agents");
    let template = serde_json::json!({"agentId": "bench", "name": "Bench",
        "chatSettings": {"tools": ["echo"], "historyPolicy": "none"}});
    std::fs::write(agents.join("template.json"), template.to_string()).expect("template");
    let vars: Vec<(String, String)> = [
        (
            "PARLOR_DATA_DIR",
            dir.path().join("data").display().to_string(),
        ),
        ("PARLOR_CONFIG", config.display().to_string()),
        (
            "PARLOR_AGENTS_DIR",
            dir.path().join("agents").display().to_string(),
        ),
        ("OPENAI_BASE_URL", base.to_owned()),
        ("PARLOR_MODEL", "fake".to_owned()),
        ("PARLOR_RATE_LIMIT_CHAT", "0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let config = Config::from_vars(vars).expect("config");
    let (catalog, _) = AgentCatalog::load_dir(&config.agents_dir).expect("agents");
    let setup = parlor_server::setup(&config, &catalog)
        .await
        .expect("setup");
    let services = parlor_server::services(config, catalog, setup);
    wait_ready(&services.tools).await;
    let agent = services.agents.get("bench").expect("agent");
    let own = std::sync::Mutex::new(Vec::new());
    let first = std::sync::Mutex::new(None);
    let result = timed(|i| {
        let (services, agent, own, first) = (&services, &agent, &own, &first);
        async move {
            let input = TurnInput {
                agent: agent.clone(),
                session_id: None,
                cookie_session: None,
                new_conversation: true,
                browser: None,
                message: Some(message.to_owned()),
                context: Vec::new(),
                url_policy: None,
                url_length: None,
                admin_token: None,
                edit: None,
                user: None,
            };
            let mut running = start(services, input).await.expect("turn");
            let session = running.meta.session_id.clone();
            let mut done = false;
            while let Some(event) = running.events.recv().await {
                match event {
                    ChatEvent::Error { message } => panic!("turn failed: {message}"),
                    ChatEvent::ToolResult(r) => assert!(r.ok, "{r:?}"),
                    ChatEvent::Done(_) => done = true,
                    _ => {}
                }
            }
            assert!(done);
            if (1..WARM_UP).contains(&i) {
                return;
            }
            let history = services.histories.get("default").expect("history");
            let id = parlor_domain::ConversationId::parse(&session).expect("id");
            let info = history
                .store
                .info(&id)
                .await
                .expect("info")
                .expect("stored");
            let rounds = info.last_turn.and_then(|t| t.tools).map(|t| t.own_us);
            if i == 0 {
                let cold = rounds.as_ref().and_then(|r| r.first());
                *first.lock().expect("first") = cold.map(|&us| us as f64 / 1000.0);
                return;
            }
            own.lock().expect("own").extend(
                rounds
                    .unwrap_or_default()
                    .iter()
                    .map(|&us| us as f64 / 1000.0),
            );
        }
    })
    .await;
    services.tools.shutdown().await;
    let mut own = own.into_inner().expect("own");
    own.sort_by(f64::total_cmp);
    let own = (!own.is_empty()).then(|| (percentile(&own, 0.5), percentile(&own, 0.99)));
    (result, own, first.into_inner().expect("first"))
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let data = tempfile::tempdir().expect("temp dir");
    runtime.block_on(async {
        let fake = fake_llm::FakeLlm::start().await.expect("fake upstream");
        let base = fake.base_url();
        let http = HttpServer::start();
        let transports = [
            ("stdio", Transport::Stdio {
                command: everything(),
                args: vec!["stdio".into()],
                env: path_env(),
            }),
            ("http", Transport::Http {
                url: format!("http://127.0.0.1:{}/mcp", http.1),
                headers: Default::default(),
            }),
        ];
        let up = upstream(&base).await;
        for (name, transport) in transports {
            let (direct, direct_p99, parlor, parlor_p99) = calls(name, transport.clone()).await;
            let ask = r#"[call:echo__echo {"message":"hello"}]"#;
            // The rounds first: the first one is the cold case.
            let (round, own, cold) = turns(transport.clone(), &base, data.path(), ask).await;
            let (plain, _, _) = turns(transport, &base, data.path(), "hello").await;
            let (own, own_p99) = own.expect("the turns made a round");
            let cold = cold.expect("the first turn made a round");
            println!(
                "{{\"transport\": \"{name}\", \"direct_ms_p50\": {direct:.3}, \"direct_ms_p99\": {direct_p99:.3}, \"parlor_call_ms_p50\": {parlor:.3}, \"parlor_call_ms_p99\": {parlor_p99:.3}, \"upstream_ms_p50\": {:.3}, \"turn_plain_ms_p50\": {:.3}, \"turn_round_ms_p50\": {:.3}, \"turn_round_ms_p99\": {:.3}, \"round_own_ms_p50\": {own:.3}, \"round_own_ms_p99\": {own_p99:.3}, \"round_own_first_ms\": {cold:.3}}}",
                up.0, plain.0, round.0, round.1
            );
        }
    });
}
