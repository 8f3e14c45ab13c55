//! The chat stream's wire format: typed JSON events shared by the server and the browser.
//!
//! A turn streams `meta` first, then any number of `delta`s, then exactly one of `done` or
//! `error`. Each event is one server-sent event whose `event:` name is the `type` field.

use crate::settings::SettingSource;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChatEvent {
    Meta(MetaEvent),
    Delta { text: String },
    Done(DoneEvent),
    Error { message: String },
}

impl ChatEvent {
    pub fn name(&self) -> &'static str {
        match self {
            ChatEvent::Meta(_) => "meta",
            ChatEvent::Delta { .. } => "delta",
            ChatEvent::Done(_) => "done",
            ChatEvent::Error { .. } => "error",
        }
    }
}

/// What the server is about to send to the model, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetaEvent {
    pub session_id: String,
    pub agent_id: String,
    /// The model's name as Parlor knows it (`mirror` for the built-in offline model).
    pub model: String,
    pub provider: String,
    pub history: HistoryReport,
}

/// The history facts of one model call: the debug panel shows exactly these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryReport {
    pub policy: String,
    pub policy_source: SettingSource,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_notes: Vec<String>,
    /// The length as configured; `effective_length` is what applies (0 or less acts as 1).
    pub length: i64,
    pub effective_length: usize,
    pub length_source: SettingSource,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub length_notes: Vec<String>,
    /// Messages in the stored conversation, including the new user message.
    pub messages_stored: usize,
    /// Messages in the request to the model, including the agent's system prompt.
    pub messages_sent: usize,
    /// Stored messages that were not sent.
    pub messages_trimmed: usize,
    /// Stored messages before this index were not sent on this turn.
    pub first_sent_index: usize,
    /// A rough count of the tokens sent (about four characters a token).
    pub estimated_tokens: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneEvent {
    /// `stop`, `length`, … as the model reported it, or `stop` when it did not say.
    pub finish_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_tagged_json() {
        let json = serde_json::to_string(&ChatEvent::Delta { text: "hi".into() }).unwrap();
        assert_eq!(json, r#"{"type":"delta","text":"hi"}"#);
        let back: ChatEvent = serde_json::from_str(r#"{"type":"error","message":"x"}"#).unwrap();
        assert_eq!(back.name(), "error");
    }
}
