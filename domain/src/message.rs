//! Messages as Parlor stores them and sends them to models.
//!
//! The serialized shape (`role`, `text`, `ts` in epoch milliseconds, optional `meta`) is the
//! one the MCP History Store keeps in `messages.json`, so either tool can read the other's files.

use crate::block::{ContextBlock, Part};
use serde::{Deserialize, Serialize};

/// Who a message is from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an assistant reply ended, when it did not simply complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyStatus {
    /// The user pressed Stop; the text is what had arrived by then.
    Stopped,
    /// The model or the connection failed midway; the text is what had arrived by then.
    Incomplete,
}

/// A user's decision about sending a message, which overrides the policy and the window.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendMark {
    /// Pinned: kept by the policy and the window; only the token budget may drop it.
    Always,
    /// Excluded: never sent.
    Never,
}

/// A message id derived from its role, time and text: `h` and 16 hex digits of their 64-bit
/// FNV-1a hash (a fixed function, so the id is the same on every machine and version).
fn derived_id(role: Role, ts: i64, text: &str) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = role
        .as_str()
        .bytes()
        .chain([0])
        .chain(ts.to_le_bytes())
        .chain(text.bytes());
    let hash = bytes.fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    format!("h{hash:016x}")
}

/// Optional facts kept beside a message's text. Read from any JSON object: `status` and
/// `model` are Parlor's only when they have Parlor's types; otherwise they stay, as written,
/// with the other fields (a client's `meta` is never dropped, nor a stored message refused).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "serde_json::Map<String, serde_json::Value>")]
pub struct MessageMeta {
    /// Set on assistant replies that did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ReplyStatus>,
    /// The model that wrote an assistant reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Anything else a client stored (the MCP History Store's `meta` is any object): kept
    /// as written.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl From<serde_json::Map<String, serde_json::Value>> for MessageMeta {
    fn from(mut extra: serde_json::Map<String, serde_json::Value>) -> Self {
        let status = match extra.get("status") {
            Some(value) => serde_json::from_value(value.clone()).ok(),
            None => None,
        };
        if status.is_some() {
            extra.remove("status");
        }
        let model = match extra.get("model") {
            Some(serde_json::Value::String(model)) => Some(model.clone()),
            _ => None,
        };
        if model.is_some() {
            extra.remove("model");
        }
        MessageMeta {
            status,
            model,
            extra,
        }
    }
}

impl MessageMeta {
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.model.is_none() && self.extra.is_empty()
    }
}

/// How many characters of a message make its title (and the mirror model's preview).
pub const TITLE_CHARS: usize = 60;

/// A message's first characters, on one line, as a conversation's title: the sidebar names
/// a conversation by its first user message.
pub fn title_of(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut chars = one_line.chars();
    let mut short: String = chars.by_ref().take(TITLE_CHARS).collect();
    if chars.next().is_some() {
        short.push('…');
    }
    short
}

/// One tool call an assistant reply asked for: the call's id, the tool as the model named
/// it, and its arguments exactly as the model gave them (JSON text, or not).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// What a `tool` message answers and how: its content is the message's blocks (see
/// [`Message::context`]), each kept as the server's `save` says.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolAnswer {
    /// The id of the call it answers.
    pub tool_call_id: String,
    /// The tool as the model named it.
    pub name: String,
    /// `false` when the result is an error (of the tool, the server, the arguments, a
    /// timeout, a denial, a cancellation).
    pub ok: bool,
    /// How long the call took, in milliseconds.
    #[serde(default)]
    pub ms: u64,
    /// The size of the full result, in bytes (kept when the content is replaced by a stub).
    #[serde(default)]
    pub bytes: u64,
    /// Set once the content was replaced by a stub: for how many turns after its own it
    /// was kept (`0`: for its own turn only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_after: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub text: String,
    /// When the message was written, in milliseconds since the Unix epoch.
    pub ts: i64,
    /// The message's stable id (see [`Message::id`]); stored with it since it was written by
    /// this version of Parlor, absent from messages written by hand or by other tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Whether the message is always or never sent, whatever the policy and window decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<SendMark>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<MessageMeta>,
    /// Context after a user message's text: each source's header, then its blocks, each
    /// with its retention (see [`crate::context`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextBlock>,
    /// The tool calls an assistant reply asked for (a tool exchange opens with it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolAnswer>,
}

