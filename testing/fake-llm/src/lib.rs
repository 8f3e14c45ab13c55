//! Test fixtures for Parlor: a scriptable OpenAI-compatible Chat Completions server, and a
//! throwaway `redis-server` ([`redis_server::RedisServer`]).
//!
//! It is a real HTTP server on loopback. What it does is chosen by directives in the last
//! user message, so a test (or a person in the browser) can provoke every upstream fault:
//!
//! | directive       | behaviour                                                        |
//! |-----------------|------------------------------------------------------------------|
//! | (none)          | streams `Echo: <message>` a few words at a time, then usage      |
//! | `[slow]`        | streams 60 words, one every 150 ms                               |
//! | `[words:N]`     | streams N words, one every 80 ms                                 |
//! | `[status:NNN]`  | answers HTTP NNN with an OpenAI error body                       |
//! | `[fail-once]`   | answers 503 the first time it sees this exact message, then echoes |
//! | `[malformed]`   | streams a chunk that is not JSON                                 |
//! | `[drop]`        | streams two chunks, then cuts the connection                     |
//! | `[hang]`        | never answers                                                    |
//! | `[stall]`       | streams one chunk, then goes silent                              |
//! | `[cached]`      | as (none), reporting half the prompt's tokens as cached          |
//! | `[flood]`       | streams 3 MiB of text in 64 KiB pieces, then finishes           |
//!
//! `[status:429]` comes with `Retry-After: 7`. Every request body is recorded; `GET
//! /_requests` returns them as a JSON array.
//!
//! It speaks Anthropic's Messages API too (`POST /v1/messages`, see [`messages`]), and
//! emulates a provider's prompt cache ([`cache`]): always on the Messages API, on Chat
//! Completions when started with [`FakeLlm::start_with_prefix_cache`] (or `--prefix-cache`),
//! reported as `prompt_tokens_details.cached_tokens`.

pub mod cache;
mod messages;
pub mod redis_server;
mod tools;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
pub struct Recorder {
    requests: Arc<Mutex<Vec<Value>>>,
    authorizations: Arc<Mutex<Vec<Option<String>>>>,
    headers: Arc<Mutex<Vec<axum::http::HeaderMap>>>,
    failed_once: Arc<Mutex<HashSet<String>>>,
    cache: Arc<Mutex<cache::PrefixCache>>,
    /// Whether Chat Completions report the emulated cache (the Messages API always does).
    prefix_cache: bool,
}

impl Recorder {
    /// A recorder whose Chat Completions report the emulated prompt cache.
    pub fn with_prefix_cache() -> Recorder {
        Recorder {
            prefix_cache: true,
            ..Recorder::default()
        }
    }

    /// A Chat Completions request's prompt tokens, and those the emulated cache served
    /// (`None` when it is off).
    fn prompt_tokens(&self, request: &Value) -> (u64, Option<u64>) {
        if !self.prefix_cache {
            return (request.to_string().len() as u64 / 4, None);
        }
        let units = cache::units_of_chat(request);
        let used = self.cache.lock().expect("cache lock").lookup(&units, false);
        (used.read + used.fresh, Some(used.read))
    }

    fn note_headers(&self, headers: &axum::http::HeaderMap) {
        self.headers
            .lock()
            .expect("recorder lock")
            .push(headers.clone());
    }

    fn note_authorization(&self, value: Option<String>) {
        self.authorizations
            .lock()
            .expect("recorder lock")
            .push(value);
    }

    fn note_request(&self, request: Value) {
        self.requests.lock().expect("recorder lock").push(request);
    }

    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("recorder lock").clone()
    }

    /// The `Authorization` header of each request, oldest first.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.authorizations.lock().expect("recorder lock").clone()
    }

    /// Every header of each request, oldest first.
    pub fn headers(&self) -> Vec<axum::http::HeaderMap> {
        self.headers.lock().expect("recorder lock").clone()
    }
}

/// The fake's routes, under `/v1` like OpenAI's.
pub fn router(recorder: Recorder) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages::messages))
        .route("/v1/models", get(models))
        .route("/_requests", get(recorded))
        .with_state(recorder)
}

/// A running fake server.
pub struct FakeLlm {
    pub addr: SocketAddr,
    recorder: Recorder,
    task: tokio::task::JoinHandle<()>,
}

impl FakeLlm {
    /// Starts on a free loopback port.
    pub async fn start() -> std::io::Result<FakeLlm> {
        Self::start_with(Recorder::default()).await
    }

    /// Starts with Chat Completions reporting the emulated prompt cache.
    pub async fn start_with_prefix_cache() -> std::io::Result<FakeLlm> {
        Self::start_with(Recorder::with_prefix_cache()).await
    }

