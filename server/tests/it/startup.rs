//! The `parlor` binary itself: configuration errors stop it with a clear message, broken
//! agent templates are reported while the rest load, and development logs show history.

use crate::support::process::{refuses, start};

#[test]
fn invalid_history_environment_stops_the_server_naming_the_variable() {
    let data = tempfile::tempdir().unwrap();
    for (vars, words) in [
        (
            vec![("DEFAULT_HISTORY_POLICY", "LastN")],
            vec!["DEFAULT_HISTORY_POLICY", "lastN, all, none"],
        ),
        (
            vec![("DEFAULT_HISTORY_LENGTH", "20abc")],
            vec!["DEFAULT_HISTORY_LENGTH", "integer"],
        ),
        (
            vec![("NEXT_PUBLIC_DEFAULT_HISTORY_LENGTH", "5.9")],
            vec!["NEXT_PUBLIC_DEFAULT_HISTORY_LENGTH"],
        ),
        (
            vec![
                ("DEFAULT_HISTORY_POLICY", "all"),
                ("NEXT_PUBLIC_DEFAULT_HISTORY_POLICY", "none"),
            ],
            vec![
                "DEFAULT_HISTORY_POLICY",
                "NEXT_PUBLIC_DEFAULT_HISTORY_POLICY",
                "set only one",
            ],
        ),
        (
            vec![("PARLOR_LLM_TIMEOUT_SECS", "soon")],
            vec!["PARLOR_LLM_TIMEOUT_SECS"],
        ),
        (
            vec![("HISTORY_BACKUP_RETENTION", "0")],
            vec!["HISTORY_BACKUP_RETENTION", "at least 1"],
        ),
        (
            vec![("HISTORY_CONTEXT_MAX_MESSAGES", "0")],
            vec!["HISTORY_CONTEXT_MAX_MESSAGES", "at least 1"],
        ),
        (
            vec![("HISTORY_CONTEXT_MAX_BYTES", "lots")],
            vec!["HISTORY_CONTEXT_MAX_BYTES", "whole number"],
        ),
        (
            vec![("PARLOR_MCP_TOKEN", " ")],
            vec!["PARLOR_MCP_TOKEN", "must not be empty"],
        ),
        (
            vec![("PARLOR_MAX_CONTEXT_BYTES", "1000")],
            vec!["PARLOR_MAX_CONTEXT_BYTES", "at least 1048576"],
        ),
        (
            vec![("PARLOR_MAX_CONTEXT_BYTES", "10MB")],
            vec!["PARLOR_MAX_CONTEXT_BYTES"],
        ),
    ] {
        let stderr = refuses(&vars, data.path());
        for word in words {
            assert!(stderr.contains(word), "{vars:?}: {stderr}");
        }
    }
}

#[test]
fn a_broken_template_is_reported_and_the_other_agents_load() {
    let data = tempfile::tempdir().unwrap();
    let agents = tempfile::tempdir().unwrap();
    for (id, json) in [
        ("ok", r#"{"agentId":"ok","name":"Fine"}"#),
        ("bad", r#"{"agentId": "bad", "#),
    ] {
        std::fs::create_dir_all(agents.path().join(id)).unwrap();
        std::fs::write(agents.path().join(id).join("template.json"), json).unwrap();
    }
    let dir = agents.path().display().to_string();
    let server = start(&[("PARLOR_AGENTS_DIR", &dir)], data.path());
    assert!(server.log.contains("bad/template.json"), "{}", server.log);
    let home = reqwest::blocking::get(server.url("/"))
        .unwrap()
        .text()
        .unwrap();
    assert!(home.contains("Fine"));
}

#[test]
fn development_logging_shows_the_history_decisions() {
    let data = tempfile::tempdir().unwrap();
    let mut server = start(
        &[
            ("RUST_LOG", "info,parlor_server=debug"),
            ("PARLOR_MIRROR_DELAY_MS", "0"),
            ("DEFAULT_HISTORY_LENGTH", "1"),
        ],
        data.path(),
    );
    let client = reqwest::blocking::Client::new();
    let mut session = String::new();
    for text in ["one", "two", "three"] {
        // The first message carries a block kept for one turn: pruned before the third.
        let context = serde_json::json!([
            {"source": "log", "blocks": [{"type": "text", "text": "x"}], "save": 1}
        ]);
        let mut request = serde_json::json!({"session_id": session, "message": text});
        if text == "one" {
            request["context"] = context;
        }
        let body = client
            .post(server.url("/api/chat/general"))
            .json(&request)
            .send()
            .unwrap()
            .text()
            .unwrap();
        session = body
            .split("\"session_id\":\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_owned();
    }
    server.kill();
    // The process is gone, so the reader thread ends at EOF and the iterator with it.
    let log: String = server.lines.iter().collect::<Vec<_>>().join("\n");
    assert!(
        log.contains(r#"[History] Agent general history settings: {policy: "lastN", length: 1, messageCount: 3}"#),
        "{log}"
    );
    assert!(
        log.contains("[History] Trimmed messages from 3 to 1"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "[History] Context pruning in {session}: 1 block(s) expired, 1 message(s) rewritten, 0 removed"
        )),
        "{log}"
    );
}
