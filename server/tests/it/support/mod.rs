//! A real Parlor server on a loopback port, with its own data folder, for HTTP tests.

pub mod process;

use parlor_domain::event::SseDecoder;
use parlor_domain::{ChatEvent, Message};
use parlor_server::config::agents::AgentCatalog;
use parlor_server::config::Config;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

pub struct TestServer {
    pub addr: SocketAddr,
    pub data: TempDir,
    pub http: reqwest::Client,
    /// The running server's services, for tests that act as its background tasks do.
    pub services: std::sync::Arc<parlor_server::state::Services>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
        self.services.tools.stop();
    }
}

/// The runtime the test servers run on.
fn server_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("server runtime")
    })
}

/// The cookie key test servers sign browser sessions with (`PARLOR_COOKIE_KEY`), so tests
/// can name browsers ahead of time.
pub const COOKIE_KEY: &str = "7061726c6f7220696e746567726174696f6e207465737420636f6f6b6965206b";

/// The `Cookie` header of browser `id` (32 hex digits) as a test server issues it: signed.
pub fn browser(id: &str) -> String {
    let key = parlor_server::ops::browser::CookieKey::parse(COOKIE_KEY).expect("a valid key");
    format!("parlor_session={}", key.sign(id))
}

pub fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents")
}

impl TestServer {
    /// Starts Parlor with the shipped agents and `vars` as its environment.
    pub async fn start(vars: &[(&str, &str)]) -> TestServer {
        TestServer::start_with(vars, |_| {}).await
    }

    /// [`TestServer::start`], with `change` applied to what the configuration set up (e.g.
    /// a history's store wrapped) before the server starts.
    pub async fn start_with(
        vars: &[(&str, &str)],
        change: impl FnOnce(&mut parlor_server::Setup),
    ) -> TestServer {
        let data = tempfile::tempdir().expect("temp dir");
        let mut env: Vec<(String, String)> = vec![
            (
                "PARLOR_AGENTS_DIR".into(),
                agents_dir().display().to_string(),
            ),
            ("PARLOR_DATA_DIR".into(), data.path().display().to_string()),
            ("PARLOR_MIRROR_DELAY_MS".into(), "0".into()),
            ("PARLOR_COOKIE_KEY".into(), COOKIE_KEY.into()),
        ];
        for (key, value) in vars {
            env.retain(|(k, _)| k != key);
            env.push((key.to_string(), value.to_string()));
        }
        let config = Config::from_vars(env).expect("valid test config");
        let (agents, problems) = AgentCatalog::load_dir(&config.agents_dir).expect("agents");
        assert!(problems.is_empty(), "{problems:?}");
        let mut setup = parlor_server::setup(&config, &agents)
            .await
            .expect("histories");
        change(&mut setup);
        // Background tasks (tool servers) run where the server does.
        let services = {
            let _runtime = server_runtime().enter();
            parlor_server::services(config, agents, setup)
        };
        let options = leptos::config::LeptosOptions::builder()
            .output_name("parlor")
            .build();
        let app = parlor_server::router(options, services.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("addr");
        // Every test server runs on one shared multi-threaded runtime, as Parlor does in
        // production; each test's own runtime only runs its client side.
        // The same guarded listener the binary serves with.
        let limits = parlor_server::ops::connections::Limits::of(&services.config);
        let task = server_runtime().spawn(async move {
            use axum::serve::ListenerExt;
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let listener =
                parlor_server::ops::connections::Guarded::new(listener, limits).tap_io(|_| {});
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app).await.expect("serve");
        });
        TestServer {
            addr,
            data,
            // A request that never completes fails the test instead of hanging the suite.
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()
                .expect("HTTP client"),
            services,
            task,
        }
    }

