//! The chat stream's wire format: typed JSON events shared by the server and the browser.
//!
//! A turn streams `meta` first, then any number of `delta`s, then exactly one of `done` or
//! `error`. Each event is one server-sent event whose `event:` name is the `type` field.

use crate::command::{parse_command, Parsed};
use crate::context::{ContextEntry, ContextError, ContextReport};
use crate::conversation_id::{ConversationId, ConversationIdError};
pub use crate::meter::Usage;
use crate::settings::SettingSource;
use serde::{Deserialize, Serialize};

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChatEvent {
    // The two large events are boxed: streams queue many small deltas, and every queued
    // event takes the size of the largest variant.
    Meta(Box<MetaEvent>),
    Delta {
        text: String,
        /// Present when this piece completed one or more Markdown blocks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rendered: Option<Rendered>,
    },
    Done(Box<DoneEvent>),
    Error {
        message: String,
    },
    /// Parlor's answer to a `!` command (not the model's, and not stored).
    Notice {
        text: String,
    },
    ToolCall(ToolCallEvent),
    ToolResult(ToolResultEvent),
    Approval(ApprovalEvent),
    Limit(LimitEvent),
    Unavailable(UnavailableEvent),
}

mod request;
pub mod tools;
pub use request::{ChatRequest, ChatRequestError, ValidChatRequest};
pub use tools::{ApprovalEvent, LimitEvent, ToolCallEvent, ToolResultEvent, UnavailableEvent};

/// A refused request's body: `{"error": "…"}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub error: String,
}

impl ChatEvent {
    pub fn name(&self) -> &'static str {
        match self {
            ChatEvent::Meta(_) => "meta",
            ChatEvent::Delta { .. } => "delta",
            ChatEvent::Done(_) => "done",
            ChatEvent::Error { .. } => "error",
            ChatEvent::Notice { .. } => "notice",
            ChatEvent::ToolCall(_) => "tool_call",
            ChatEvent::ToolResult(_) => "tool_result",
            ChatEvent::Approval(_) => "approval",
            ChatEvent::Limit(_) => "limit",
            ChatEvent::Unavailable(_) => "unavailable",
        }
    }
}

impl ChatEvent {
    /// Parses one event's JSON. Equivalent to deserializing a `ChatEvent`, but reads the
    /// `type` first and then the one variant's fields (see [`StreamEvent::from_json`]).
    pub fn from_json(data: &str) -> Result<ChatEvent, serde_json::Error> {
        Ok(
            match StreamEvent::<MetaEvent, DoneEvent>::from_json(data)? {
                StreamEvent::Meta(meta) => ChatEvent::Meta(Box::new(meta)),
                StreamEvent::Delta { text, rendered } => ChatEvent::Delta { text, rendered },
                StreamEvent::Done(done) => ChatEvent::Done(Box::new(done)),
                StreamEvent::Error { message } => ChatEvent::Error { message },
                StreamEvent::Notice { text } => ChatEvent::Notice { text },
                StreamEvent::ToolCall(e) => ChatEvent::ToolCall(e),
                StreamEvent::ToolResult(e) => ChatEvent::ToolResult(e),
                StreamEvent::Approval(e) => ChatEvent::Approval(e),
                StreamEvent::Limit(e) => ChatEvent::Limit(e),
                StreamEvent::Unavailable(e) => ChatEvent::Unavailable(e),
            },
        )
    }
}

/// A chat event as a reader wants it: `M` and `D` are what it reads of `meta` and `done`
/// (the whole [`MetaEvent`] and [`DoneEvent`], or only the fields a page shows: serde
/// skips the others, and their parsers stay out of a browser bundle).
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent<M, D> {
    Meta(M),
    Delta {
        text: String,
        rendered: Option<Rendered>,
    },
    Done(D),
    Error {
        message: String,
    },
    Notice {
        text: String,
    },
    ToolCall(ToolCallEvent),
    ToolResult(ToolResultEvent),
    Approval(ApprovalEvent),
    Limit(LimitEvent),
    Unavailable(UnavailableEvent),
}

