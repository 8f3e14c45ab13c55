//! Parlor as separate processes: configuration-file errors stop it, two processes share one
//! Redis, and a process killed mid-write (SIGKILL) loses nothing it acknowledged.

use crate::support::process::{refuses, start, Running};
use fake_llm::redis_server::RedisServer;
use std::io::Read;

static BROWSER: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::browser("00112233445566778899aabbccddeeff"));

fn write_config(dir: &std::path::Path, text: &str) -> String {
    let path = dir.join("parlor.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn an_invalid_configuration_file_stops_the_server_naming_the_entry_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = format!(
        "[[histories]]\nid = \"shared\"\nbackend = {{ type = \"redis\", url = \"redis://127.0.0.1:{closed_port}\" }}\n"
    );
    let cases: [(&str, &[&str]); 7] = [
        (
            "[[histories]]\nid = \"x\"\nbackend = { type = \"sqlite\" }\n",
            &["histories[0] (id \"x\")", "backend.type", "sqlite"],
        ),
        (
            "[[histories]]\nid = \"x\"\nbackend = { type = \"memory\" }\n[[histories]]\nid = \"x\"\nbackend = { type = \"file\" }\n",
            &["histories[1] (id \"x\")", "id: duplicate id"],
        ),
        (
            "[[histories]]\nid = \"x\"\nbackend = { type = \"file\", max_turns = 0 }\n",
            &["histories[0] (id \"x\")", "backend.max_turns", "at least 1"],
        ),
        (
            "[[histories]]\nid = \"r\"\nbackend = { type = \"redis\", url = \"redis://127.0.0.1:1\", ttl = 0 }\n",
            &["histories[0] (id \"r\")", "backend.ttl"],
        ),
        (
            unreachable.as_str(),
            &["history \"shared\"", "backend.url", "cannot reach Redis"],
        ),
        (
            "[[context]]\nid = \"clock\"\nkind = \"time\"\ntime_zone = \"Nowhere/City\"\n",
            &["context[0] (id \"clock\")", "time_zone", "Nowhere/City"],
        ),
        (
            "[[context]]\nid = \"notes\"\nkind = \"file\"\nsave = -2\n",
            &["negative"],
        ),
    ];
    for (text, words) in cases {
        let config = write_config(dir.path(), text);
        let stderr = refuses(&[("PARLOR_CONFIG", &config)], dir.path());
        for word in words {
            assert!(
                stderr.contains(word),
                "{text}\n{stderr}\nshould contain {word}"
            );
        }
    }

    let missing = dir.path().join("nope.toml").display().to_string();
    let stderr = refuses(&[("PARLOR_CONFIG", &missing)], dir.path());
    assert!(stderr.contains("nope.toml"), "{stderr}");

    // An agent naming a history that is not declared.
    let agents = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(agents.path().join("a")).unwrap();
    std::fs::write(
        agents.path().join("a/template.json"),
        r#"{"agentId":"a","name":"A","chatSettings":{"historyId":"missing"}}"#,
    )
    .unwrap();
    let agents_dir = agents.path().display().to_string();
    let stderr = refuses(&[("PARLOR_AGENTS_DIR", &agents_dir)], dir.path());
    assert!(
        stderr.contains("agent \"a\": chatSettings.historyId \"missing\" names no history"),
        "{stderr}"
    );

    // An agent switching on a context provider that is not declared.
    std::fs::write(
        agents.path().join("a/template.json"),
        r#"{"agentId":"a","name":"A","chatSettings":{"context":["weather"]}}"#,
    )
    .unwrap();
    let stderr = refuses(&[("PARLOR_AGENTS_DIR", &agents_dir)], dir.path());
    assert!(
        stderr.contains("agent \"a\": chatSettings.context names \"weather\""),
        "{stderr}"
    );
}

/// Posts a turn; the whole event stream as text.
fn chat(server: &Running, body: serde_json::Value) -> String {
    reqwest::blocking::Client::new()
        .post(server.url("/api/chat/general"))
        .header("cookie", BROWSER.as_str())
        .json(&body)
        .send()
        .unwrap()
        .text()
        .unwrap()
}

fn field<'a>(events: &'a str, name: &str) -> &'a str {
    let marker = format!("\"{name}\":");
    let rest = events
        .split(&marker)
        .nth(1)
        .unwrap_or_else(|| panic!("{name} in {events}"));
    rest.split([',', '}']).next().unwrap().trim_matches('"')
}

/// Two Parlor processes (each with its own data folder) sharing one Redis history; the
/// Redis and the folders live as long as the first and last values.
fn two_on_one_redis() -> (RedisServer, Running, Running, [tempfile::TempDir; 3]) {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\" }}\n",
            redis.url()
        ),
    );
    let vars = [
        ("PARLOR_CONFIG", config.as_str()),
        ("PARLOR_MIRROR_DELAY_MS", "0"),
    ];
    let (data_a, data_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (start(&vars, data_a.path()), start(&vars, data_b.path()));
    (redis, a, b, [dir, data_a, data_b])
}

#[test]
fn a_conversation_started_on_one_process_continues_on_another() {
    let (_redis, a, b, _dirs) = two_on_one_redis();

    let first = chat(&a, serde_json::json!({"message": "started on A"}));
    let session = field(&first, "session_id").to_owned();
    let second = chat(
        &b,
        serde_json::json!({"session_id": session, "message": "continued on B"}),
    );
    assert_eq!(field(&second, "session_id"), session);
    assert_eq!(field(&second, "messages_stored"), "3", "{second}");
    let third = chat(
        &a,
        serde_json::json!({"session_id": session, "message": "back on A"}),
    );
    assert_eq!(field(&third, "messages_stored"), "5", "{third}");

    // B's page shows the whole conversation in this browser's sidebar and transcript.
    let page = reqwest::blocking::Client::new()
        .get(b.url(&format!("/chat?agent=general&session={session}")))
        .header("cookie", BROWSER.as_str())
        .send()
        .unwrap()
        .text()
        .unwrap();
    for text in ["started on A", "continued on B", "back on A"] {
        assert!(page.contains(text), "{text} missing from B's page");
    }
}

