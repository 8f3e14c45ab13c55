//! The chat stream's tool events (spec `tools.md`, "Seeing it"): a call the model asked for,
//! its result, an approval asked of the user, and the limit that ended a turn's loop.

use crate::tool::LimitReached;
use serde::{Deserialize, Serialize};

/// The longest preview of a result an event carries, in characters.
pub const PREVIEW_CHARS: usize = 500;

/// The model asked for a call.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallEvent {
    pub id: String,
    /// The tool as the model named it (`<server>__<tool>`).
    pub tool: String,
    /// The server's id (empty for a tool the agent is not offered).
    pub server: String,
    /// The arguments as the model gave them.
    pub arguments: String,
}

/// A call's result.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultEvent {
    pub id: String,
    pub ok: bool,
    /// The whole result's size in bytes.
    pub bytes: u64,
    pub ms: u64,
    /// The result's first [`PREVIEW_CHARS`] characters (when `ok`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub preview: String,
    /// What went wrong (when not `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A call waits for the user's approval (`POST …/tool-calls/{id}` `{"approve": bool}`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalEvent {
    pub id: String,
    pub tool: String,
    pub server: String,
    pub arguments: String,
    /// Seconds before an unanswered call is denied.
    pub timeout_secs: u64,
    /// The server asks only on the first use in a conversation: "always in this
    /// conversation" may be offered.
    pub first_use: bool,
}

/// A limit ended the loop: the last model call was made without tools.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitEvent {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub reached: LimitReached,
    /// The limit's value.
    pub limit: u32,
}

/// A tool server the agent may use is not available to this user on this turn (a per-user
/// server whose secrets they have not set, or that serves as many users as it may): the
/// turn goes on without its tools.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnavailableEvent {
    pub server: String,
    pub why: String,
    /// Where the user sets what it needs, when that is the cure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_url: Option<String>,
}

/// The first [`PREVIEW_CHARS`] characters of `text`, `…` when cut.
pub fn preview(text: &str) -> String {
    let mut chars = text.chars();
    let mut out: String = chars.by_ref().take(PREVIEW_CHARS).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// One call of a round, as the debug panel shows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallReport {
    pub id: String,
    pub tool: String,
    pub ok: bool,
    pub ms: u64,
    pub bytes: u64,
}

/// A turn's tools: those offered, each round's calls, and the limit that ended the loop.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsReport {
    /// The tools offered, as the model saw them.
    pub offered: Vec<String>,
    pub rounds: Vec<Vec<CallReport>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitEvent>,
    /// The tokens of each model call of the turn, as sent (the first call's, then one per
    /// round after it): messages and the tools' definitions, after the budget's stubs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_tokens: Vec<u64>,
    /// Parlor's own time in each round, in microseconds (the tool servers' and the model's
    /// time left out): what `make bench` reports as the time per tool round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub own_us: Vec<u64>,
}

/// A tool server and its state (`ready (3 tools)`, `starting`, `down: …`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerReport {
    pub id: String,
    pub state: String,
    /// Tools of its list that were dropped or changed, and why (`fetch: dropped: its input
    /// schema has an array without items at /properties/urls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
