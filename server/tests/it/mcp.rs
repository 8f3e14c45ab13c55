//! `parlor mcp --stdio` and `/mcp`: the history store's tools through a real MCP client
//! (rmcp's, over stdio and streamable HTTP), each rule of the spec, and the web chat and the
//! MCP server seeing each other's writes; raw JSON-RPC lines only for what no client sends.

use crate::support::TestServer;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

/// `parlor mcp --stdio` through rmcp's client (a real MCP client: initialization, requests,
/// the server's own requests answered): what every tool test uses.
pub(crate) struct Mcp {
    runtime: tokio::runtime::Runtime,
    client: Option<rmcp::service::RunningService<rmcp::RoleClient, ()>>,
}

impl Drop for Mcp {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.cancel());
        }
    }
}

impl Mcp {
    /// Starts `parlor mcp --stdio` on `data` and initializes the session.
    pub(crate) fn start(data: &Path, vars: &[(&str, &str)]) -> Mcp {
        use rmcp::ServiceExt;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut command = crate::support::process::command(vars, data);
        command.args(["mcp", "--stdio"]).stderr(Stdio::inherit());
        let client = runtime.block_on(async {
            let transport =
                rmcp::transport::TokioChildProcess::new(tokio::process::Command::from(command))
                    .unwrap();
            ().serve(transport).await.unwrap()
        });
        let server = client
            .peer_info()
            .unwrap()
            .server_info
            .as_ref()
            .unwrap()
            .name
            .clone();
        assert_eq!(server, "parlor-history");
        Mcp {
            runtime,
            client: Some(client),
        }
    }

    fn client(&self) -> &rmcp::service::RunningService<rmcp::RoleClient, ()> {
        self.client.as_ref().unwrap()
    }

    /// The tools as listed, as JSON.
    fn tools(&mut self) -> Value {
        let tools = self
            .runtime
            .block_on(self.client().list_all_tools())
            .unwrap();
        serde_json::to_value(tools).unwrap()
    }

    /// Calls a tool: whether it failed, and its one text item.
    fn call(&mut self, tool: &str, arguments: Value) -> (bool, String) {
        let Value::Object(arguments) = arguments else {
            panic!("arguments must be an object");
        };
        let params =
            rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let result = self
            .runtime
            .block_on(self.client().call_tool(params))
            .unwrap();
        let reply = serde_json::to_value(&result).unwrap();
        let content = reply["content"]
            .as_array()
            .unwrap_or_else(|| panic!("{reply}"));
        assert_eq!(content.len(), 1, "one text item: {reply}");
        (
            result.is_error == Some(true),
            content[0]["text"].as_str().unwrap().to_owned(),
        )
    }