impl Message {
    pub fn new(role: Role, text: impl Into<String>, ts: i64) -> Self {
        Self {
            role,
            text: text.into(),
            ts,
            id: None,
            send: None,
            meta: None,
            context: Vec::new(),
            tool_calls: Vec::new(),
            tool: None,
        }
    }

    /// A `tool` message answering `call` with `content` (text and images), each block kept
    /// for `retention`.
    pub fn tool_result(
        answer: ToolAnswer,
        content: Vec<Part>,
        retention: crate::block::Retention,
        ts: i64,
    ) -> Self {
        let mut message = Self::new(Role::Tool, String::new(), ts);
        message.context = content
            .into_iter()
            .map(|part| ContextBlock { part, retention })
            .collect();
        message.tool = Some(answer);
        message
    }

    /// The id of the call a `tool` message answers.
    pub fn answers(&self) -> Option<&str> {
        self.tool.as_ref().map(|t| t.tool_call_id.as_str())
    }

    /// The message's id: the stored one, or else the one derived from its role, time and
    /// text (what Parlor stores when it first writes the message, so the two never differ
    /// for a message whose text is unchanged). Two messages with the same role, time and
    /// text share an id; the web chat never writes two such messages.
    pub fn id(&self) -> std::borrow::Cow<'_, str> {
        match &self.id {
            Some(id) => id.as_str().into(),
            None => self.derived_id().into(),
        }
    }

    /// The id derived from role, time and text; a tool exchange's messages, which may share
    /// a time and have no text, add the first call id they ask for or answer.
    fn derived_id(&self) -> String {
        let call = self
            .answers()
            .or_else(|| self.tool_calls.first().map(|c| c.id.as_str()));
        match call {
            None => derived_id(self.role, self.ts, &self.text),
            Some(call) => derived_id(self.role, self.ts, &format!("{}\0{call}", self.text)),
        }
    }

    /// Stores the id a message would otherwise derive (see [`Message::id`]).
    pub fn ensure_id(&mut self) {
        if self.id.is_none() {
            self.id = Some(self.derived_id());
        }
    }

    /// Pinned: sent even when the policy or the window would leave it out (the token budget
    /// may still drop it).
    pub fn is_pinned(&self) -> bool {
        self.send == Some(SendMark::Always)
    }

    /// Excluded: stored and shown, never sent.
    pub fn is_excluded(&self) -> bool {
        self.send == Some(SendMark::Never)
    }

    /// The text pieces the model reads, in order: the message's text, then its context's
    /// headers and text blocks (a tool result's content), then the tool calls it asks for
    /// (each call's tool and arguments).
    pub fn texts(&self) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
        std::iter::once(self.text.as_str().into())
            .chain(self.context.iter().filter_map(|b| b.part.sent_text()))
            .chain(
                self.tool_calls
                    .iter()
                    .flat_map(|c| [c.name.as_str().into(), c.arguments.as_str().into()]),
            )
    }

    /// How many images the message carries.
    pub fn images(&self) -> usize {
        self.context
            .iter()
            .filter(|b| matches!(b.part, Part::Image { .. }))
            .count()
    }

    pub fn user(text: impl Into<String>, ts: i64) -> Self {
        Self::new(Role::User, text, ts)
    }

    pub fn assistant(text: impl Into<String>, ts: i64) -> Self {
        Self::new(Role::Assistant, text, ts)
    }

    pub fn system(text: impl Into<String>, ts: i64) -> Self {
        Self::new(Role::System, text, ts)
    }

    /// The reply's status, if it did not complete.
    pub fn status(&self) -> Option<ReplyStatus> {
        self.meta.as_ref().and_then(|m| m.status)
    }
}