#[test]
fn a_version_made_on_one_process_is_chosen_on_another_and_both_show_that_path() {
    let (_redis, a, b, _dirs) = two_on_one_redis();
    let first = chat(&a, serde_json::json!({"message": "first on A"}));
    let session = field(&first, "session_id").to_owned();
    let question = field(&first, "message_id").to_owned();
    // B edits the question: a new version, the first kept.
    let edited = chat(
        &b,
        serde_json::json!({"session_id": session, "message": "edited on B", "edit": question}),
    );
    assert!(
        edited.contains("\"versions\":{\"n\":2,\"of\":2"),
        "{edited}"
    );
    // The chosen path's first message, as each process exports it.
    let first_text = |server: &Running| {
        let export: serde_json::Value = reqwest::blocking::Client::new()
            .get(server.url(&format!("/api/chat/general/sessions/{session}/export")))
            .header("cookie", BROWSER.as_str())
            .send()
            .unwrap()
            .json()
            .unwrap();
        export["messages"][0]["text"].as_str().unwrap().to_owned()
    };
    assert_eq!(first_text(&a), "edited on B");
    // A chooses the first version back; B shows it too.
    let chosen = reqwest::blocking::Client::new()
        .post(a.url(&format!(
            "/api/chat/general/sessions/{session}/messages/{question}/choose"
        )))
        .header("cookie", BROWSER.as_str())
        .json(&serde_json::json!({}))
        .send()
        .unwrap();
    assert_eq!(chosen.status(), 200);
    assert_eq!(first_text(&b), "first on A");
}

/// Sends user messages one after another until the server goes away. Returns, per message
/// sent, whether its user message was acknowledged (the `meta` event arrived) and whether
/// its reply was (the `done` event arrived).
fn append_until_killed(port: u16, session: &str, next: &mut usize) -> Vec<(String, bool, bool)> {
    let client = reqwest::blocking::Client::new();
    let mut sent = Vec::new();
    loop {
        let text = format!("message {}", *next);
        *next += 1;
        let response = client
            .post(format!("http://127.0.0.1:{port}/api/chat/general"))
            .json(&serde_json::json!({"session_id": session, "message": text}))
            .send();
        let mut body = String::new();
        let finished = match response {
            Ok(mut response) => response.read_to_string(&mut body).is_ok(),
            Err(_) => false,
        };
        let acked = body.contains("event: meta");
        let replied = body.contains("event: done");
        sent.push((text, acked, replied));
        if !finished || !replied {
            return sent;
        }
    }
}

/// One more turn on a live server: whether it completed.
fn one_more_turn(server: &Running, session: &str, next: &mut usize) -> bool {
    let body = reqwest::blocking::Client::new()
        .post(server.url("/api/chat/general"))
        .json(&serde_json::json!({"session_id": session, "message": format!("message {next}")}))
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    *next += 1;
    body.contains("event: done")
}

#[test]
fn killing_the_server_mid_write_never_loses_or_corrupts_what_it_acknowledged() {
    let data = tempfile::tempdir().unwrap();
    let session = "crash-test";
    let vars = [("PARLOR_MIRROR_DELAY_MS", "0")];
    let mut sent = Vec::new();
    let mut next = 0;
    // A varying but reproducible pause before each kill.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _round in 0..20 {
        let server = start(&vars, data.path());
        let port = server.port;
        let client = std::thread::spawn({
            let mut from = next;
            move || {
                let sent = append_until_killed(port, session, &mut from);
                (sent, from)
            }
        });
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        std::thread::sleep(std::time::Duration::from_millis(40 + (seed >> 33) % 160));
        drop(server); // SIGKILL
        let (round_sent, upto) = client.join().unwrap();
        next = upto;
        sent.extend(round_sent);
    }
    let acked = sent.iter().filter(|(_, acked, _)| *acked).count();
    eprintln!("{} sent, {acked} acknowledged", sent.len());
    assert!(acked > 20, "too few turns to mean anything");

    // Every JSON file the store wrote is whole.
    let root = data.path().join(".chat-history");
    for dialog in std::fs::read_dir(&root).unwrap() {
        for file in std::fs::read_dir(dialog.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let bytes = std::fs::read(&path).unwrap();
                serde_json::from_slice::<serde_json::Value>(&bytes)
                    .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
            }
        }
    }
    let bytes = std::fs::read(root.join(session).join("messages.json")).unwrap();
    let stored: Vec<parlor_domain::Message> = serde_json::from_slice(&bytes).unwrap();
    let users: Vec<(usize, &str)> = stored
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == parlor_domain::Role::User)
        .map(|(i, m)| (i, m.text.as_str()))
        .collect();

    // The stored user messages are the sent ones, in order, each once, and include every
    // acknowledged one; every acknowledged reply follows its message.
    let mut position = 0;
    for (text, acked, replied) in &sent {
        match users.get(position) {
            Some((index, stored_text)) if stored_text == text => {
                position += 1;
                if *replied {
                    let reply = stored.get(index + 1).expect("reply stored");
                    assert_eq!(reply.role, parlor_domain::Role::Assistant, "after {text}");
                }
            }
            _ => assert!(!acked, "acknowledged {text:?} is missing"),
        }
    }
    assert_eq!(
        position,
        users.len(),
        "stored messages nobody sent: {:?}",
        &users[position..]
    );

    // A restart cleans up what interrupted writes left behind, and the conversation goes on.
    let server = start(&vars, data.path());
    let leftovers: Vec<String> = std::fs::read_dir(root.join(session))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let mut from = next;
    let after = one_more_turn(&server, session, &mut from);
    assert!(after, "the conversation continues after the crashes");
}