    pub(crate) fn ok(&mut self, tool: &str, arguments: Value) -> Value {
        let (failed, text) = self.call(tool, arguments);
        assert!(!failed, "{tool}: {text}");
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    fn error(&mut self, tool: &str, arguments: Value) -> String {
        let (failed, text) = self.call(tool, arguments);
        assert!(failed, "{tool} should fail: {text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["ok"], false);
        body["error"].as_str().unwrap().to_owned()
    }
}

/// `parlor mcp --stdio` spoken to line by line, for what no real client sends: malformed
/// input, a process killed in the middle of a call.
struct Lines {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Lines {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Lines {
    /// Starts `parlor mcp --stdio` on `data` and initializes the session.
    fn start(data: &Path) -> Lines {
        let mut command = crate::support::process::command(&[], data);
        command.args(["mcp", "--stdio"]).stdin(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut lines = Lines {
            child,
            stdin,
            stdout,
        };
        lines.send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}})
            .to_string(),
        );
        assert_eq!(lines.read()["id"], 1);
        lines.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        lines
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }
}

#[test]
fn the_tools_are_listed_with_their_parameters() {
    let data = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(data.path(), &[]);
    let tools = mcp.tools();
    let mut names: Vec<String> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "history_clear",
            "history_fetch",
            "history_get_dialog_detail",
            "history_get_messages_since",
            "history_list_backups",
            "history_list_dialogs",
            "history_restore_backup",
            "history_save",
            "history_set_summary",
            "history_stats"
        ]
    );
    let schema = |name: &str| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["inputSchema"]
            .clone()
    };
    assert_eq!(
        schema("history_set_summary")["required"],
        json!(["dialog", "summary"])
    );
    assert_eq!(
        schema("history_restore_backup")["required"],
        json!(["dialog", "id"])
    );
    // A message's shape is described, for clients and models to see.
    let save = schema("history_save");
    let shape = |at: &Value| -> Value {
        // Either inline or a reference into the schema's definitions.
        match at["$ref"].as_str() {
            Some(path) => {
                let name = path.rsplit('/').next().unwrap();
                save["$defs"][name].clone()
            }
            None => at.clone(),
        }
    };
    let entry_schema = &save["properties"]["entry"];
    let entry = shape(
        entry_schema["anyOf"]
            .as_array()
            .and_then(|variants| variants.iter().find(|v| v["type"] != "null"))
            .unwrap_or(entry_schema),
    );
    let items = shape(&save["properties"]["entries"]["items"]);
    for message in [&entry, &items] {
        assert_eq!(message["required"], json!(["role", "text"]), "{save}");
        let role = shape(&message["properties"]["role"]);
        assert_eq!(role["enum"], json!(["user", "assistant"]), "{save}");
        assert_eq!(message["properties"]["text"]["type"], "string", "{save}");
        assert!(message["properties"]["ts"].is_object(), "{save}");
        assert!(message["properties"]["meta"].is_object(), "{save}");
    }
    let detail = schema("history_get_dialog_detail");
    for parameter in [
        "recentTurns",
        "format",
        "includeSummary",
        "includeMessages",
        "projectRoot",
    ] {
        assert!(detail["properties"].get(parameter).is_some(), "{parameter}");
    }
    assert_eq!(detail["required"], json!(["dialog"]));
}

