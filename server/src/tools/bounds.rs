//! What a tool server sends is bounded before rmcp parses it: a message longer than
//! `max_read_bytes` ends the connection (stdio) or the call (HTTP), and a call's answer with
//! more than `max_result_items` content items is replaced, unparsed, by a JSON-RPC error.
//! (Parsed into typed content, a quarter of a million empty items within 8 MiB costs
//! Parlor hundreds of MiB; counted here they cost nothing.)

pub use super::verdict::{verdict, Verdict, MAX_VALUES};
use futures::{StreamExt, TryStreamExt};
use reqwest_rmcp::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Why Parlor closed a connection (a message too large), for the calls waiting on it.
pub type Fault = Arc<Mutex<Option<String>>>;

/// The bounds of one server.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub max_bytes: usize,
    pub max_items: usize,
}

/// A stdio server's output, a line at a time: a line longer than `max_bytes` fails the
/// read (which ends the connection, `fault` saying why); an answer with too many items is
/// handed on as an error instead.
pub struct Lines<R> {
    inner: R,
    bounds: Bounds,
    fault: Fault,
    /// The line being read.
    line: Vec<u8>,
    /// Whole lines ready to hand on, from `ready_at`.
    ready: Vec<u8>,
    ready_at: usize,
    /// The server's own requests in the current second: when it began, and how many.
    requests: (std::time::Instant, u32),
}

/// The most requests a stdio server may send Parlor in a second. Each gets an answer that
/// waits to be written; a server that floods them while never reading its input would pile
/// the answers up without end.
pub const MAX_SERVER_REQUESTS_PER_SECOND: u32 = 50;

/// Whether `line` is a request of the server's (a method and an id), read only when it
/// names a method.
fn is_server_request(line: &[u8]) -> bool {
    if memchr::memmem::find(line, b"\"method\"").is_none() {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Shape {
        method: Option<serde::de::IgnoredAny>,
        id: Option<serde_json::Value>,
    }
    serde_json::from_slice::<Shape>(line)
        .is_ok_and(|s| s.method.is_some() && s.id.is_some_and(|id| !id.is_null()))
}

impl<R> Lines<R> {
    pub fn new(inner: R, bounds: Bounds, fault: Fault) -> Self {
        Lines {
            inner,
            bounds,
            fault,
            line: Vec::new(),
            ready: Vec::new(),
            ready_at: 0,
            requests: (std::time::Instant::now(), 0),
        }
    }

    /// Takes in `fresh`; an error when a line grows past the bound.
    fn take(&mut self, fresh: &[u8]) -> std::io::Result<()> {
        let mut start = 0;
        for newline in memchr::memchr_iter(b'\n', fresh) {
            self.grow(&fresh[start..newline])?;
            let line = std::mem::take(&mut self.line);
            if is_server_request(&line) {
                self.count_request()?;
            }
            match verdict(&line, self.bounds.max_items) {
                Verdict::Pass => self.ready.extend_from_slice(&line),
                Verdict::Replace(error) => self.ready.extend_from_slice(&error),
                Verdict::Drop => {}
            }
            self.ready.push(b'\n');
            start = newline + 1;
        }
        self.grow(&fresh[start..])
    }

    /// Counts a request of the server's; past [`MAX_SERVER_REQUESTS_PER_SECOND`] the read
    /// fails (which ends the connection).
    fn count_request(&mut self) -> std::io::Result<()> {
        let (began, count) = &mut self.requests;
        if began.elapsed() >= std::time::Duration::from_secs(1) {
            *began = std::time::Instant::now();
            *count = 0;
        }
        *count += 1;
        if *count <= MAX_SERVER_REQUESTS_PER_SECOND {
            return Ok(());
        }
        let why = format!(
            "it sent more than {MAX_SERVER_REQUESTS_PER_SECOND} requests a second; Parlor closed \
             the connection"
        );
        self.fail(why)
    }

    fn fail(&mut self, why: String) -> std::io::Result<()> {
        if let Ok(mut fault) = self.fault.lock() {
            *fault = Some(why.clone());
        }
        Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why))
    }

    fn grow(&mut self, piece: &[u8]) -> std::io::Result<()> {
        if self.line.len() + piece.len() > self.bounds.max_bytes {
            let why = format!(
                "it sent a message larger than {} bytes (max_read_bytes); Parlor closed the \
                 connection",
                self.bounds.max_bytes
            );
            self.line = Vec::new();
            return self.fail(why);
        }
        self.line.extend_from_slice(piece);
        Ok(())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Lines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_at);
                buf.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                if this.ready_at == this.ready.len() {
                    this.ready.clear();
                    this.ready_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // The end: a line without its newline is not a message.
                return Poll::Ready(Ok(()));
            }
            this.take(read.filled())?;
        }
    }
}

