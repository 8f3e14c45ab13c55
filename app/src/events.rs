//! The chat stream's events as the page reads them.
//!
//! The page needs a few facts of a `meta` event (which conversation, which model, how many
//! messages are stored, the meter), not the whole history report with its chain steps,
//! context and summary reports: those are shown by the server-rendered debug panel. Reading
//! only what the page uses keeps every other report's parser out of the WASM bundle. API
//! clients read the full events ([`parlor_domain::ChatEvent`]).

use crate::start::{optional, or_default, required, FromJson, Json};
use parlor_domain::event::{
    ApprovalEvent, LimitEvent, Rendered, StreamEvent, ToolCallEvent, ToolResultEvent,
    UnavailableEvent, Usage,
};
use parlor_domain::meter::Meter;
use parlor_domain::DoneEvent;

/// One event of a turn as the page reads it (see [`parlor_domain::ChatEvent`] for the full
/// wire format).
pub type PageEvent = StreamEvent<PageMeta, DoneEvent>;

/// What the page uses of a `meta` event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PageMeta {
    pub session_id: String,
    pub model: String,
    pub provider: String,
    pub history: PageHistory,
    pub message_id: Option<String>,
    pub meter: Option<Meter>,
    pub message_tokens: Option<u64>,
    pub versions: Option<parlor_domain::branch::Versions>,
}

/// What the page uses of a `meta` event's history report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PageHistory {
    pub messages_stored: usize,
    pub first_sent_index: usize,
    /// How many stored messages the rolling summary covers (`summary.covers`), when there is
    /// one.
    pub summary: Option<usize>,
}

/// Reads one event of the chat stream from its parsed JSON (the browser's `JSON.parse`), as
/// the island's data is read (`crate::start`): no serde_json parser in the browser's code for
/// the events. `None` for an event of another type or shape (skipped, as the server may add
/// kinds).
pub fn read_event(json: &impl Json) -> Option<PageEvent> {
    let kind: String = required(json, "type")?;
    Some(match kind.as_str() {
        "meta" => PageEvent::Meta(PageMeta::from_json(json)?),
        "delta" => PageEvent::Delta {
            text: required(json, "text")?,
            rendered: optional(json, "rendered")?,
        },
        "done" => PageEvent::Done(DoneEvent::from_json(json)?),
        "error" => PageEvent::Error {
            message: required(json, "message")?,
        },
        "notice" => PageEvent::Notice {
            text: required(json, "text")?,
        },
        "tool_call" => PageEvent::ToolCall(ToolCallEvent {
            id: required(json, "id")?,
            tool: required(json, "tool")?,
            server: required(json, "server")?,
            arguments: required(json, "arguments")?,
        }),
        "tool_result" => PageEvent::ToolResult(ToolResultEvent {
            id: required(json, "id")?,
            ok: required(json, "ok")?,
            bytes: required(json, "bytes")?,
            ms: required(json, "ms")?,
            preview: or_default(json, "preview")?,
            error: optional(json, "error")?,
        }),
        "approval" => PageEvent::Approval(ApprovalEvent {
            id: required(json, "id")?,
            tool: required(json, "tool")?,
            server: required(json, "server")?,
            arguments: required(json, "arguments")?,
            timeout_secs: required(json, "timeout_secs")?,
            first_use: required(json, "first_use")?,
        }),
        "limit" => PageEvent::Limit(LimitEvent {
            reached: required(json, "reached")?,
            limit: required(json, "limit")?,
        }),
        "unavailable" => PageEvent::Unavailable(UnavailableEvent {
            server: required(json, "server")?,
            why: required(json, "why")?,
            settings_url: optional(json, "settings_url")?,
        }),
        _ => return None,
    })
}

impl FromJson for PageMeta {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(PageMeta {
            session_id: required(json, "session_id")?,
            model: required(json, "model")?,
            provider: required(json, "provider")?,
            history: required(json, "history")?,
            message_id: optional(json, "message_id")?,
            meter: optional(json, "meter")?,
            message_tokens: optional(json, "message_tokens")?,
            versions: optional(json, "versions")?,
        })
    }
}

impl FromJson for PageHistory {
    fn from_json(json: &impl Json) -> Option<Self> {
        let summary = match json.get("summary") {
            Some(summary) => Some(required(&summary, "covers")?),
            None => None,
        };
        Some(PageHistory {
            messages_stored: required(json, "messages_stored")?,
            first_sent_index: required(json, "first_sent_index")?,
            summary,
        })
    }
}

