//! Tool servers written by others, through Parlor's MCP client: PyPI `mcp-server-time` over
//! stdio (in the project's `.tools/venv`, installed by `scripts/setup.sh test`) and npm
//! `@modelcontextprotocol/server-everything` over streamable HTTP and stdio.

mod approval;
mod budget;
mod chat;
mod hostile;
mod limits;
mod processes;
mod servers;
mod stop;
mod storage;
mod users;
mod whole;

use parlor_domain::message::ToolCall;
use parlor_server::tools::server::Status;
use parlor_server::tools::spec::{ServerSpec, ToolSpecs, Transport};
use parlor_server::tools::{Outcome, Recall, Tools};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// No built-in server in these tests.
struct NoRecall;

#[async_trait::async_trait]
impl Recall for NoRecall {
    async fn call(&self, _tool: &str, _arguments: parlor_server::tools::Arguments) -> Outcome {
        Outcome::error("no recall here")
    }
}

fn spec(id: &str, transport: Transport) -> ServerSpec {
    ServerSpec {
        id: id.into(),
        transport,
        timeout: Duration::from_secs(20),
        max_result_bytes: 65536,
        max_read_bytes: parlor_server::tools::spec::DEFAULT_MAX_READ_BYTES,
        max_result_items: parlor_server::tools::spec::DEFAULT_MAX_RESULT_ITEMS,
        confirm: parlor_domain::tool::Confirm::Never,
        allow: None,
        save: parlor_domain::context::Save::Always,
        scope: parlor_server::tools::spec::Scope::Shared,
    }
}

