//! The history store as an MCP server: the MCP History Store's nine tools over a file
//! history, on stdio (`parlor mcp --stdio`) and at `/mcp` on the web server (with
//! `PARLOR_MCP_TOKEN`). The same store the web chat writes: a conversation saved here shows
//! up in the web chat's sidebar of the operator, and writes are serialized with the web
//! server's by the dialog lock files.
//!
//! Every reply is one text content item; errors are tool errors carrying
//! `{"ok": false, "error": "…"}`. The rules are `docs`' spec: `domain/src/dialog.rs` (names,
//! timestamps, selection) and `domain/src/summary.rs` (merge, signal, flat format).

use crate::store::{ConversationStore, StoreError};
use parlor_domain::dialog::{dialog_folder, recent_count, since, stamp, Entry};
use parlor_domain::summary::{flat, merge_summary, Maintenance, Thresholds};
use parlor_domain::{Message, MessageMeta, Role, SessionId};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{schemars, tool, tool_handler, tool_router, ServerHandler};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// How many times a summary merge is tried again when another writer changed the summary
/// between its read and its write.
const MERGE_ATTEMPTS: usize = 5;

/// The tools' shared state: the file history they serve and the operator's limits.
#[derive(Clone)]
pub struct HistoryTools {
    store: Arc<dyn ConversationStore>,
    thresholds: Thresholds,
    backup_retention: usize,
}

/// A tool's failure, as the client reads it.
struct ToolError(String);

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        ToolError(e.to_string())
    }
}

type ToolResult = Result<String, ToolError>;

