//! The chat stream's events as the page reads them.
//!
//! The page needs a few facts of a `meta` event (which conversation, which model, how many
//! messages are stored, the meter), not the whole history report with its chain steps,
//! context and summary reports: those are shown by the server-rendered debug panel. Reading
//! only what the page uses keeps every other report's parser out of the WASM bundle. API
//! clients read the full events ([`parlor_domain::ChatEvent`]).

use parlor_domain::event::StreamEvent;
use parlor_domain::meter::Meter;
use parlor_domain::DoneEvent;
use serde::Deserialize;

/// One event of a turn as the page reads it (see [`parlor_domain::ChatEvent`] for the full
/// wire format).
pub type PageEvent = StreamEvent<PageMeta, DoneEvent>;

/// What the page uses of a `meta` event.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PageMeta {
    pub session_id: String,
    pub model: String,
    pub provider: String,
    pub history: PageHistory,
    #[serde(default)]
    pub message_id: Option<String>,
    #[serde(default)]
    pub meter: Option<Meter>,
    #[serde(default)]
    pub message_tokens: Option<u64>,
}

/// What the page uses of a `meta` event's history report.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PageHistory {
    pub messages_stored: usize,
    pub first_sent_index: usize,
    /// How many stored messages the rolling summary covers, when there is one.
    #[serde(default, deserialize_with = "covers")]
    pub summary: Option<usize>,
}

/// Reads `summary.covers`.
fn covers<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    struct Summary {
        covers: usize,
    }
    Ok(Option::<Summary>::deserialize(d)?.map(|s| s.covers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parlor_domain::meter::{MeterParts, NEAR_LIMIT_PERCENT};
    use parlor_domain::summary::SummaryReport;
    use parlor_domain::{ChatEvent, HistoryReport, MetaEvent, SettingsReport, Usage};

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
        }
    }

    #[test]
    fn the_page_reads_what_it_shows_of_each_event_as_the_server_sends_it() {
        let meta = meta();
        assert_eq!(meta.history.summary.as_ref().map(|s| s.covers), Some(6));
        let json = serde_json::to_string(&ChatEvent::Meta(Box::new(meta.clone()))).unwrap();
        let PageEvent::Meta(page) = PageEvent::from_json(&json).unwrap() else {
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

        let done = DoneEvent {
            finish_reason: "stop".into(),
            usage: Some(Usage {
                prompt_tokens: 330,
                completion_tokens: 8,
                total_tokens: 338,
                cached_tokens: Some(128),
            }),
            html: Some("<p>hi</p>".into()),
            message_id: Some("m10".into()),
            meter: meta.meter.clone(),
            message_tokens: Some(8),
        };
        let json = serde_json::to_string(&ChatEvent::Done(Box::new(done.clone()))).unwrap();
        assert_eq!(PageEvent::from_json(&json).unwrap(), PageEvent::Done(done));

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
            assert_eq!(PageEvent::from_json(&json).unwrap(), expected);
        }
        assert!(PageEvent::from_json(r#"{"type":"party"}"#).is_err());
        assert!(PageEvent::from_json("{").is_err());
    }

    #[test]
    fn a_meta_event_without_summary_or_meter_is_read() {
        let mut meta = meta();
        meta.history.summary = None;
        meta.meter = None;
        meta.message_id = None;
        let json = serde_json::to_string(&ChatEvent::Meta(Box::new(meta))).unwrap();
        let PageEvent::Meta(page) = PageEvent::from_json(&json).unwrap() else {
            panic!("not a meta event");
        };
        assert_eq!(
            (page.history.summary, page.meter, page.message_id),
            (None, None, None)
        );
    }
}