/// Runs `parlor <args>` with `vars` and `data` as the data folder: success, stdout, stderr.
fn parlor_cli(
    vars: &[(&str, &str)],
    args: &[&str],
    data: &std::path::Path,
) -> (bool, String, String) {
    let output = crate::support::process::command(vars, data)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn operators_list_clear_and_restore_conversations_from_the_command_line() {
    let data = tempfile::tempdir().unwrap();
    let dialog = data.path().join(".chat-history/talk");
    std::fs::create_dir_all(&dialog).unwrap();
    std::fs::write(
        dialog.join("messages.json"),
        r#"[{"role":"user","text":"keep me","ts":5},{"role":"assistant","text":"ok","ts":6}]"#,
    )
    .unwrap();

    let (ok, out, err) = parlor_cli(&[], &["store", "list"], data.path());
    assert!(ok, "{err}");
    assert!(out.contains("default: file ("), "{out}");
    assert!(out.contains("talk  2 message(s)"), "{out}");

    let (ok, out, _) = parlor_cli(&[], &["store", "stats", "talk"], data.path());
    assert!(ok);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (stats["messages"].as_u64(), stats["last_ts"].as_i64()),
        (Some(2), Some(6))
    );
    assert_eq!(stats["summary"], serde_json::Value::Null);
    assert_eq!(stats.get("maintenance"), None, "under the thresholds");
    // With a summary, its size and coverage; over a threshold, the maintenance signal.
    let summary = r#"{"facts":["a"],"covers":{"messages":1,"untilTs":5,"updatedMs":9}}"#;
    std::fs::write(dialog.join("summary.json"), summary).unwrap();
    let vars = [("HISTORY_CONTEXT_MAX_MESSAGES", "1")];
    let (ok, out, _) = parlor_cli(&vars, &["store", "stats", "talk"], data.path());
    assert!(ok);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        stats["summary"],
        serde_json::json!({"bytes": summary.len(), "covers": 1, "updated_ms": 9})
    );
    assert_eq!(
        stats["maintenance"]["reason"],
        "messages_count_exceeds_comfort_zone"
    );
    assert_eq!(stats["maintenance"]["thresholds"]["maxMessages"], 1);

    let (ok, out, _) = parlor_cli(&[], &["store", "clear", "talk"], data.path());
    assert!(ok);
    let backup = out.trim().rsplit("backup ").next().unwrap().to_owned();
    assert!(
        !dialog.join("messages.json").exists() && !dialog.join("summary.json").exists(),
        "clearing deletes both files (after backing them up)"
    );

    let (ok, out, _) = parlor_cli(&[], &["store", "backups", "talk"], data.path());
    assert!(ok && out.starts_with(&backup), "{out}");
    let (ok, _, err) = parlor_cli(&[], &["store", "restore", "talk", &backup], data.path());
    assert!(ok, "{err}");
    assert!(std::fs::read_to_string(dialog.join("messages.json"))
        .unwrap()
        .contains("keep me"));

    for (args, expected) in [
        (
            vec!["store", "restore", "talk", "../../etc"],
            "no backup \"../../etc\"",
        ),
        (vec!["store", "stats", "../x"], "is not a session id"),
        (
            vec!["store", "clear", "talk", "--history", "nope"],
            "no history \"nope\" (declared: default)",
        ),
        (vec!["store", "frobnicate"], "unrecognized subcommand"),
    ] {
        let (ok, _, err) = parlor_cli(&[], &args, data.path());
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

#[test]
fn a_restore_from_the_command_line_keeps_the_backup_it_puts_back() {
    let data = tempfile::tempdir().unwrap();
    let dialog = data.path().join(".chat-history/talk");
    std::fs::create_dir_all(&dialog).unwrap();
    let keep = [("HISTORY_BACKUP_RETENTION", "1")];
    std::fs::write(
        dialog.join("messages.json"),
        r#"[{"role":"user","text":"precious","ts":5}]"#,
    )
    .unwrap();
    let (ok, out, err) = parlor_cli(&keep, &["store", "clear", "talk"], data.path());
    assert!(ok, "{err}");
    let backup = out.trim().rsplit("backup ").next().unwrap().to_owned();
    std::fs::write(
        dialog.join("messages.json"),
        r#"[{"role":"user","text":"current","ts":9}]"#,
    )
    .unwrap();
    let (ok, _, err) = parlor_cli(&keep, &["store", "restore", "talk", &backup], data.path());
    assert!(ok, "{err}");
    let restored = std::fs::read_to_string(dialog.join("messages.json")).unwrap();
    assert!(restored.contains("precious"), "{restored}");
    let (ok, out, _) = parlor_cli(&keep, &["store", "backups", "talk"], data.path());
    assert!(ok);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.contains(&backup),
        "the restored backup is still there: {out}"
    );

    // The default retention (5): restoring the oldest of five.
    let mut made = Vec::new();
    for round in 0..5 {
        std::fs::write(
            dialog.join("messages.json"),
            format!(r#"[{{"role":"user","text":"round {round}","ts":{round}}}]"#),
        )
        .unwrap();
        let (ok, out, err) = parlor_cli(&[], &["store", "clear", "talk"], data.path());
        assert!(ok, "{err}");
        made.push(out.trim().rsplit("backup ").next().unwrap().to_owned());
    }
    let (ok, _, err) = parlor_cli(&[], &["store", "restore", "talk", &made[0]], data.path());
    assert!(ok, "{err}");
    let restored = std::fs::read_to_string(dialog.join("messages.json")).unwrap();
    assert!(restored.contains("round 0"), "{restored}");
    let (_, out, _) = parlor_cli(&[], &["store", "backups", "talk"], data.path());
    assert!(out.contains(&made[0]), "the restored backup is kept: {out}");
    assert_eq!(out.lines().count(), 5, "{out}");
}

#[test]
fn operators_export_import_and_search_conversations_from_the_command_line() {
    let data = tempfile::tempdir().unwrap();
    let dialog = data.path().join(".chat-history/talk");
    std::fs::create_dir_all(&dialog).unwrap();
    std::fs::write(
        dialog.join("messages.json"),
        r#"[{"role":"user","text":"Where is the key?\nUnder the Doormat, maybe","ts":5},{"role":"assistant","text":"ok","ts":6}]"#,
    )
    .unwrap();

    let (ok, markdown, err) = parlor_cli(
        &[],
        &["store", "export", "talk", "--format", "md"],
        data.path(),
    );
    assert!(ok, "{err}");
    assert!(
        markdown.contains("## User · 1970-01-01 00:00:00 UTC\n\nWhere is the key?"),
        "{markdown}"
    );
    let (ok, json, err) = parlor_cli(&[], &["store", "export", "talk"], data.path());
    assert!(ok, "{err}");
    let export: parlor_domain::transfer::Export = serde_json::from_str(&json).unwrap();
    assert_eq!(export.messages.len(), 2);

    // The export imports as a new conversation (an agent must be named: this one was
    // written without one), message for message.
    let file = data.path().join("talk.json");
    std::fs::write(&file, &json).unwrap();
    let file_arg = file.display().to_string();
    let (ok, _, err) = parlor_cli(&[], &["store", "import", &file_arg], data.path());
    assert!(!ok && err.contains("--agent"), "{err}");
    let (ok, out, err) = parlor_cli(
        &[],
        &["store", "import", &file_arg, "--agent", "general"],
        data.path(),
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("imported 2 message(s) as "), "{out}");
    let imported = out.split_whitespace().nth(4).unwrap().to_owned();
    let stored = std::fs::read_to_string(
        data.path()
            .join(".chat-history")
            .join(&imported)
            .join("messages.json"),
    )
    .unwrap();
    let stored: Vec<parlor_domain::Message> = serde_json::from_str(&stored).unwrap();
    let mut expected = export.messages.clone();
    for m in &mut expected {
        m.ensure_id();
    }
    assert_eq!(stored, expected);

    // Search finds both, with the matching line; a bad file stores nothing.
    let (ok, out, err) = parlor_cli(&[], &["store", "search", "doormat"], data.path());
    assert!(ok, "{err}");
    assert!(
        out.contains("default  talk  (untitled)\n    Under the Doormat, maybe"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "default  {imported}  Where is the key? Under the Doormat, maybe\n"
        )),
        "{out}"
    );
    let (ok, out, _) = parlor_cli(&[], &["store", "search", "crowbar"], data.path());
    assert!(
        ok && out.contains("no conversation contains \"crowbar\""),
        "{out}"
    );
    std::fs::write(
        &file,
        r#"[{"role": "user", "content": "hi"}, {"role": "robot"}]"#,
    )
    .unwrap();
    let (ok, _, err) = parlor_cli(
        &[],
        &["store", "import", &file_arg, "--agent", "general"],
        data.path(),
    );
    assert!(
        !ok && err.contains("message 2: role \"robot\" cannot be imported"),
        "{err}"
    );
    let (ok, out, _) = parlor_cli(&[], &["store", "list"], data.path());
    assert!(ok && out.contains("2 conversation(s)"), "{out}");
    let (ok, _, err) = parlor_cli(&[], &["store", "export", "nothing-here"], data.path());
    assert!(!ok && err.contains("no conversation nothing-here"), "{err}");
}

