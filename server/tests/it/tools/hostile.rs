//! Tool servers that misbehave on purpose (`testing/hostile-mcp.py`, over stdio and HTTP):
//! answers larger than Parlor reads, answers that never end, floods of content items, calls
//! that hang, tool lists a provider would refuse, names that clash. None of them may hold a
//! turn past its timeout, grow Parlor's memory past its bounds, or break the next turn.

use super::{agent, call, run, spec, wait_for};
use parlor_server::tools::server::Status;
use parlor_server::tools::spec::{ToolSpecs, Transport};
use parlor_server::tools::Tools;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testing/hostile-mcp.py")
}

/// The hostile server over stdio; what it receives is logged to `log`.
pub fn stdio(log: &std::path::Path, tools: &str) -> Transport {
    let mut env = std::collections::BTreeMap::new();
    env.insert("PATH".into(), std::env::var("PATH").unwrap_or_default());
    env.insert("HOSTILE_LOG".into(), log.display().to_string());
    env.insert("HOSTILE_TOOLS".into(), tools.into());
    Transport::Stdio {
        command: "python3".into(),
        // The log's path names the process among those of other tests.
        args: vec![script().display().to_string(), log.display().to_string()],
        env,
    }
}

/// The hostile server over streamable HTTP, on a free port.
pub struct HostileHttp {
    child: Child,
    pub url: String,
}