fn reply(result: ToolResult) -> CallToolResult {
    match result {
        Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(ToolError(error)) => CallToolResult::error(vec![ContentBlock::text(
            json!({"ok": false, "error": error}).to_string(),
        )]),
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    /// Accepted for compatibility and ignored: the store is Parlor's data folder.
    pub project_root: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DialogParams {
    /// The dialog (a Parlor session id, or any name: see the README's mapping rule).
    pub dialog: String,
    pub project_root: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SaveParams {
    pub dialog: String,
    /// One message, saved after `entries`.
    #[schemars(with = "Option<SavedMessage>")]
    pub entry: Option<Value>,
    /// Messages to save, in order.
    #[schemars(with = "Option<Vec<SavedMessage>>")]
    pub entries: Option<Vec<Value>>,
    pub project_root: Option<String>,
}

/// The shape of a message given to `history_save`, for its input schema (items are read
/// by [`entry_of`], which names the item and field at fault).
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct SavedMessage {
    role: SavedRole,
    /// The message's text.
    text: String,
    /// When it was written, in epoch milliseconds; assigned (strictly increasing) when left
    /// out.
    ts: Option<i64>,
    /// Anything to keep with the message, stored as given.
    meta: Option<serde_json::Map<String, Value>>,
}

#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum SavedRole {
    User,
    Assistant,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DetailParams {
    pub dialog: String,
    /// The last n messages (default 6; 0 gives none).
    pub recent_turns: Option<i64>,
    /// `flat` (default) or `json`.
    pub format: Option<String>,
    /// Default true.
    pub include_summary: Option<bool>,
    /// Default true.
    pub include_messages: Option<bool>,
    pub project_root: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SinceParams {
    pub dialog: String,
    /// Messages with a greater `ts` (a missing ts counts as 0); without it, the last ones.
    pub since_ts: Option<i64>,
    /// Default 50, clamped to 1..200.
    pub limit: Option<i64>,
    pub project_root: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummaryParams {
    pub dialog: String,
    /// The summary: a string holding JSON.
    pub summary: String,
    /// `merge` (default) or `replace`.
    pub mode: Option<String>,
    pub project_root: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreParams {
    pub dialog: String,
    /// One of the dialog's backups, as `history_list_backups` names it.
    pub id: String,
    pub project_root: Option<String>,
}

fn folder(dialog: &str) -> Result<SessionId, ToolError> {
    dialog_folder(dialog).map_err(|e| ToolError(e.to_string()))
}

/// One item of `history_save`, checked: the whole call is refused on the first bad one.
fn entry_of(item: &Value, at: &str) -> Result<Entry, ToolError> {
    let fail = |what: &str| ToolError(format!("{at}: {what}"));
    let object = item.as_object().ok_or_else(|| fail("must be an object"))?;
    let role = match object.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => return Err(fail("role must be \"user\" or \"assistant\"")),
    };
    let text = object
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| fail("text must be a string"))?
        .to_owned();
    let ts = match object.get("ts") {
        None | Some(Value::Null) => None,
        Some(ts) => Some(
            ts.as_i64()
                .ok_or_else(|| fail("ts must be a whole number"))?,
        ),
    };
    let meta = match object.get("meta") {
        None | Some(Value::Null) => None,
        Some(meta @ Value::Object(_)) => Some(meta.clone()),
        Some(_) => return Err(fail("meta must be an object")),
    };
    Ok(Entry {
        role,
        text,
        ts,
        meta,
    })
}

/// Compact JSON of the messages (measured by the store) and the summary: the size the
/// signal measures.
fn dialog_bytes(messages_bytes: usize, summary: Option<&Value>) -> usize {
    messages_bytes + summary.map_or(0, |s| s.to_string().len())
}

#[tool_router]
impl HistoryTools {
    pub fn new(
        store: Arc<dyn ConversationStore>,
        thresholds: Thresholds,
        backup_retention: usize,
    ) -> Self {
        HistoryTools {
            store,
            thresholds,
            backup_retention,
        }
    }

    fn signal(&self, messages: usize, bytes: usize) -> Option<Maintenance> {
        Maintenance::check(messages, bytes, self.thresholds, self.backup_retention)
    }

    #[tool(description = "List the dialogs that hold messages or a summary, sorted.")]
    async fn history_list_dialogs(&self, Parameters(_): Parameters<ListParams>) -> CallToolResult {
        reply(self.list_dialogs().await)
    }

    async fn list_dialogs(&self) -> ToolResult {
        let mut dialogs = Vec::new();
        for id in self.store.list().await? {
            let has_data = self.store.load_tail(&id, 0).await?.total > 0
                || self.store.summary(&id).await?.is_some();
            if has_data {
                dialogs.push(id.as_str().to_owned());
            }
        }
        dialogs.sort();
        Ok(json!({"dialogs": dialogs}).to_string())
    }

    #[tool(
        description = "Append messages to a dialog: `entries` in order, then `entry`. Each {role: user|assistant, text, ts?, meta?}; a missing ts is assigned, strictly increasing. One invalid item refuses the whole call."
    )]
    async fn history_save(&self, Parameters(params): Parameters<SaveParams>) -> CallToolResult {
        reply(self.save(params).await)
    }

    async fn save(&self, params: SaveParams) -> ToolResult {
        let id = folder(&params.dialog)?;
        let mut items: Vec<Entry> = Vec::new();
        for (i, item) in params.entries.iter().flatten().enumerate() {
            items.push(entry_of(item, &format!("entries[{i}]"))?);
        }
        if let Some(item) = &params.entry {
            items.push(entry_of(item, "entry")?);
        }
        if items.is_empty() {
            return Err(ToolError(
                "give an entry or a non-empty entries list".into(),
            ));
        }
        let saved = items.len();
        let stamped = self
            .store
            .append_stamped(
                &id,
                Box::new(move |latest, now| to_messages(&items, latest, now)),
            )
            .await?;
        debug_assert_eq!(stamped, saved);
        Ok(json!({"ok": true, "saved": saved}).to_string())
    }

    #[tool(
        description = "A dialog's summary and last messages: `flat` lines (M: maintenance, S: summary, U:/A: messages) or `json`."
    )]
    async fn history_get_dialog_detail(
        &self,
        Parameters(params): Parameters<DetailParams>,
    ) -> CallToolResult {
        reply(self.detail(params).await)
    }

    #[tool(description = "The same as history_get_dialog_detail.")]
    async fn history_fetch(&self, Parameters(params): Parameters<DetailParams>) -> CallToolResult {
        reply(self.detail(params).await)
    }

    async fn detail(&self, params: DetailParams) -> ToolResult {
        let id = folder(&params.dialog)?;
        let json_format = match params.format.as_deref() {
            None | Some("flat") => false,
            Some("json") => true,
            Some(other) => {
                return Err(ToolError(format!(
                    "format must be \"flat\" or \"json\" (got {other:?})"
                )))
            }
        };
        // Only the messages returned are read; the signal measures the whole dialog.
        let count = recent_count(params.recent_turns).map_err(ToolError)?;
        let (tail, bytes) = self.store.load_tail_sized(&id, count).await?;
        let summary = self.store.summary(&id).await?;
        let recent = &tail.messages[..];
        let maintenance = self.signal(tail.total, dialog_bytes(bytes, summary.as_ref()));
        let with_summary = params.include_summary.unwrap_or(true);
        let with_messages = params.include_messages.unwrap_or(true);
        if !json_format {
            return Ok(flat(
                maintenance.as_ref(),
                summary.as_ref().filter(|_| with_summary),
                if with_messages { recent } else { &[] },
            ));
        }
        let mut out = serde_json::Map::new();
        if with_summary {
            let text = summary
                .as_ref()
                .map(|s| serde_json::to_string_pretty(s).unwrap_or_default());
            out.insert("summary".into(), json!(text));
        }
        if with_messages {
            out.insert(
                "messages".into(),
                serde_json::to_value(recent).unwrap_or_default(),
            );
        }
        if let Some(signal) = maintenance {
            out.insert(
                "maintenance".into(),
                serde_json::to_value(signal).unwrap_or_default(),
            );
        }
        Ok(Value::Object(out).to_string())
    }

    #[tool(
        description = "Messages after `sinceTs` (oldest first, at most `limit`), or the last `limit` without it."
    )]
    async fn history_get_messages_since(
        &self,
        Parameters(params): Parameters<SinceParams>,
    ) -> CallToolResult {
        reply(self.messages_since(params).await)
    }

    async fn messages_since(&self, params: SinceParams) -> ToolResult {
        let id = folder(&params.dialog)?;
        let messages = self.store.load(&id).await?;
        let selected = since(&messages, params.since_ts, params.limit);
        Ok(json!({"messages": selected}).to_string())
    }

    #[tool(
        description = "Set a dialog's summary from a string holding JSON: `merge` (default) into the current one, or `replace` it."
    )]
    async fn history_set_summary(
        &self,
        Parameters(params): Parameters<SummaryParams>,
    ) -> CallToolResult {
        reply(self.set_summary(params).await)
    }

    async fn set_summary(&self, params: SummaryParams) -> ToolResult {
        let id = folder(&params.dialog)?;
        let mode = params.mode.as_deref().unwrap_or("merge");
        if !matches!(mode, "merge" | "replace") {
            return Err(ToolError(format!(
                "mode must be \"merge\" or \"replace\" (got {mode:?})"
            )));
        }
        let next: Value = serde_json::from_str(&params.summary)
            .map_err(|e| ToolError(format!("summary is not valid JSON: {e}")))?;
        if mode == "replace" {
            self.store.put_summary(&id, &next).await?;
            return Ok(json!({"ok": true, "mode": mode}).to_string());
        }
        // A merge is a read-modify-write: written only if nothing (the web chat's
        // summarizer, a reset, another client) wrote the summary since it was read; else
        // merged again into what is there now.
        for _ in 0..MERGE_ATTEMPTS {
            let version = self.store.version(&id).await?;
            let merged = merge_summary(self.store.summary(&id).await?, next.clone());
            if self.store.put_summary_if(&id, version, &merged).await? {
                return Ok(json!({"ok": true, "mode": mode}).to_string());
            }
        }
        Err(ToolError(format!(
            "the summary of {:?} kept changing while it was merged; try again",
            params.dialog
        )))
    }

    #[tool(
        description = "Back up a dialog's messages and summary, then delete both; keeps the newest HISTORY_BACKUP_RETENTION backups."
    )]
    async fn history_clear(&self, Parameters(params): Parameters<DialogParams>) -> CallToolResult {
        reply(self.clear(params).await)
    }

    async fn clear(&self, params: DialogParams) -> ToolResult {
        let id = folder(&params.dialog)?;
        let backup = self.store.clear(&id).await?;
        Ok(json!({"ok": true, "backup": backup.map(|b| b.id)}).to_string())
    }

    #[tool(
        description = "A dialog's size: messages, approxBytes, lastTs, backups and the maintenance thresholds."
    )]
    async fn history_stats(&self, Parameters(params): Parameters<DialogParams>) -> CallToolResult {
        reply(self.stats(params).await)
    }

    async fn stats(&self, params: DialogParams) -> ToolResult {
        let id = folder(&params.dialog)?;
        let (tail, bytes) = self.store.load_tail_sized(&id, 1).await?;
        let summary = self.store.summary(&id).await?;
        let backups = self.store.list_backups(&id).await?.len();
        Ok(json!({
            "messages": tail.total,
            "approxBytes": dialog_bytes(bytes, summary.as_ref()),
            "lastTs": tail.messages.last().map(|m| m.ts),
            "backups": backups,
            "thresholds": self.thresholds,
        })
        .to_string())
    }

    #[tool(
        description = "A dialog's backups, newest first: id, mtime (epoch ms) and the files each holds."
    )]
    async fn history_list_backups(
        &self,
        Parameters(params): Parameters<DialogParams>,
    ) -> CallToolResult {
        reply(self.list_backups(params).await)
    }

    async fn list_backups(&self, params: DialogParams) -> ToolResult {
        let id = folder(&params.dialog)?;
        let backups: Vec<Value> = self
            .store
            .list_backups(&id)
            .await?
            .into_iter()
            .rev()
            .map(|b| json!({"id": b.id, "mtime": b.mtime_ms, "files": b.files}))
            .collect();
        Ok(json!({"backups": backups}).to_string())
    }

    #[tool(
        description = "Put a backup back, after backing up the current files (so a restore can be undone)."
    )]
    async fn history_restore_backup(
        &self,
        Parameters(params): Parameters<RestoreParams>,
    ) -> CallToolResult {
        reply(self.restore(params).await)
    }

    async fn restore(&self, params: RestoreParams) -> ToolResult {
        let id = folder(&params.dialog)?;
        self.store.restore_backup(&id, &params.id).await?;
        Ok(json!({"ok": true, "restored": params.id}).to_string())
    }
}