impl<M: serde::de::DeserializeOwned, D: serde::de::DeserializeOwned> StreamEvent<M, D> {
    /// Parses one event's JSON: its `type` first, then that variant's fields, instead of
    /// serde's buffering of internally tagged enums (much less parsing code in a browser
    /// bundle).
    pub fn from_json(data: &str) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize)]
        struct Tag<'a> {
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
        }
        #[derive(Deserialize)]
        struct Delta {
            text: String,
            #[serde(default)]
            rendered: Option<Rendered>,
        }
        #[derive(Deserialize)]
        struct Error {
            message: String,
        }
        #[derive(Deserialize)]
        struct Notice {
            text: String,
        }
        let tag: Tag = serde_json::from_str(data)?;
        Ok(match tag.kind.as_ref() {
            "meta" => StreamEvent::Meta(serde_json::from_str(data)?),
            "delta" => {
                let Delta { text, rendered } = serde_json::from_str(data)?;
                StreamEvent::Delta { text, rendered }
            }
            "done" => StreamEvent::Done(serde_json::from_str(data)?),
            "error" => StreamEvent::Error {
                message: serde_json::from_str::<Error>(data)?.message,
            },
            "notice" => StreamEvent::Notice {
                text: serde_json::from_str::<Notice>(data)?.text,
            },
            "tool_call" => StreamEvent::ToolCall(serde_json::from_str(data)?),
            "tool_result" => StreamEvent::ToolResult(serde_json::from_str(data)?),
            "approval" => StreamEvent::Approval(serde_json::from_str(data)?),
            "limit" => StreamEvent::Limit(serde_json::from_str(data)?),
            "unavailable" => StreamEvent::Unavailable(serde_json::from_str(data)?),
            other => {
                return Err(serde::de::Error::unknown_variant(
                    other,
                    &[
                        "meta",
                        "delta",
                        "done",
                        "error",
                        "notice",
                        "tool_call",
                        "tool_result",
                        "approval",
                        "limit",
                    ],
                ))
            }
        })
    }
}

/// What the server is about to send to the model, and why.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetaEvent {
    pub session_id: String,
    pub agent_id: String,
    /// The model's name as Parlor knows it (`mirror` for the built-in offline model).
    pub model: String,
    pub provider: String,
    pub history: HistoryReport,
    /// The id of the user message stored on this turn (none for commands and regenerations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// How full the model's window is with this call, part by part (Parlor's count; `done`
    /// brings the provider's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meter: Option<crate::meter::Meter>,
    /// The tokens of the message sent on this turn (its text and context blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_tokens: Option<u64>,
    /// An edit or a regeneration: the ‹ n/m › of the new version (the edited question, or
    /// the reply being written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<crate::branch::Versions>,
}

/// The history settings of a model call: each value, where it came from, and why higher
/// sources did not decide it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsReport {
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
}

impl SettingsReport {
    pub fn from_settings(settings: &crate::settings::HistorySettings) -> Self {
        Self {
            policy: settings.policy.value.to_string(),
            policy_source: settings.policy.source,
            policy_notes: settings.policy.notes.clone(),
            length: settings.length.value.configured(),
            effective_length: settings.length.value.effective(),
            length_source: settings.length.source,
            length_notes: settings.length.notes.clone(),
        }
    }

    /// The length as a person reads it: `20`, or `0, acts as 1`.
    pub fn length_label(&self) -> String {
        if self.length < 1 {
            format!("{}, acts as {}", self.length, self.effective_length)
        } else {
            self.length.to_string()
        }
    }
}

/// The body of a request that marks a message: `{"send": "always"}` pins it, `"never"`
/// excludes it, `null` (or no `send`) clears the mark.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkRequest {
    #[serde(default)]
    pub send: Option<crate::message::SendMark>,
}

/// The answer to a [`MarkRequest`]: the message's id and mark, and how many messages of
/// the conversation are pinned now.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkReply {
    pub id: String,
    pub send: Option<crate::message::SendMark>,
    pub pinned: usize,
}

