//! The `parlor` binary itself: configuration errors stop it with a clear message, broken
//! agent templates are reported while the rest load, and development logs show history.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn parlor(vars: &[(&str, &str)], data: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_parlor"));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    command
        .current_dir(&root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LEPTOS_SITE_ADDR", "127.0.0.1:0")
        .env("PARLOR_DATA_DIR", data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in vars {
        command.env(k, v);
    }
    command
}

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
    ] {
        let output = parlor(&vars, data.path()).output().unwrap();
        assert!(!output.status.success(), "{vars:?} started");
        let stderr = String::from_utf8_lossy(&output.stderr);
        for word in words {
            assert!(stderr.contains(word), "{vars:?}: {stderr}");
        }
    }
}

/// Starts the binary and waits (at most 60 s) until it listens. Returns the process, its log
/// up to then, its port, and a receiver for the rest of its log lines.
fn start(
    vars: &[(&str, &str)],
    data: &std::path::Path,
) -> (std::process::Child, String, u16, mpsc::Receiver<String>) {
    let mut child = parlor(vars, data).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not start listening:\n{log}");
        };
        log.push_str(&line);
        log.push('\n');
        if let Some(rest) = line.split("listening on http://127.0.0.1:").nth(1) {
            let port = rest.trim().parse::<u16>().unwrap();
            return (child, log, port, rx);
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
    let (mut child, log, port, _) = start(&[("PARLOR_AGENTS_DIR", &dir)], data.path());
    assert!(log.contains("bad/template.json"), "{log}");
    let home = reqwest::blocking::get(format!("http://127.0.0.1:{port}/"))
        .unwrap()
        .text()
        .unwrap();
    assert!(home.contains("Fine"));
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn development_logging_shows_the_history_decisions() {
    let data = tempfile::tempdir().unwrap();
    let (mut child, _, port, log_lines) = start(
        &[
            ("RUST_LOG", "info,parlor_server=debug"),
            ("PARLOR_MIRROR_DELAY_MS", "0"),
            ("DEFAULT_HISTORY_LENGTH", "1"),
        ],
        data.path(),
    );
    let client = reqwest::blocking::Client::new();
    let mut session = String::new();
    for text in ["one", "two"] {
        let body = client
            .post(format!("http://127.0.0.1:{port}/api/chat/general"))
            .json(&serde_json::json!({"session_id": session, "message": text}))
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
    child.kill().unwrap();
    let _ = child.wait();
    // The process is gone, so the reader thread ends at EOF and the iterator with it.
    let log: String = log_lines.iter().collect::<Vec<_>>().join("\n");
    assert!(
        log.contains(r#"[History] Agent general history settings: {policy: "lastN", length: 1, messageCount: 3}"#),
        "{log}"
    );
    assert!(
        log.contains("[History] Trimmed messages from 3 to 1"),
        "{log}"
    );
}
