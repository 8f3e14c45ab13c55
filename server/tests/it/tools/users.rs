//! Per-user tool servers (`scope = "per_user"`) over real HTTP: npm
//! `@modelcontextprotocol/server-memory` keeps each account's entities apart; the values a
//! user sets (`user_secrets`) reach only their own process, sealed at rest, never shown
//! again; a server whose values a user has not set is unavailable to them, saying where to
//! set them; idle processes end, and `max_users` is kept.

use super::chat::parlor_with;
use super::hostile;
use crate::accounts::{add_users, client, cookie_of};
use crate::support::browser;
use parlor_domain::ChatEvent;
use parlor_server::tools::spec::{PerUser, Scope, ToolSpecs};
use parlor_server::tools::Tools;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn memory_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../end2end/node_modules/.bin/mcp-server-memory");
    assert!(
        bin.exists(),
        "run scripts/setup.sh test (it installs the npm packages)"
    );
    bin
}

/// The result's text of the one tool call of a reply.
fn result_of(reply: &crate::support::Reply) -> (bool, String) {
    let result = reply.events.iter().find_map(|e| match e {
        ChatEvent::ToolResult(r) => Some(r.clone()),
        _ => None,
    });
    let result = result.unwrap_or_else(|| panic!("no tool_result: {:?}", reply.events));
    (result.ok, result.error.unwrap_or(result.preview))
}