/// What the user's marks did to one model call (see [`crate::message::SendMark`]).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarksReport {
    /// Pinned messages sent.
    pub pinned_sent: usize,
    /// Pinned messages the token budget dropped (only it may).
    pub pinned_dropped: usize,
    /// Excluded messages left out of what the policy would have sent.
    pub excluded: usize,
}

/// The history facts of one model call: the debug panel shows exactly these.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryReport {
    #[serde(flatten)]
    pub settings: SettingsReport,
    /// Messages in the stored conversation, including the new user message.
    pub messages_stored: usize,
    /// Messages in the request to the model, including the agent's system prompt.
    pub messages_sent: usize,
    /// Stored messages that were not sent.
    pub messages_trimmed: usize,
    /// Stored messages before this index were not sent on this turn.
    pub first_sent_index: usize,
    /// The tokens sent, counted by the model's tokenizer where Parlor has it, else estimated
    /// (about four characters a token).
    pub estimated_tokens: u64,
    /// Each step that chose what was sent: the policy, then the configured processors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<crate::chain::StepReport>,
    /// The window of the sliding window step: min(agent max_ctx, model max_context).
    #[serde(default)]
    pub effective_ctx: usize,
    /// The model's token budget, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// The turn's context blocks, those still held from earlier turns, and what pruning
    /// removed; absent when the conversation has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Box<ContextReport>>,
    /// The conversation's rolling summary, when the chain has the `summary` processor and
    /// there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Box<crate::summary::SummaryReport>>,
    /// The user's pins and exclusions on this call, when the conversation has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<MarksReport>,
    /// Each tool exchange of the stored conversation's end: sent in full, with stubs, or
    /// dropped whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exchanges: Vec<crate::exchange::ExchangeReport>,
}

/// Sanitized HTML for newly completed blocks of a streaming reply: append `html` to what
/// was rendered before; together they cover the reply's first `upto` bytes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendered {
    pub html: String,
    pub upto: usize,
}

/// Everything the `?debug=true` panel and `GET /api/chat/{agent_id}/debug` show.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebugInfo {
    pub agent_id: String,
    pub session_id: Option<String>,
    pub model: String,
    pub provider: String,
    /// How the settings resolve for this request (environment, its URL, the template).
    pub settings: SettingsReport,
    /// The conversation's last model call, if it had one.
    pub last_turn: Option<TurnReport>,
    /// The conversation it was forked from, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<crate::transfer::ForkLink>,
    /// The agent's tool servers now, each with its state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_servers: Vec<tools::ServerReport>,
    /// The conversation's other versions, when it has any: the model receives the chosen
    /// path only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<crate::branch::VersionFacts>,
}

/// What the last model call of a conversation was sent.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnReport {
    pub history: HistoryReport,
    pub model: String,
    /// Tokens sent: the model's own count when it reported usage, else the estimate.
    pub tokens_sent: u64,
    /// True when `tokens_sent` is the model's own count.
    pub tokens_exact: bool,
    /// The context meter of the call, with the provider's usage and the cost once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meter: Option<crate::meter::Meter>,
    /// The turn's tools: those offered, each round's calls, the limit that ended the loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<tools::ToolsReport>,
    /// The prompt's tokens read from the provider's cache, written to it, and fresh, when
    /// the provider reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::cache::CacheUse>,
    /// Why this call's history does not begin as the previous turn's did (which is what
    /// the provider's cache needs); `None` when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_change: Option<crate::cache::PrefixChange>,
    /// What was sent, for the next turn's comparison.
    #[serde(default, skip_serializing_if = "crate::cache::Prefix::is_empty")]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub prefix: crate::cache::Prefix,
}

impl TurnReport {
    pub fn new(history: HistoryReport, model: String) -> Self {
        let tokens_sent = history.estimated_tokens;
        Self {
            history,
            model,
            tokens_sent,
            tokens_exact: false,
            meter: None,
            tools: None,
            cache: None,
            prefix_change: None,
            prefix: Default::default(),
        }
    }