    async fn start_with(recorder: Recorder) -> std::io::Result<FakeLlm> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = router(recorder.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeLlm {
            addr,
            recorder,
            task,
        })
    }

    /// The value for `OPENAI_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request body received so far, oldest first.
    pub fn requests(&self) -> Vec<Value> {
        self.recorder.requests()
    }

    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.recorder.authorizations()
    }

    /// Every header of each request, oldest first.
    pub fn headers(&self) -> Vec<axum::http::HeaderMap> {
        self.recorder.headers()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))
}

async fn recorded(State(recorder): State<Recorder>) -> Json<Value> {
    Json(Value::Array(recorder.requests()))
}

async fn chat_completions(
    State(recorder): State<Recorder>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    recorder.note_authorization(authorization.clone());
    recorder.note_headers(&headers);
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
    };
    recorder.note_request(request.clone());
    let last_user = last_user_text(&request);
    let model = request["model"].as_str().unwrap_or("fake-model").to_owned();
    if let Some(refused) = refusal(&recorder, authorization.as_deref(), &last_user).await {
        return refused;
    }
    let (prompt_tokens, cached) = recorder.prompt_tokens(&request);
    let include_usage = request["stream_options"]["include_usage"] == json!(true);
    if request["stream"] == json!(true) {
        if let Some(mut steps) = tools::steps(&model, &request, &last_user) {
            // As providers do, every call reports its usage, tool calls included: before
            // the end of the stream.
            if include_usage {
                let done = steps.pop();
                steps.push(Step::Data(json!({
                    "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
                    "choices": [], "usage": usage(prompt_tokens, 5),
                })));
                steps.extend(done);
            }
            return sse(steps);
        }
    }
    if request["stream"] != json!(true) {
        let text = format!("Echo: {last_user}");
        return Json(json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": usage(prompt_tokens, 3),
        }))
        .into_response();
    }
    let mut steps = steps(&model, &last_user, include_usage.then_some(prompt_tokens));
    if let Some(cached) = cached {
        report_cached(&mut steps, cached);
    }
    sse(steps)
}

/// Adds the emulated cache's share to the usage chunk of `steps`.
fn report_cached(steps: &mut [Step], cached: u64) {
    for step in steps {
        if let Step::Data(chunk) = step {
            if chunk.get("usage").is_some() {
                chunk["usage"]["prompt_tokens_details"] = json!({"cached_tokens": cached});
            }
        }
    }
}

/// The text of the last user message: a string, or the first text part of its content.
pub(crate) fn last_user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| {
            m["content"].as_str().or_else(|| {
                m["content"].as_array().and_then(|parts| {
                    parts
                        .iter()
                        .find(|p| p["type"] == "text")
                        .and_then(|p| p["text"].as_str())
                })
            })
        })
        .unwrap_or_default()
        .to_owned()
}