/// Test conversations written as role letters: `s` system, `u` user, `a` assistant, `t`
/// tool; each message's text is its position and `ts` its index.
#[cfg(test)]
pub(crate) fn from_roles(roles: &str) -> Vec<Message> {
    roles
        .chars()
        .enumerate()
        .map(|(i, c)| {
            let role = match c {
                's' => Role::System,
                'u' => Role::User,
                'a' => Role::Assistant,
                't' => Role::Tool,
                _ => unreachable!("test alphabet"),
            };
            Message::new(role, i.to_string(), i as i64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_in_the_history_store_layout() {
        let json = serde_json::to_string(&Message::user("hi", 1_700_000_000_000)).unwrap();
        assert_eq!(json, r#"{"role":"user","text":"hi","ts":1700000000000}"#);
    }

    #[test]
    fn a_meta_of_any_shape_is_kept_as_written() {
        // Another tool's `status` and `model` of other types stay, with everything else.
        let written = r#"{"role":"assistant","text":"t","ts":1,"meta":{"status":3,"model":{"name":"m"},"tag":"x"}}"#;
        let message: Message = serde_json::from_str(written).unwrap();
        let meta = message.meta.as_ref().unwrap();
        assert_eq!((meta.status, meta.model.as_deref()), (None, None));
        assert_eq!(serde_json::to_string(&message).unwrap(), written);
        // Parlor's own are read as such, and written back the same.
        let parlor = r#"{"role":"assistant","text":"t","ts":1,"meta":{"status":"stopped","model":"m","tag":"x"}}"#;
        let message: Message = serde_json::from_str(parlor).unwrap();
        let meta = message.meta.as_ref().unwrap();
        assert_eq!(meta.status, Some(ReplyStatus::Stopped));
        assert_eq!(meta.model.as_deref(), Some("m"));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&serde_json::to_string(&message).unwrap())
                .unwrap(),
            serde_json::from_str::<serde_json::Value>(parlor).unwrap()
        );
        // An unknown status string is not Parlor's either: kept as written.
        let other: MessageMeta = serde_json::from_str(r#"{"status":"draft"}"#).unwrap();
        assert_eq!(other.status, None);
        assert_eq!(other.extra["status"], "draft");
    }

    #[test]
    fn ids_are_stored_or_derived_from_role_time_and_text_and_stay_the_same() {
        let mut m = Message::user("hi", 1_700_000_000_000);
        let derived = m.id().into_owned();
        assert!(derived.starts_with('h') && derived.len() == 17, "{derived}");
        // The same on every run and machine (a fixed hash, not the std's seeded one).
        assert_eq!(derived, Message::user("hi", 1_700_000_000_000).id());
        assert_ne!(derived, Message::assistant("hi", 1_700_000_000_000).id());
        assert_ne!(derived, Message::user("hi", 1_700_000_000_001).id());
        assert_ne!(derived, Message::user("hi!", 1_700_000_000_000).id());
        m.ensure_id();
        assert_eq!(m.id.as_deref(), Some(derived.as_str()));
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(
            json,
            format!(r#"{{"role":"user","text":"hi","ts":1700000000000,"id":"{derived}"}}"#)
        );
        // A stored id wins, even when the text changes later.
        m.text = "edited".into();
        assert_eq!(m.id(), derived);
    }

    #[test]
    fn marks_read_and_write_as_send_always_or_never() {
        let m: Message =
            serde_json::from_str(r#"{"role":"user","text":"x","ts":1,"send":"always"}"#).unwrap();
        assert!(m.is_pinned() && !m.is_excluded());
        let m: Message =
            serde_json::from_str(r#"{"role":"user","text":"x","ts":1,"send":"never"}"#).unwrap();
        assert!(m.is_excluded() && !m.is_pinned());
        assert!(serde_json::from_str::<Message>(
            r#"{"role":"user","text":"x","ts":1,"send":"maybe"}"#
        )
        .is_err());
    }

    #[test]
    fn reads_messages_with_meta_and_unknown_fields() {
        let m: Message = serde_json::from_str(
            r#"{"role":"assistant","text":"part","ts":5,"meta":{"status":"stopped","agent":"x"}}"#,
        )
        .unwrap();
        assert_eq!(m.status(), Some(ReplyStatus::Stopped));
    }
}