#[test]
fn the_admin_command_line_edits_the_configuration_file_and_refuses_bad_changes() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "# our settings\n[[histories]]\nid = \"default\"\nbackend = { type = \"file\" }\n",
    );
    let run = |args: &[&str]| parlor_cli(&[("PARLOR_CONFIG", &config)], args, dir.path());
    let (ok, out, _) = run(&["history", "list"]);
    assert!(ok);
    for line in [
        "token_budget",
        "0. policy (always first)",
        "1. sliding_window",
        "agent_max_ctx: 200",
        "max_users: 50",
        "session_idle_timeout_minutes: 60",
    ] {
        assert!(out.contains(line), "{line} missing from\n{out}");
    }
    for args in [
        vec!["history", "chain", "add", "token_budget"],
        vec!["history", "chain", "add", "role_alternation"],
        vec!["history", "chain", "move", "role_alternation", "1"],
        vec!["history", "chain", "remove", "sliding_window"],
        vec!["history", "max-ctx", "40"],
        vec!["max-users", "0"],
        vec!["session-timeout", "15"],
    ] {
        let (ok, _, err) = run(&args);
        assert!(ok, "{args:?}: {err}");
    }
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains("# our settings\n[[histories]]"),
        "comments kept:\n{text}"
    );
    assert!(
        text.contains("[history]\nchain = ["),
        "a [history] table:\n{text}"
    );
    let (_, out, _) = run(&["history", "list"]);
    for line in [
        "1. role_alternation",
        "2. token_budget",
        "agent_max_ctx: 40",
        "max_users: 0",
        "session_idle_timeout_minutes: 15",
    ] {
        assert!(out.contains(line), "{line} missing from\n{out}");
    }
    assert!(!out.contains(". sliding_window"), "{out}");

    for (args, expected) in [
        (vec!["history", "chain", "add", "policy"], "always first"),
        (vec!["history", "chain", "remove", "policy"], "always first"),
        (
            vec!["history", "chain", "move", "policy", "2"],
            "always first",
        ),
        (
            vec!["history", "chain", "move", "token_budget", "-1"],
            "position -1 is out of range",
        ),
        (
            vec!["history", "chain", "move", "token_budget", "0"],
            "position 0 is out of range",
        ),
        (
            vec!["history", "chain", "move", "token_budget", "9"],
            "positions 1 to 2",
        ),
        (
            vec!["history", "chain", "add", "summarize"],
            "unknown history processor \"summarize\"",
        ),
        (
            vec!["history", "chain", "add", "token_budget"],
            "already in the chain",
        ),
        (vec!["history", "max-ctx", "0"], "at least 1"),
        (vec!["max-users", "-1"], "0 (no limit) or more"),
        (vec!["session-timeout", "-5"], "0 (never) or more"),
    ] {
        let before = std::fs::read_to_string(&config).unwrap();
        let (ok, _, err) = run(&args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            before,
            "{args:?} changed the file"
        );
    }
}

