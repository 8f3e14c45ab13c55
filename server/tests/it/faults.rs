//! The faults a review found (issue 28), each as an outsider would try them: forged cookies,
//! names of things already stored, conversations written by another process.

use crate::support::{redis_history, TestServer};
use fake_llm::redis_server::RedisServer;
use serde_json::json;

/// A random 32-hex-digit value (a forged session id).
fn forged(n: usize) -> String {
    format!(
        "{:032x}",
        (n as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
    )
}

/// Sets of requests a forger might send, each with its own made-up cookie.
async fn forge(server: &TestServer, count: usize) {
    let key = parlor_server::ops::browser::CookieKey::parse(&"ab".repeat(32)).unwrap();
    let mut tasks = Vec::new();
    for n in 0..count {
        let http = server.http.clone();
        let id = forged(n);
        // Bare ids (as Parlor issued before it signed), ids signed with another key, and
        // garbage after a dot.
        let cookie = match n % 3 {
            0 => format!("parlor_session={id}"),
            1 => format!("parlor_session={}", key.sign(&id)),
            _ => format!("parlor_session={id}.{}", "0".repeat(32)),
        };
        let path = match n % 4 {
            0 => "/".to_owned(),
            1 => format!("/anything-{n}"),
            2 => "/chat/general".to_owned(),
            _ => String::new(),
        };
        let url = server.url(&path);
        let chat = server.url("/api/chat/general");
        tasks.push(tokio::spawn(async move {
            if path.is_empty() {
                let _ = http
                    .post(chat)
                    .header("cookie", cookie)
                    .json(&json!({"message": "let me in"}))
                    .send()
                    .await;
            } else {
                let _ = http.get(url).header("cookie", cookie).send().await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn forged_cookies_never_take_a_slot() {
    let config = crate::support::config_file("max_users = 2\n");
    let config_path = config.path().display().to_string();
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &config_path),
        ("PARLOR_RATE_LIMIT_PAGES", "0"),
        ("PARLOR_RATE_LIMIT_CHAT", "0"),
    ])
    .await;
    forge(&server, 1000).await;
    // A real browser: its first visit gets a signed cookie; it comes back and chats.
    let first = server.http.get(server.url("/")).send().await.unwrap();
    let cookie = first
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("parlor_session="))
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (status, _) = server.get("/", Some(&cookie)).await;
    assert_eq!(status, 200, "the real browser gets in");
    let reply = server
        .chat_with("general", "", json!({"message": "hello"}), Some(&cookie))
        .await;
    assert!(reply.done().is_some(), "{}", reply.body);
}

#[tokio::test]
async fn unknown_paths_are_rate_limited_static_files_not() {
    let server = TestServer::start(&[("PARLOR_RATE_LIMIT_PAGES", "3")]).await;
    let mut statuses = Vec::new();
    for n in 0..5 {
        statuses.push(server.get(&format!("/nothing-{n}"), None).await.0);
    }
    assert_eq!(statuses, [404, 404, 404, 429, 429]);
    // Static files are not counted.
    assert_ne!(server.get("/pkg/nothing.wasm", None).await.0, 429);
    // Readiness is limited too (on its own count); liveness never.
    let mut ready = Vec::new();
    for _ in 0..4 {
        ready.push(server.get("/readyz", None).await.0);
    }
    assert_eq!(ready[3], 429, "{ready:?}");
    for _ in 0..5 {
        assert_eq!(server.get("/healthz", None).await.0, 200);
    }
}

/// A raw GET of `path`, exactly as written (an HTTP client would resolve `..` first): the
/// status line's code, the headers and the body.
async fn raw_get(server: &TestServer, path: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: parlor\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn made_up_paths_under_pkg_are_a_plain_404_not_the_app() {
    // Anyone may read the site's files, without the pages' limit or a login: a path there
    // that names no file must not render the app, take a session or pass the login.
    let open = TestServer::start(&[("PARLOR_RATE_LIMIT_PAGES", "1")]).await;
    let accounts = crate::accounts::local(&[]).await;
    for server in [&open, &accounts] {
        for (path, expected) in [
            ("/pkg/nothing.wasm", 404),
            ("/pkg/0123456789abcdeg/parlor.js", 404),
            // Spellings that could mean another path never reach a route.
            ("/pkg/../chat", 400),
            ("/pkg/%2e%2e/chat", 400),
            ("/pkg//etc/passwd", 400),
        ] {
            for _ in 0..3 {
                let (status, head, body) = raw_get(server, path).await;
                assert_eq!(status, expected, "{path}: {head}");
                assert!(!head.contains("set-cookie"), "{path}: {head}");
                assert!(!head.contains("location"), "{path}: {head}");
                assert!(
                    !body.to_ascii_lowercase().contains("<html"),
                    "{path}: {body}"
                );
            }
        }
    }
    // The one page the limit allows is still there: those requests did not count.
    assert_eq!(open.get("/", None).await.0, 200);
    assert_eq!(open.get("/", None).await.0, 429);
}

#[tokio::test]
async fn failed_metrics_authorizations_are_limited() {
    let server = TestServer::start(&[("PARLOR_ADMIN_TOKEN", "right")]).await;
    let get = |token: &'static str| {
        server
            .http
            .get(server.url("/metrics"))
            .bearer_auth(token)
            .send()
    };
    for _ in 0..parlor_server::METRICS_FAILURES_PER_MINUTE {
        assert_eq!(get("guess").await.unwrap().status(), 401);
    }
    let limited = get("guess").await.unwrap();
    assert_eq!(limited.status(), 429);
    assert!(limited.headers().contains_key("retry-after"));
    // Even the right token waits now: a guess cannot be confirmed by trying.
    assert_eq!(get("right").await.unwrap().status(), 429);
}

/// A proposed name under which something is stored is refused: the chat and the debug
/// panel never reveal it.
async fn names_of_stored_things_are_refused(server: &TestServer) {
    let store = &server.services.histories.get("default").unwrap().store;
    let id = |s: &str| parlor_domain::ConversationId::parse(s).unwrap();
    store
        .put_summary(
            &id("only-summary"),
            &json!({"facts": ["the MCP client's secret"]}),
        )
        .await
        .unwrap();
    store
        .append(
            &id("only-messages"),
            &[parlor_domain::Message::user("x", 1)],
        )
        .await
        .unwrap();
    for name in ["only-summary", "only-messages"] {
        for message in ["!summary", "hello"] {
            let reply = server
                .chat("general", json!({"session_id": name, "message": message}))
                .await;
            assert_eq!(reply.status, 404, "{name} {message}: {}", reply.body);
        }
    }
    assert_eq!(
        store.summary(&id("only-summary")).await.unwrap(),
        Some(json!({"facts": ["the MCP client's secret"]}))
    );
    // A fresh name is an API client's to choose.
    let reply = server
        .chat(
            "general",
            json!({"session_id": "fresh-name", "message": "hi"}),
        )
        .await;
    assert!(reply.done().is_some(), "{}", reply.body);
    // A browser's new conversations get names the server makes.
    let browser = crate::support::browser("c0ffeec0ffeec0ffeec0ffeec0ffeec0");
    let reply = server
        .chat_with(
            "general",
            "",
            json!({"session_id": "browser-named", "message": "hi"}),
            Some(&browser),
        )
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
}

#[tokio::test]
async fn a_name_under_which_something_is_stored_cannot_be_claimed_on_files() {
    let server = TestServer::start(&[]).await;
    names_of_stored_things_are_refused(&server).await;
    // Backups alone (a conversation deleted) are something too.
    let folder = server.data.path().join(".chat-history/deleted/backups/x");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("messages.json"), "[]").unwrap();
    let reply = server
        .chat(
            "general",
            json!({"session_id": "deleted", "message": "mine now?"}),
        )
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
}

#[tokio::test]
async fn a_name_under_which_something_is_stored_cannot_be_claimed_on_redis() {
    let redis = RedisServer::start().unwrap();
    let config = redis_history(&redis.url(), "faults:");
    let config_path = config.path().display().to_string();
    let server = TestServer::start(&[("PARLOR_CONFIG", &config_path)]).await;
    names_of_stored_things_are_refused(&server).await;
}

#[test]
fn a_conversation_imported_while_the_server_runs_is_reachable_by_its_id() {
    let data = tempfile::tempdir().unwrap();
    let server = crate::support::process::start(&[("PARLOR_MIRROR_DELAY_MS", "0")], data.path());
    let export = data.path().join("talk.json");
    std::fs::write(
        &export,
        r#"[{"role":"user","content":"imported question"},{"role":"assistant","content":"imported answer"}]"#,
    )
    .unwrap();
    let output = crate::support::process::command(&[], data.path())
        .args([
            "store",
            "import",
            export.to_str().unwrap(),
            "--agent",
            "general",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let id = out.split_whitespace().nth(4).unwrap().to_owned();
    let http = reqwest::blocking::Client::new();
    let response = http
        .post(server.url("/api/chat/general"))
        .json(&json!({"session_id": id, "message": "and now?"}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().unwrap();
    assert!(body.contains("event: done"), "{body}");
    // The mirror saw the imported messages before the new one.
    assert!(body.contains("imported question"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_redis_outage_no_conversation_stays_locked() {
    // Redis keeps its data across the restart, as in production: the locks survive it.
    let mut redis = RedisServer::start_persistent().unwrap();
    let config = redis_history(&redis.url(), "outage:");
    let config_path = config.path().display().to_string();
    // The mirror writes word by word: each reply takes a while, so the outage falls in the
    // middle of replies.
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &config_path),
        ("PARLOR_MIRROR_DELAY_MS", "15"),
        ("PARLOR_RATE_LIMIT_CHAT", "0"),
    ])
    .await;
    let server = std::sync::Arc::new(server);
    let mut sessions = Vec::new();
    for n in 0..8 {
        let reply = server
            .chat("general", json!({"message": format!("conversation {n}")}))
            .await;
        assert!(reply.done().is_some(), "{}", reply.body);
        sessions.push(reply.session_id());
    }
    // Every conversation chats on while Redis goes away for 1.5 s and comes back.
    let chatting: Vec<_> = sessions
        .iter()
        .map(|session| {
            let (server, session) = (server.clone(), session.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for turn in 0..6 {
                    let reply = server
                        .chat(
                            "general",
                            json!({"session_id": session, "message": format!("turn {turn}")}),
                        )
                        .await;
                    statuses.push(reply.status);
                }
                statuses
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    redis.stop();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    redis.restart().unwrap();
    for task in chatting {
        let statuses = task.await.unwrap();
        // During the outage: the error event (200), never "a reply is being written".
        assert!(!statuses.contains(&409), "{statuses:?}");
    }
    // Once Redis is back, every conversation takes its next message at once.
    for session in &sessions {
        let reply = server
            .chat(
                "general",
                json!({"session_id": session, "message": "after"}),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.done().is_some(), "{}", reply.body);
    }
}

#[tokio::test]
async fn a_conversation_restored_while_the_server_runs_comes_back_for_its_browser() {
    let server = TestServer::start(&[]).await;
    let browser = crate::support::browser("5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e");
    let first = server
        .chat_with(
            "general",
            "",
            json!({"message": "a conversation worth keeping"}),
            Some(&browser),
        )
        .await;
    let session = first.session_id();
    let deleted = server
        .http
        .delete(server.url(&format!("/api/chat/general/sessions/{session}")))
        .header("cookie", &browser)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let backup = deleted.json::<serde_json::Value>().await.unwrap()["backup"]
        .as_str()
        .unwrap()
        .to_owned();
    // The operator brings it back with the CLI while the server runs.
    let output = crate::support::process::command(&[], server.data.path())
        .args(["store", "restore", &session, &backup])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Its browser finds it in its list of conversations (before anything asked for it by
    // its id), and chats in it again.
    let mut listed = false;
    for _ in 0..40 {
        let (_, page) = server.get("/chat?agent=general", Some(&browser)).await;
        if page.contains("a conversation worth keeping") {
            listed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(listed, "the sidebar lists it again");
    let again = server
        .chat_with(
            "general",
            "",
            json!({"session_id": session, "message": "still here?"}),
            Some(&browser),
        )
        .await;
    assert!(again.done().is_some(), "{}", again.body);
    assert!(again.text().contains("a conversation worth keeping"));
    // Another browser still cannot see it.
    let stranger = crate::support::browser("6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f");
    let (status, _) = server
        .get(
            &format!("/chat?agent=general&session={session}"),
            Some(&stranger),
        )
        .await;
    assert_eq!(status, 404);
}

mod interleaving {
    //! A store that lets another writer act between a request's read and its write: the
    //! next `load` of the armed conversation returns what was stored, then (before the
    //! request goes on) appends a message as an MCP client's save would.
    use async_trait::async_trait;
    use parlor_domain::context::Edit;
    use parlor_domain::{ConversationId, Message};
    use parlor_server::store::{
        BackupInfo, ConversationInfo, ConversationStore, Stats, StoreError, Tail,
    };
    use serde_json::Value;
    use std::sync::{Arc, Mutex};

    pub struct Interleaving {
        pub inner: Arc<dyn ConversationStore>,
        pub armed: Mutex<Option<(ConversationId, Message)>>,
    }

    #[async_trait]
    impl ConversationStore for Interleaving {
        fn describe(&self) -> String {
            self.inner.describe()
        }
        fn kind(&self) -> &'static str {
            self.inner.kind()
        }
        async fn load(&self, id: &ConversationId) -> Result<Vec<Message>, StoreError> {
            let read = self.inner.load(id).await?;
            let save = {
                let mut armed = self.armed.lock().unwrap();
                match armed.take() {
                    Some((at, message)) if &at == id => Some(message),
                    other => {
                        *armed = other;
                        None
                    }
                }
            };
            if let Some(message) = save {
                self.inner.append(id, &[message]).await?;
            }
            Ok(read)
        }
        async fn load_tail(&self, id: &ConversationId, count: usize) -> Result<Tail, StoreError> {
            self.inner.load_tail(id, count).await
        }
        async fn append(
            &self,
            id: &ConversationId,
            messages: &[Message],
        ) -> Result<(), StoreError> {
            self.inner.append(id, messages).await
        }
        async fn replace(
            &self,
            id: &ConversationId,
            messages: &[Message],
        ) -> Result<(), StoreError> {
            self.inner.replace(id, messages).await
        }
        async fn version(&self, id: &ConversationId) -> Result<u64, StoreError> {
            self.inner.version(id).await
        }
        async fn put_summary_if(
            &self,
            id: &ConversationId,
            version: u64,
            summary: &Value,
        ) -> Result<bool, StoreError> {
            self.inner.put_summary_if(id, version, summary).await
        }
        async fn branches(
            &self,
            id: &ConversationId,
        ) -> Result<parlor_domain::branch::Branches, StoreError> {
            self.inner.branches(id).await
        }
        async fn rebranch_if(
            &self,
            id: &ConversationId,
            change: &parlor_domain::branch::Rebranch,
        ) -> Result<bool, StoreError> {
            self.inner.rebranch_if(id, change).await
        }
        async fn prune(
            &self,
            id: &ConversationId,
            offset: usize,
            edits: &[Edit],
        ) -> Result<usize, StoreError> {
            self.inner.prune(id, offset, edits).await
        }
        async fn rewrite(&self, id: &ConversationId, edits: &[Edit]) -> Result<usize, StoreError> {
            self.inner.rewrite(id, edits).await
        }
        async fn summary(&self, id: &ConversationId) -> Result<Option<Value>, StoreError> {
            self.inner.summary(id).await
        }
        async fn put_summary(
            &self,
            id: &ConversationId,
            summary: &Value,
        ) -> Result<(), StoreError> {
            self.inner.put_summary(id, summary).await
        }
        async fn clear(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
            self.inner.clear(id).await
        }
        async fn delete(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
            self.inner.delete(id).await
        }
        async fn list(&self) -> Result<Vec<ConversationId>, StoreError> {
            self.inner.list().await
        }
        async fn stats(&self, id: &ConversationId) -> Result<Stats, StoreError> {
            self.inner.stats(id).await
        }
        async fn info(&self, id: &ConversationId) -> Result<Option<ConversationInfo>, StoreError> {
            self.inner.info(id).await
        }
        async fn exists(&self, id: &ConversationId) -> Result<bool, StoreError> {
            self.inner.exists(id).await
        }
        async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError> {
            self.inner.put_info(info).await
        }
        async fn list_owned(
            &self,
            owner: &str,
        ) -> Result<Vec<parlor_server::store::Listed>, StoreError> {
            self.inner.list_owned(owner).await
        }
    }
}

#[tokio::test]
async fn a_save_made_while_an_edit_or_a_regenerate_reads_is_never_lost() {
    use interleaving::Interleaving;
    use std::sync::Arc;
    let mut armed = None;
    let server = TestServer::start_with(&[], |setup| {
        setup.histories.wrap_store("default", |inner| {
            let store = Arc::new(Interleaving {
                inner,
                armed: Default::default(),
            });
            armed = Some(store.clone());
            store
        })
    })
    .await;
    let store = armed.unwrap();
    let first = server.chat("general", json!({"message": "question"})).await;
    let session = first.session_id();
    let id = parlor_domain::ConversationId::parse(&session).unwrap();
    let texts = |server: &TestServer| -> Vec<String> {
        server
            .stored(&session)
            .into_iter()
            .map(|m| m.text)
            .collect()
    };
    let arm = |text: &str| {
        *store.armed.lock().unwrap() = Some((
            id.clone(),
            parlor_domain::Message::assistant(text, parlor_server::store::now_ms()),
        ));
    };
    // Regenerate reads the conversation; an MCP save lands before it cuts the reply.
    arm("saved over MCP during a regenerate");
    let regenerate = server
        .chat(
            "general",
            json!({"session_id": session, "regenerate": true}),
        )
        .await;
    assert_eq!(regenerate.status, 409, "{}", regenerate.body);
    assert!(regenerate.body.contains("changed"), "{}", regenerate.body);
    assert_eq!(
        texts(&server).last().unwrap(),
        "saved over MCP during a regenerate",
        "the save is kept"
    );
    // The same for an edit of the last question.
    let second = server
        .chat(
            "general",
            json!({"session_id": session, "message": "second"}),
        )
        .await;
    let question = second.meta().message_id.clone().unwrap();
    arm("saved over MCP during an edit");
    let edit = server
        .chat(
            "general",
            json!({"session_id": session, "message": "second, edited", "edit": question}),
        )
        .await;
    assert_eq!(edit.status, 409, "{}", edit.body);
    let now = texts(&server);
    assert_eq!(now.last().unwrap(), "saved over MCP during an edit");
    assert!(now.contains(&"second".to_owned()), "{now:?}");
    // Nothing in between: both work.
    let edit = server
        .chat(
            "general",
            json!({"session_id": session, "message": "second, edited", "edit": question}),
        )
        .await;
    assert!(edit.done().is_some(), "{}", edit.body);
    let now = texts(&server);
    assert_eq!(now[now.len() - 2], "second, edited", "{now:?}");
    assert!(now.contains(&"saved over MCP during a regenerate".to_owned()));
}

/// Reads until the server closes the connection (or `limit` passes): whether it closed.
async fn closed_within(stream: &mut tokio::net::TcpStream, limit: std::time::Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 64 * 1024];
    let until = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_request_is_closed() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start(&[
        ("PARLOR_REQUEST_HEAD_TIMEOUT_SECS", "1"),
        ("PARLOR_IDLE_TIMEOUT_SECS", "2"),
        // The offline model's reply takes several seconds, word by word.
        ("PARLOR_MIRROR_DELAY_MS", "80"),
    ])
    .await;
    // Slowloris: a head that never ends, a byte at a time.
    let mut slow = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nhost: parlor\r\n")
        .await
        .unwrap();
    let trickle = async {
        for _ in 0..6 {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            if slow.write_all(b"x").await.is_err() {
                return;
            }
        }
    };
    trickle.await;
    assert!(
        closed_within(&mut slow, std::time::Duration::from_secs(3)).await,
        "a head trickling in for longer than its time is cut off"
    );
    // A connection that answered one request and then stays idle goes too.
    let mut idle = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: parlor\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut idle, std::time::Duration::from_secs(6)).await);
    // A reply that streams for longer than the idle time is not cut: it moves.
    let started = std::time::Instant::now();
    let reply = server
        .chat(
            "general",
            serde_json::json!({"message": "a question worth a long answer"}),
        )
        .await;
    assert!(reply.done().is_some(), "{}", reply.body);
    assert!(
        started.elapsed() > std::time::Duration::from_secs(2),
        "the reply outlasted the idle time"
    );
}

#[tokio::test]
async fn one_address_holds_a_limited_number_of_connections() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start(&[("PARLOR_MAX_CONNECTIONS_PER_ADDRESS", "3")]).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        held.push(stream);
    }
    // The fourth is closed at once, before anything is read from it.
    let mut fourth = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let _ = fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: parlor\r\n\r\n")
        .await;
    assert!(closed_within(&mut fourth, std::time::Duration::from_secs(3)).await);
    // One let go: there is room again.
    held.pop();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (status, _, body) = raw_get(&server, "/healthz").await;
    assert_eq!(status, 200, "{body}");
}
