//! What each tool takes (its input schema) and how a saved message is read: every bad
//! item is named with its place and field.

use super::ToolError;
use parlor_domain::dialog::{dialog_folder, stamp, Entry};
use parlor_domain::{ConversationId, Message, MessageMeta, Role};
use rmcp::schemars;
use serde::Deserialize;
use serde_json::Value;

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
    /// List the dialog's other versions (edits and regenerations made in Parlor's page):
    /// each one's parent message id, its size and first message. Default false.
    pub include_branches: Option<bool>,
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

pub(super) fn folder(dialog: &str) -> Result<ConversationId, ToolError> {
    dialog_folder(dialog).map_err(|e| ToolError(e.to_string()))
}

/// One item of `history_save`, checked: the whole call is refused on the first bad one.
pub(super) fn entry_of(item: &Value, at: &str) -> Result<Entry, ToolError> {
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
pub(super) fn dialog_bytes(messages_bytes: usize, summary: Option<&Value>) -> usize {
    messages_bytes + summary.map_or(0, |s| s.to_string().len())
}

/// The messages of a save, with their timestamps assigned after `latest` at `now`.
pub(super) fn to_messages(items: &[Entry], latest: Option<i64>, now: i64) -> Vec<Message> {
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
