//! The tool loop in a chat turn, end to end over HTTP: the mirror asks for a call of the
//! real time server, the result goes back to it, and the exchange is stored whole and sent
//! on later turns; the built-in `parlor` server recalls the owner's conversations only.

use super::servers;
use crate::support::{browser, config_file, TestServer};
use parlor_domain::{ChatEvent, Role};
use parlor_server::tools::spec::Transport;
use serde_json::json;

/// A Parlor with the time server (as `clock`), the built-in server (as `recall`) and an agent
/// `timekeeper` that may use both; `extra` is added to `parlor.toml`.
pub async fn parlor_with_tools(
    extra: &str,
) -> (TestServer, tempfile::TempDir, tempfile::NamedTempFile) {
    parlor_with(extra, "never", 30, &[]).await
}

/// [`parlor_with_tools`] whose `clock` asks for approval as `confirm` says, within `timeout`
/// seconds.
pub async fn parlor_with_tools_as(
    confirm: &str,
    timeout: u64,
) -> (TestServer, tempfile::TempDir, tempfile::NamedTempFile) {
    parlor_with("", confirm, timeout, &[]).await
}

/// [`parlor_with_tools`] whose `clock` keeps its results as `save` says.
pub async fn parlor_with_save(
    save: &str,
) -> (TestServer, tempfile::TempDir, tempfile::NamedTempFile) {
    parlor_with(&format!("#save {save}"), "never", 30, &[]).await
}

/// The same, with `extra` in `parlor.toml` (its `[[mcp_servers]]` join the agent's tools)
/// and `vars` in the environment.
pub async fn parlor_with(
    extra: &str,
    confirm: &str,
    timeout: u64,
    vars: &[(&str, &str)],
) -> (TestServer, tempfile::TempDir, tempfile::NamedTempFile) {
    let Transport::Stdio { command, args, .. } = servers::time_server() else {
        unreachable!()
    };
    // `#save N` in `extra` sets the clock's `save`.
    let save = extra
        .strip_prefix("#save ")
        .map_or(String::new(), |s| format!("save = {s}\n"));
    let config = config_file(&format!(
        "[[mcp_servers]]\nid = \"clock\"\ncommand = {command:?}\nargs = {args:?}\n\
         confirm = {confirm:?}\ntimeout_secs = {timeout}\n{save}\n\
         [[mcp_servers]]\nid = \"recall\"\nbuiltin = \"parlor\"\n\n{extra}"
    ));
    let agents = tempfile::tempdir().unwrap();
    let mut tools = vec!["clock".to_owned(), "recall".to_owned()];
    let mut section = "";
    for line in extra.lines() {
        if line.starts_with('[') {
            section = line;
        }
        let id = line
            .strip_prefix("id = \"")
            .and_then(|l| l.strip_suffix('"'));
        if let (Some(id), "[[mcp_servers]]") = (id, section) {
            tools.push(id.to_owned());
        }
    }
    let agent = json!({
        "agentId": "timekeeper", "name": "Timekeeper",
        "personality": "You tell the time.",
        "chatSettings": {"tools": tools, "historyPolicy": "all"},
    });
    let folder = agents.path().join("timekeeper");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("template.json"), agent.to_string()).unwrap();
    let (config_path, agents_path) = (
        config.path().display().to_string(),
        agents.path().display().to_string(),
    );
    let mut env = vec![
        ("PARLOR_CONFIG", config_path.as_str()),
        ("PARLOR_AGENTS_DIR", agents_path.as_str()),
    ];
    env.extend_from_slice(vars);
    let server = TestServer::start(&env).await;
    for _ in 0..600 {
        let ready = server.services.tools.statuses().iter().all(|(_, s)| {
            use parlor_server::tools::server::Status;
            matches!(s, Status::Ready { .. } | Status::PerUser { .. })
        });
        if ready {
            return (server, agents, config);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "tool servers not ready: {:?}",
        server.services.tools.statuses()
    );
}

