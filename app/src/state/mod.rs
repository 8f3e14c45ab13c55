//! The chat page's live state, in rooms: the [`transcript`] (the messages on screen), the
//! turn being [`streaming`], [`paging`] back through older messages, the [`composer`] (the
//! draft and its attachments), and the page's other [`requests`] (fork, rename, delete,
//! pin, import, the debug panel).
//!
//! Every message owns its own signals, so a streamed piece of a reply updates that one
//! message and nothing else on the page. Replies arrive as text plus sanitized HTML that the
//! server renders block by block; the browser never parses Markdown itself.

mod composer;
mod paging;
mod requests;
mod streaming;
mod tool_cards;
mod transcript;

pub use composer::Composer;
pub use paging::Paging;
pub(crate) use requests::open_version;
pub use streaming::Streaming;
pub use transcript::{Transcript, UiMessage};

use crate::api::{ChatData, ChatQuery, ConversationItem, DebugView};
use leptos::prelude::*;
use parlor_domain::meter::Meter;

#[derive(Clone, Copy)]
pub struct ChatState {
    pub agent_id: StoredValue<String>,
    query: StoredValue<ChatQuery>,
    pub session_id: RwSignal<Option<String>>,
    pub transcript: Transcript,
    pub streaming: Streaming,
    pub paging: Paging,
    pub composer: Composer,
    pub conversations: RwSignal<Vec<ConversationItem>>,
    /// The debug panel as the server rendered it; `None` unless the page was opened with
    /// `?debug=true` (and the operator allows it). Rendered again after every turn.
    pub debug: RwSignal<Option<DebugView>>,
    /// The panel is being fetched again.
    pub debug_loading: RwSignal<bool>,
    /// The conversation's model and provider, as the last turn reported them.
    pub model: RwSignal<String>,
    pub provider: RwSignal<String>,
    /// How full the model's window was on the last call (the header's meter).
    pub meter: RwSignal<Option<Meter>>,
    /// Why the code behind the page's buttons could not be fetched (see [`crate::actions::Action`]).
    pub unloaded: RwSignal<Option<String>>,
}

impl ChatState {
    pub fn new(data: &ChatData, query: ChatQuery) -> Self {
        let state = ChatState {
            agent_id: StoredValue::new(data.agent.id.clone()),
            query: StoredValue::new(query),
            session_id: RwSignal::new(data.session_id.clone()),
            transcript: Transcript::new(data.first_index, data.summarized),
            streaming: Streaming::default(),
            paging: Paging::default(),
            composer: Composer::new(data.max_context_bytes),
            conversations: RwSignal::new(data.conversations.clone()),
            debug: RwSignal::new(data.debug.clone()),
            debug_loading: RwSignal::new(false),
            model: RwSignal::new(data.model.clone()),
            provider: RwSignal::new(data.provider.clone()),
            meter: RwSignal::new(data.meter.clone()),
            unloaded: RwSignal::new(None),
        };
        let initial = data
            .messages
            .iter()
            .map(|m| {
                // On the server this is the rendered reply; in the browser it is absent and
                // the server-rendered HTML already in the page stays as it is.
                state
                    .transcript
                    .stored(m.clone(), m.html.clone().unwrap_or_default())
            })
            .collect();
        state.transcript.messages.set(initial);
        state
    }

    /// `/api/chat/{agent}`.
    pub fn agent_url(&self) -> String {
        format!("/api/chat/{}", encode(&self.agent_id.get_value()))
    }

    /// The chat endpoint, with the page's history settings from its URL.
    fn api_url(&self) -> String {
        let query = self.query.get_value();
        let params = settings_params(&query);
        match params.is_empty() {
            true => self.agent_url(),
            false => format!("{}?{}", self.agent_url(), params.join("&")),
        }
    }

    /// The debug panel's address for the conversation shown.
    fn debug_url(&self) -> String {
        let mut url = format!("{}/debug?format=html", self.agent_url());
        if let Some(session) = self.session_id.get_untracked() {
            url.push_str(&format!("&session_id={}", encode(&session)));
        }
        for param in settings_params(&self.query.get_value()) {
            url.push('&');
            url.push_str(&param);
        }
        url
    }
}

/// The page's history settings as query parameters (`historyPolicy`, `historyLength`).
fn settings_params(query: &ChatQuery) -> Vec<String> {
    [
        ("historyPolicy", &query.history_policy),
        ("historyLength", &query.history_length),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", encode(v))))
    .collect()
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// Percent-encodes a URL query value or path segment.
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::AgentInfo;

    /// Makes a reactive owner current for the rest of the test (the server's build of
    /// Leptos keeps signals in per-owner arenas). Kept for the test's whole thread.
    pub(crate) fn reactive() {
        let owner = Owner::new();
        owner.set();
        std::mem::forget(owner);
    }

    /// The state of a chat page for the agent `helper`, showing `session`.
    pub(crate) fn state(session: Option<&str>) -> ChatState {
        state_with(session, ChatQuery::default())
    }

    fn state_with(session: Option<&str>, query: ChatQuery) -> ChatState {
        reactive();
        let data = ChatData {
            agent: AgentInfo {
                id: "helper".into(),
                name: "Helper".into(),
                description: String::new(),
                initial_messages_html: Vec::new(),
                chat_prompts: Vec::new(),
            },
            model: "small".into(),
            provider: "openai".into(),
            models: Vec::new(),
            model_details: Vec::new(),
            mirror: false,
            session_id: session.map(str::to_owned),
            messages: Vec::new(),
            first_index: 0,
            conversations: Vec::new(),
            debug: None,
            max_context_bytes: 1024,
            summarized: 0,
            meter: None,
            forked_from: None,
            account: None,
        };
        ChatState::new(&data, query)
    }

    #[test]
    fn urls_carry_the_pages_settings_encoded() {
        let query = ChatQuery {
            history_policy: Some("lastN".into()),
            history_length: Some("3 & more".into()),
            ..ChatQuery::default()
        };
        let state = state_with(Some("s/1"), query);
        assert_eq!(
            state.api_url(),
            "/api/chat/helper?historyPolicy=lastN&historyLength=3%20%26%20more"
        );
        assert_eq!(
            state.debug_url(),
            "/api/chat/helper/debug?format=html&session_id=s%2F1&historyPolicy=lastN\
             &historyLength=3%20%26%20more"
        );
        let plain = state_with(None, ChatQuery::default());
        assert_eq!(plain.api_url(), "/api/chat/helper");
        assert_eq!(plain.debug_url(), "/api/chat/helper/debug?format=html");
        assert_eq!(encode("a-b_c.d~é"), "a-b_c.d~%C3%A9");
        assert_eq!(json_string("say \"hi\""), "\"say \\\"hi\\\"\"");
    }
}
