//! What the chat island starts from, and how it reaches the browser.
//!
//! An island's props are parsed in the browser by serde_json, whose code (with serde's
//! visitors for every type) made up about a fifth of the page's WASM. So the chat island
//! takes no props: the server writes its data into the page as JSON, in a
//! `<script type="application/json">` element beside the island, and the browser parses it
//! with its own `JSON.parse` and reads the typed values out of the result (the [`Json`] and
//! [`FromJson`] traits below). A round-trip test checks that what the server writes is read
//! back whole. docs/performance.md has the measurements (nanoserde, a JSON crate made for
//! small code, was tried too: with it the page's WASM was 27 KB larger than with these
//! readers).

use crate::api::{AgentInfo, ChatData, ChatQuery, ConversationItem, DebugView, StoredMessage};
use parlor_domain::context::Chip;
use parlor_domain::meter::{Cost, DailyUse, Meter, MeterParts};
use parlor_domain::tool::LimitReached;
use parlor_domain::{ReplyStatus, Role, SendMark};
use serde::Serialize;

/// The chat island's data: the conversation and the query the page was opened with.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatStart {
    pub data: ChatData,
    pub query: ChatQuery,
}

impl ChatStart {
    /// The id of the element that carries it.
    pub const ELEMENT_ID: &'static str = "chat-start";

    /// The element's text: JSON with every `<` escaped, so that no text in it (`</script>`,
    /// `<!--`) can end the element early. (`<` only ever occurs inside JSON strings, where
    /// `\u003c` reads back as the same character.)
    pub fn to_script_text(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_default()
            .replace('<', "\\u003c")
    }

    /// Read from the page (in the browser): `None` when the element is missing or its data
    /// does not have the shape this build expects.
    #[cfg(feature = "hydrate")]
    pub fn from_page() -> Option<ChatStart> {
        let text = leptos::prelude::document()
            .get_element_by_id(ChatStart::ELEMENT_ID)?
            .text_content()?;
        let value = js_sys::JSON::parse(&text).ok()?;
        ChatStart::from_json(&value)
    }
}

/// A parsed JSON value, as far as the readers need it: the browser's (`JSON.parse`'s
/// result) in the page, serde_json's in tests.
pub trait Json: Sized {
    /// An object's member; `None` when it is missing or `null`.
    fn get(&self, key: &str) -> Option<Self>;
    fn string(&self) -> Option<String>;
    fn number(&self) -> Option<f64>;
    fn boolean(&self) -> Option<bool>;
    /// An array's items.
    fn items(&self) -> Option<Vec<Self>>;
}

/// A value read from JSON as serde writes it; `None` when the JSON does not have its shape.
pub trait FromJson: Sized {
    fn from_json(json: &impl Json) -> Option<Self>;
}

/// A member that must be there.
pub(crate) fn required<T: FromJson>(json: &impl Json, key: &str) -> Option<T> {
    T::from_json(&json.get(key)?)
}

/// A member that may be missing or `null` (`Option` fields): `None` only when it is there
/// but of the wrong shape.
pub(crate) fn optional<T: FromJson>(json: &impl Json, key: &str) -> Option<Option<T>> {
    match json.get(key) {
        None => Some(None),
        Some(value) => T::from_json(&value).map(Some),
    }
}

/// A member left out when it has its default (`skip_serializing_if`).
pub(crate) fn or_default<T: FromJson + Default>(json: &impl Json, key: &str) -> Option<T> {
    optional(json, key).map(Option::unwrap_or_default)
}

impl FromJson for String {
    fn from_json(json: &impl Json) -> Option<Self> {
        json.string()
    }
}

impl FromJson for bool {
    fn from_json(json: &impl Json) -> Option<Self> {
        json.boolean()
    }
}

/// Whole numbers: JSON's numbers are doubles in the browser, exact up to 2^53 (far above
/// any count, size, time or cost here).
macro_rules! whole_numbers {
    ($($t:ty),*) => {$(
        impl FromJson for $t {
            fn from_json(json: &impl Json) -> Option<Self> {
                let n = json.number()?;
                (n.fract() == 0.0 && n >= <$t>::MIN as f64 && n <= <$t>::MAX as f64).then_some(n as $t)
            }
        }
    )*};
}
whole_numbers!(u32, u64, usize, i64);