/// rmcp's reqwest client, with the answers to `tools/call` read by Parlor: the body (JSON)
/// or the whole event stream (SSE) bounded, and an answer with too many items replaced by an
/// error before it is parsed. Every other request is rmcp's own.
#[derive(Clone)]
pub struct GuardedHttp {
    pub inner: reqwest_rmcp::Client,
    pub bounds: Bounds,
}

type HttpError = StreamableHttpError<reqwest_rmcp::Error>;

impl GuardedHttp {
    async fn call(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let mut request = self
            .inner
            .post(uri.as_ref())
            .header(ACCEPT, "text/event-stream, application/json");
        if let Some(auth) = auth {
            request = request.bearer_auth(auth);
        }
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some(session) = &session_id {
            request = request.header("mcp-session-id", session.as_ref());
        }
        let response = request
            .json(&message)
            .send()
            .await
            .map_err(HttpError::Client)?;
        let status = response.status();
        if matches!(status.as_u16(), 202 | 204) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status.as_u16() == 404 && session_id.is_some() {
            return Err(HttpError::SessionExpired);
        }
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or(session_id.map(|s| s.to_string()));
        if !status.is_success() {
            return Err(HttpError::UnexpectedServerResponse(Cow::Owned(format!(
                "HTTP {status}"
            ))));
        }
        self.answer(response, session).await
    }

    /// Reads a call's answer (JSON or an event stream) within the bounds.
    async fn answer(
        &self,
        response: reqwest_rmcp::Response,
        session: Option<String>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let kind = response_kind(
            &response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_ascii_lowercase(),
        );
        let sse = matches!(kind, Kind::Sse);
        let max = self.bounds.max_bytes;
        let mut total = 0usize;
        // The whole answer is bounded (an event stream too: twice the bound, for the
        // progress events that come before the result).
        let bytes = response.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(std::io::Error::other)?;
            total += chunk.len();
            let limit = if sse { max * 2 } else { max };
            match total > limit {
                true => Err(std::io::Error::other(format!(
                    "it sent an answer larger than {limit} bytes (max_read_bytes)"
                ))),
                false => Ok(chunk),
            }
        });
        match kind {
            Kind::Json => {
                let mut body = Vec::new();
                let mut bytes = Box::pin(bytes);
                while let Some(chunk) = bytes.next().await {
                    body.extend_from_slice(&chunk.map_err(HttpError::Io)?);
                }
                let body = match verdict(&body, self.bounds.max_items) {
                    Verdict::Pass => body,
                    Verdict::Replace(error) => error,
                    Verdict::Drop => {
                        let why = "the answer was too large a structure and answered no request";
                        return Err(HttpError::UnexpectedServerResponse(Cow::Borrowed(why)));
                    }
                };
                let parsed: ServerJsonRpcMessage = serde_json::from_slice(&body)?;
                Ok(StreamableHttpPostResponse::Json(parsed, session))
            }
            Kind::Sse => {
                let events = sse_stream::SseStream::from_bytes_stream(bytes);
                let events = guard_events(events.boxed(), self.bounds.max_items);
                Ok(StreamableHttpPostResponse::Sse(events, session))
            }
            Kind::Other(kind) => Err(HttpError::UnexpectedContentType(kind)),
        }
    }
}

enum Kind {
    Json,
    Sse,
    Other(Option<String>),
}

fn response_kind(kind: &str) -> Kind {
    if kind.starts_with("application/json") {
        Kind::Json
    } else if kind.starts_with("text/event-stream") {
        Kind::Sse
    } else {
        Kind::Other((!kind.is_empty()).then(|| kind.to_owned()))
    }
}

/// Requests (calls, tool lists, the handshake) are answered through Parlor's bounded reader;
/// notifications and Parlor's own answers expect no content.
fn is_request(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, rmcp::model::JsonRpcMessage::Request(_))
}

impl StreamableHttpClient for GuardedHttp {
    type Error = reqwest_rmcp::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let limits = self.limits();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        if is_request(&message) {
            return self
                .call(uri, message, session_id, auth_header, custom_headers)
                .await;
        }
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, HttpError> {
        // The server's own stream (and a call's stream resumed on it) may carry answers too.
        let events = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                self.bounds.max_bytes,
            )
            .await?;
        Ok(guard_events(events, self.bounds.max_items))
    }
}

type Events = futures::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>>;

/// `events` with every answer of more than `max_items` content items replaced, unparsed, by
/// a JSON-RPC error.
fn guard_events(events: Events, max_items: usize) -> Events {
    events
        .map_ok(move |mut event| {
            match event
                .data
                .as_deref()
                .map(|d| verdict(d.as_bytes(), max_items))
            {
                None | Some(Verdict::Pass) => {}
                Some(Verdict::Replace(error)) => {
                    event.data = Some(String::from_utf8_lossy(&error).into_owned());
                }
                Some(Verdict::Drop) => event.data = None,
            }
            event
        })
        .boxed()
}