fn agent(tools: &[&str]) -> parlor_domain::Agent {
    let json = serde_json::json!({"agentId": "a", "name": "A", "chatSettings": {"tools": tools}});
    parlor_domain::Agent::from_json(&json.to_string())
        .unwrap()
        .0
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// Waits until server `id` reports `wanted` (by its state's name), up to 60 s.
async fn wait_for(tools: &Tools, id: &str, wanted: &str) -> Status {
    for _ in 0..600 {
        let status = tools
            .statuses()
            .into_iter()
            .find(|(s, _)| s == id)
            .unwrap()
            .1;
        let name = serde_json::to_value(&status).unwrap()["state"].clone();
        if name == wanted {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{id} never became {wanted}: {:?}", tools.statuses());
}

async fn run(tools: &Tools, agent: &parlor_domain::Agent, call: &ToolCall) -> Outcome {
    let offered = tools.offered(agent, None);
    tools
        .call(call, (&offered, None), &CancellationToken::new(), &NoRecall)
        .await
}

#[tokio::test]
async fn the_time_server_over_stdio_answers_and_every_fault_is_a_result() {
    // Its own local zone names its process among the other tests' time servers.
    let mut clock = servers::time_server();
    if let Transport::Stdio { args, .. } = &mut clock {
        *args.last_mut().unwrap() = "Etc/UTC".into();
    }
    let tools = Tools::start(ToolSpecs {
        servers: vec![spec("clock", clock)],
        ..Default::default()
    });
    wait_for(&tools, "clock", "ready").await;
    let clock = agent(&["clock"]);
    let names: Vec<String> = tools
        .offered(&clock, None)
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(
        names.contains(&"clock__get_current_time".to_owned()),
        "{names:?}"
    );
    let now = run(
        &tools,
        &clock,
        &call("clock__get_current_time", r#"{"timezone":"UTC"}"#),
    )
    .await;
    assert!(now.ok, "{now:?}");
    assert!(now.text().contains("UTC"), "{}", now.text());
    // Arguments that are not JSON, an unknown tool, a tool error: results, not failures.
    let bad = run(
        &tools,
        &clock,
        &call("clock__get_current_time", "{timezone"),
    )
    .await;
    assert!(
        !bad.ok && bad.text().contains("not valid JSON"),
        "{}",
        bad.text()
    );
    let unknown = run(&tools, &clock, &call("clock__fly", "{}")).await;
    assert!(!unknown.ok && unknown.text().contains("Unknown tool \"clock__fly\""));
    let zone = run(
        &tools,
        &clock,
        &call("clock__get_current_time", r#"{"timezone":"Mars/Base"}"#),
    )
    .await;
    assert!(!zone.ok, "{zone:?}");
    // One tool only, as the agent's list says.
    let one = agent(&["clock.convert_time"]);
    let names: Vec<String> = tools
        .offered(&one, None)
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["clock__convert_time"]);
    // Stopping ends the process: none of ours is left.
    let pids = servers::children_running("--local-timezone Etc/UTC");
    assert_eq!(pids.len(), 1, "one process per server");
    tools.shutdown().await;
    assert!(servers::children_running("--local-timezone Etc/UTC").is_empty());
}

#[tokio::test]
async fn a_server_that_cannot_start_is_reported_and_retried_without_stopping_anything() {
    let missing = Transport::Stdio {
        command: "/nonexistent/tool-server".into(),
        args: vec![],
        env: Default::default(),
    };
    let tools = Tools::start(ToolSpecs {
        servers: vec![spec("gone", missing)],
        ..Default::default()
    });
    let Status::Down { error, retry_secs } = wait_for(&tools, "gone", "down").await else {
        unreachable!()
    };
    assert!(error.contains("cannot start"), "{error}");
    assert!(retry_secs >= 1);
    assert!(tools.offered(&agent(&["gone"]), None).is_empty());
    tools.shutdown().await;
}

#[tokio::test]
async fn the_everything_server_over_http_images_timeouts_and_stop() {
    let everything = servers::Everything::start_http();
    let mut slow = spec("everything", everything.transport());
    slow.timeout = Duration::from_secs(2);
    slow.max_result_bytes = 100_000;
    let tools = Tools::start(ToolSpecs {
        servers: vec![slow],
        ..Default::default()
    });
    wait_for(&tools, "everything", "ready").await;
    let all = agent(&["everything"]);
    let echo = run(
        &tools,
        &all,
        &call("everything__echo", r#"{"message":"hi there"}"#),
    )
    .await;
    assert!(echo.ok && echo.text().contains("hi there"), "{echo:?}");
    let image = run(&tools, &all, &call("everything__get-tiny-image", "{}")).await;
    assert!(
        image.content.iter().any(|p| matches!(p, parlor_domain::block::Part::Image { url } if url.starts_with("data:image/png;base64,"))),
        "{:?}",
        image.text()
    );
    // A long operation past the timeout: an error result, the call cancelled.
    let long = r#"{"duration": 30, "steps": 3}"#;
    let late = run(
        &tools,
        &all,
        &call("everything__trigger-long-running-operation", long),
    )
    .await;
    assert!(
        !late.ok && late.text().contains("did not answer within 2 s"),
        "{}",
        late.text()
    );
    // Stop cancels a running call at once.
    let stop = CancellationToken::new();
    let offered = tools.offered(&all, None);
    let slow_call = call("everything__trigger-long-running-operation", long);
    let (stopped, _) = tokio::join!(
        tools.call(&slow_call, (&offered, None), &stop, &NoRecall),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            stop.cancel();
        }
    );
    assert!(
        !stopped.ok && stopped.text().contains("cancelled"),
        "{}",
        stopped.text()
    );
    assert!(
        stopped.ms < 2000,
        "stopped before the timeout: {} ms",
        stopped.ms
    );
    // A tool that errors on bad input.
    let sum = run(&tools, &all, &call("everything__get-sum", r#"{"a":"x"}"#)).await;
    assert!(!sum.ok, "{sum:?}");
    tools.shutdown().await;
}

#[tokio::test]
async fn a_result_over_max_result_bytes_is_cut_with_a_marker() {
    let everything = servers::Everything::start_http();
    let mut small = spec("everything", everything.transport());
    small.max_result_bytes = 40;
    let tools = Tools::start(ToolSpecs {
        servers: vec![small],
        ..Default::default()
    });
    wait_for(&tools, "everything", "ready").await;
    let long = format!(r#"{{"message":"{}"}}"#, "x".repeat(500));
    let echo = run(
        &tools,
        &agent(&["everything"]),
        &call("everything__echo", &long),
    )
    .await;
    assert!(echo.ok);
    assert!(echo.bytes > 500, "the size as received: {}", echo.bytes);
    let text = echo.text();
    assert!(text.ends_with(" bytes kept (max_result_bytes)]"), "{text}");
    assert!(text.contains("[result cut: 40 of "), "{text}");
    tools.shutdown().await;
}

#[tokio::test]
async fn a_server_answering_malformed_json_rpc_is_down_not_a_panic() {
    // A "server" that answers the initialization with a line that is not JSON-RPC.
    let garbage = Transport::Stdio {
        command: "sh".into(),
        args: vec![
            "-c".into(),
            "read line; echo '{\"jsonrpc\": \"2.0\", \"id\": oops}'; echo 'not json'; sleep 30"
                .into(),
        ],
        env: std::iter::once(("PATH".to_owned(), std::env::var("PATH").unwrap())).collect(),
    };
    let mut quick = spec("garbage", garbage);
    quick.timeout = Duration::from_secs(2);
    let tools = Tools::start(ToolSpecs {
        servers: vec![quick],
        ..Default::default()
    });
    let Status::Down { error, .. } = wait_for(&tools, "garbage", "down").await else {
        unreachable!()
    };
    assert!(!error.is_empty());
    let offered = tools.offered(&agent(&["garbage"]), None);
    assert!(offered.is_empty());
    tools.shutdown().await;
}

#[tokio::test]
async fn a_server_that_exits_mid_call_answers_an_error_and_is_started_again() {
    let tools = Tools::start(ToolSpecs {
        servers: vec![spec("everything", servers::Everything::stdio())],
        ..Default::default()
    });
    wait_for(&tools, "everything", "ready").await;
    let all = agent(&["everything"]);
    let offered = tools.offered(&all, None);
    let long = call(
        "everything__trigger-long-running-operation",
        r#"{"duration": 30, "steps": 3}"#,
    );
    let stop = CancellationToken::new();
    let (outcome, _) = tokio::join!(
        tools.call(&long, (&offered, None), &stop, &NoRecall),
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            for pid in servers::children_running("mcp-server-everything stdio") {
                servers::kill(pid);
            }
        }
    );
    assert!(
        !outcome.ok && outcome.text().contains("failed"),
        "{}",
        outcome.text()
    );
    wait_for(&tools, "everything", "down").await;
    wait_for(&tools, "everything", "ready").await;
    let echo = run(
        &tools,
        &all,
        &call("everything__echo", r#"{"message":"back"}"#),
    )
    .await;
    assert!(echo.ok, "{echo:?}");
    tools.shutdown().await;
    assert!(servers::children_running("mcp-server-everything stdio").is_empty());
}