/// `parlor history trim` with `args`, `stdin` as its input: (success, stdout, stderr).
fn trim(args: &[&str], stdin: &str) -> (bool, String, String) {
    use std::io::Write;
    let data = tempfile::tempdir().unwrap();
    let mut child = crate::support::process::command(&[], data.path())
        .args(["history", "trim"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn history_trim_prints_what_a_policy_sends() {
    let conversation = r#"[
        {"role": "assistant", "content": "opening reply"},
        {"role": "user", "content": "q1"},
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "tool", "content": "t2"},
        {"role": "assistant", "content": "a2"}
    ]"#;
    let sent = |args: &[&str]| -> Vec<(String, String)> {
        let (ok, out, err) = trim(args, conversation);
        assert!(ok, "{args:?}: {err}");
        let messages: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        messages
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_owned(),
                    m["content"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(r, c)| (r.to_string(), c.to_string()))
            .collect()
    };
    // lastN 1: the system message first, then the last user turn with what follows it.
    assert_eq!(
        sent(&["--policy", "lastN", "--length", "1"]),
        pairs(&[
            ("system", "be brief"),
            ("user", "q2"),
            ("tool", "t2"),
            ("assistant", "a2")
        ])
    );
    // 0 acts as 1; without preserving, system messages are dropped.
    assert_eq!(
        sent(&["--policy", "lastN", "--length", "0", "--no-preserve-system"]),
        pairs(&[("user", "q2"), ("tool", "t2"), ("assistant", "a2")])
    );
    // all: everything in order, the opening reply too (nothing before it was cut: an agent's
    // greeting is such a reply).
    assert_eq!(
        sent(&["--policy", "all", "--length", "5"]),
        pairs(&[
            ("assistant", "opening reply"),
            ("user", "q1"),
            ("system", "be brief"),
            ("assistant", "a1"),
            ("user", "q2"),
            ("tool", "t2"),
            ("assistant", "a2")
        ])
    );
    // lastN with more turns than there are: the same as all, system first.
    assert_eq!(
        sent(&["--policy", "lastN", "--length", "5"])[0].1,
        "be brief"
    );
    assert_eq!(
        sent(&["--policy", "none", "--length", "1"]),
        pairs(&[
            ("system", "be brief"),
            ("user", "q2"),
            ("tool", "t2"),
            ("assistant", "a2")
        ])
    );
    let (ok, out, _) = trim(&["--policy", "all", "--length", "1"], "[]");
    assert!(ok);
    assert_eq!(out.trim(), "[]");
}

#[test]
fn history_trim_refuses_bad_input_with_a_clear_message() {
    let good = r#"[{"role": "user", "content": "hi"}]"#;
    for (args, stdin, expected) in [
        (
            vec!["--policy", "LastN", "--length", "1"],
            good,
            "--policy: unknown history policy \"LastN\"",
        ),
        (
            vec!["--policy", "lastN", "--length", "5.9"],
            good,
            "--length",
        ),
        (
            vec!["--policy", "lastN", "--length", "2"],
            "not json",
            "stdin is not JSON",
        ),
        (
            vec!["--policy", "lastN", "--length", "2"],
            r#"{"role": "user", "content": "hi"}"#,
            "must be a JSON array",
        ),
        (
            vec!["--policy", "lastN", "--length", "2"],
            r#"[{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]"#,
            "message 1: unknown role \"bot\"",
        ),
        (
            vec!["--policy", "lastN", "--length", "2"],
            r#"[{"role": "user"}]"#,
            "message 0: missing field `content`",
        ),
        (vec!["--policy", "lastN"], good, "--length"),
    ] {
        let (ok, out, err) = trim(&args, stdin);
        assert!(!ok, "{args:?} {stdin}: succeeded with {out}");
        assert!(out.is_empty(), "nothing on stdout: {out}");
        assert!(err.contains(expected), "{args:?} {stdin}: {err}");
    }
}

/// Kills the server (SIGKILL) right after the first event (`meta`) of a new browser
/// conversation, five times, and checks every conversation is still its browser's alone.
fn owners_survive_a_kill_after_meta(extra: &[(&str, &str)]) {
    use std::io::Read;
    let data = tempfile::tempdir().unwrap();
    // A slow reply: the server is killed while the model is still answering.
    let mut vars = vec![("PARLOR_MIRROR_DELAY_MS", "500")];
    vars.extend_from_slice(extra);
    let mut sessions = Vec::new();
    for attempt in 0..5 {
        let mut server = start(&vars, data.path());
        let mut response = reqwest::blocking::Client::new()
            .post(server.url("/api/chat/general"))
            .header("cookie", BROWSER.as_str())
            .json(&serde_json::json!({"message": format!("first message {attempt}")}))
            .send()
            .unwrap();
        // Read until the first event (`meta`) is complete, then kill at once.
        let mut seen = Vec::new();
        let mut buffer = [0u8; 512];
        while !String::from_utf8_lossy(&seen).contains("\n\n") {
            let n = response.read(&mut buffer).unwrap();
            assert!(n > 0, "the stream ended before its first event");
            seen.extend_from_slice(&buffer[..n]);
        }
        server.kill();
        let events = String::from_utf8_lossy(&seen).into_owned();
        assert!(events.starts_with("event: meta"), "{events}");
        sessions.push(field(&events, "session_id").to_owned());
    }
    let server = start(&vars, data.path());
    let page = |session: &str, cookie: &str| {
        reqwest::blocking::Client::new()
            .get(server.url(&format!("/chat?agent=general&session={session}")))
            .header("cookie", cookie)
            .send()
            .unwrap()
    };
    let stranger = &crate::support::browser("0123456789abcdef0123456789abcdef");
    let stranger = stranger.as_str();
    for (attempt, session) in sessions.iter().enumerate() {
        let own = page(session, BROWSER.as_str());
        assert_eq!(own.status(), 200, "attempt {attempt}");
        assert!(own
            .text()
            .unwrap()
            .contains(&format!("first message {attempt}")));
        assert_eq!(
            page(session, stranger).status(),
            404,
            "attempt {attempt}: another browser must not see it"
        );
    }
}

#[test]
fn a_conversation_keeps_its_owner_when_the_server_dies_right_after_acknowledging_it() {
    owners_survive_a_kill_after_meta(&[]);
}

#[test]
fn on_redis_a_conversation_keeps_its_owner_when_the_server_dies_right_after_acknowledging_it() {
    let redis = RedisServer::start().unwrap();
    let config = crate::support::redis_history(&redis.url(), "crash:");
    let path = config.path().display().to_string();
    owners_survive_a_kill_after_meta(&[("PARLOR_CONFIG", &path)]);
}

#[test]
fn help_lists_every_environment_variable_with_its_default() {
    let data = tempfile::tempdir().unwrap();
    let (ok, out, err) = parlor_cli(&[], &["--help"], data.path());
    assert!(ok, "{err}");
    for var in parlor_server::config::vars::ALL {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(var.name()))
            .unwrap_or_else(|| panic!("{} missing from --help:\n{out}", var.name()));
        assert!(
            line.contains(&format!("[{}]", var.shown_default())),
            "{line}"
        );
    }
}