fn unavailable(reply: &crate::support::Reply) -> Option<parlor_domain::event::UnavailableEvent> {
    reply.events.iter().find_map(|e| match e {
        ChatEvent::Unavailable(u) => Some(u.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn two_accounts_never_see_each_others_memory() {
    let extra = format!(
        "[[mcp_servers]]\nid = \"memory\"\ncommand = {:?}\nscope = \"per_user\"\n\
         env = {{ MEMORY_FILE_PATH = \"{{user_dir}}/memory.jsonl\", PATH = {:?} }}\n",
        memory_bin().display().to_string(),
        std::env::var("PATH").unwrap_or_default(),
    );
    let (server, _agents, _config) =
        parlor_with(&extra, "never", 30, &[("PARLOR_AUTH", "local")]).await;
    add_users(&server).await;
    let (ada, bob) = (
        cookie_of(&server, "ada").await,
        cookie_of(&server, "bob").await,
    );
    let turn = |cookie: String, message: String| {
        let server = &server;
        async move {
            let headers = [("cookie", cookie.as_str())];
            let body = json!({ "message": message, "new_conversation": true });
            server
                .chat_request("timekeeper", "", body, None, &headers)
                .await
        }
    };
    let create = r#"/tool memory__create_entities {"entities": [{"name": "Ada's cat", "entityType": "pet", "observations": ["black"]}]}"#;
    let made = turn(ada.clone(), create.into()).await;
    let (ok, text) = result_of(&made);
    assert!(ok, "{text}");
    let read = "/tool memory__read_graph {}".to_owned();
    let (ok, bobs) = result_of(&turn(bob.clone(), read.clone()).await);
    assert!(ok && !bobs.contains("Ada's cat"), "bob sees: {bobs}");
    let (ok, adas) = result_of(&turn(ada.clone(), read.clone()).await);
    assert!(ok && adas.contains("Ada's cat"), "ada sees: {adas}");
    // One process each, each with its own file, in a folder only Parlor's user may enter.
    let status = server.services.tools.statuses();
    let memory = status.iter().find(|(id, _)| id == "memory").unwrap();
    assert_eq!(memory.1.to_string(), "per user (2 running)");
    let root = server.data.path().join("tool-users/memory");
    let folders: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(folders.len(), 2, "{folders:?}");
    use std::os::unix::fs::PermissionsExt;
    for folder in &folders {
        let mode = std::fs::metadata(folder).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    let files: Vec<String> = folders
        .iter()
        .filter_map(|f| std::fs::read_to_string(f.join("files/memory.jsonl")).ok())
        .collect();
    assert_eq!(files.len(), 1, "only ada wrote: {files:?}");
    assert!(files[0].contains("Ada's cat"));
    // The debug panel says whose process it is.
    let debug: serde_json::Value = client()
        .get(server.url("/api/chat/timekeeper/debug"))
        .header("cookie", &bob)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let states = debug["tool_servers"].to_string();
    assert!(states.contains("per user"), "{states}");
}

#[tokio::test]
async fn a_users_secret_reaches_only_their_process_and_is_never_shown_again() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let parlor_server::tools::spec::Transport::Stdio { command, args, env } =
        hostile::stdio(log.path(), "")
    else {
        unreachable!()
    };
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
    let extra = format!(
        "[[mcp_servers]]\nid = \"vault\"\ncommand = {command:?}\nargs = {args:?}\n\
         scope = \"per_user\"\nuser_secrets = [\"VAULT_TOKEN\"]\nenv = {{ {} }}\n",
        env.join(", ")
    );
    let (server, _agents, _config) = parlor_with(&extra, "never", 30, &[]).await;
    let (alice, bob) = (browser(&"a".repeat(32)), browser(&"b".repeat(32)));
    let ask = r#"/tool vault__env {"name": "VAULT_TOKEN"}"#;
    let turn = |cookie: String| {
        let server = &server;
        async move {
            let body = json!({ "message": ask, "new_conversation": true });
            server
                .chat_with("timekeeper", "", body, Some(&cookie))
                .await
        }
    };
    // Not set: unavailable, saying where to set it; the turn goes on without its tools.
    let first = turn(alice.clone()).await;
    let said = unavailable(&first).expect("an unavailable event");
    assert_eq!(said.server, "vault");
    assert!(said.why.contains("VAULT_TOKEN"), "{said:?}");
    assert_eq!(said.settings_url.as_deref(), Some("/account/tools"));
    let (ok, text) = result_of(&first);
    assert!(!ok && text.contains("Unknown tool"), "{text}");
    assert!(first.done().is_some());

    let put = |cookie: Option<String>, body: serde_json::Value| {
        let server = &server;
        async move {
            let mut request = client()
                .put(server.url("/api/account/tool-secrets/vault"))
                .json(&body);
            if let Some(cookie) = cookie {
                request = request.header("cookie", cookie);
            }
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(
        put(Some(alice.clone()), json!({"VAULT_TOKEN": "alice-1"}))
            .await
            .0,
        204
    );
    let (ok, text) = result_of(&turn(alice.clone()).await);
    assert!(ok && text.starts_with("alice-1 pid="), "{text}");
    // Its home is Alice's own folder.
    let home = r#"/tool vault__env {"name": "HOME"}"#;
    let body = json!({ "message": home, "new_conversation": true });
    let (_, home) = result_of(&server.chat_with("timekeeper", "", body, Some(&alice)).await);
    let folder = server.data.path().join("tool-users/vault");
    assert!(home.starts_with(&*folder.to_string_lossy()), "{home}");
    // A new value: the next turn's process has it (the old one was ended).
    assert_eq!(
        put(Some(alice.clone()), json!({"VAULT_TOKEN": "alice-2"}))
            .await
            .0,
        204
    );
    let (ok, again) = result_of(&turn(alice.clone()).await);
    assert!(ok && again.starts_with("alice-2 pid="), "{again}");
    assert_ne!(
        text.split("pid=").nth(1),
        again.split("pid=").nth(1),
        "a new process"
    );
    // Bob has set nothing: Alice's value is not his.
    let bobs = turn(bob.clone()).await;
    assert!(unavailable(&bobs).is_some(), "{:?}", bobs.events);

    // What can be read back: which names are set, never a value.
    let listed = |cookie: String| {
        let server = &server;
        async move {
            let response = client()
                .get(server.url("/api/account/tool-secrets"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            response.text().await.unwrap()
        }
    };
    let alices = listed(alice.clone()).await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&alices).unwrap(),
        json!([{"server": "vault", "secrets": [{"name": "VAULT_TOKEN", "set": true}]}])
    );
    assert!(listed(bob.clone()).await.contains(r#""set":false"#));
    let page = client()
        .get(server.url("/account/tools"))
        .header("cookie", &alice)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("VAULT_TOKEN") && page.contains("(set)"),
        "{page}"
    );
    assert!(!page.contains("alice-2"), "{page}");
    // Sealed at rest (the conversations hold it: the test's tool answered it).
    let kept = walk(&server.data.path().join("tool-secrets"));
    assert_eq!(kept.len(), 1, "{kept:?}");
    for entry in kept {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("alice-2"),
            "{} holds the value",
            entry.display()
        );
    }

    // Refused: no user, a name the server does not ask for, a bad value, not an object.
    let (status, body) = put(None, json!({"VAULT_TOKEN": "x"})).await;
    assert!(
        status == 400 && body.contains("no browser session"),
        "{status} {body}"
    );
    for bad in [
        json!({"OTHER": "x"}),
        json!({"VAULT_TOKEN": "two\nlines"}),
        json!({"VAULT_TOKEN": ""}),
        json!({"VAULT_TOKEN": 7}),
        json!(["VAULT_TOKEN"]),
    ] {
        let (status, body) = put(Some(alice.clone()), bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let huge = json!({ "VAULT_TOKEN": "x".repeat(200_000) });
    assert_eq!(put(Some(alice.clone()), huge).await.0, 413);
    // Removed: unavailable again.
    assert_eq!(
        put(Some(alice.clone()), json!({"VAULT_TOKEN": null}))
            .await
            .0,
        204
    );
    assert!(unavailable(&turn(alice).await).is_some());
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn per_user(log: &std::path::Path, max_users: usize, root: &std::path::Path) -> ToolSpecs {
    let mut spec = super::spec("echo", hostile::stdio(log, ""));
    spec.scope = Scope::PerUser(PerUser {
        idle: Duration::from_secs(900),
        max_users,
        secrets: vec![],
        headers: Default::default(),
    });
    ToolSpecs {
        servers: vec![spec],
        user_root: Some(root.to_owned()),
        ..Default::default()
    }
}

#[tokio::test]
async fn idle_processes_end_and_max_users_is_kept() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let tools = Tools::start(per_user(log.path(), 1, root.path()));
    let secrets = parlor_server::store::secrets::Secrets::in_memory(&[9; 32]);
    let agent = super::agent(&["echo"]);
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    let started = tools.prepare(&agent, Some(&a), &secrets).await;
    assert!(started.unavailable.is_empty(), "{:?}", started.unavailable);
    assert!(tools.started_for(&agent, Some(&a)).await.is_empty());
    let offered_a = tools.offered(&agent, Some(&a));
    assert_eq!(offered_a.len(), 10);
    assert!(
        tools.offered(&agent, Some(&b)).is_empty(),
        "b has none running"
    );
    // While a call of a's runs, a's process is neither ended as idle nor given to b.
    let stop = CancellationToken::new();
    let hang = super::call("echo__hang", "{}");
    let running = tools.call(
        &hang,
        (&offered_a, Some(a.as_str())),
        &stop,
        &super::NoRecall,
    );
    let meanwhile = async {
        tokio::task::yield_now().await;
        let refused = tools.prepare(&agent, Some(&b), &secrets).await;
        let why = &refused.unavailable[0].1;
        assert!(why.contains("serves 1 users at once"), "{why}");
        tools.end_idle(Duration::ZERO);
        assert_eq!(
            tools.offered(&agent, Some(&a)).len(),
            10,
            "not ended mid-call"
        );
        stop.cancel();
    };
    let (outcome, ()) = tokio::join!(running, meanwhile);
    assert!(!outcome.ok);
    // Between calls (a turn waiting for an approval or a model holds nothing), b's first
    // turn ends a's process to make room.
    let room = tools.prepare(&agent, Some(&b), &secrets).await;
    assert!(room.unavailable.is_empty(), "{:?}", room.unavailable);
    assert!(tools.offered(&agent, Some(&a)).is_empty());
    assert!(tools.started_for(&agent, Some(&b)).await.is_empty());
    tools.end_idle(Duration::ZERO);
    assert!(
        tools.offered(&agent, Some(&b)).is_empty(),
        "ended when idle"
    );
    let status = tools.statuses()[0].1.to_string();
    assert_eq!(status, "per user (0 running)");
    // No user, no per-user server.
    let none = tools.prepare(&agent, None, &secrets).await;
    assert!(
        none.unavailable[0].1.contains("no user"),
        "{:?}",
        none.unavailable
    );
    tools.shutdown().await;
}

#[tokio::test]
async fn an_http_server_gets_each_users_value_as_a_header() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let http = hostile::HostileHttp::start(log.path());
    let mut spec = super::spec(
        "api",
        parlor_server::tools::spec::Transport::Http {
            url: http.url.clone(),
            headers: Default::default(),
        },
    );
    spec.scope = Scope::PerUser(PerUser {
        idle: Duration::from_secs(900),
        max_users: 8,
        secrets: vec!["API_KEY".into()],
        headers: [("Authorization".into(), "Bearer {API_KEY}".into())].into(),
    });
    let tools = Tools::start(ToolSpecs {
        servers: vec![spec],
        ..Default::default()
    });
    let secrets = parlor_server::store::secrets::Secrets::in_memory(&[9; 32]);
    let agent = super::agent(&["api"]);
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    secrets
        .set(&a, "api", "API_KEY", Some("key-of-a"))
        .await
        .unwrap();
    secrets
        .set(&b, "api", "API_KEY", Some("key-of-b"))
        .await
        .unwrap();
    for (user, key) in [(&a, "Bearer key-of-a"), (&b, "Bearer key-of-b")] {
        let started = tools.prepare(&agent, Some(user), &secrets).await;
        assert!(started.unavailable.is_empty(), "{:?}", started.unavailable);
        assert!(tools.started_for(&agent, Some(user)).await.is_empty());
        let offered = tools.offered(&agent, Some(user));
        let call = super::call("api__header", r#"{"name": "authorization"}"#);
        let outcome = tools
            .call(
                &call,
                (&offered, Some(user.as_str())),
                &Default::default(),
                &super::NoRecall,
            )
            .await;
        assert_eq!(outcome.text(), key);
    }
    tools.shutdown().await;
}