impl<T: FromJson> FromJson for Vec<T> {
    fn from_json(json: &impl Json) -> Option<Self> {
        json.items()?.iter().map(T::from_json).collect()
    }
}

/// Enums of unit variants, as serde writes them (their names, renamed).
macro_rules! names {
    ($t:ty { $($name:literal => $variant:expr),* $(,)? }) => {
        impl FromJson for $t {
            fn from_json(json: &impl Json) -> Option<Self> {
                match json.string()?.as_str() {
                    $($name => Some($variant),)*
                    _ => None,
                }
            }
        }
    };
}
names!(Role { "system" => Role::System, "user" => Role::User, "assistant" => Role::Assistant, "tool" => Role::Tool });
names!(ReplyStatus { "stopped" => ReplyStatus::Stopped, "incomplete" => ReplyStatus::Incomplete });
names!(SendMark { "always" => SendMark::Always, "never" => SendMark::Never });
names!(LimitReached {
    "max_rounds" => LimitReached::MaxRounds,
    "max_calls" => LimitReached::MaxCalls,
});

impl FromJson for ChatStart {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(ChatStart {
            data: required(json, "data")?,
            query: required(json, "query")?,
        })
    }
}

impl FromJson for ChatQuery {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(ChatQuery {
            agent: required(json, "agent")?,
            session: optional(json, "session")?,
            history_policy: optional(json, "history_policy")?,
            history_length: optional(json, "history_length")?,
            debug: required(json, "debug")?,
        })
    }
}

impl FromJson for ChatData {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(ChatData {
            agent: required(json, "agent")?,
            model: required(json, "model")?,
            provider: required(json, "provider")?,
            models: required(json, "models")?,
            model_details: or_default(json, "model_details")?,
            mirror: required(json, "mirror")?,
            session_id: optional(json, "session_id")?,
            messages: required(json, "messages")?,
            first_index: required(json, "first_index")?,
            conversations: required(json, "conversations")?,
            debug: optional(json, "debug")?,
            max_context_bytes: required(json, "max_context_bytes")?,
            summarized: required(json, "summarized")?,
            meter: optional(json, "meter")?,
            forked_from: optional(json, "forked_from")?,
            account: optional(json, "account")?,
        })
    }
}

impl FromJson for AgentInfo {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(AgentInfo {
            id: required(json, "id")?,
            name: required(json, "name")?,
            description: required(json, "description")?,
            initial_messages_html: required(json, "initial_messages_html")?,
            chat_prompts: required(json, "chat_prompts")?,
        })
    }
}

impl FromJson for StoredMessage {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(StoredMessage {
            id: required(json, "id")?,
            role: required(json, "role")?,
            text: required(json, "text")?,
            send: optional(json, "send")?,
            // Never written: the page already shows it (see `StoredMessage::html`).
            html: None,
            status: optional(json, "status")?,
            context: or_default(json, "context")?,
            tokens: optional(json, "tokens")?,
            calls: or_default(json, "calls")?,
            card: optional(json, "card")?,
            versions: optional(json, "versions")?,
        })
    }
}

impl FromJson for parlor_domain::branch::Versions {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(parlor_domain::branch::Versions {
            n: required(json, "n")?,
            of: required(json, "of")?,
            prev: optional(json, "prev")?,
            next: optional(json, "next")?,
        })
    }
}

impl FromJson for crate::api::ToolCard {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(crate::api::ToolCard {
            call_id: required(json, "call_id")?,
            tool: required(json, "tool")?,
            arguments: required(json, "arguments")?,
            ok: optional(json, "ok")?,
            ms: or_default(json, "ms")?,
            bytes: or_default(json, "bytes")?,
            text: or_default(json, "text")?,
            image: optional(json, "image")?,
            removed: or_default(json, "removed")?,
        })
    }
}

impl FromJson for Chip {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(Chip {
            source: required(json, "source")?,
            kind: required(json, "kind")?,
            keep: optional(json, "keep")?,
        })
    }
}

impl FromJson for ConversationItem {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(ConversationItem {
            session_id: required(json, "session_id")?,
            agent_id: required(json, "agent_id")?,
            title: required(json, "title")?,
            updated_ms: required(json, "updated_ms")?,
        })
    }
}

impl FromJson for DebugView {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(DebugView {
            html: required(json, "html")?,
            first_sent: optional(json, "first_sent")?,
        })
    }
}

