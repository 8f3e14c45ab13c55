//! The history store as an MCP server: the MCP History Store's nine tools over a file
//! history, on stdio (`parlor mcp --stdio`) and at `/mcp` on the web server (with
//! `PARLOR_MCP_TOKEN`). The same store the web chat writes: a conversation saved here shows
//! up in the web chat's sidebar of the operator, and writes are serialized with the web
//! server's by the dialog lock files.
//!
//! Every reply is one text content item; errors are tool errors carrying
//! `{"ok": false, "error": "…"}`. The rules are `docs`' spec: `domain/src/dialog.rs` (names,
//! timestamps, selection) and `domain/src/summary.rs` (merge, signal, flat format).

pub mod params;
mod tools;
mod transport;

pub use transport::{http, serve_lines, serve_stdio};

use crate::store::{ConversationStore, StoreError};
use parlor_domain::summary::Thresholds;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;
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

/// Why the tools cannot serve a history.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("no history {id:?} (declared: {declared})")]
    NoHistory { id: String, declared: String },
    #[error("history {id:?} is kept in {kind}; the MCP tools serve file histories")]
    NotFile { id: String, kind: &'static str },
}

/// The tools over the file history `id` of the configuration.
pub fn for_history(
    histories: &crate::store::histories::Histories,
    id: &str,
    config: &crate::config::Config,
) -> Result<HistoryTools, McpError> {
    let history = histories.get(id).ok_or_else(|| McpError::NoHistory {
        id: id.to_owned(),
        declared: histories.ids().join(", "),
    })?;
    if history.store.kind() != "file" {
        return Err(McpError::NotFile {
            id: id.to_owned(),
            kind: history.store.kind(),
        });
    }
    Ok(HistoryTools::new(
        history.store.clone(),
        config.maintenance,
        config.backup_retention,
    ))
}