impl HostileHttp {
    pub fn start(log: &std::path::Path) -> HostileHttp {
        use std::io::BufRead;
        let mut child = Command::new("python3")
            .arg(script())
            .args(["--http", "0"])
            .env("HOSTILE_LOG", log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().rsplit(' ').next().unwrap().to_owned();
        HostileHttp {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    pub fn transport(&self) -> Transport {
        Transport::Http {
            url: self.url.clone(),
            headers: Default::default(),
        }
    }
}

impl Drop for HostileHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The messages the server logged, as JSON.
fn received(log: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The cancellations the server received.
fn cancellations(log: &std::path::Path) -> Vec<serde_json::Value> {
    received(log)
        .into_iter()
        .filter(|m| m["method"] == "notifications/cancelled")
        .collect()
}

async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..100 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}");
}

/// Every hostile answer of one transport: the call ends with a tool error saying why, and
/// the server answers again afterwards.
async fn hostile_answers(transport: Transport, log: &std::path::Path, restarts: bool) {
    let mut hostile = spec("hostile", transport);
    hostile.timeout = Duration::from_secs(3);
    hostile.max_read_bytes = 1024 * 1024;
    let tools = Tools::start(ToolSpecs {
        servers: vec![hostile],
        ..Default::default()
    });
    wait_for(&tools, "hostile", "ready").await;
    let all = agent(&["hostile"]);
    let echo = run(&tools, &all, &call("hostile__echo", r#"{"text": "hello"}"#)).await;
    assert!(echo.ok && echo.text() == "hello", "{echo:?}");

    for ask in [r#"{"mb": 40}"#, r#"{"mb": 2}"#] {
        let huge = run(&tools, &all, &call("hostile__huge", ask)).await;
        assert!(!huge.ok, "{huge:?}");
        let text = huge.text();
        assert!(
            !text.contains("did not answer within"),
            "not a timeout: {text}"
        );
        if restarts {
            assert!(
                text.contains("larger than 1048576 bytes (max_read_bytes)"),
                "{text}"
            );
            wait_for(&tools, "hostile", "down").await;
            wait_for(&tools, "hostile", "ready").await;
        }
    }
    let endless = run(&tools, &all, &call("hostile__endless", "{}")).await;
    assert!(!endless.ok, "{endless:?}");
    assert!(
        !endless.text().contains("did not answer within"),
        "{}",
        endless.text()
    );
    if restarts {
        wait_for(&tools, "hostile", "down").await;
        wait_for(&tools, "hostile", "ready").await;
    }

    let items = run(&tools, &all, &call("hostile__items", r#"{"count": 5000}"#)).await;
    assert!(!items.ok);
    assert!(
        items.text().contains("5,000 content items; at most 64"),
        "{}",
        items.text()
    );

    // A call that never answers is cancelled at the server, with the reason.
    let before = cancellations(log).len();
    let hung = run(&tools, &all, &call("hostile__hang", "{}")).await;
    assert!(
        hung.text().contains("did not answer within 3 s"),
        "{}",
        hung.text()
    );
    eventually("the server got notifications/cancelled", || {
        cancellations(log).len() > before
    })
    .await;
    let cancelled = cancellations(log).pop().unwrap();
    assert_eq!(cancelled["params"]["reason"], "no answer within 3 s");
    // The request it cancels is the hung call's.
    let asked = received(log)
        .into_iter()
        .rfind(|m| m["params"]["name"] == "hang")
        .unwrap();
    assert_eq!(cancelled["params"]["requestId"], asked["id"]);

    let after = run(
        &tools,
        &all,
        &call("hostile__echo", r#"{"text": "still here"}"#),
    )
    .await;
    assert!(after.ok && after.text() == "still here", "{after:?}");
    tools.shutdown().await;
}

#[tokio::test]
async fn a_hostile_stdio_server_cannot_flood_or_hold_a_call() {
    let log = tempfile::NamedTempFile::new().unwrap();
    hostile_answers(stdio(log.path(), ""), log.path(), true).await;
}

#[tokio::test]
async fn a_hostile_http_server_cannot_flood_or_hold_a_call() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let server = HostileHttp::start(log.path());
    hostile_answers(server.transport(), log.path(), false).await;
}

#[tokio::test]
async fn a_server_whose_calls_keep_timing_out_is_started_again() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mine = log.path().display().to_string();
    let pids = || super::servers::children_running(&mine);
    let (before, after) = keeps_timing_out(stdio(log.path(), ""), pids).await;
    assert_eq!((before.len(), after.len()), (1, 1), "one process");
    assert_ne!(before, after, "a new process");
}

#[tokio::test]
async fn an_http_server_whose_calls_keep_timing_out_is_marked_down_and_connected_again() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let server = HostileHttp::start(log.path());
    keeps_timing_out(server.transport(), || ()).await;
}

#[tokio::test]
async fn a_failed_call_tells_the_user_and_the_model_no_address() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let server = HostileHttp::start(log.path());
    let url = match server.transport() {
        Transport::Http { url, .. } => url,
        _ => unreachable!(),
    };
    let tools = Tools::start(ToolSpecs {
        servers: vec![spec("hostile", server.transport())],
        ..Default::default()
    });
    wait_for(&tools, "hostile", "ready").await;
    // The server goes away while Parlor holds its session.
    drop(server);
    let all = agent(&["hostile"]);
    let failed = run(&tools, &all, &call("hostile__echo", r#"{"text": "x"}"#)).await;
    assert!(!failed.ok);
    let said = format!("{failed:?}");
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    assert!(
        !said.contains("127.0.0.1") && !said.contains(port),
        "{said}"
    );
    assert!(said.contains("hostile"), "it names the server: {said}");
    tools.shutdown().await;
}

/// A server over `transport` whose calls time out three times in a row: it is marked down
/// (what `/readyz` shows), with a wait before it is tried again, then started or connected
/// again, and answers. `up` is asked while it is up, before and after.
async fn keeps_timing_out<T>(transport: Transport, up: impl Fn() -> T) -> (T, T) {
    let is_stdio = matches!(transport, Transport::Stdio { .. });
    let mut hostile = spec("hostile", transport);
    hostile.timeout = Duration::from_secs(1);
    let tools = Tools::start(ToolSpecs {
        servers: vec![hostile],
        ..Default::default()
    });
    wait_for(&tools, "hostile", "ready").await;
    let before = up();
    let all = agent(&["hostile"]);
    for _ in 0..3 {
        let hung = run(&tools, &all, &call("hostile__hang", "{}")).await;
        assert!(!hung.ok);
    }
    let Status::Down { error, retry_secs } = wait_for(&tools, "hostile", "down").await else {
        unreachable!()
    };
    assert!(
        error.contains("stopped answering (3 calls in a row timed out)"),
        "{error}"
    );
    assert!(retry_secs >= 1, "tried again after a wait");
    let shown = tools.statuses().into_iter().find(|(id, _)| id == "hostile");
    let shown = shown.map(|(_, s)| s.to_string()).unwrap_or_default();
    assert!(shown.contains("stopped answering"), "{shown}");
    wait_for(&tools, "hostile", "ready").await;
    let after = up();
    let echo = run(&tools, &all, &call("hostile__echo", r#"{"text": "back"}"#)).await;
    assert!(echo.ok, "{echo:?} (stdio: {is_stdio})");
    tools.shutdown().await;
    (before, after)
}

#[tokio::test]
async fn tool_lists_are_checked_bounded_and_refreshed_and_clashes_refused() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let tools = Tools::start(ToolSpecs {
        servers: vec![
            spec("bad", stdio(log.path(), "bad")),
            spec("clash", stdio(log.path(), "clash")),
            spec("grows", stdio(log.path(), "")),
        ],
        ..Default::default()
    });
    wait_for(&tools, "bad", "ready").await;
    let bad = agent(&["bad"]);
    let offered = tools.offered(&bad, None);
    assert_eq!(offered.len(), 128, "at most 128 tools");
    let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
    assert!(!names.contains(&"bad__no_items") && !names.contains(&"bad__not_object"));
    let warnings = tools
        .warnings()
        .into_iter()
        .find(|(id, _)| id == "bad")
        .unwrap()
        .1;
    let all = warnings.join("\n");
    assert!(
        all.contains(
            "no_items: dropped: its input schema has an array without items at /properties/urls"
        ),
        "{all}"
    );
    assert!(all.contains("not_object: dropped"), "{all}");
    assert!(
        // 10 tools, 2 refused, 200 more: 128 offered, 82 left out.
        all.contains("82 more: dropped: a server may offer at most 128 tools"),
        "{all}"
    );
    let report = tools.reports(&bad, None);
    assert_eq!(report[0].warnings, warnings, "the debug panel shows them");

    let Status::Down { error, .. } = wait_for(&tools, "clash", "down").await else {
        unreachable!()
    };
    assert!(
        error.contains(
            "tools clash.read.file and clash.read_file would both be called \"clash__read_file\""
        ),
        "{error}"
    );

    wait_for(&tools, "grows", "ready").await;
    let grows = agent(&["grows"]);
    assert!(!tools
        .offered(&grows, None)
        .iter()
        .any(|t| t.name == "grows__extra"));
    let grown = run(&tools, &grows, &call("grows__grow", "{}")).await;
    assert!(grown.ok);
    eventually("the list was read again after list_changed", || {
        tools
            .offered(&grows, None)
            .iter()
            .any(|t| t.name == "grows__extra")
    })
    .await;
    tools.shutdown().await;
}

#[tokio::test]
async fn endless_list_pages_and_an_agents_many_servers_are_bounded() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let tools = Tools::start(ToolSpecs {
        servers: vec![
            spec("paged", stdio(log.path(), "pages")),
            spec("bad", stdio(log.path(), "bad")),
            spec("worse", stdio(log.path(), "bad")),
        ],
        ..Default::default()
    });
    // A server that always names a next page: 16 pages are read, and the admin is told.
    wait_for(&tools, "paged", "ready").await;
    let paged = tools.offered(&agent(&["paged"]), None);
    let names: Vec<&str> = paged.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 16, "{names:?}");
    assert_eq!((names[0], names[15]), ("paged__page_0", "paged__page_15"));
    let warnings = tools.warnings();
    let said = warnings.iter().find(|(id, _)| id == "paged").unwrap();
    assert!(
        said.1.iter().any(|w| w.contains("at most 16 pages")),
        "{said:?}"
    );
    // Two servers of 128 tools each: an agent given both is offered 128, the first's.
    wait_for(&tools, "bad", "ready").await;
    wait_for(&tools, "worse", "ready").await;
    let both = tools.offered(&agent(&["bad", "worse"]), None);
    assert_eq!(both.len(), 128);
    assert!(both.iter().all(|t| t.name.starts_with("bad__")));
    tools.shutdown().await;
}

/// A folder with one agent `tooled` that may use `servers`.
pub fn agent_folder(servers: &[&str]) -> tempfile::TempDir {
    let agents = tempfile::tempdir().unwrap();
    let template = serde_json::json!({
        "agentId": "tooled", "name": "Tooled",
        "chatSettings": {"tools": servers, "historyPolicy": "all"},
    });
    let folder = agents.path().join("tooled");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("template.json"), template.to_string()).unwrap();
    agents
}

/// A Parlor configured by `config`, whose agent `tooled` may use `servers`, with `env`
/// besides; the files it reads are kept while it runs.
async fn with_tool_servers(
    config: tempfile::NamedTempFile,
    servers: &[&str],
    env: &[(&str, &str)],
) -> (
    crate::support::TestServer,
    (tempfile::NamedTempFile, tempfile::TempDir),
) {
    let agents = agent_folder(servers);
    let vars = tool_vars(config.path(), agents.path());
    let server = crate::support::TestServer::start(&with(&vars, env)).await;
    (server, (config, agents))
}

/// The variables that point Parlor at `config` and the agents' folder `agents`.
pub fn tool_vars(
    config: &std::path::Path,
    agents: &std::path::Path,
) -> [(&'static str, String); 2] {
    [
        ("PARLOR_CONFIG", config.display().to_string()),
        ("PARLOR_AGENTS_DIR", agents.display().to_string()),
    ]
}

/// `vars`, then `env`, as a server's variables.
pub fn with<'a>(
    vars: &'a [(&'static str, String)],
    env: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut all: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend_from_slice(env);
    all
}

/// The peak resident memory of process `pid`, in MiB.
fn peak_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib / 1024
}