    /// Starts a fake OpenAI-compatible upstream and Parlor in front of it.
    pub async fn with_upstream(extra: &[(&str, &str)]) -> (fake_llm::FakeLlm, TestServer) {
        let fake = fake_llm::FakeLlm::start().await.expect("fake upstream");
        let base = fake.base_url();
        let mut vars = vec![("OPENAI_BASE_URL", base.as_str())];
        vars.extend_from_slice(extra);
        let server = TestServer::start(&vars).await;
        (fake, server)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// GETs `path` (with a cookie when given): the status and the body.
    pub async fn get(&self, path: &str, cookie: Option<&str>) -> (u16, String) {
        let mut request = self.http.get(self.url(path));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }

    /// GETs `path` as an admin (the admin token in its header): its body.
    pub async fn admin_get(&self, path: &str, token: &str) -> String {
        let request = self.http.get(self.url(path));
        let response = request.header("x-parlor-admin-token", token).send().await;
        response.expect("request").text().await.expect("body")
    }

    /// Posts a chat turn and reads the whole event stream.
    pub async fn chat(&self, agent: &str, body: serde_json::Value) -> Reply {
        self.chat_with(agent, "", body, None).await
    }

    pub async fn chat_with(
        &self,
        agent: &str,
        query: &str,
        body: serde_json::Value,
        cookie: Option<&str>,
    ) -> Reply {
        self.chat_request(agent, query, body, cookie, &[]).await
    }

    /// A chat turn with extra headers.
    pub async fn chat_request(
        &self,
        agent: &str,
        query: &str,
        body: serde_json::Value,
        cookie: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = self
            .http
            .post(self.url(&format!("/api/chat/{agent}{query}")))
            .json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let set_cookies = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect();
        let body = response.text().await.expect("body");
        let events = if content_type.starts_with("text/event-stream") {
            parse_events(body.as_bytes())
        } else {
            Vec::new()
        };
        Reply {
            status,
            content_type,
            body,
            events,
            set_cookies,
        }
    }

    /// The conversation as stored on disk.
    pub fn stored(&self, session_id: &str) -> Vec<Message> {
        let path = self
            .data
            .path()
            .join(".chat-history")
            .join(session_id)
            .join("messages.json");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).expect("valid messages.json"),
            Err(_) => Vec::new(),
        }
    }

    /// Waits (bounded) until the stored conversation satisfies `done`.
    pub async fn stored_eventually(
        &self,
        session_id: &str,
        done: impl Fn(&[Message]) -> bool,
    ) -> Vec<Message> {
        for _ in 0..200 {
            let messages = self.stored(session_id);
            if done(&messages) {
                return messages;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!(
            "stored conversation never reached the expected state: {:?}",
            self.stored(session_id)
        );
    }

    /// The dialogs' folders (not the lock files' folder, `.locks`).
    pub fn dialog_count(&self) -> usize {
        std::fs::read_dir(self.data.path().join(".chat-history"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .count()
            })
            .unwrap_or(0)
    }
}

pub fn parse_events(bytes: &[u8]) -> Vec<ChatEvent> {
    SseDecoder::default()
        .push(bytes)
        .into_iter()
        .map(|data| serde_json::from_str(&data).expect("event JSON"))
        .collect()
}

pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: String,
    pub events: Vec<ChatEvent>,
    pub set_cookies: Vec<String>,
}

/// A configuration file whose `default` history is in the Redis at `url`, under `key_prefix`.
pub fn redis_history(url: &str, key_prefix: &str) -> tempfile::NamedTempFile {
    config_file(&format!(
        "[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{url}\", key_prefix = \"{key_prefix}\" }}\n"
    ))
}

/// A conversation of `general` without an owner, holding one user message `text`, as an
/// import or an MCP client makes one.
pub async fn ownerless(server: &TestServer, id: &str, text: &str) -> String {
    let store = &server.services.histories.get("default").unwrap().store;
    let id = parlor_domain::ConversationId::parse(id).unwrap();
    store
        .put_info(&parlor_server::store::ConversationInfo {
            agent_id: "general".into(),
            ..parlor_server::store::ConversationInfo::bare(&id, Some(1))
        })
        .await
        .unwrap();
    store
        .append(&id, &[parlor_domain::Message::user(text, 1)])
        .await
        .unwrap();
    id.to_string()
}

/// A configuration file with `text`, removed when dropped.
pub fn config_file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), text).expect("write config");
    file
}

impl Reply {
    /// The value of the `parlor_chat` cookie the response set.
    pub fn chat_cookie(&self) -> Option<String> {
        self.set_cookies.iter().find_map(|v| {
            v.strip_prefix("parlor_chat=")
                .map(|v| v.split(';').next().unwrap_or_default().to_owned())
        })
    }

    pub fn meta(&self) -> &parlor_domain::MetaEvent {
        match self.events.first() {
            Some(ChatEvent::Meta(meta)) => meta,
            other => panic!("first event is not meta: {other:?} (body {})", self.body),
        }
    }

    pub fn session_id(&self) -> String {
        self.meta().session_id.clone()
    }

    pub fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                ChatEvent::Delta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    pub fn error(&self) -> Option<&str> {
        self.events.iter().find_map(|e| match e {
            ChatEvent::Error { message } => Some(message.as_str()),
            _ => None,
        })
    }

    pub fn notice(&self) -> Option<&str> {
        self.events.iter().find_map(|e| match e {
            ChatEvent::Notice { text } => Some(text.as_str()),
            _ => None,
        })
    }

    pub fn done(&self) -> Option<&parlor_domain::DoneEvent> {
        self.events.iter().find_map(|e| match e {
            ChatEvent::Done(d) => Some(&**d),
            _ => None,
        })
    }

    /// The JSON error of a refused request.
    pub fn json_error(&self) -> String {
        let value: serde_json::Value = serde_json::from_str(&self.body)
            .unwrap_or_else(|_| panic!("not a JSON error: {}", self.body));
        value["error"].as_str().expect("error field").to_owned()
    }
}