impl FromJson for DoneEvent {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(DoneEvent {
            finish_reason: required(json, "finish_reason")?,
            usage: optional(json, "usage")?,
            html: optional(json, "html")?,
            message_id: optional(json, "message_id")?,
            meter: optional(json, "meter")?,
            message_tokens: optional(json, "message_tokens")?,
        })
    }
}

impl FromJson for Usage {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(Usage {
            prompt_tokens: required(json, "prompt_tokens")?,
            completion_tokens: required(json, "completion_tokens")?,
            total_tokens: required(json, "total_tokens")?,
            cached_tokens: optional(json, "cached_tokens")?,
            cache_write_tokens: optional(json, "cache_write_tokens")?,
        })
    }
}

impl FromJson for Rendered {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(Rendered {
            html: required(json, "html")?,
            upto: required(json, "upto")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parlor_domain::meter::{MeterParts, NEAR_LIMIT_PERCENT};
    use parlor_domain::summary::SummaryReport;
    use parlor_domain::tool::LimitReached;
    use parlor_domain::{ChatEvent, HistoryReport, MetaEvent, SettingsReport};

    fn meta() -> MetaEvent {
        let settings = SettingsReport {
            policy: "lastN".into(),
            policy_source: parlor_domain::SettingSource::Environment,
            policy_notes: vec!["URL ignored".into()],
            length: 4,
            effective_length: 4,
            length_source: parlor_domain::SettingSource::Default,
            length_notes: vec![],
        };
        let summary = SummaryReport {
            covers: 6,
            ..SummaryReport::new(&serde_json::json!({"facts": ["they met"]}), true, 12, None)
        };
        MetaEvent {
            session_id: "s1".into(),
            agent_id: "general".into(),
            model: "quick".into(),
            provider: "openai".into(),
            history: HistoryReport {
                settings,
                messages_stored: 9,
                messages_sent: 5,
                messages_trimmed: 4,
                first_sent_index: 4,
                estimated_tokens: 321,
                chain: vec![],
                effective_ctx: 20,
                token_budget: Some(4000),
                context: None,
                summary: Some(Box::new(summary)),
                marks: None,
                exchanges: Vec::new(),
            },
            message_id: Some("m9".into()),
            meter: Some(Meter {
                window: Some(400),
                sent: 321,
                parts: MeterParts {
                    system: 20,
                    summary: 12,
                    history: 250,
                    context: 30,
                    tools: 0,
                    message: 9,
                },
                near_limit: 321 * 100 >= 400 * NEAR_LIMIT_PERCENT,
                drops_next: Some("hello".into()),
                ..Meter::default()
            }),
            message_tokens: Some(39),
            versions: Some(parlor_domain::branch::Versions {
                n: 3,
                of: 3,
                prev: Some("m8".into()),
                next: None,
            }),
        }
    }

    /// An event as the page reads it: parsed (by the browser's `JSON.parse` in the page,
    /// serde_json's `Value` here), then read by [`read_event`].
    fn page_event(json: &str) -> Option<PageEvent> {
        read_event(&serde_json::from_str::<serde_json::Value>(json).ok()?)
    }

    #[test]
    fn the_page_reads_what_it_shows_of_each_event_as_the_server_sends_it() {
        let meta = meta();
        assert_eq!(meta.history.summary.as_ref().map(|s| s.covers), Some(6));
        let json = serde_json::to_string(&ChatEvent::Meta(Box::new(meta.clone()))).unwrap();
        let PageEvent::Meta(page) = page_event(&json).unwrap() else {
            panic!("not a meta event: {json}");
        };
        assert_eq!(page.session_id, meta.session_id);
        assert_eq!(
            (page.model.as_str(), page.provider.as_str()),
            ("quick", "openai")
        );
        assert_eq!(page.history.messages_stored, 9);
        assert_eq!(page.history.first_sent_index, 4);
        assert_eq!(page.history.summary, Some(6));
        assert_eq!(page.message_id.as_deref(), Some("m9"));
        assert_eq!(page.meter, meta.meter, "the meter arrives whole");
        assert_eq!(page.message_tokens, Some(39));
        assert_eq!(page.versions, meta.versions, "the new version's ‹ n/m ›");

        let done = DoneEvent {
            finish_reason: "stop".into(),
            usage: Some(Usage {
                prompt_tokens: 330,
                completion_tokens: 8,
                total_tokens: 338,
                cached_tokens: Some(128),
                cache_write_tokens: None,
            }),
            html: Some("<p>hi</p>".into()),
            message_id: Some("m10".into()),
            meter: meta.meter.clone(),
            message_tokens: Some(8),
        };
        let json = serde_json::to_string(&ChatEvent::Done(Box::new(done.clone()))).unwrap();
        assert_eq!(page_event(&json).unwrap(), PageEvent::Done(done));

        for (event, expected) in [
            (
                ChatEvent::Delta {
                    text: "a".into(),
                    rendered: None,
                },
                PageEvent::Delta {
                    text: "a".into(),
                    rendered: None,
                },
            ),
            (
                ChatEvent::Error {
                    message: "no".into(),
                },
                PageEvent::Error {
                    message: "no".into(),
                },
            ),
            (
                ChatEvent::Notice { text: "n".into() },
                PageEvent::Notice { text: "n".into() },
            ),
        ] {
            let json = serde_json::to_string(&event).unwrap();
            assert_eq!(page_event(&json).unwrap(), expected);
        }
        assert_eq!(page_event(r#"{"type":"party"}"#), None);
        assert_eq!(
            page_event(r#"{"type":"delta"}"#),
            None,
            "a delta without its text"
        );
        assert_eq!(page_event("{"), None);
    }

    #[test]
    fn a_meta_event_without_summary_or_meter_is_read() {
        let mut meta = meta();
        meta.history.summary = None;
        meta.meter = None;
        meta.message_id = None;
        let json = serde_json::to_string(&ChatEvent::Meta(Box::new(meta))).unwrap();
        let PageEvent::Meta(page) = page_event(&json).unwrap() else {
            panic!("not a meta event");
        };
        assert_eq!(
            (page.history.summary, page.meter, page.message_id),
            (None, None, None)
        );
    }

    #[test]
    fn tool_events_and_a_rendered_delta_are_read_whole() {
        let events = [
            PageEvent::Delta {
                text: "**hi**".into(),
                rendered: Some(Rendered {
                    html: "<p><strong>hi</strong></p>".into(),
                    upto: 6,
                }),
            },
            PageEvent::ToolCall(ToolCallEvent {
                id: "c1".into(),
                tool: "get_time".into(),
                server: "time".into(),
                arguments: r#"{"tz":"UTC"}"#.into(),
            }),
            PageEvent::ToolResult(ToolResultEvent {
                id: "c1".into(),
                ok: true,
                bytes: 120,
                ms: 4,
                preview: "12:00".into(),
                error: None,
            }),
            PageEvent::ToolResult(ToolResultEvent {
                id: "c2".into(),
                ok: false,
                bytes: 0,
                ms: 30000,
                preview: String::new(),
                error: Some("timed out".into()),
            }),
            PageEvent::Approval(ApprovalEvent {
                id: "c3".into(),
                tool: "write".into(),
                server: "files".into(),
                arguments: "{}".into(),
                timeout_secs: 120,
                first_use: true,
            }),
            PageEvent::Limit(LimitEvent {
                reached: LimitReached::MaxCalls,
                limit: 8,
            }),
            PageEvent::Unavailable(UnavailableEvent {
                server: "memory".into(),
                why: "it needs your TOKEN".into(),
                settings_url: Some("/account/tools".into()),
            }),
        ];
        for expected in events {
            // As the server writes it: the full event type, serialized by serde.
            let sent = match expected.clone() {
                PageEvent::Delta { text, rendered } => ChatEvent::Delta { text, rendered },
                PageEvent::ToolCall(call) => ChatEvent::ToolCall(call),
                PageEvent::ToolResult(result) => ChatEvent::ToolResult(result),
                PageEvent::Approval(asked) => ChatEvent::Approval(asked),
                PageEvent::Limit(limit) => ChatEvent::Limit(limit),
                PageEvent::Unavailable(e) => ChatEvent::Unavailable(e),
                other => panic!("not in this list: {other:?}"),
            };
            let json = serde_json::to_string(&sent).unwrap();
            assert_eq!(page_event(&json), Some(expected), "{json}");
        }
    }
}
