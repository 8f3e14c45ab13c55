//! The data the pages load from the server (the server functions that load it live beside
//! their pages, in `pages/`).

use parlor_domain::context::Chip;
use parlor_domain::{ReplyStatus, Role};
use serde::{Deserialize, Serialize};

/// An agent on the home page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentCard {
    pub id: String,
    pub name: String,
    pub description: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HomeData {
    pub agents: Vec<AgentCard>,
    pub mirror: bool,
}

/// What the chat page was asked for, straight from its URL.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatQuery {
    pub agent: String,
    pub session: Option<String>,
    pub history_policy: Option<String>,
    pub history_length: Option<String>,
    pub debug: bool,
}

impl ChatQuery {
    /// The chat page's query from its URL's parameters (`agent`, `session`,
    /// `historyPolicy`, `historyLength`, `debug`).
    pub fn from_params(get: impl Fn(&str) -> Option<String>) -> ChatQuery {
        ChatQuery {
            agent: get("agent").unwrap_or_default(),
            session: get("session").filter(|s| !s.is_empty()),
            history_policy: get("historyPolicy"),
            history_length: get("historyLength"),
            debug: get("debug").as_deref() == Some("true"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub id: String,
    pub name: String,
    pub description: String,
    /// The agent's greeting, as sanitized HTML.
    pub initial_messages_html: Vec<String>,
    pub chat_prompts: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// The message's stable id (to pin or exclude it).
    pub id: String,
    pub role: Role,
    pub text: String,
    /// Pinned (always sent) or excluded (never sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<parlor_domain::SendMark>,
    /// Assistant replies as sanitized HTML (the browser has no Markdown renderer). Rendered
    /// into the page on the server and never sent again as data: hydration keeps the
    /// server-rendered HTML of a message, so the chat island does not need it.
    #[serde(default, skip_serializing)]
    pub html: Option<String>,
    pub status: Option<ReplyStatus>,
    /// A user message's saved context, one chip per source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<Chip>,
    /// Its tokens, counted for the conversation's model (with the debug panel only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// An assistant message that asked for tools (its cards follow it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub calls: bool,
    /// A tool result, as its card shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<ToolCard>,
    /// Its ‹ n/m › when it has other versions (an edit, a regeneration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<parlor_domain::branch::Versions>,
}

/// One tool call and its result, as the chat page's card shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCard {
    pub call_id: String,
    pub tool: String,
    /// The arguments as the model gave them.
    pub arguments: String,
    /// `None` while the call runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(default)]
    pub ms: u64,
    #[serde(default)]
    pub bytes: u64,
    /// The result's text (or its preview while streaming), or the error.
    #[serde(default)]
    pub text: String,
    /// An image the result carries (PNG, JPEG, GIF or WebP data under the size cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The result was removed after its retention: `text` is the stub.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// How many messages the chat page shows at first, and each older page brings.
pub const PAGE_MESSAGES: usize = 40;

/// Messages before the ones the page shows, for when the reader scrolls up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OlderMessages {
    pub messages: Vec<StoredMessage>,
    /// The replies' sanitized HTML, in the order of `messages` (empty for questions).
    pub html: Vec<String>,
    /// The stored position of the first of `messages`.
    pub first_index: usize,
    /// How many of the first stored messages the rolling summary covers, when its end is
    /// among `messages` (0 otherwise).
    pub summarized: usize,
}

/// A conversation in the sidebar.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationItem {
    pub session_id: String,
    pub agent_id: String,
    pub title: String,
    pub updated_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatData {
    pub agent: AgentInfo,
    pub model: String,
    pub provider: String,
    /// The models this conversation can switch to (`!model`), the current one included.
    pub models: Vec<String>,
    /// For each of `models`, in order: its provider, context size and prices, in words
    /// (empty when there is nothing to say).
    #[serde(default)]
    pub model_details: Vec<String>,
    pub mirror: bool,
    pub session_id: Option<String>,
    /// The latest messages (at most [`PAGE_MESSAGES`]); older ones load on scroll.
    pub messages: Vec<StoredMessage>,
    /// The stored position of the first of `messages` (0: the whole conversation is here).
    pub first_index: usize,
    pub conversations: Vec<ConversationItem>,
    /// Present when the debug panel was asked for (`?debug=true`) and the operator allows it.
    pub debug: Option<DebugView>,
    /// The largest chat request with images (`PARLOR_MAX_CONTEXT_BYTES`): the composer
    /// refuses larger attachments before uploading them.
    pub max_context_bytes: usize,
    /// How many of the first stored messages the rolling summary covers (0: none).
    pub summarized: usize,
    /// The context meter of the conversation's last model call.
    pub meter: Option<parlor_domain::meter::Meter>,
    /// The conversation this one was forked from, when it was.
    pub forked_from: Option<ConversationItem>,
    /// Who is logged in (accounts on): the menu shows the name, the tokens page and Log out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ChatPageData {
    Ready(Box<ChatData>),
    UnknownAgent(String),
    UnknownConversation,
}

/// What the chat page's `<head>` and status depend on, known before its conversation is
/// read: the server decides it in front of the page (a cheap check, no messages read) and
/// puts it into the request, so the page sends its head (and with it the stylesheet and
/// scripts the browser then fetches) while the server reads and renders the messages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ChatHead {
    /// The page exists; its agent's name.
    Ready(String),
    UnknownAgent(String),
    UnknownConversation,
    /// The check could not be made (e.g. the history store is down).
    Failed(String),
}

/// The debug panel, as the server rendered it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DebugView {
    /// The panel's inner HTML.
    pub html: String,
    /// The first stored message the last model call received (earlier ones are marked "not
    /// sent" in the transcript).
    pub first_sent: Option<usize>,
}

/// A conversation the server just made (a fork, an import) or renamed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationRef {
    pub session_id: String,
    pub agent_id: String,
    pub title: String,
}

/// A search result as the sidebar shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub session_id: String,
    pub agent_id: String,
    pub title: String,
    /// The first matching line.
    pub line: String,
    /// The hit is on a version that is not chosen: the id of its message, chosen when the
    /// hit is opened.
    pub version: Option<String>,
}