#[test]
fn saves_reads_summaries_backups_and_every_refusal_through_mcp() {
    let data = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(data.path(), &[("HISTORY_CONTEXT_MAX_MESSAGES", "3")]);
    // Unknown dialogs read as empty and create nothing.
    assert_eq!(
        mcp.ok("history_get_dialog_detail", json!({"dialog": "ghost"})),
        json!("")
    );
    assert_eq!(
        mcp.ok(
            "history_get_dialog_detail",
            json!({"dialog": "ghost", "format": "json"})
        ),
        json!({"summary": null, "messages": []})
    );
    assert_eq!(
        mcp.ok("history_list_dialogs", json!({})),
        json!({"dialogs": []})
    );

    // Saves: entries then entry; a given ts is kept (0 too); missing ones strictly increase.
    let saved = mcp.ok(
        "history_save",
        json!({"dialog": "Project X", "entries": [
            {"role": "user", "text": "first\nline", "ts": 0},
            {"role": "assistant", "text": "back\\slash", "meta": {"tool": "x"}}
        ], "entry": {"role": "user", "text": "third"}}),
    );
    assert_eq!(saved, json!({"ok": true, "saved": 3}));
    let all = mcp.ok("history_get_messages_since", json!({"dialog": "Project X"}));
    let messages = all["messages"].as_array().unwrap();
    assert_eq!(messages[0]["ts"], 0);
    assert!(messages[2]["ts"].as_i64() > messages[1]["ts"].as_i64());
    assert_eq!(messages[1]["meta"], json!({"tool": "x"}), "meta as stored");
    // One invalid item refuses the whole call.
    let error = mcp.error(
        "history_save",
        json!({"dialog": "Project X", "entries": [{"role": "user", "text": "ok"}, {"role": "system", "text": "no"}]}),
    );
    assert!(error.contains("entries[1]: role must be"), "{error}");
    assert!(mcp
        .error("history_save", json!({"dialog": "Project X"}))
        .contains("give an entry"));
    assert!(mcp
        .error(
            "history_save",
            json!({"dialog": "..", "entry": {"role": "user", "text": "x"}})
        )
        .contains("not allowed"));
    assert_eq!(
        mcp.ok("history_stats", json!({"dialog": "Project X"}))["messages"],
        3
    );

    // Detail: flat lines with the maintenance signal (3 messages is not over 3; a fourth is).
    let flat = mcp.ok(
        "history_get_dialog_detail",
        json!({"dialog": "Project X", "recentTurns": 2}),
    );
    assert_eq!(flat, json!("A: back\\\\slash\nU: third"));
    mcp.ok(
        "history_save",
        json!({"dialog": "Project X", "entry": {"role": "assistant", "text": "4"}}),
    );
    let flat = mcp.ok(
        "history_fetch",
        json!({"dialog": "Project X", "recentTurns": 0}),
    );
    let flat = flat.as_str().unwrap();
    assert!(flat.starts_with("M:{\"action\":\"compact\",\"importance\":\"high\",\"reason\":\"messages_count_exceeds_comfort_zone\""), "{flat}");
    assert!(!flat.contains('\n'), "no summary, no messages: {flat}");
    assert!(mcp
        .error(
            "history_get_dialog_detail",
            json!({"dialog": "Project X", "recentTurns": -1})
        )
        .contains("0 or more"));
    let since = mcp.ok(
        "history_get_messages_since",
        json!({"dialog": "Project X", "sinceTs": 0, "limit": 1}),
    );
    assert_eq!(since["messages"][0]["text"], "back\\slash");

    // Summaries: merge by default, replace on request; invalid JSON changes nothing.
    mcp.ok(
        "history_set_summary",
        json!({"dialog": "Project X", "summary": "{\"decisions\":[\"a\",\"b\"]}"}),
    );
    assert_eq!(
        mcp.ok(
            "history_set_summary",
            json!({"dialog": "Project X", "summary": "{\"decisions\":[\"c\",\"a\"]}"})
        ),
        json!({"ok": true, "mode": "merge"})
    );
    let file = data.path().join(".chat-history/project-x/summary.json");
    let before = std::fs::read(&file).unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&before).unwrap(),
        json!({"decisions": ["c", "a", "b"]})
    );
    assert!(mcp
        .error(
            "history_set_summary",
            json!({"dialog": "Project X", "summary": "{nope"})
        )
        .contains("not valid JSON"));
    assert_eq!(std::fs::read(&file).unwrap(), before, "byte for byte");
    let detail = mcp.ok(
        "history_get_dialog_detail",
        json!({"dialog": "Project X", "format": "json", "includeMessages": false}),
    );
    assert_eq!(
        detail["summary"],
        json!("{\n  \"decisions\": [\n    \"c\",\n    \"a\",\n    \"b\"\n  ]\n}")
    );
    assert!(detail.get("messages").is_none());
    assert_eq!(
        mcp.ok("history_list_dialogs", json!({"projectRoot": "/elsewhere"})),
        json!({"dialogs": ["project-x"]})
    );

    // Clear backs up both files and deletes them; restore backs up the current state first.
    let cleared = mcp.ok("history_clear", json!({"dialog": "Project X"}));
    let backup = cleared["backup"].as_str().unwrap().to_owned();
    let folder = data.path().join(".chat-history/project-x");
    assert!(!folder.join("messages.json").exists() && !folder.join("summary.json").exists());
    assert_eq!(
        mcp.ok("history_list_dialogs", json!({})),
        json!({"dialogs": []}),
        "a cleared dialog holds no data"
    );
    assert_eq!(
        mcp.ok("history_stats", json!({"dialog": "Project X"}))["messages"],
        0
    );
    let backups = mcp.ok("history_list_backups", json!({"dialog": "Project X"}));
    assert_eq!(backups["backups"][0]["id"], backup);
    assert_eq!(
        backups["backups"][0]["files"],
        json!(["messages.json", "summary.json"])
    );
    for bad in ["nope", "..", "../project-x", "a/b"] {
        let error = mcp.error(
            "history_restore_backup",
            json!({"dialog": "Project X", "id": bad}),
        );
        assert!(error.contains("no backup"), "{bad}: {error}");
    }
    // Something new since the clear: the restore backs it up first.
    mcp.ok(
        "history_save",
        json!({"dialog": "Project X", "entry": {"role": "user", "text": "after the clear"}}),
    );
    assert_eq!(
        mcp.ok(
            "history_restore_backup",
            json!({"dialog": "Project X", "id": backup})
        ),
        json!({"ok": true, "restored": backup})
    );
    assert_eq!(
        mcp.ok("history_stats", json!({"dialog": "Project X"}))["messages"],
        4
    );
    assert_eq!(
        mcp.ok("history_stats", json!({"dialog": "Project X"}))["backups"],
        2
    );
}