/// Sends SIGTERM to a running server and waits (at most 30 s) for it to exit.
fn terminate(server: &mut crate::support::process::Running) -> std::process::ExitStatus {
    let pid = server.child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running 30 s after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Starts a turn and reads its stream until `meta` and one `delta` arrived: (the response,
/// to read on or drop, and the session id). The client must outlive the response.
fn start_reply(
    client: &reqwest::blocking::Client,
    server: &crate::support::process::Running,
) -> (reqwest::blocking::Response, String) {
    use std::io::Read;
    let mut response = client
        .post(server.url("/api/chat/general"))
        .header("cookie", BROWSER.as_str())
        .json(&serde_json::json!({"message": "tell me everything"}))
        .send()
        .unwrap();
    let mut seen = String::new();
    let mut buffer = [0u8; 256];
    while !seen.contains("event: delta") {
        let n = response.read(&mut buffer).unwrap();
        assert!(n > 0, "the stream ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    let session = field(&seen, "session_id").to_owned();
    assert!(
        !seen.contains("event: done"),
        "the reply must still be running: {seen}"
    );
    (response, session)
}

/// The rest of a response whose start was read with `Read` (its `text()` would see only
/// what `Read` had not touched, which is nothing, and close the connection).
fn read_rest(mut response: reqwest::blocking::Response) -> std::io::Result<String> {
    use std::io::Read;
    let mut rest = String::new();
    response.read_to_string(&mut rest)?;
    Ok(rest)
}

/// The conversation as stored in a file history.
fn stored_messages(data: &std::path::Path, session: &str) -> Vec<serde_json::Value> {
    let path = data
        .join(".chat-history")
        .join(session)
        .join("messages.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn sigterm_lets_replies_finish_within_the_grace_period() {
    let data = tempfile::tempdir().unwrap();
    let vars = [
        ("PARLOR_MIRROR_DELAY_MS", "20"),
        ("PARLOR_SHUTDOWN_GRACE_SECS", "20"),
    ];
    let mut server = start(&vars, data.path());
    let client = reqwest::blocking::Client::new();
    let (response, session) = start_reply(&client, &server);
    let status = {
        let reader = std::thread::spawn(move || read_rest(response));
        let status = terminate(&mut server);
        let rest = reader.join().unwrap();
        let log: Vec<String> = server.lines.try_iter().collect();
        let rest = rest.unwrap_or_else(|e| panic!("{e:?} {log:?}"));
        assert!(
            rest.contains("event: done"),
            "the reply finished: {rest} {log:?}"
        );
        status
    };
    assert!(status.success(), "{status:?}");
    let messages = stored_messages(data.path(), &session);
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1]["role"], "assistant");
    assert!(messages[1]["meta"]["status"].is_null(), "{:?}", messages[1]);
}

#[test]
fn sigterm_stores_what_a_long_reply_has_when_the_grace_period_ends() {
    let data = tempfile::tempdir().unwrap();
    // About 80 words at 300 ms: far longer than the 1 s of grace.
    let vars = [
        ("PARLOR_MIRROR_DELAY_MS", "300"),
        ("PARLOR_SHUTDOWN_GRACE_SECS", "1"),
    ];
    // With the browser still listening: it is told, and the part is kept.
    let mut server = start(&vars, data.path());
    let client = reqwest::blocking::Client::new();
    let (response, session) = start_reply(&client, &server);
    let reader = std::thread::spawn(move || read_rest(response).unwrap_or_default());
    let started = std::time::Instant::now();
    let status = terminate(&mut server);
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "exits after the grace period, not after the reply"
    );
    let rest = reader.join().unwrap();
    assert!(rest.contains("shutting down"), "{rest}");
    let messages = stored_messages(data.path(), &session);
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[1]["meta"]["status"], "incomplete");
    assert!(!messages[1]["text"].as_str().unwrap().is_empty());

    // With the browser gone: the reply's part is stored before Parlor exits.
    let mut server = start(&vars, data.path());
    let client = reqwest::blocking::Client::new();
    let (response, session) = start_reply(&client, &server);
    drop(response);
    let status = terminate(&mut server);
    assert!(status.success(), "{status:?}");
    let messages = stored_messages(data.path(), &session);
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[1]["role"], "assistant");
    assert!(!messages[1]["text"].as_str().unwrap().is_empty());
}

