//! The nine tools of the MCP History Store, over one file history.

use super::params::*;
use super::{reply, HistoryTools, ToolError, ToolResult, MERGE_ATTEMPTS};
use crate::store::ConversationStore;
use parlor_domain::dialog::{recent_count, since, Entry};
use parlor_domain::summary::{flat, merge_summary, Maintenance, Thresholds};
use parlor_domain::ConversationId;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use serde_json::{json, Value};
use std::sync::Arc;

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
        description = "A dialog's summary and last messages (of its chosen path): `flat` lines (M: maintenance, S: summary, U:/A: messages, B: other versions with `includeBranches`) or `json`."
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
        let (tail, bytes) = whole_tail(self.store.as_ref(), &id, count).await?;
        let summary = self.store.summary(&id).await?;
        let recent = &tail.messages[..];
        let maintenance = self.signal(tail.total, dialog_bytes(bytes, summary.as_ref()));
        let with_summary = params.include_summary.unwrap_or(true);
        let with_messages = params.include_messages.unwrap_or(true);
        let branches = match params.include_branches {
            Some(true) => Some(self.branches(&id).await?),
            _ => None,
        };
        if !json_format {
            let mut text = flat(
                maintenance.as_ref(),
                summary.as_ref().filter(|_| with_summary),
                if with_messages { recent } else { &[] },
            );
            for branch in branches.iter().flatten() {
                text.push_str(&format!("\nB: {branch}"));
            }
            return Ok(text);
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
        if let Some(branches) = branches {
            out.insert("branches".into(), json!(branches));
        }
        Ok(Value::Object(out).to_string())
    }

    /// The dialog's other versions, one line each: the message it follows, how many
    /// messages it holds, and its first message's role and first characters.
    async fn branches(&self, id: &ConversationId) -> Result<Vec<String>, ToolError> {
        let path = self.store.load(id).await?;
        let branches = self.store.branches(id).await?.shown(&path);
        Ok(branches
            .branches
            .iter()
            .filter_map(|b| {
                let first = b.messages.first()?;
                Some(format!(
                    "after {} · {} message(s) · {}: {}",
                    b.parent.as_deref().unwrap_or("(start)"),
                    b.messages.len(),
                    first.role,
                    parlor_domain::message::title_of(&first.text)
                ))
            })
            .collect())
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

/// The last `count` messages of `id`, and the size of all, widened back so that the window
/// does not begin inside a tool exchange (read further back until its call is found).
async fn whole_tail(
    store: &dyn ConversationStore,
    id: &parlor_domain::ConversationId,
    count: usize,
) -> Result<(crate::store::Tail, usize), crate::store::StoreError> {
    let mut want = count;
    loop {
        let (mut tail, bytes) = store.load_tail_sized(id, want).await?;
        let extra = tail.messages.len().saturating_sub(count);
        let all = tail.messages.len() >= tail.total;
        match parlor_domain::exchange::window_start(&tail.messages, extra) {
            Some(start) => {
                tail.messages.drain(..start);
                return Ok((tail, bytes));
            }
            None if all => return Ok((tail, bytes)),
            None => want = want.saturating_mul(2).max(want + 16),
        }
    }
}