#[test]
fn a_line_that_is_not_json_gets_a_parse_error_and_the_server_goes_on() {
    let data = tempfile::tempdir().unwrap();
    let mut lines = Lines::start(data.path());
    lines.send("{not json");
    let error = lines.read();
    assert_eq!(error["error"]["code"], -32700, "{error}");
    lines.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "history_stats", "arguments": {"dialog": "x"}}})
        .to_string(),
    );
    let reply = lines.read();
    assert_eq!(reply["id"], 2, "{reply}");
    assert!(reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("\"messages\":0"));
}

#[tokio::test]
async fn the_web_chat_and_the_mcp_server_see_each_others_writes() {
    let server = TestServer::start(&[]).await;
    let reply = server
        .chat("general", json!({"message": "hello from the web"}))
        .await;
    let session = reply.session_id();
    let data = server.data.path().to_owned();
    let web_session = session.clone();
    let detail = tokio::task::spawn_blocking(move || {
        let mut mcp = Mcp::start(&data, &[]);
        let dialogs = mcp.ok("history_list_dialogs", json!({}));
        assert_eq!(dialogs["dialogs"], json!([web_session.clone()]));
        mcp.ok(
            "history_save",
            json!({"dialog": web_session, "entry": {"role": "user", "text": "added over MCP"}}),
        );
        mcp.ok(
            "history_save",
            json!({"dialog": "notes", "entry": {"role": "user", "text": "secret plan"}}),
        );
        mcp.ok("history_get_dialog_detail", json!({"dialog": web_session}))
    })
    .await
    .unwrap();
    assert!(
        detail
            .as_str()
            .unwrap()
            .starts_with("U: hello from the web\nA: "),
        "{detail}"
    );
    let stored = server.stored(&session);
    assert_eq!(stored.last().unwrap().text, "added over MCP");
    // A dialog MCP wrote has no web owner: no request reads it by guessing its name.
    let guess = server
        .chat(
            "general",
            json!({"session_id": "notes", "message": "what is in here?"}),
        )
        .await;
    assert_eq!(guess.status, 404, "{}", guess.body);
    let (status, _) = server.get("/chat?agent=general&session=notes", None).await;
    assert_eq!(status, 404);
}

#[test]
fn twenty_concurrent_saves_from_two_processes_are_all_kept() {
    let data = tempfile::tempdir().unwrap();
    let threads: Vec<_> = (0..2)
        .map(|p| {
            let dir = data.path().to_owned();
            std::thread::spawn(move || {
                let mut mcp = Mcp::start(&dir, &[]);
                for i in 0..10 {
                    let entry = json!({"role": "user", "text": format!("p{p} m{i}")});
                    mcp.ok("history_save", json!({"dialog": "shared", "entry": entry}));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut mcp = Mcp::start(data.path(), &[]);
    let all = mcp.ok(
        "history_get_messages_since",
        json!({"dialog": "shared", "limit": 200}),
    );
    let messages = all["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 20, "every save kept");
    let stamps: Vec<i64> = messages.iter().map(|m| m["ts"].as_i64().unwrap()).collect();
    assert!(
        stamps.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {stamps:?}"
    );
}

#[test]
fn a_client_that_goes_away_mid_call_leaves_the_store_consistent() {
    let data = tempfile::tempdir().unwrap();
    let entries: Vec<Value> = (0..300)
        .map(|i| json!({"role": "user", "text": format!("message {i} {}", "x".repeat(200))}))
        .collect();
    let save = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "history_save", "arguments": {"dialog": "big", "entries": entries}}})
    .to_string();
    for round in 0..6u64 {
        if round % 2 == 0 {
            // The client sends the call and closes its ends of the pipes without reading
            // anything: the server finishes or drops the call, and exits.
            let mut command = crate::support::process::command(&[], data.path());
            command.args(["mcp", "--stdio"]).stdin(Stdio::piped());
            let mut child = command.spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}});
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            writeln!(stdin, "{init}\n{initialized}\n{save}").unwrap();
            drop(stdin);
            drop(child.stdout.take());
            let status = child.wait().unwrap();
            assert!(status.code().is_some(), "round {round}: exits by itself");
        } else {
            // The process is killed in the middle of the call.
            let mut lines = Lines::start(data.path());
            lines.send(&save);
            std::thread::sleep(std::time::Duration::from_millis(round * 3));
        }
        // Whatever happened, the dialog holds whole saves only and stays readable.
        let mut check = Mcp::start(data.path(), &[]);
        let count = check.ok("history_stats", json!({"dialog": "big"}))["messages"]
            .as_u64()
            .unwrap();
        assert_eq!(count % 300, 0, "round {round}: a save is all or nothing");
        let folder = data.path().join(".chat-history/big");
        if count > 0 {
            let bytes = std::fs::read(folder.join("messages.json")).unwrap();
            let stored: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(stored.len() as u64, count);
        }
    }
    let mut mcp = Mcp::start(data.path(), &[]);
    mcp.ok(
        "history_save",
        json!({"dialog": "big", "entry": {"role": "user", "text": "after"}}),
    );
    let last = mcp.ok(
        "history_get_dialog_detail",
        json!({"dialog": "big", "recentTurns": 1}),
    );
    let last = last.as_str().unwrap();
    assert!(last.ends_with("\nU: after"), "{last}");
}