#[test]
fn request_logs_carry_the_request_id_and_never_the_api_key_even_at_trace_level() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fake = runtime.block_on(fake_llm::FakeLlm::start()).unwrap();
    let key = "sk-trace-Qm4Zp8Lw2Xv6Rt0Ny5";
    let base = fake.base_url();
    let data = tempfile::tempdir().unwrap();
    let vars = [
        ("OPENAI_BASE_URL", base.as_str()),
        ("OPENAI_API_KEY", key),
        ("RUST_LOG", "trace"),
        ("PARLOR_LOG_FORMAT", "json"),
    ];
    let mut server = start(&vars, data.path());
    let client = reqwest::blocking::Client::new();
    let post = |message: &str, request_id: &str| {
        client
            .post(server.url("/api/chat/general"))
            .header("x-request-id", request_id)
            .json(&serde_json::json!({ "message": message }))
            .send()
            .unwrap()
    };
    let ok = post("hello", "req-hello-1");
    assert_eq!(ok.headers()["x-request-id"], "req-hello-1", "propagated");
    assert!(ok.text().unwrap().contains("event: done"));
    let failed = post("hi [echo-key]", "req-echo-2");
    assert!(failed.text().unwrap().contains("[redacted]"));
    // Without one, Parlor makes an id and returns it.
    let made = client.get(server.url("/healthz")).send().unwrap();
    assert_eq!(made.headers()["x-request-id"].len(), 36);
    // One that is not an id (too long, a fake log line, sent twice) is replaced, not logged.
    let flood = "f".repeat(250_000);
    let fake_line = "x level=ERROR msg=forged";
    for sent in [vec![flood.as_str()], vec![fake_line], vec!["a-1", "b-2"]] {
        let mut request = client.get(server.url("/healthz"));
        for value in &sent {
            request = request.header("x-request-id", *value);
        }
        let answer = request.send().unwrap();
        assert_eq!(answer.status(), 200);
        let returned: Vec<_> = answer.headers().get_all("x-request-id").iter().collect();
        assert_eq!(returned.len(), 1, "{sent:?}");
        assert_eq!(returned[0].len(), 36, "a new id instead of {sent:?}");
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    server.kill();
    let mut log: Vec<String> = server.log.lines().map(str::to_owned).collect();
    log.extend(server.lines.try_iter());
    let stderr = {
        use std::io::Read;
        let mut text = String::new();
        if let Some(mut err) = server.child.stderr.take() {
            let _ = err.read_to_string(&mut text);
        }
        text
    };
    let all = format!("{}\n{stderr}", log.join("\n"));
    assert!(!all.contains(&flood[..1000]) && !all.contains(fake_line));
    for fragment in key.as_bytes().windows(8) {
        let fragment = std::str::from_utf8(fragment).unwrap();
        assert!(!all.contains(fragment), "{fragment} logged");
    }
    // One JSON object per line; the failed reply's line is under its request's id.
    let lines: Vec<serde_json::Value> = log
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let failure = lines
        .iter()
        .find(|l| l.to_string().contains("model call for"))
        .expect("the failed model call is logged");
    assert!(failure.to_string().contains("req-echo-2"), "{failure}");
    let finished = lines
        .iter()
        .find(|l| {
            let text = l.to_string();
            text.contains("req-hello-1") && text.contains("latency")
        })
        .expect("one line per request with its status and latency");
    assert!(finished.to_string().contains("200"), "{finished}");
    drop(fake);
}

#[test]
fn metrics_can_be_served_on_a_separate_private_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let data = tempfile::tempdir().unwrap();
    let server = start(&[("PARLOR_METRICS_ADDR", addr.as_str())], data.path());
    chat(&server, serde_json::json!({"message": "count me"}));
    let text = reqwest::blocking::get(format!("http://{addr}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        text.contains("parlor_turns_total{outcome=\"done\"} 1"),
        "{text}"
    );
    // Under another name (a page of a name pointed at this address: DNS rebinding), not.
    let rebound = reqwest::blocking::Client::new()
        .get(format!("http://{addr}/metrics"))
        .header("host", format!("evil.test:{port}"))
        .send()
        .unwrap();
    assert_eq!(rebound.status(), 421);
    // The main address keeps it behind the admin token (here: none, so off).
    let main = reqwest::blocking::get(server.url("/metrics")).unwrap();
    assert_eq!(main.status(), 404);
}