/// The messages of a save, with their timestamps assigned after `latest` at `now`.
fn to_messages(items: &[Entry], latest: Option<i64>, now: i64) -> Vec<Message> {
    let stamps = stamp(items, latest, now);
    items
        .iter()
        .zip(stamps)
        .map(|(item, ts)| {
            let mut message = Message::new(item.role, item.text.clone(), ts);
            // Kept whole; Parlor's own fields (status, model) are read from it where they
            // have Parlor's types (see `MessageMeta`).
            message.meta = item.meta.as_ref().and_then(|meta| match meta {
                Value::Object(fields) => Some(MessageMeta::from(fields.clone())),
                _ => None,
            });
            message
        })
        .collect()
}

#[tool_handler]
impl ServerHandler for HistoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "parlor-history",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Parlor's conversation history: list, read, append to, summarize, clear and \
                 restore the dialogs the web chat shows.",
            )
    }
}

/// The tools over the file history `id` of the configuration.
pub fn for_history(
    histories: &crate::store::histories::Histories,
    id: &str,
    config: &crate::config::Config,
) -> Result<HistoryTools, String> {
    let history = histories.get(id).ok_or_else(|| {
        format!(
            "no history {id:?} (declared: {})",
            histories.ids().join(", ")
        )
    })?;
    if history.store.kind() != "file" {
        return Err(format!(
            "history {id:?} is kept in {}; the MCP tools serve file histories",
            history.store.kind()
        ));
    }
    Ok(HistoryTools::new(
        history.store.clone(),
        config.maintenance,
        config.backup_retention,
    ))
}