#[tokio::test]
async fn the_same_tools_answer_at_slash_mcp_only_with_the_token() {
    let off = TestServer::start(&[]).await;
    let response = off.http.post(off.url("/mcp")).send().await.unwrap();
    assert_eq!(response.status(), 404, "off without PARLOR_MCP_TOKEN");

    let server = TestServer::start(&[("PARLOR_MCP_TOKEN", "s3cret-token")]).await;
    let reply = server.chat("general", json!({"message": "hello"})).await;
    let session = reply.session_id();
    let post = |body: Value, token: Option<&str>, mcp_session: Option<&str>| {
        let mut request = server
            .http
            .post(server.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(id) = mcp_session {
            request = request
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", "2025-06-18");
        }
        request.send()
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    for token in [None, Some("wrong")] {
        let response = post(initialize.clone(), token, None).await.unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
    }
    // With the token, a real MCP client (rmcp's, over streamable HTTP) gets every tool, on
    // the same store as the web chat.
    use rmcp::transport::streamable_http_client::{
        StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
    };
    use rmcp::ServiceExt;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url("/mcp"))
            .auth_header("s3cret-token"),
    );
    let client = ().serve(transport).await.unwrap();
    let info = client.peer_info().unwrap().server_info.clone().unwrap();
    assert_eq!(info.name, "parlor-history");
    let call = |tool: &'static str, arguments: Value| {
        let client = &client;
        async move {
            let Value::Object(arguments) = arguments else {
                panic!("arguments must be an object")
            };
            let params = rmcp::model::CallToolRequestParams::new(tool).with_arguments(arguments);
            let result = client.call_tool(params).await.unwrap();
            let reply = serde_json::to_value(&result).unwrap();
            assert_ne!(result.is_error, Some(true), "{reply}");
            let text = reply["content"][0]["text"].as_str().unwrap().to_owned();
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text))
        }
    };
    let detail = call("history_get_dialog_detail", json!({"dialog": session})).await;
    assert!(
        detail.as_str().unwrap().starts_with("U: hello\nA: "),
        "{detail}"
    );
    let saved = call(
        "history_save",
        json!({"dialog": "over-http", "entry": {"role": "user", "text": "via http", "ts": 5}}),
    )
    .await;
    assert_eq!(saved, json!({"ok": true, "saved": 1}));
    let since = call(
        "history_get_messages_since",
        json!({"dialog": "over-http", "sinceTs": 4}),
    )
    .await;
    assert_eq!(since["messages"][0]["text"], "via http", "{since}");
    let dialogs = call("history_list_dialogs", json!({})).await;
    let names = dialogs["dialogs"].as_array().unwrap();
    assert!(
        names.contains(&json!("over-http")) && names.contains(&json!(session)),
        "{dialogs}"
    );
    let merged = call(
        "history_set_summary",
        json!({"dialog": "over-http", "summary": r#"{"facts":["f"]}"#}),
    )
    .await;
    assert_eq!(merged, json!({"ok": true, "mode": "merge"}));
    let fetched = call("history_fetch", json!({"dialog": "over-http"})).await;
    assert_eq!(fetched, json!("S:{\"facts\":[\"f\"]}\nU: via http"));
    let stats = call("history_stats", json!({"dialog": "over-http"})).await;
    assert_eq!(
        (stats["messages"].clone(), stats["lastTs"].clone()),
        (json!(1), json!(5)),
        "{stats}"
    );
    call("history_clear", json!({"dialog": "over-http"})).await;
    let backups = call("history_list_backups", json!({"dialog": "over-http"})).await;
    let backup = backups["backups"][0]["id"].as_str().unwrap().to_owned();
    let restored = call(
        "history_restore_backup",
        json!({"dialog": "over-http", "id": backup}),
    )
    .await;
    assert_eq!(restored, json!({"ok": true, "restored": backup}));
    let detail = call(
        "history_get_dialog_detail",
        json!({"dialog": "over-http", "includeSummary": false}),
    )
    .await;
    assert_eq!(detail, json!("U: via http"));
    client.cancel().await.unwrap();

    // A foreign Host or Origin (DNS rebinding, a web page calling in) is refused; this
    // server's own origin passes.
    for (header, value, refused) in [
        ("host", "evil.example".to_owned(), true),
        ("origin", "http://evil.example".to_owned(), true),
        ("origin", server.url(""), false),
    ] {
        let response = server
            .http
            .post(server.url("/mcp"))
            .header(header, value.trim_end_matches('/'))
            .header("accept", "application/json, text/event-stream")
            .bearer_auth("s3cret-token")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status().is_client_error(),
            refused,
            "{header}: {value} → {}",
            response.status()
        );
    }
}