    /// Takes the model's reported prompt tokens, when there are any, and the cache's share
    /// of them when the provider said.
    pub fn with_usage(mut self, usage: Option<&Usage>) -> Self {
        if let Some(usage) = usage.filter(|u| u.prompt_tokens > 0) {
            self.tokens_sent = usage.prompt_tokens;
            self.tokens_exact = true;
            let (read, written) = (usage.cached_tokens, usage.cache_write_tokens);
            if read.is_some() || written.is_some() {
                self.cache = Some(crate::cache::CacheUse::of(
                    usage.prompt_tokens,
                    read,
                    written,
                ));
            }
        }
        self
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneEvent {
    /// `stop`, `length`, … as the model reported it, or `stop` when it did not say.
    pub finish_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The whole reply as sanitized HTML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// The stored reply's id (to pin or exclude it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// The context meter with the provider's usage and the cost, when the provider reported
    /// usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meter: Option<crate::meter::Meter>,
    /// The reply's tokens as Parlor counts every message of the transcript (the provider's
    /// count of the reply is the meter's `completion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: &str) -> ChatRequest {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn chat_requests_are_validated_before_anything_is_stored() {
        let ok = request(r#"{"session_id": "abc", "message": "hi"}"#)
            .validate(10)
            .unwrap();
        assert_eq!(ok.session_id, Some(ConversationId::parse("abc").unwrap()));
        assert_eq!(ok.message.as_deref(), Some("hi"));
        let empty_id = request(r#"{"session_id": "", "message": "hi"}"#)
            .validate(10)
            .unwrap();
        assert_eq!(empty_id.session_id, None, "an empty id is no id");
        let again = request(r#"{"session_id": "abc", "regenerate": true}"#)
            .validate(10)
            .unwrap();
        assert_eq!(again.message, None);
        for (json, error) in [
            (
                r#"{"message": "hi", "regenerate": true}"#,
                ChatRequestError::MessageAndRegenerate,
            ),
            (
                r#"{"regenerate": true}"#,
                ChatRequestError::RegenerateWithoutSession,
            ),
            (r#"{}"#, ChatRequestError::MissingMessage),
            (r#"{"message": " \n\t"}"#, ChatRequestError::EmptyMessage),
            (
                r#"{"message": "ééééééééééé"}"#,
                ChatRequestError::TooLong {
                    length: 11,
                    limit: 10,
                },
            ),
            (
                r#"{"session_id": "../x", "message": "hi"}"#,
                ChatRequestError::ConversationId(ConversationIdError::BadCharacter),
            ),
            (
                r#"{"session_id": "abc", "regenerate": true, "context": [{"source": "s", "blocks": [{"type": "text", "text": "t"}]}]}"#,
                ChatRequestError::ContextWithRegenerate,
            ),
            (
                r#"{"message": "!help", "context": [{"source": "s", "blocks": [{"type": "text", "text": "t"}]}]}"#,
                ChatRequestError::ContextWithCommand,
            ),
            (
                r#"{"message": "hi", "context": [{"source": "s", "blocks": []}]}"#,
                ChatRequestError::Context(crate::context::ContextError::NoBlocks { entry: 0 }),
            ),
        ] {
            assert_eq!(request(json).validate(10), Err(error), "{json}");
        }
        // The limit counts characters, not bytes.
        assert!(request(r#"{"message": "éééééééééé"}"#).validate(10).is_ok());
    }

    #[test]
    fn events_are_tagged_json() {
        let json = serde_json::to_string(&ChatEvent::Delta {
            text: "hi".into(),
            rendered: None,
        })
        .unwrap();
        assert_eq!(json, r#"{"type":"delta","text":"hi"}"#);
        let back: ChatEvent = serde_json::from_str(r#"{"type":"error","message":"x"}"#).unwrap();
        assert_eq!(back.name(), "error");
    }

    #[test]
    fn from_json_reads_every_event_as_serde_does() {
        let settings = SettingsReport {
            policy: "lastN".into(),
            policy_source: SettingSource::Url,
            policy_notes: vec!["a note".into()],
            length: 0,
            effective_length: 1,
            length_source: SettingSource::Template,
            length_notes: vec![],
        };
        let events = [
            ChatEvent::Meta(Box::new(MetaEvent {
                session_id: "s".into(),
                agent_id: "a".into(),
                model: "m".into(),
                provider: "p".into(),
                history: HistoryReport {
                    settings,
                    messages_stored: 5,
                    messages_sent: 3,
                    messages_trimmed: 2,
                    first_sent_index: 2,
                    estimated_tokens: 40,
                    chain: vec![],
                    effective_ctx: 200,
                    token_budget: Some(1000),
                    context: None,
                    summary: None,
                    marks: None,
                    exchanges: Vec::new(),
                },
                message_id: None,
                meter: Some(crate::meter::Meter {
                    window: Some(128_000),
                    sent: 40,
                    ..Default::default()
                }),
                message_tokens: Some(7),
                versions: None,
            })),
            ChatEvent::Delta {
                text: "hi \"there\"".into(),
                rendered: Some(Rendered {
                    html: "<p>hi</p>".into(),
                    upto: 2,
                }),
            },
            ChatEvent::Delta {
                text: "plain".into(),
                rendered: None,
            },
            ChatEvent::Done(Box::new(DoneEvent {
                finish_reason: "stop".into(),
                usage: Some(Usage {
                    prompt_tokens: 1,
                    completion_tokens: 2,
                    total_tokens: 3,
                    cached_tokens: None,
                    cache_write_tokens: None,
                }),
                html: None,
                message_id: Some("h0123456789abcdef".into()),
                meter: None,
                message_tokens: Some(2),
            })),
            ChatEvent::Error {
                message: "upstream said no".into(),
            },
            ChatEvent::Notice {
                text: "Model set to 'x'.".into(),
            },
        ];
        for event in events {
            let json = serde_json::to_string(&event).unwrap();
            assert_eq!(ChatEvent::from_json(&json).unwrap(), event, "{json}");
        }
        assert!(ChatEvent::from_json(r#"{"type":"party"}"#).is_err());
        assert!(ChatEvent::from_json(r#"{"type":"error"}"#).is_err());
        assert!(ChatEvent::from_json("not json").is_err());
    }
}

/// Splits a server-sent-event byte stream into the `data` payloads of its events.
///
/// Feed it bytes as they arrive, in any chunking (even mid-character); it returns each
/// complete event's data. Comment lines (keep-alives) and other fields are skipped.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
}

impl SseDecoder {
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some((end, sep_len)) = find_event_end(&self.buffer) {
            let frame: Vec<u8> = self.buffer.drain(..end + sep_len).take(end).collect();
            let text = String::from_utf8_lossy(&frame);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() {
                out.push(data.join("\n"));
            }
        }
        out
    }
}

fn find_event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod decoder_tests {
    use super::*;

    #[test]
    fn decodes_events_across_arbitrary_chunk_boundaries() {
        let stream =
            "event: meta\ndata: {\"a\":1}\n\n: keep-alive\n\nevent: delta\ndata: {\"t\":\"é\"}\n\n";
        let bytes = stream.as_bytes();
        for split in 1..bytes.len() {
            let mut d = SseDecoder::default();
            let mut got = d.push(&bytes[..split]);
            got.extend(d.push(&bytes[split..]));
            assert_eq!(got, vec!["{\"a\":1}", "{\"t\":\"é\"}"], "split at {split}");
        }
    }

    #[test]
    fn joins_multi_line_data_and_accepts_crlf() {
        let mut d = SseDecoder::default();
        assert_eq!(d.push(b"data: a\r\ndata: b\r\n\r\n"), vec!["a\nb"]);
        assert!(d.push(b"data: incomplete").is_empty());
    }
}