impl FromJson for Meter {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(Meter {
            window: optional(json, "window")?,
            sent: required(json, "sent")?,
            reported: or_default(json, "reported")?,
            parts: required(json, "parts")?,
            near_limit: or_default(json, "near_limit")?,
            drops_next: optional(json, "drops_next")?,
            completion: optional(json, "completion")?,
            cached: optional(json, "cached")?,
            cache_written: optional(json, "cache_written")?,
            cost: optional(json, "cost")?,
            today: optional(json, "today")?,
        })
    }
}

impl FromJson for DailyUse {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(DailyUse {
            used: required(json, "used")?,
            per_day: required(json, "per_day")?,
        })
    }
}

impl FromJson for MeterParts {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(MeterParts {
            system: required(json, "system")?,
            summary: required(json, "summary")?,
            history: required(json, "history")?,
            context: required(json, "context")?,
            tools: optional(json, "tools")?.unwrap_or(0),
            message: required(json, "message")?,
        })
    }
}

impl FromJson for Cost {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(Cost {
            turn_nano_usd: optional(json, "turn_nano_usd")?,
            conversation_nano_usd: required(json, "conversation_nano_usd")?,
        })
    }
}

#[cfg(feature = "hydrate")]
impl Json for wasm_bindgen::JsValue {
    fn get(&self, key: &str) -> Option<Self> {
        let value = js_sys::Reflect::get(self, &key.into()).ok()?;
        (!value.is_undefined() && !value.is_null()).then_some(value)
    }

    fn string(&self) -> Option<String> {
        self.as_string()
    }

    fn number(&self) -> Option<f64> {
        self.as_f64()
    }

    fn boolean(&self) -> Option<bool> {
        self.as_bool()
    }