/// What the directives in the user's message make the fake do instead of answering: an
/// error page echoing the credentials (`[echo-key]`), a status (`[status-N]`), one failure
/// (`[fail-once]`), or no answer at all (`[hang]`).
pub(crate) async fn refusal(
    recorder: &Recorder,
    authorization: Option<&str>,
    last_user: &str,
) -> Option<Response> {
    if last_user.contains("[echo-key]") {
        // A proxy's error page that echoes the start of the credentials it was given.
        let token = authorization
            .unwrap_or_default()
            .trim_start_matches("Bearer ");
        let cut: String = token.chars().take(14).collect();
        let page = format!(
            "<html><body><h1>502 Bad Gateway</h1><p>upstream refused credentials {cut}…</p></body></html>"
        );
        let html = [(header::CONTENT_TYPE, "text/html")];
        return Some((StatusCode::BAD_GATEWAY, html, page).into_response());
    }
    if let Some(code) = directive_status(last_user) {
        return Some(openai_error(code, "The fake model was told to fail."));
    }
    if last_user.contains("[fail-once]") {
        let mut failed = recorder.failed_once.lock().expect("recorder lock");
        if failed.insert(last_user.to_owned()) {
            let overloaded = "The fake model is overloaded.";
            return Some(openai_error(StatusCode::SERVICE_UNAVAILABLE, overloaded));
        }
    }
    if last_user.contains("[hang]") {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    None
}

/// The streamed reply to `last_user`: a fault it asks for (`[malformed]`, `[drop]`,
/// `[stall]`), paced words, or an echo (with usage for `prompt_tokens` when asked).
pub(crate) fn steps(model: &str, last_user: &str, prompt_tokens: Option<u64>) -> Vec<Step> {
    if last_user.contains("[malformed]") {
        return vec![
            Step::Data(chunk(model, Some("Hello"), None)),
            Step::Raw("data: {this is not json\n\n".into()),
        ];
    }
    if last_user.contains("[drop]") {
        return vec![
            Step::Data(chunk(model, Some("Partial "), None)),
            Step::Data(chunk(model, Some("reply"), None)),
            Step::Pause(Duration::from_millis(50)),
            Step::Cut,
        ];
    }
    if last_user.contains("[stall]") {
        return vec![
            Step::Data(chunk(model, Some("Waiting"), None)),
            Step::Pause(Duration::from_secs(3600)),
        ];
    }
    if last_user.contains("[flood]") {
        let piece = "flood ".repeat(64 * 1024 / 6);
        let mut steps: Vec<Step> = (0..48)
            .map(|_| Step::Data(chunk(model, Some(&piece), None)))
            .collect();
        steps.push(Step::Data(chunk(model, None, Some("stop"))));
        steps.push(Step::Raw("data: [DONE]\n\n".into()));
        return steps;
    }
    if let Some((count, pause)) = paced_words(last_user) {
        let mut steps = Vec::new();
        for i in 0..count {
            steps.push(Step::Data(chunk(model, Some(&format!("word{i} ")), None)));
            steps.push(Step::Pause(pause));
        }
        steps.push(Step::Data(chunk(model, None, Some("stop"))));
        steps.push(Step::Raw("data: [DONE]\n\n".into()));
        return steps;
    }
    echo(model, last_user, prompt_tokens)
}

/// "Echo: <text>", two words a chunk, then the usage when asked for.
fn echo(model: &str, last_user: &str, prompt_tokens: Option<u64>) -> Vec<Step> {
    let text = format!("Echo: {last_user}");
    let pieces: Vec<&str> = text.split_inclusive(' ').collect();
    let mut steps: Vec<Step> = pieces
        .chunks(2)
        .map(|c| Step::Data(chunk(model, Some(&c.concat()), None)))
        .collect();
    steps.push(Step::Data(chunk(model, None, Some("stop"))));
    if let Some(prompt_tokens) = prompt_tokens {
        let mut usage = usage(prompt_tokens, pieces.len() as u64);
        if last_user.contains("[cached]") {
            usage["prompt_tokens_details"] = json!({"cached_tokens": prompt_tokens / 2});
        }
        steps.push(Step::Data(json!({
            "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
            "choices": [], "usage": usage,
        })));
    }
    steps.push(Step::Raw("data: [DONE]\n\n".into()));
    steps
}

/// Plays `steps` as a server-sent event stream.
fn sse(steps: Vec<Step>) -> Response {
    play(steps, false)
}

/// The same, each event named by its data's `type` (as the Messages API sends them).
pub(crate) fn sse_named(steps: Vec<Step>) -> Response {
    play(steps, true)
}

fn play(steps: Vec<Step>, named: bool) -> Response {
    let stream = futures::stream::iter(steps).then(move |step| async move {
        match step {
            Step::Data(value) if named => {
                let name = value["type"].as_str().unwrap_or("message").to_owned();
                Ok(Bytes::from(format!("event: {name}\ndata: {value}\n\n")))
            }
            Step::Data(value) => Ok(Bytes::from(format!("data: {value}\n\n"))),
            Step::Raw(text) => Ok(Bytes::from(text)),
            Step::Pause(d) => {
                tokio::time::sleep(d).await;
                Ok(Bytes::new())
            }
            Step::Cut => Err(std::io::Error::other("connection cut by the fake")),
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("static response parts")
}

pub(crate) enum Step {
    Data(Value),
    Raw(String),
    Pause(Duration),
    Cut,
}

fn chunk(model: &str, content: Option<&str>, finish: Option<&str>) -> Value {
    let delta = match content {
        Some(text) => json!({"role": "assistant", "content": text}),
        None => json!({}),
    };
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// `[slow]` or `[words:N]`: how many words to stream, and the pause after each.
fn paced_words(message: &str) -> Option<(usize, Duration)> {
    if message.contains("[slow]") {
        return Some((60, Duration::from_millis(150)));
    }
    let start = message.find("[words:")? + "[words:".len();
    let count = message[start..].split(']').next()?.parse::<usize>().ok()?;
    Some((count.min(10_000), Duration::from_millis(80)))
}

fn directive_status(message: &str) -> Option<StatusCode> {
    let start = message.find("[status:")? + "[status:".len();
    let code = message[start..].split(']').next()?.parse::<u16>().ok()?;
    StatusCode::from_u16(code).ok()
}

fn openai_error(status: StatusCode, message: &str) -> Response {
    let body =
        json!({"error": {"message": message, "type": "fake_error", "code": status.as_u16()}});
    let mut response = (status, Json(body)).into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("7"));
    }
    response
}