/// Saves `text` to `dialog`, clears it (a backup), and returns the backup's id.
fn save_and_clear(mcp: &mut Mcp, dialog: &str, text: &str) -> String {
    mcp.ok(
        "history_save",
        json!({"dialog": dialog, "entry": {"role": "user", "text": text}}),
    );
    let cleared = mcp.ok("history_clear", json!({"dialog": dialog}));
    cleared["backup"].as_str().unwrap().to_owned()
}

/// The dialog's backup ids, newest first.
fn backup_ids(mcp: &mut Mcp, dialog: &str) -> Vec<String> {
    let backups = mcp.ok("history_list_backups", json!({"dialog": dialog}));
    backups["backups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_owned())
        .collect()
}

fn texts_of(mcp: &mut Mcp, dialog: &str) -> Vec<String> {
    let detail = mcp.ok(
        "history_get_dialog_detail",
        json!({"dialog": dialog, "format": "json", "recentTurns": 100}),
    );
    detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_restore_never_deletes_the_backup_it_puts_back() {
    // With one backup kept, the restore's own backup of the current state used to prune the
    // backup being restored before it was read, then delete the conversation.
    let data = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(data.path(), &[("HISTORY_BACKUP_RETENTION", "1")]);
    let only = save_and_clear(&mut mcp, "solo", "precious");
    mcp.ok(
        "history_save",
        json!({"dialog": "solo", "entry": {"role": "user", "text": "current"}}),
    );
    assert_eq!(
        mcp.ok(
            "history_restore_backup",
            json!({"dialog": "solo", "id": only})
        ),
        json!({"ok": true, "restored": only})
    );
    assert_eq!(texts_of(&mut mcp, "solo"), ["precious"]);
    // Both are there: the one restored and the state it replaced (so the restore can be
    // undone).
    let ids = backup_ids(&mut mcp, "solo");
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids[1], only);
    mcp.ok(
        "history_restore_backup",
        json!({"dialog": "solo", "id": ids[0]}),
    );
    assert_eq!(
        texts_of(&mut mcp, "solo"),
        ["current"],
        "the restore is undone"
    );
    drop(mcp);

    // The default retention (5): restoring the oldest of five.
    let mut mcp = Mcp::start(data.path(), &[]);
    let made: Vec<String> = (0..5)
        .map(|i| save_and_clear(&mut mcp, "five", &format!("round {i}")))
        .collect();
    mcp.ok(
        "history_save",
        json!({"dialog": "five", "entry": {"role": "user", "text": "now"}}),
    );
    mcp.ok(
        "history_restore_backup",
        json!({"dialog": "five", "id": made[0]}),
    );
    assert_eq!(texts_of(&mut mcp, "five"), ["round 0"]);
    let ids = backup_ids(&mut mcp, "five");
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert!(ids.contains(&made[0]), "the restored backup is kept");
    assert!(!ids.contains(&made[1]), "the oldest other one made room");
}

#[test]
fn messages_since_summary_only_dialogs_any_meta_and_max_turns_as_the_spec_says() {
    let data = tempfile::tempdir().unwrap();
    let config = crate::support::config_file(
        "[[histories]]\nid = \"default\"\nbackend = { type = \"file\", max_turns = 4 }\n",
    );
    let config_path = config.path().to_str().unwrap();
    let mut mcp = Mcp::start(data.path(), &[("PARLOR_CONFIG", config_path)]);

    // Every message whose ts is greater, also after an older one.
    mcp.ok(
        "history_save",
        json!({"dialog": "times", "entries": [
            {"role": "user", "text": "a", "ts": 50},
            {"role": "assistant", "text": "old", "ts": 5},
            {"role": "user", "text": "b", "ts": 60},
        ]}),
    );
    let since = mcp.ok(
        "history_get_messages_since",
        json!({"dialog": "times", "sinceTs": 10}),
    );
    let texts: Vec<&str> = since["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["a", "b"]);

    // A dialog holding only a summary is listed.
    mcp.ok(
        "history_set_summary",
        json!({"dialog": "notes", "summary": "{\"facts\": [\"f\"]}"}),
    );
    assert_eq!(
        mcp.ok("history_list_dialogs", json!({})),
        json!({"dialogs": ["notes", "times"]})
    );

    // A meta whose status and model have other types is kept as given.
    let meta = json!({"status": 7, "model": {"name": "x"}, "tag": "t"});
    mcp.ok(
        "history_save",
        json!({"dialog": "meta", "entry": {"role": "assistant", "text": "m", "meta": meta}}),
    );
    let stored = mcp.ok(
        "history_get_messages_since",
        json!({"dialog": "meta", "sinceTs": 0}),
    );
    assert_eq!(stored["messages"][0]["meta"], meta);

    // max_turns never drops what a save stores: a save past it is refused whole.
    let error = mcp.error(
        "history_save",
        json!({"dialog": "times", "entries": [
            {"role": "user", "text": "c"},
            {"role": "assistant", "text": "d"},
        ]}),
    );
    assert!(error.contains("max_turns"), "{error}");
    assert!(error.contains("at most 4"), "{error}");
    assert_eq!(
        mcp.ok("history_stats", json!({"dialog": "times"}))["messages"],
        3
    );
    mcp.ok(
        "history_save",
        json!({"dialog": "times", "entry": {"role": "user", "text": "fits"}}),
    );
    assert_eq!(
        mcp.ok("history_stats", json!({"dialog": "times"}))["messages"],
        4
    );
}

#[tokio::test]
async fn mcp_tools_read_and_append_to_the_chosen_path_and_list_the_other_versions() {
    let server = TestServer::start(&[]).await;
    let first = server
        .chat("general", json!({"message": "first version"}))
        .await;
    let session = first.session_id();
    let question = first.meta().message_id.clone().unwrap();
    let edited = server
        .chat(
            "general",
            json!({"session_id": session, "message": "second version", "edit": question}),
        )
        .await;
    assert!(edited.done().is_some(), "{}", edited.body);
    let data = server.data.path().to_owned();
    let dialog = session.clone();
    let (flat, detail) = tokio::task::spawn_blocking(move || {
        let mut mcp = Mcp::start(&data, &[]);
        mcp.ok(
            "history_save",
            json!({"dialog": dialog, "entry": {"role": "user", "text": "added over MCP"}}),
        );
        let flat = mcp.ok(
            "history_get_dialog_detail",
            json!({"dialog": dialog, "includeBranches": true}),
        );
        let detail = mcp.ok(
            "history_get_dialog_detail",
            json!({"dialog": dialog, "format": "json", "includeBranches": true}),
        );
        (flat, detail)
    })
    .await
    .unwrap();
    let flat = flat.as_str().unwrap().to_owned();
    assert!(flat.starts_with("U: second version\nA: "), "{flat}");
    assert!(!flat.contains("U: first version"), "{flat}");
    assert!(
        flat.contains("\nB: after (start) · 2 message(s) · user: first version"),
        "{flat}"
    );
    assert_eq!(detail["branches"].as_array().unwrap().len(), 1, "{detail}");
    let stored = server.stored(&session);
    assert_eq!(stored.len(), 3, "appended to the chosen path");
    assert_eq!(stored[0].text, "second version");
    assert_eq!(stored[2].text, "added over MCP");
}