    fn items(&self) -> Option<Vec<Self>> {
        use wasm_bindgen::JsCast;
        self.dyn_ref::<js_sys::Array>()
            .map(|array| array.iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    impl Json for Value {
        fn get(&self, key: &str) -> Option<Self> {
            self.as_object()?.get(key).filter(|v| !v.is_null()).cloned()
        }
        fn string(&self) -> Option<String> {
            self.as_str().map(str::to_owned)
        }
        fn number(&self) -> Option<f64> {
            self.as_f64()
        }
        fn boolean(&self) -> Option<bool> {
            self.as_bool()
        }
        fn items(&self) -> Option<Vec<Self>> {
            self.as_array().cloned()
        }
    }

    /// What the browser reads from the element's text: `JSON.parse` undoes the `\u003c`
    /// escapes as serde_json does.
    fn read_back(start: &ChatStart) -> Option<ChatStart> {
        let text = start.to_script_text();
        ChatStart::from_json(&serde_json::from_str::<Value>(&text).expect("valid JSON"))
    }

    fn message(id: &str, role: Role, text: &str) -> StoredMessage {
        StoredMessage {
            id: id.into(),
            role,
            text: text.into(),
            send: None,
            html: None,
            status: None,
            context: Vec::new(),
            tokens: None,
            calls: false,
            card: None,
            versions: None,
        }
    }

    /// Every field set, every variant used: a field the server writes and the browser does
    /// not read (or reads under another name) fails here.
    fn everything() -> ChatStart {
        let mut pinned = message("h1", Role::User, "a </script><!-- b & \"c\"\n\u{2028}é😀");
        pinned.send = Some(SendMark::Always);
        pinned.tokens = Some(12);
        pinned.context = vec![
            Chip {
                source: "file:a.txt".into(),
                kind: "text".into(),
                keep: None,
            },
            Chip {
                source: "time".into(),
                kind: "text, image".into(),
                keep: Some(3),
            },
        ];
        let mut stopped = message("h2", Role::Assistant, "half");
        stopped.status = Some(ReplyStatus::Stopped);
        stopped.send = Some(SendMark::Never);
        let mut broken = message("h3", Role::Assistant, "");
        broken.status = Some(ReplyStatus::Incomplete);
        broken.calls = true;
        let mut result = message("h4", Role::Tool, "");
        result.card = Some(crate::api::ToolCard {
            call_id: "c1".into(),
            tool: "clock__now".into(),
            arguments: "{\"tz\": \"UTC\"}".into(),
            ok: Some(false),
            ms: 12,
            bytes: 1204,
            text: "[result of clock__now removed after 2 turns: 1,204 bytes]".into(),
            image: Some("data:image/png;base64,iVBO".into()),
            removed: true,
        });
        ChatStart {
            data: ChatData {
                agent: AgentInfo {
                    id: "general".into(),
                    name: "General".into(),
                    description: "Helps".into(),
                    initial_messages_html: vec!["<p>Hi</p>".into()],
                    chat_prompts: vec!["one".into(), "two".into()],
                },
                model: "gpt".into(),
                provider: "openai".into(),
                models: vec!["gpt".into(), "mirror".into()],
                model_details: vec!["openai · 128,000 tokens".into(), String::new()],
                mirror: true,
                session_id: Some("s-1".into()),
                messages: vec![
                    message("h0", Role::System, "rules"),
                    pinned,
                    stopped,
                    broken,
                    result,
                ],
                first_index: 7,
                conversations: vec![ConversationItem {
                    session_id: "s-1".into(),
                    agent_id: "general".into(),
                    title: "First".into(),
                    updated_ms: 1_764_000_000_000,
                }],
                debug: Some(DebugView {
                    html: "<table></table>".into(),
                    first_sent: Some(2),
                }),
                max_context_bytes: 10 << 20,
                summarized: 4,
                account: Some("ada".into()),
                forked_from: Some(ConversationItem {
                    session_id: "s-0".into(),
                    agent_id: "general".into(),
                    title: "Origin".into(),
                    updated_ms: 1_763_000_000_000,
                }),
                meter: Some(Meter {
                    window: Some(128_000),
                    sent: 900,
                    reported: true,
                    parts: MeterParts {
                        system: 1,
                        summary: 2,
                        history: 3,
                        context: 4,
                        tools: 6,
                        message: 5,
                    },
                    near_limit: true,
                    drops_next: Some("h1".into()),
                    completion: Some(40),
                    cached: Some(128),
                    cache_written: Some(64),
                    cost: Some(Cost {
                        turn_nano_usd: Some(5),
                        conversation_nano_usd: 9_000_000_000,
                    }),
                    today: Some(DailyUse {
                        used: 7,
                        per_day: 100,
                    }),
                }),
            },
            query: ChatQuery {
                agent: "general".into(),
                session: Some("s-1".into()),
                history_policy: Some("lastN".into()),
                history_length: Some("0".into()),
                debug: true,
            },
        }
    }

    #[test]
    fn what_the_server_writes_is_read_back_whole() {
        let start = everything();
        assert_eq!(read_back(&start), Some(start));
    }

    #[test]
    fn defaults_left_out_by_the_server_read_back_as_defaults() {
        let mut start = everything();
        start.data.session_id = None;
        start.data.debug = None;
        start.data.meter = Some(Meter::default());
        start.data.messages = vec![message("h0", Role::User, "hello")];
        start.query = ChatQuery {
            agent: "general".into(),
            ..ChatQuery::default()
        };
        assert_eq!(read_back(&start), Some(start.clone()));
        start.data.meter = None;
        assert_eq!(read_back(&start), Some(start));
    }

    #[test]
    fn the_element_cannot_be_closed_by_the_data() {
        let text = everything().to_script_text();
        assert!(!text.contains('<'), "{text}");
        assert!(text.contains(r"a \u003c/script>\u003c!-- b"));
    }

    #[test]
    fn replies_html_is_not_written_twice() {
        let mut start = everything();
        start.data.messages[2].html = Some("<p>half</p>".into());
        assert!(!start.to_script_text().contains("half\\u003c/p>"));
        let read = read_back(&start).expect("read back");
        assert_eq!(read.data.messages[2].html, None);
    }

    #[test]
    fn data_of_another_shape_is_refused() {
        let mut json = serde_json::to_value(everything()).unwrap();
        json["data"]["messages"][1]["role"] = "narrator".into();
        assert_eq!(ChatStart::from_json(&json), None);
        let mut json = serde_json::to_value(everything()).unwrap();
        json["data"]["first_index"] = (-1).into();
        assert_eq!(ChatStart::from_json(&json), None);
        let mut json = serde_json::to_value(everything()).unwrap();
        json["data"]["meter"]["parts"]["history"] = 1.5.into();
        assert_eq!(ChatStart::from_json(&json), None);
        let mut json = serde_json::to_value(everything()).unwrap();
        json["query"].as_object_mut().unwrap().remove("agent");
        assert_eq!(ChatStart::from_json(&json), None);
    }
}