/// A process killed while its replies hold their conversations' locks, then Redis stopped
/// for 1.5 s with persistence on: the first request in every conversation, on a new process,
/// is answered, never refused with "a reply is already being written".
#[test]
fn after_a_crash_and_a_redis_outage_the_next_request_in_every_conversation_is_answered() {
    let mut redis = RedisServer::start_persistent().unwrap();
    let config = crate::support::redis_history(&redis.url(), "crash-locks:");
    let path = config.path().display().to_string();
    let data = tempfile::tempdir().unwrap();
    let vars = [
        ("PARLOR_MIRROR_DELAY_MS", "300"),
        ("PARLOR_CONFIG", path.as_str()),
    ];
    let mut crashed = start(&vars, data.path());
    let client = reqwest::blocking::Client::new();
    let running: Vec<_> = (0..4).map(|_| start_reply(&client, &crashed)).collect();
    crashed.kill();
    let sessions: Vec<String> = running.into_iter().map(|(_, session)| session).collect();
    redis.stop();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    redis.restart().unwrap();
    let server = start(&vars, data.path());
    for session in &sessions {
        let events = chat(
            &server,
            serde_json::json!({"session_id": session, "message": "still there?"}),
        );
        assert!(
            events.contains("event: done"),
            "{session}: the first request after the crash must be answered: {events}"
        );
    }
}

#[test]
fn store_check_names_versions_that_do_not_lead_back_to_the_path() {
    let data = tempfile::tempdir().unwrap();
    let dialog = data.path().join(".chat-history/talk");
    std::fs::create_dir_all(&dialog).unwrap();
    std::fs::write(
        dialog.join("messages.json"),
        r#"[{"role":"user","text":"hello","ts":5,"id":"q1"},{"role":"assistant","text":"hi","ts":6,"id":"a1"}]"#,
    )
    .unwrap();
    let branch = |parent: &str, id: &str| {
        format!(
            r#"{{"parent":"{parent}","messages":[{{"role":"assistant","text":"x","ts":7,"id":"{id}"}}]}}"#
        )
    };
    let write_branches = |items: &[String]| {
        std::fs::write(
            dialog.join("branches.json"),
            format!(r#"{{"branches":[{}]}}"#, items.join(",")),
        )
        .unwrap()
    };
    write_branches(&[branch("q1", "a2")]);
    let (ok, out, err) = parlor_cli(&[], &["store", "check"], data.path());
    assert!(ok, "{out}{err}");
    assert!(out.contains("default: 1 conversation(s) checked"), "{out}");
    assert!(out.ends_with("no problem found\n"), "{out}");

    // A version off a message that is not stored, and one stored twice.
    let twice = r#"{"parent":"q1","messages":[{"role":"assistant","text":"x","ts":7,"id":"a4"},{"role":"user","text":"y","ts":8,"id":"a1"}]}"#;
    write_branches(&[branch("gone", "a3"), twice.to_owned()]);
    let (ok, out, err) = parlor_cli(&[], &["store", "check"], data.path());
    assert!(!ok, "{out}");
    assert!(
        err.contains(
            "default talk: branch 0 hangs off \"gone\", which does not lead back to the path"
        ),
        "{err}"
    );
    assert!(err.contains("message a1 is stored 2 times"), "{err}");
    assert!(err.contains("2 problem(s) found"), "{err}");
    // The leftover of a change a crash interrupted (a version already on the path) is not
    // a problem; a file set aside because it did not read is.
    write_branches(&[branch("q1", "a2"), branch("q1", "a1")]);
    let (ok, out, err) = parlor_cli(&[], &["store", "check"], data.path());
    assert!(ok, "{out}{err}");
    std::fs::write(dialog.join("branches.json.corrupt-20261128T000000Z"), "{").unwrap();
    let (ok, _, err) = parlor_cli(&[], &["store", "check"], data.path());
    assert!(!ok);
    assert!(
        err.contains("branches.json.corrupt-20261128T000000Z was set aside"),
        "{err}"
    );
    // The page still shows the chosen path.
    let server = start(&[], data.path());
    let page = reqwest::blocking::get(server.url("/chat?agent=general&session=talk")).unwrap();
    assert_ne!(page.status(), 500);
}

#[test]
fn on_redis_store_check_names_a_version_that_does_not_read() {
    let redis = RedisServer::start().unwrap();
    let config = crate::support::redis_history(&redis.url(), "chk:");
    let path = config.path().display().to_string();
    let vars = [("PARLOR_CONFIG", path.as_str())];
    let data = tempfile::tempdir().unwrap();
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut push = |key: &str, item: &str| {
        let _: i64 = redis::cmd("RPUSH")
            .arg(key)
            .arg(item)
            .query(&mut connection)
            .unwrap();
    };
    push(
        "chk:default:talk",
        r#"{"role":"user","text":"hello","ts":5,"id":"q1"}"#,
    );
    push(
        "chk:default:talk",
        r#"{"role":"assistant","text":"hi","ts":6,"id":"a1"}"#,
    );
    let branches = "chk:default:talk:branches";
    push(
        branches,
        r#"{"parent":"q1","messages":[{"role":"assistant","text":"x","ts":7,"id":"a2"}]}"#,
    );
    let (ok, out, err) = parlor_cli(&vars, &["store", "check"], data.path());
    assert!(ok, "{out}{err}");
    assert!(out.contains("default: 1 conversation(s) checked"), "{out}");
    // A damaged item: every reader skips it, and the check names it.
    push(branches, "{not json");
    let (ok, out, err) = parlor_cli(&vars, &["store", "check"], data.path());
    assert!(!ok, "{out}");
    assert!(
        err.contains("item 2 of chk:default:talk:branches does not read"),
        "{err}"
    );
    assert!(err.contains("1 problem(s) found"), "{err}");
}