const ADMIN: &str = "hostile-test-admin-token-0123456789";

/// Waits until `/readyz` says server `id` is ready.
fn ready(parlor: &crate::support::process::Running, id: &str) {
    for _ in 0..300 {
        let body: serde_json::Value = reqwest::blocking::Client::new()
            .get(parlor.url("/readyz"))
            .header("x-parlor-admin-token", ADMIN)
            .send()
            .unwrap()
            .json()
            .unwrap();
        if body["tool_servers"][id]
            .as_str()
            .is_some_and(|s| s.starts_with("ready"))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{id} never became ready");
}

/// One turn of agent `tooled`; the event stream as text.
fn turn(parlor: &crate::support::process::Running, message: &str) -> String {
    reqwest::blocking::Client::new()
        .post(parlor.url("/api/chat/tooled"))
        .header(
            "cookie",
            crate::support::browser("0123456789abcdef0123456789abcdef"),
        )
        .json(&serde_json::json!({"message": message}))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

#[test]
fn floods_over_stdio_and_http_leave_parlor_under_256_mib_and_the_next_turn_answers() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let http = HostileHttp::start(log.path());
    let Transport::Stdio { args, .. } = stdio(log.path(), "") else {
        unreachable!()
    };
    let config = crate::support::config_file(&format!(
        "[[mcp_servers]]\nid = \"flood\"\ncommand = \"python3\"\nargs = {args:?}\ntimeout_secs = 20\n\n\
         [[mcp_servers]]\nid = \"floodweb\"\nurl = {:?}\ntimeout_secs = 20\n",
        http.url
    ));
    let agents = agent_folder(&["flood", "floodweb"]);
    let data = tempfile::tempdir().unwrap();
    let (config_path, agents_path) = (
        config.path().display().to_string(),
        agents.path().display().to_string(),
    );
    let parlor = crate::support::process::start(
        &[
            ("PARLOR_CONFIG", &config_path),
            ("PARLOR_AGENTS_DIR", &agents_path),
            ("PARLOR_ADMIN_TOKEN", ADMIN),
        ],
        data.path(),
    );
    let pid = parlor.child.id();
    let floods = [
        (
            "flood",
            r#"flood__huge {"mb": 40}"#,
            "larger than 8388608 bytes",
        ),
        ("flood", r#"flood__endless {}"#, "larger than 8388608 bytes"),
        ("floodweb", r#"floodweb__huge {"mb": 40}"#, "failed"),
        ("floodweb", r#"floodweb__endless {}"#, "failed"),
        // A JSON body (not an event) that never ends.
        ("floodweb", r#"floodweb__endless {"json": true}"#, "failed"),
        (
            "floodweb",
            r#"floodweb__items {"count": 1000000}"#,
            "failed",
        ),
        (
            "floodweb",
            r#"floodweb__items {"count": 250000}"#,
            "250,000 content items",
        ),
        (
            "floodweb",
            r#"floodweb__items_sse {"count": 250000}"#,
            "250,000 content items",
        ),
        (
            "flood",
            r#"flood__items {"count": 250000}"#,
            "250,000 content items",
        ),
    ];
    let mut peaks = Vec::new();
    for (server, ask, why) in floods {
        ready(&parlor, server);
        let events = turn(&parlor, &format!("/tool {ask}"));
        assert!(events.contains("event: tool_result"), "{ask}: {events}");
        assert!(
            events.contains(r#""ok":false"#) && events.contains(why),
            "{ask}: {events}"
        );
        assert!(
            events.contains("event: done"),
            "the turn ended: {ask}: {events}"
        );
        peaks.push(peak_mib(pid));
    }
    ready(&parlor, "flood");
    let after = turn(&parlor, r#"/tool flood__echo {"text": "calm again"}"#);
    assert!(
        after.contains("calm again") && after.contains("event: done"),
        "{after}"
    );
    let peak = peak_mib(pid);
    eprintln!("peak resident memory after each flood: {peaks:?} MiB; at the end {peak} MiB");
    assert!(peak < 256, "Parlor's peak memory was {peak} MiB");
}

/// Whether `pid` has exited (gone, or a zombie).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
        state.starts_with('Z')
    })
}

/// Parlor with `server` (a `[[mcp_servers]]` entry's lines after its id) as `busy`, killed
/// with SIGKILL while `ask` runs: the server's process does not outlive it.
fn killed_mid_call(entry: &str, ask: &str, needle: &str) {
    let config = crate::support::config_file(&format!(
        "[[mcp_servers]]\nid = \"busy\"\n{entry}\ntimeout_secs = 300\n"
    ));
    let agents = agent_folder(&["busy"]);
    let data = tempfile::tempdir().unwrap();
    let (config_path, agents_path) = (
        config.path().display().to_string(),
        agents.path().display().to_string(),
    );
    let mut parlor = crate::support::process::start(
        &[
            ("PARLOR_CONFIG", &config_path),
            ("PARLOR_AGENTS_DIR", &agents_path),
            ("PARLOR_ADMIN_TOKEN", ADMIN),
        ],
        data.path(),
    );
    ready(&parlor, "busy");
    let servers: Vec<u32> = super::servers::children_running(needle)
        .into_iter()
        .filter(|&p| super::servers::descends(p, parlor.child.id()))
        .collect();
    assert_eq!(servers.len(), 1, "{servers:?}");
    let url = parlor.url("/api/chat/tooled");
    let ask = format!("/tool {ask}");
    let asked = std::thread::spawn(move || {
        let _ = reqwest::blocking::Client::new()
            .post(url)
            .header(
                "cookie",
                crate::support::browser("0123456789abcdef0123456789abcdef"),
            )
            .json(&serde_json::json!({"message": ask}))
            .send()
            .and_then(|r| r.text());
    });
    // The call is running (the stream has started and the server has it) when Parlor dies.
    std::thread::sleep(Duration::from_millis(1500));
    parlor.kill();
    let _ = asked.join();
    let since = std::time::Instant::now();
    while !gone(servers[0]) {
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "the busy server outlived Parlor"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_busy_stdio_server_dies_with_parlor_when_parlor_is_killed() {
    // A server busy in a call, not reading its input: only the kernel can end it.
    let log = tempfile::NamedTempFile::new().unwrap();
    let Transport::Stdio { args, .. } = stdio(log.path(), "") else {
        unreachable!()
    };
    let needle = log.path().display().to_string();
    killed_mid_call(
        &format!("command = \"python3\"\nargs = {args:?}"),
        "busy__busy {}",
        &needle,
    );
    // server-everything's long-running operation.
    let Transport::Stdio { command, args, .. } = super::servers::Everything::stdio() else {
        unreachable!()
    };
    killed_mid_call(
        &format!("command = {command:?}\nargs = {args:?}"),
        r#"busy__trigger-long-running-operation {"duration": 600, "steps": 600}"#,
        "mcp-server-everything",
    );
}

#[tokio::test]
async fn a_turn_waits_for_a_starting_server_and_readyz_says_not_ready_meanwhile() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let config = crate::support::config_file(&format!(
        "[[mcp_servers]]\nid = \"slow\"\ncommand = \"sh\"\n\
         args = [\"-c\", \"sleep 2; exec python3 {} {}\"]\ntimeout_secs = 10\n",
        script().display(),
        log.path().display()
    ));
    let (server, _files) = with_tool_servers(config, &["slow"], &[]).await;
    let (status, body) = server.get("/readyz", None).await;
    assert_eq!(status, 503, "not ready while a tool server starts: {body}");
    let reply = server
        .chat(
            "tooled",
            serde_json::json!({"message": r#"/tool slow__echo {"text": "waited"}"#}),
        )
        .await;
    let result = reply.events.iter().find_map(|e| match e {
        parlor_domain::ChatEvent::ToolResult(r) => Some(r.clone()),
        _ => None,
    });
    let result = result.expect("the tool was offered and called");
    assert!(result.ok && result.preview.contains("waited"), "{result:?}");
    let (status, _) = server.get("/readyz", None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_turn_without_a_servers_tools_says_so_without_its_error() {
    // A server that can never start: every turn goes on without it, and says so.
    let config = crate::support::config_file(
        "[[mcp_servers]]\nid = \"broken\"\ncommand = \"/nonexistent/secret-tool-server\"\n",
    );
    let (server, _files) = with_tool_servers(config, &["broken"], &[]).await;
    for turn in ["first", "second"] {
        let reply = server
            .chat("tooled", serde_json::json!({"message": turn}))
            .await;
        let said: Vec<_> = reply
            .events
            .iter()
            .filter_map(|e| match e {
                parlor_domain::ChatEvent::Unavailable(u) => Some(u.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(said.len(), 1, "{turn}: {}", reply.body);
        assert_eq!(said[0].server, "broken");
        // Why, in words for a user: the command (or a URL) stays with admins.
        assert!(said[0].why.contains("starting it again"), "{:?}", said[0]);
        assert!(!reply.body.contains("nonexistent"), "{}", reply.body);
        assert!(
            reply.text().contains(turn),
            "the turn was answered: {}",
            reply.body
        );
    }
    // The debug panel, which anyone who may chat reads, says it is down, not why.
    let (status, debug) = server.get("/api/chat/tooled/debug", None).await;
    assert_eq!(status, 200, "{debug}");
    assert!(debug.contains("\"state\":\"down"), "{debug}");
    assert!(!debug.contains("nonexistent"), "{debug}");
}

#[tokio::test]
async fn readyz_tells_an_admin_which_tools_were_dropped_and_why() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let log_path = log.path().display().to_string();
    let config = crate::support::config_file(&format!(
        "[[mcp_servers]]\nid = \"bad\"\ncommand = \"python3\"\nargs = [{:?}, {:?}]\n\
         env = {{ HOSTILE_LOG = {:?}, HOSTILE_TOOLS = \"bad\" }}\n",
        script().display().to_string(),
        log_path,
        log_path,
    ));
    let (server, _files) =
        with_tool_servers(config, &["bad"], &[("PARLOR_ADMIN_TOKEN", ADMIN)]).await;
    let as_admin = || async {
        let response = server
            .http
            .get(server.url("/readyz"))
            .header("x-parlor-admin-token", ADMIN)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json::<serde_json::Value>().await.unwrap())
    };
    let mut ready = None;
    for _ in 0..300 {
        let (status, body) = as_admin().await;
        if status == 200 {
            ready = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = ready.expect("ready once the server has started");
    let warnings = body["tool_warnings"]["bad"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings for bad: {body}"))
        .iter()
        .filter_map(|w| w.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        warnings.contains(
            "no_items: dropped: its input schema has an array without items at /properties/urls"
        ),
        "{warnings}"
    );
    assert!(
        warnings.contains("82 more: dropped: a server may offer at most 128 tools"),
        "{warnings}"
    );
    // Anyone else learns only whether Parlor is ready.
    let (status, body) = server.get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (200, r#"{"ready":true}"#));
}