#[tokio::test]
async fn a_tool_call_runs_in_the_turn_and_its_exchange_is_stored_whole_and_sent_again() {
    let (server, _agents, _config) = parlor_with_tools("").await;
    let ask = r#"/tool clock__get_current_time {"timezone": "UTC"}"#;
    let reply = server.chat("timekeeper", json!({"message": ask})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let names: Vec<&str> = reply.events.iter().map(ChatEvent::name).collect();
    let call_at = names
        .iter()
        .position(|n| *n == "tool_call")
        .expect("a tool_call event");
    let result_at = names.iter().position(|n| *n == "tool_result").unwrap();
    assert!(
        call_at < result_at && names.last() == Some(&"done"),
        "{names:?}"
    );
    let ChatEvent::ToolCall(call) = &reply.events[call_at] else {
        unreachable!()
    };
    assert_eq!(
        (call.tool.as_str(), call.server.as_str()),
        ("clock__get_current_time", "clock")
    );
    let ChatEvent::ToolResult(result) = &reply.events[result_at] else {
        unreachable!()
    };
    assert!(result.ok && result.preview.contains("UTC"), "{result:?}");
    assert_eq!(result.id, call.id);
    // The mirror's second call received the result and describes it.
    let text = reply.text();
    assert!(text.contains("(ok)") && text.contains("UTC"), "{text}");

    let session = reply.session_id();
    let stored = server.stored(&session);
    let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(stored[1].tool_calls[0].id, call.id);
    assert_eq!(stored[2].answers(), Some(call.id.as_str()));
    assert!(stored[2].tool.as_ref().unwrap().ok);

    // The next turn sends the exchange whole: the mirror sees its call and result.
    let next = server
        .chat(
            "timekeeper",
            json!({"message": "thanks", "session_id": session}),
        )
        .await;
    let text = next.text();
    assert!(text.contains("I received **6 messages**"), "{text}");
    assert!(
        text.contains("asking for “clock\\_\\_get\\_current\\_time”"),
        "{text}"
    );
}

#[tokio::test]
async fn faults_of_a_call_are_results_for_the_model_and_the_turn_goes_on() {
    let (server, _agents, _config) = parlor_with_tools("").await;
    for (ask, says) in [
        ("/tool clock__get_current_time {timezone", "not valid JSON"),
        ("/tool clock__fly {}", "Unknown tool"),
        (
            "/tool clock__get_current_time {\"timezone\": \"Mars/Base\"}",
            "Invalid timezone",
        ),
    ] {
        let reply = server.chat("timekeeper", json!({"message": ask})).await;
        let result = reply.events.iter().find_map(|e| match e {
            ChatEvent::ToolResult(r) => Some(r.clone()),
            _ => None,
        });
        let result = result.expect("a tool_result event");
        assert!(!result.ok, "{ask}");
        assert!(
            result.error.as_deref().unwrap_or_default().contains(says),
            "{ask}: {result:?}"
        );
        assert!(reply.done().is_some(), "{ask}: the turn completes");
        let stored = server.stored(&reply.session_id());
        assert!(parlor_domain::exchange::paired(&stored[1..]), "{stored:?}");
    }
}

#[tokio::test]
async fn the_built_in_server_recalls_the_owners_conversations_only() {
    let (server, _agents, _config) = parlor_with_tools("").await;
    let (alice, bob) = (browser(&"a".repeat(32)), browser(&"b".repeat(32)));
    let secret = server
        .chat_with(
            "timekeeper",
            "",
            json!({"message": "my locker code is 4711"}),
            Some(&alice),
        )
        .await;
    let secret_id = secret.session_id();
    let search = r#"/tool recall__search_conversations {"query": "locker"}"#;
    let found = server
        .chat_with("timekeeper", "", json!({"message": search}), Some(&alice))
        .await;
    assert!(found.text().contains(&secret_id), "{}", found.text());
    // Bob finds nothing, and cannot read Alice's conversation by its id.
    let theirs = server
        .chat_with("timekeeper", "", json!({"message": search}), Some(&bob))
        .await;
    assert!(!theirs.text().contains(&secret_id), "{}", theirs.text());
    assert!(
        theirs.text().contains("No conversation mentions"),
        "{}",
        theirs.text()
    );
    let read = format!(r#"/tool recall__read_conversation {{"session_id": "{secret_id}"}}"#);
    let denied = server
        .chat_with("timekeeper", "", json!({"message": read}), Some(&bob))
        .await;
    assert!(!denied.text().contains("4711"), "{}", denied.text());
    let mine = server
        .chat_with("timekeeper", "", json!({"message": read}), Some(&alice))
        .await;
    assert!(mine.text().contains("4711"), "{}", mine.text());
}

#[tokio::test]
async fn the_debug_facts_show_tools_rounds_exchanges_and_the_meter_counts_tools() {
    let (server, _agents, _config) = parlor_with_tools("").await;
    let alice = browser(&"a".repeat(32));
    let ask = r#"/tool clock__get_current_time {"timezone": "UTC"}"#;
    let first = server
        .chat_with("timekeeper", "", json!({"message": ask}), Some(&alice))
        .await;
    let session = first.session_id();
    let debug_path = format!("/api/chat/timekeeper/debug?session_id={session}");
    let (_, debug) = server.get(&debug_path, Some(&alice)).await;
    let debug: serde_json::Value = serde_json::from_str(&debug).unwrap();
    let tools = &debug["last_turn"]["tools"];
    assert!(tools["offered"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "clock__get_current_time"));
    assert_eq!(
        tools["rounds"][0][0]["tool"], "clock__get_current_time",
        "{debug}"
    );
    assert_eq!(tools["rounds"][0][0]["ok"], true);
    let servers = debug["tool_servers"].as_array().unwrap();
    assert!(servers
        .iter()
        .any(|s| s["id"] == "clock" && s["state"].as_str().unwrap().starts_with("ready")));

    let next = server
        .chat_with(
            "timekeeper",
            "",
            json!({"message": "and?", "session_id": session}),
            Some(&alice),
        )
        .await;
    assert!(
        next.meta().meter.as_ref().unwrap().parts.tools > 0,
        "the meter counts tools"
    );
    let (_, debug) = server.get(&debug_path, Some(&alice)).await;
    let debug: serde_json::Value = serde_json::from_str(&debug).unwrap();
    let exchanges = &debug["last_turn"]["history"]["exchanges"];
    assert_eq!(exchanges[0]["sent"], "full", "{debug}");
    assert_eq!(exchanges[0]["at"], 1);
    let (_, page) = server
        .get(
            &format!("/chat?agent=timekeeper&session={session}&debug=true"),
            Some(&alice),
        )
        .await;
    assert!(
        page.contains("data-fact=\"exchanges\""),
        "the panel lists the exchanges"
    );
    assert!(page.contains("sent in full"));
    assert!(page.contains("data-fact=\"tool-servers\""));
}