impl GuardedHttp {
    fn limits(&self) -> StreamableHttpResponseLimits {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = self.bounds.max_bytes;
        limits.max_json_response_size = self.bounds.max_bytes;
        limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn bounds(max_bytes: usize) -> Bounds {
        Bounds {
            max_bytes,
            max_items: 3,
        }
    }

    async fn read_all(input: &[u8], max: usize) -> (std::io::Result<Vec<u8>>, Option<String>) {
        let fault = Fault::default();
        let mut reader = Lines::new(input, bounds(max), fault.clone());
        let mut out = Vec::new();
        let result = reader.read_to_end(&mut out).await.map(|_| out);
        let why = fault.lock().unwrap().clone();
        (result, why)
    }

    #[tokio::test]
    async fn lines_up_to_the_bound_pass_and_a_longer_one_ends_the_read() {
        let (ok, why) = read_all(b"12345\n1234\n", 5).await;
        assert_eq!(ok.unwrap(), b"12345\n1234\n");
        assert!(why.is_none());
        let (refused, why) = read_all(b"12\n123456\n1", 5).await;
        assert_eq!(refused.unwrap_err().kind(), std::io::ErrorKind::InvalidData);
        assert!(why.unwrap().contains("larger than 5 bytes"));
        let endless = vec![b'x'; 100_000];
        assert!(read_all(&endless, 1000).await.0.is_err());
    }

    #[tokio::test]
    async fn a_server_flooding_parlor_with_requests_is_cut_off() {
        let ping = |id: u32| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let few: String = (0..MAX_SERVER_REQUESTS_PER_SECOND)
            .map(|i| ping(i) + "\n")
            .collect();
        assert!(read_all(few.as_bytes(), 1000).await.0.is_ok());
        let many: String = (0..=MAX_SERVER_REQUESTS_PER_SECOND)
            .map(|i| ping(i) + "\n")
            .collect();
        let (refused, why) = read_all(many.as_bytes(), 1000).await;
        assert!(refused.is_err());
        assert!(why.unwrap().contains("more than 50 requests a second"));
        // Notifications and answers are not requests.
        let notes: String = (0..200)
            .map(|_| {
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#.to_owned()
                    + "\n"
            })
            .collect();
        assert!(read_all(notes.as_bytes(), 1000).await.0.is_ok());
    }

    #[tokio::test]
    async fn an_answer_with_too_many_items_becomes_an_error_before_it_is_parsed() {
        let many = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{},{},{},{}]}}"#;
        let few = br#"{"jsonrpc":"2.0","id":8,"result":{"content":[{},{},{}]}}"#;
        let input = [&many[..], b"\n", &few[..], b"\n"].concat();
        let (out, _) = read_all(&input, 1000).await;
        let out = String::from_utf8(out.unwrap()).unwrap();
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["id"], 7);
        assert_eq!(
            lines[0]["error"]["message"],
            "The result held 4 content items; at most 3 are accepted (max_result_items)."
        );
        assert_eq!(lines[1]["result"]["content"].as_array().unwrap().len(), 3);
        // Not an answer, or not JSON: handed on as it came.
        let note = br#"{"method":"x","params":{"content":[1,2,3,4]}}"#;
        assert_eq!(verdict(note, 3), Verdict::Pass);
        assert_eq!(verdict(b"not json", 3), Verdict::Pass);
        // Too many items without an id to answer, or a huge structure anywhere: dropped, or
        // an error for the request it answers.
        let idless = br#"{"jsonrpc":"2.0","result":{"content":[{},{},{},{}]}}"#;
        assert_eq!(verdict(idless, 3), Verdict::Drop);
        let nulled = br#"{"jsonrpc":"2.0","id":null,"result":{"content":[{},{},{},{}]}}"#;
        assert_eq!(verdict(nulled, 3), Verdict::Drop);
        let values = vec!["0"; MAX_VALUES + 1].join(",");
        let structured = format!(
            r#"{{"jsonrpc":"2.0","id":4,"result":{{"structuredContent":{{"a":[{values}]}}}}}}"#
        );
        let Verdict::Replace(error) = verdict(structured.as_bytes(), 3) else {
            panic!("a huge structure is refused")
        };
        assert!(String::from_utf8(error)
            .unwrap()
            .contains("more than 100000 JSON values"));
        let flood = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":[{values}]}}}}"#
        );
        assert_eq!(verdict(flood.as_bytes(), 3), Verdict::Drop);
        let deep = format!("{}{}", "[".repeat(500), "]".repeat(500));
        // Nested too deep to count: refused like a structure too large.
        assert_eq!(verdict(deep.as_bytes(), 3), Verdict::Drop);
    }
}