/// Serves the tools on stdin/stdout until the client closes stdin.
pub async fn serve_stdio(tools: HistoryTools) -> anyhow::Result<()> {
    serve_lines(tools, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves the tools on a line-delimited JSON-RPC stream. A line that is not JSON gets a
/// JSON-RPC parse error (the SDK would drop it silently) and the server goes on; every
/// line the client sends otherwise reaches the SDK as is.
pub async fn serve_lines(
    tools: HistoryTools,
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (sdk_read, sdk_write) = tokio::io::split(theirs);
    let (from_sdk, mut to_sdk) = tokio::io::split(ours);
    let output = std::sync::Arc::new(tokio::sync::Mutex::new(output));
    // Replies from the SDK go out whole lines at a time, so a parse error never lands in
    // the middle of one.
    let replies = {
        let output = output.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(from_sdk).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut out = output.lock().await;
                if out.write_all(format!("{line}\n").as_bytes()).await.is_err()
                    || out.flush().await.is_err()
                {
                    break;
                }
            }
        })
    };
    let requests = tokio::spawn(async move {
        let mut lines = BufReader::new(input).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim().is_empty() {
                continue;
            }
            if let Err(e) = serde_json::from_str::<Value>(&line) {
                let error = json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": format!("Parse error: {e}")}});
                let mut out = output.lock().await;
                let _ = out.write_all(format!("{error}\n").as_bytes()).await;
                let _ = out.flush().await;
                continue;
            }
            if to_sdk
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
        // The client closed its side: so does the SDK's.
        let _ = to_sdk.shutdown().await;
    });
    let running = tools.serve((sdk_read, sdk_write)).await?;
    running.waiting().await?;
    requests.abort();
    let _ = replies.await;
    Ok(())
}

/// `/mcp`: the same tools over streamable HTTP, only when `PARLOR_MCP_TOKEN` is set and only
/// for requests carrying it (`Authorization: Bearer …`; 401 otherwise). A `Host` or `Origin`
/// that is not this server's (loopback, or `PARLOR_PUBLIC_URL`'s) is refused with 403, so a
/// web page cannot reach it through DNS rebinding. `None` when it is off.
pub fn http(
    services: &Arc<crate::state::Services>,
) -> Option<axum::Router<crate::state::AppState>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let config = &services.config;
    config.mcp_token.as_ref()?;
    let tools = match for_history(&services.histories, "default", config) {
        Ok(tools) => tools,
        Err(e) => {
            tracing::error!("PARLOR_MCP_TOKEN is set but /mcp stays off: {e}");
            return None;
        }
    };
    const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];
    let mut hosts: Vec<String> = LOOPBACK.into_iter().map(str::to_owned).collect();
    // A browser's `Origin` must be this server's too: any port on loopback (a local client
    // chooses its own), the exact origin of `PARLOR_PUBLIC_URL`.
    let mut origins: Vec<String> = LOOPBACK
        .into_iter()
        .flat_map(|host| [format!("http://{host}:*"), format!("https://{host}:*")])
        .collect();
    if let Some(url) = config
        .public_url
        .as_deref()
        .and_then(|url| reqwest::Url::parse(url).ok())
    {
        if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
            hosts.push(host.to_owned());
            origins.push(format!("{}://{host}:{port}", url.scheme()));
        }
    }
    let mut server_config = StreamableHttpServerConfig::default();
    server_config.allowed_hosts = hosts;
    server_config.allowed_origins = origins;
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        LocalSessionManager::default().into(),
        server_config,
    );
    let services = services.clone();
    Some(
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let services = services.clone();
                    async move {
                        let token = request
                            .headers()
                            .get(axum::http::header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Bearer "));
                        if services.config.mcp_token_matches(token) {
                            next.run(request).await
                        } else {
                            use axum::response::IntoResponse;
                            (
                                axum::http::StatusCode::UNAUTHORIZED,
                                [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
                                axum::Json(json!({"error": "send the MCP token (PARLOR_MCP_TOKEN) as a bearer token"})),
                            )
                                .into_response()
                        }
                    }
                },
            )),
    )
}
