//! The chat page's live state and what the user can do with it.
//!
//! Every message owns its own signals, so a streamed piece of a reply updates that one
//! message and nothing else on the page. Replies arrive as text plus sanitized HTML that the
//! server renders block by block; the browser never parses Markdown itself.

use crate::api::{
    ChatData, ChatQuery, ConversationItem, ConversationRef, DebugView, OlderMessages, StoredMessage,
};
use crate::attach::Attachment;
use crate::events::{PageEvent, PageMeta};
use crate::stream::{self, AbortHandle, StreamEnd};
use leptos::prelude::*;
use parlor_domain::context::Chip;
use parlor_domain::meter::Meter;
use parlor_domain::{ChatRequest, DoneEvent, Rendered, ReplyStatus, Role, SendMark};

#[derive(Clone, Copy)]
pub struct UiMessage {
    pub key: u64,
    pub role: Role,
    /// The raw text (what Copy copies).
    pub text: RwSignal<String>,
    /// Sanitized HTML for the first `rendered_len` bytes of `text` (assistant replies).
    pub html: RwSignal<String>,
    pub rendered_len: RwSignal<usize>,
    pub status: RwSignal<Option<ReplyStatus>>,
    pub streaming: RwSignal<bool>,
    /// Parlor's answer to a `!` command, shown as a notice (not stored).
    pub notice: RwSignal<bool>,
    /// A user message's context, one chip per source.
    pub chips: StoredValue<Vec<Chip>>,
    /// The stored message's id, once known (from the page, `meta` or `done`).
    pub id: RwSignal<Option<String>>,
    /// Pinned or excluded.
    pub send: RwSignal<Option<SendMark>>,
    /// Its tokens (shown with the debug panel).
    pub tokens: RwSignal<Option<u64>>,
}

/// Where a message of the transcript stands.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Position {
    key: u64,
    /// Its stored position (`None`: a command or its notice, which are not stored).
    index: Option<usize>,
    /// The user turns sent after it.
    later_turns: usize,
}

#[derive(Clone, Copy)]
pub struct ChatState {
    pub agent_id: StoredValue<String>,
    query: StoredValue<ChatQuery>,
    pub session_id: RwSignal<Option<String>>,
    pub messages: RwSignal<Vec<UiMessage>>,
    /// Each message's stored position and the user turns after it, kept once for the whole
    /// transcript (each message reading the list itself would cost the page O(n²)).
    positions: Memo<Vec<Position>>,
    /// The stored position of the first message shown (0: the whole conversation is).
    pub first_index: RwSignal<usize>,
    /// Older messages are being fetched (the reader scrolled up).
    pub older_loading: RwSignal<bool>,
    /// Why older messages could not be loaded.
    pub older_error: RwSignal<Option<String>>,
    pub streaming: RwSignal<bool>,
    /// An error from the last turn, shown inline with Retry.
    pub error: RwSignal<Option<String>>,
    pub draft: RwSignal<String>,
    /// Files attached to the next message.
    pub attachments: RwSignal<Vec<Attachment>>,
    /// Why a file could not be attached (too large, not a text file or an image).
    pub attach_error: RwSignal<Option<String>>,
    pub max_context_bytes: StoredValue<usize>,
    /// How many of the first stored messages the rolling summary covers.
    pub summarized: RwSignal<usize>,
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
    next_key: StoredValue<u64>,
    abort: StoredValue<AbortHandle>,
    /// Why the code behind the page's buttons could not be fetched (see [`crate::actions::Action`]).
    pub unloaded: RwSignal<Option<String>>,
    /// The chat view's reactive owner. Signals made during a turn belong to it, not to the
    /// button that started the turn: that button (a suggestion, Retry, Regenerate) is often
    /// removed by the turn itself, and its signals would be disposed with it.
    owner: StoredValue<Option<Owner>>,
}

impl ChatState {
    pub fn new(data: &ChatData, query: ChatQuery) -> Self {
        let messages = RwSignal::new(Vec::<UiMessage>::new());
        let first_index = RwSignal::new(data.first_index);
        let positions = Memo::new(move |_| {
            let mut index = first_index.get();
            let mut list: Vec<Position> = messages.with(|list| {
                list.iter()
                    .map(|m| {
                        let stored = !m.notice.get();
                        let at = stored.then_some(index);
                        index += usize::from(stored);
                        Position {
                            key: m.key,
                            index: at,
                            // For now: whether it is itself a user turn.
                            later_turns: usize::from(stored && m.role == Role::User),
                        }
                    })
                    .collect()
            });
            let mut later = 0;
            for position in list.iter_mut().rev() {
                let turn = position.later_turns;
                position.later_turns = later;
                later += turn;
            }
            list
        });
        let state = ChatState {
            agent_id: StoredValue::new(data.agent.id.clone()),
            query: StoredValue::new(query),
            session_id: RwSignal::new(data.session_id.clone()),
            messages,
            positions,
            first_index,
            older_loading: RwSignal::new(false),
            older_error: RwSignal::new(None),
            streaming: RwSignal::new(false),
            error: RwSignal::new(None),
            draft: RwSignal::new(String::new()),
            attachments: RwSignal::new(Vec::new()),
            attach_error: RwSignal::new(None),
            max_context_bytes: StoredValue::new(data.max_context_bytes),
            summarized: RwSignal::new(data.summarized),
            conversations: RwSignal::new(data.conversations.clone()),
            debug: RwSignal::new(data.debug.clone()),
            debug_loading: RwSignal::new(false),
            model: RwSignal::new(data.model.clone()),
            provider: RwSignal::new(data.provider.clone()),
            meter: RwSignal::new(data.meter.clone()),
            next_key: StoredValue::new(0),
            abort: StoredValue::new(AbortHandle::default()),
            unloaded: RwSignal::new(None),
            owner: StoredValue::new(Owner::current()),
        };
        let initial = data
            .messages
            .iter()
            .map(|m| {
                // On the server this is the rendered reply; in the browser it is absent and
                // the server-rendered HTML already in the page stays as it is.
                state.stored_message(m.clone(), m.html.clone().unwrap_or_default())
            })
            .collect();
        state.messages.set(initial);
        state
    }

    /// A stored message (its reply's HTML as the server rendered it) for the transcript.
    fn stored_message(&self, m: StoredMessage, html: String) -> UiMessage {
        let message = self.make_message(m.role, m.text, m.status);
        message.chips.set_value(m.context);
        message.id.set(Some(m.id));
        message.send.set(m.send);
        message.tokens.set(m.tokens);
        if m.role == Role::Assistant {
            message
                .rendered_len
                .set(message.text.with_untracked(String::len));
            message.html.set(html);
        }
        message
    }

    /// The stored position of the message `key` (`None` for commands and their notices).
    pub fn index_of(&self, key: u64) -> Option<usize> {
        self.positions
            .with(|list| list.iter().find(|p| p.key == key).and_then(|p| p.index))
    }

    /// The user turns sent after the message `key`.
    pub fn later_turns(&self, key: u64) -> usize {
        self.positions.with(|list| {
            list.iter()
                .find(|p| p.key == key)
                .map_or(0, |p| p.later_turns)
        })
    }

    /// Fetches the page of messages before the first one shown; `None` when there is none,
    /// one is being fetched, or it failed (then `older_error` says why).
    async fn fetch_older(self) -> Option<OlderMessages> {
        let before = self.first_index.get_untracked();
        if before == 0 || self.older_loading.get_untracked() {
            return None;
        }
        let session = self.session_id.get_untracked()?;
        let first = self.messages.with_untracked(|list| {
            list.iter()
                .find(|m| !m.notice.get_untracked())
                .and_then(|m| m.id.get_untracked())
        })?;
        let mut url = format!(
            "{}/sessions/{}/messages?before={before}&before_id={}",
            self.agent_url(),
            encode(&session),
            encode(&first)
        );
        if self.debug.with_untracked(Option::is_some) {
            url.push_str("&debug=true");
        }
        self.older_loading.set(true);
        self.older_error.set(None);
        let reply = stream::request("GET", url, None).await.and_then(|text| {
            serde_json::from_str::<OlderMessages>(&text).map_err(|e| e.to_string())
        });
        self.older_loading.set(false);
        match reply {
            // The conversation changed meanwhile (a new chat, a fork): not for this page.
            _ if self.session_id.get_untracked().as_ref() != Some(&session) => None,
            Ok(page) => Some(page),
            Err(reason) => {
                self.older_error.set(Some(format!(
                    "Earlier messages could not be loaded: {reason}"
                )));
                None
            }
        }
    }

    /// Fetches the messages before the first one shown and puts them above it, keeping what
    /// the reader looks at in `transcript` in place.
    pub(crate) fn load_older(self, transcript: NodeRef<leptos::html::Section>) {
        leptos::task::spawn_local(async move {
            let Some(page) = self.fetch_older().await else {
                return;
            };
            let Some(section) = transcript.get_untracked() else {
                return;
            };
            // Measured just before the insertion: the reader may have scrolled while it loaded.
            let (height, top) = (section.scroll_height(), section.scroll_top());
            self.prepend(page);
            request_animation_frame(move || {
                section.set_scroll_top(top + section.scroll_height() - height);
            });
        });
    }

    /// Puts a fetched older page before the messages shown.
    fn prepend(&self, page: OlderMessages) {
        let older: Vec<UiMessage> = page
            .messages
            .into_iter()
            .zip(
                page.html
                    .into_iter()
                    .chain(std::iter::repeat(String::new())),
            )
            .map(|(m, html)| self.stored_message(m, html))
            .collect();
        if page.summarized > 0 {
            self.summarized.set(page.summarized);
        }
        self.first_index.set(page.first_index);
        self.messages.update(|list| {
            list.splice(0..0, older);
        });
    }

    /// Runs `f` under the chat view's owner.
    fn owned<T>(&self, f: impl FnOnce() -> T) -> T {
        match self.owner.get_value() {
            Some(owner) => owner.with(f),
            None => f(),
        }
    }

    fn make_message(&self, role: Role, text: String, status: Option<ReplyStatus>) -> UiMessage {
        let key = self.next_key.get_value();
        self.next_key.set_value(key + 1);
        self.owned(|| UiMessage {
            key,
            role,
            text: RwSignal::new(text),
            html: RwSignal::new(String::new()),
            rendered_len: RwSignal::new(0),
            status: RwSignal::new(status),
            streaming: RwSignal::new(false),
            notice: RwSignal::new(false),
            chips: StoredValue::new(Vec::new()),
            id: RwSignal::new(None),
            send: RwSignal::new(None),
            tokens: RwSignal::new(None),
        })
    }

    fn push(&self, role: Role, text: String) -> UiMessage {
        let message = self.make_message(role, text, None);
        self.messages.update(|list| list.push(message));
        message
    }

    fn remove(&self, key: u64) {
        self.messages.update(|list| list.retain(|m| m.key != key));
    }

    /// Sends the composer's text with its attachments.
    pub(crate) fn send_draft(self) {
        let text = self.draft.get_untracked();
        if text.trim().is_empty() || self.streaming.get_untracked() {
            return;
        }
        self.draft.set(String::new());
        let attachments = self.attachments.get_untracked();
        self.attachments.set(Vec::new());
        self.attach_error.set(None);
        self.send_with(text, attachments);
    }

    /// Sends `text` as the user's next message.
    pub(crate) fn send(self, text: String) {
        self.send_with(text, Vec::new());
    }

    fn send_with(self, text: String, attachments: Vec<Attachment>) {
        self.send_turn(text, attachments, None);
    }

    fn send_turn(self, text: String, attachments: Vec<Attachment>, edit: Option<String>) {
        if self.streaming.get_untracked() {
            return;
        }
        let user = self.push(Role::User, text.clone());
        let entries: Vec<_> = attachments.iter().map(Attachment::entry).collect();
        user.chips
            .set_value(entries.iter().map(Chip::of_entry).collect());
        self.start_turn(Some(UserTurn {
            message: user,
            text,
            attachments,
            edit,
        }));
    }

    /// Sends `text` in place of the user message `message`: in this conversation when it is
    /// the last question (it and its reply are replaced), else in a fork made before it, so
    /// nothing is lost.
    pub(crate) fn edit(self, message: UiMessage, text: String, failed: RwSignal<Option<String>>) {
        if text.trim().is_empty() || self.streaming.get_untracked() {
            return;
        }
        let is_last = self.messages.with_untracked(|list| {
            !list
                .iter()
                .skip_while(|m| m.key != message.key)
                .skip(1)
                .any(|m| m.role == Role::User && !m.notice.get_untracked())
        });
        if is_last {
            self.keep_until(message.key, false);
            self.send_turn(text, Vec::new(), message.id.get_untracked());
        } else {
            self.fork(message, Some(text), failed);
        }
    }

    /// Forks the conversation at `message`: through it ("Fork from here"), or before it to
    /// send `edited` in its place. The page then shows the fork (the messages it copied).
    pub(crate) fn fork(
        self,
        message: UiMessage,
        edited: Option<String>,
        failed: RwSignal<Option<String>>,
    ) {
        let (Some(session), Some(id)) =
            (self.session_id.get_untracked(), message.id.get_untracked())
        else {
            return;
        };
        let url = format!("{}/sessions/{}/fork", self.agent_url(), encode(&session));
        let at = if edited.is_some() {
            "before"
        } else {
            "through"
        };
        let body = format!("{{\"{at}\":{}}}", json_string(&id));
        failed.set(None);
        stream::spawn_request("POST", url, Some(body), move |reply| {
            match reply.and_then(|text| {
                serde_json::from_str::<ConversationRef>(&text).map_err(|e| e.to_string())
            }) {
                Ok(fork) => {
                    self.keep_until(message.key, edited.is_none());
                    self.switch_to(fork);
                    match edited {
                        Some(text) => self.send(text),
                        None => self.refresh_debug(),
                    }
                }
                Err(reason) => failed.set(Some(reason)),
            }
        });
    }

    /// Drops the transcript's messages after the one with `key` (and it too unless `keep`).
    fn keep_until(&self, key: u64, keep: bool) {
        self.messages.update(|list| {
            if let Some(at) = list.iter().position(|m| m.key == key) {
                list.truncate(at + usize::from(keep));
            }
        });
    }

    /// Shows `conversation` (just made from this one) as the current conversation.
    fn switch_to(&self, conversation: ConversationRef) {
        self.session_id.set(Some(conversation.session_id.clone()));
        stream::set_url_param("session", Some(&conversation.session_id));
        self.summarized.set(0);
        self.meter.set(None);
        self.error.set(None);
        self.debug.update(|d| {
            if let Some(d) = d {
                d.first_sent = None;
            }
        });
        self.conversations.update(|list| {
            list.insert(
                0,
                ConversationItem {
                    session_id: conversation.session_id,
                    agent_id: conversation.agent_id,
                    title: conversation.title,
                    updated_ms: 0,
                },
            )
        });
    }

    /// Imports a conversation (a Parlor export or an OpenAI-style array) for this agent and
    /// opens it.
    #[cfg(feature = "hydrate")]
    fn import(self, text: String, failed: RwSignal<Option<String>>) {
        let url = format!("{}/sessions/import", self.agent_url());
        stream::spawn_request("POST", url, Some(text), move |reply| {
            match reply.and_then(|text| {
                serde_json::from_str::<ConversationRef>(&text).map_err(|e| e.to_string())
            }) {
                Ok(imported) => stream::open(&format!(
                    "/chat?agent={}&session={}",
                    encode(&imported.agent_id),
                    encode(&imported.session_id)
                )),
                Err(reason) => failed.set(Some(reason)),
            }
        });
    }

    /// Renames a conversation of the sidebar.
    pub(crate) fn rename(
        self,
        item: ConversationItem,
        title: String,
        failed: RwSignal<Option<String>>,
    ) {
        let url = format!(
            "/api/chat/{}/sessions/{}",
            encode(&item.agent_id),
            encode(&item.session_id)
        );
        let body = format!("{{\"title\":{}}}", json_string(&title));
        stream::spawn_request("PATCH", url, Some(body), move |reply| {
            match reply.and_then(|text| {
                serde_json::from_str::<ConversationRef>(&text).map_err(|e| e.to_string())
            }) {
                Ok(renamed) => self.conversations.update(|list| {
                    if let Some(c) = list.iter_mut().find(|c| c.session_id == renamed.session_id) {
                        c.title = renamed.title;
                    }
                }),
                Err(reason) => failed.set(Some(reason)),
            }
        });
    }

    /// Deletes a conversation of the sidebar; the page starts a new one if it was shown.
    pub(crate) fn delete(self, item: ConversationItem, failed: RwSignal<Option<String>>) {
        let url = format!(
            "/api/chat/{}/sessions/{}",
            encode(&item.agent_id),
            encode(&item.session_id)
        );
        stream::spawn_request("DELETE", url, None, move |reply| match reply {
            Ok(_) => {
                self.conversations
                    .update(|list| list.retain(|c| c.session_id != item.session_id));
                if self.session_id.get_untracked().as_deref() == Some(item.session_id.as_str()) {
                    self.new_chat();
                }
            }
            Err(reason) => failed.set(Some(reason)),
        });
    }

    /// Reads files picked or dropped on the composer; each is attached once read, or refused
    /// with a reason.
    #[cfg(feature = "hydrate")]
    pub(crate) fn read_files(self, files: Vec<web_sys::File>) {
        let max = self.max_context_bytes.get_value();
        // A new choice of files: the reason an earlier one was refused no longer applies.
        self.attach_error.set(None);
        for file in files {
            let id = self.next_id();
            leptos::task::spawn_local(async move {
                self.attach(crate::attach::read(file, id, max).await);
            });
        }
    }

    /// Reads the file picked for import and sends it.
    #[cfg(feature = "hydrate")]
    pub(crate) fn read_import(self, file: web_sys::File, failed: RwSignal<Option<String>>) {
        failed.set(None);
        leptos::task::spawn_local(async move {
            let file = gloo_file::File::from(file);
            match gloo_file::futures::read_as_text(&file).await {
                Ok(text) => self.import(text, failed),
                Err(e) => failed.set(Some(format!("{} could not be read: {e}", file.name()))),
            }
        });
    }

    /// Adds a file the user picked or dropped, once read; refuses it with a reason.
    #[cfg(feature = "hydrate")]
    fn attach(self, attachment: Result<Attachment, String>) {
        match attachment {
            Ok(attachment) => self.attachments.update(|list| list.push(attachment)),
            Err(reason) => self.attach_error.set(Some(reason)),
        }
    }

    /// A fresh id for an attachment.
    #[cfg(feature = "hydrate")]
    fn next_id(&self) -> u64 {
        let key = self.next_key.get_value();
        self.next_key.set_value(key + 1);
        key
    }

    /// Pins (`Always`), excludes (`Never`) or clears the mark of a stored message; the
    /// transcript shows the mark once the server has stored it, or in `failed` why not.
    pub(crate) fn mark(
        self,
        message: UiMessage,
        send: Option<SendMark>,
        failed: RwSignal<Option<String>>,
    ) {
        let (Some(session), Some(id)) =
            (self.session_id.get_untracked(), message.id.get_untracked())
        else {
            return;
        };
        let url = format!(
            "{}/sessions/{}/messages/{}",
            self.agent_url(),
            encode(&session),
            encode(&id)
        );
        failed.set(None);
        let body = serde_json::to_string(&parlor_domain::MarkRequest { send }).ok();
        stream::spawn_request("PUT", url, body, move |reply| {
            match reply.and_then(|text| {
                serde_json::from_str::<parlor_domain::MarkReply>(&text).map_err(|e| e.to_string())
            }) {
                Ok(reply) => message.send.set(reply.send),
                Err(reason) => failed.set(Some(reason)),
            }
        });
    }

    /// Asks for a new reply to the last user message (Retry after an error, Regenerate).
    pub(crate) fn regenerate(self) {
        if self.streaming.get_untracked() {
            return;
        }
        self.messages.update(|list| {
            while list.last().is_some_and(|m| m.role != Role::User) {
                list.pop();
            }
        });
        self.start_turn(None);
    }

    pub fn stop(self) {
        self.abort.update_value(|a| a.abort());
    }

    /// Starts an empty conversation with the same agent.
    pub(crate) fn new_chat(self) {
        self.stop();
        self.messages.set(Vec::new());
        self.first_index.set(0);
        self.older_error.set(None);
        self.summarized.set(0);
        self.meter.set(None);
        self.session_id.set(None);
        self.error.set(None);
        self.debug.update(|d| {
            if let Some(d) = d {
                d.first_sent = None;
            }
        });
        stream::set_url_param("session", None);
        self.refresh_debug();
    }

    /// Fetches the debug panel again (when it is open): the server renders it from what it
    /// stored about the conversation.
    fn refresh_debug(self) {
        if self.debug.with_untracked(Option::is_none) {
            return;
        }
        let query = self.query.get_value();
        let mut url = format!("{}/debug?format=html", self.agent_url());
        if let Some(session) = self.session_id.get_untracked() {
            url.push_str(&format!("&session_id={}", encode(&session)));
        }
        for (key, value) in [
            ("historyPolicy", &query.history_policy),
            ("historyLength", &query.history_length),
        ] {
            if let Some(value) = value {
                url.push_str(&format!("&{key}={}", encode(value)));
            }
        }
        self.debug_loading.set(true);
        stream::spawn_request("GET", url, None, move |html| {
            if let Ok(html) = html {
                self.debug.update(|d| {
                    if let Some(d) = d {
                        d.html = html;
                    }
                });
            }
            self.debug_loading.set(false);
        });
    }

    /// `/api/chat/{agent}`.
    pub fn agent_url(&self) -> String {
        format!("/api/chat/{}", encode(&self.agent_id.get_value()))
    }

    fn api_url(&self) -> String {
        let query = self.query.get_value();
        let mut url = self.agent_url();
        let mut params = Vec::new();
        if let Some(p) = &query.history_policy {
            params.push(format!("historyPolicy={}", encode(p)));
        }
        if let Some(l) = &query.history_length {
            params.push(format!("historyLength={}", encode(l)));
        }
        if !params.is_empty() {
            url.push('?');
            url.push_str(&params.join("&"));
        }
        url
    }

    fn start_turn(self, user: Option<UserTurn>) {
        self.error.set(None);
        let reply = self.push(Role::Assistant, String::new());
        reply.streaming.set(true);
        self.streaming.set(true);
        let session_id = self.session_id.get_untracked();
        let request = ChatRequest {
            // The page always says which conversation it shows, or that it starts a new one.
            new_conversation: session_id.is_none(),
            session_id,
            message: user.as_ref().map(|u| u.text.clone()),
            regenerate: user.is_none(),
            context: user
                .as_ref()
                .map(|u| u.attachments.iter().map(Attachment::entry).collect())
                .unwrap_or_default(),
            edit: user.as_ref().and_then(|u| u.edit.clone()),
        };
        let body = serde_json::to_string(&request).unwrap_or_default();
        let turn = self.owned(|| TurnView {
            state: self,
            reply,
            user_key: user.as_ref().map(|u| u.message.key),
            user_text: StoredValue::new(user.as_ref().map(|u| u.text.clone())),
            attachments: StoredValue::new(user.map(|u| u.attachments).unwrap_or_default()),
            finished: StoredValue::new(false),
            stored_after: StoredValue::new(usize::MAX),
        });
        let url = self.api_url();
        self.abort.update_value(|abort| {
            stream::spawn_chat(
                url,
                body,
                abort,
                move |event| turn.event(event),
                move |end| turn.end(end),
            )
        });
    }

    fn adopt_session(&self, session_id: &str, first_text: Option<&str>) {
        if self.session_id.get_untracked().as_deref() == Some(session_id) {
            if let Some(item) = self
                .conversations
                .get_untracked()
                .iter()
                .position(|c| c.session_id == session_id)
            {
                // Move the active conversation to the top: it is now the newest.
                self.conversations.update(|list| {
                    let current = list.remove(item);
                    list.insert(0, current);
                });
            }
            return;
        }
        self.session_id.set(Some(session_id.to_owned()));
        stream::set_url_param("session", Some(session_id));
        let title = first_text
            .map(parlor_domain::message::title_of)
            .unwrap_or_else(|| "New conversation".into());
        let item = ConversationItem {
            session_id: session_id.to_owned(),
            agent_id: self.agent_id.get_value(),
            title,
            updated_ms: 0,
        };
        self.conversations.update(|list| list.insert(0, item));
    }
}

/// The user's side of a turn: the message on screen, its text and its attachments.
struct UserTurn {
    message: UiMessage,
    text: String,
    attachments: Vec<Attachment>,
    /// The stored user message this one replaces (Edit).
    edit: Option<String>,
}

/// One turn on screen: the reply being written, and what the turn's events update.
#[derive(Clone, Copy)]
struct TurnView {
    state: ChatState,
    reply: UiMessage,
    /// The user's message of this turn (none for Regenerate).
    user_key: Option<u64>,
    user_text: StoredValue<Option<String>>,
    /// The files sent with it, given back to the composer if Parlor refuses the turn.
    attachments: StoredValue<Vec<Attachment>>,
    /// Whether `done` or `error` arrived.
    finished: StoredValue<bool>,
    /// How many messages the conversation holds after this turn (from `meta`).
    stored_after: StoredValue<usize>,
}

impl TurnView {
    fn event(self, event: PageEvent) {
        match event {
            PageEvent::Meta(meta) => self.meta(meta),
            PageEvent::Delta { text, rendered } => self.delta(&text, rendered),
            PageEvent::Done(done) => self.done(done),
            PageEvent::Notice { text } => self.notice(text),
            PageEvent::Error { message } => self.error(message),
        }
    }

    /// The turn's conversation, model, history report and meter.
    fn meta(self, meta: PageMeta) {
        let state = self.state;
        let first_text = self.user_text.get_value();
        state.adopt_session(&meta.session_id, first_text.as_deref());
        state.model.set(meta.model.clone());
        state.provider.set(meta.provider.clone());
        self.stored_after.set_value(meta.history.messages_stored);
        if let (Some(key), Some(id)) = (self.user_key, meta.message_id.clone()) {
            state.messages.with_untracked(|list| {
                if let Some(user) = list.iter().find(|m| m.key == key) {
                    user.id.set(Some(id));
                    user.tokens.set(meta.message_tokens);
                }
            });
        }
        if let Some(covers) = meta.history.summary {
            state.summarized.set(covers);
        }
        if meta.meter.is_some() {
            state.meter.set(meta.meter);
        }
        state.debug.update(|d| {
            if let Some(d) = d {
                d.first_sent = Some(meta.history.first_sent_index);
            }
        });
    }

    /// A piece of the reply, with the Markdown blocks it completed.
    fn delta(self, text: &str, rendered: Option<Rendered>) {
        let reply = self.reply;
        reply.text.update(|t| t.push_str(text));
        if let Some(rendered) = rendered {
            reply.html.update(|h| h.push_str(&rendered.html));
            reply.rendered_len.set(rendered.upto);
        }
    }

    /// The reply is complete: the model's token count, the whole reply's HTML.
    fn done(self, done: DoneEvent) {
        self.finished.set_value(true);
        if done.message_id.is_some() {
            self.reply.id.set(done.message_id.clone());
        }
        self.reply.tokens.set(done.message_tokens);
        if done.meter.is_some() {
            // The provider's count and the cost replace the estimate.
            self.state.meter.set(done.meter);
        }
        if let Some(html) = done.html {
            let reply = self.reply;
            reply.html.set(html);
            reply
                .rendered_len
                .set(reply.text.with_untracked(String::len));
        }
    }

    /// Parlor's answer to a command: neither it nor the command is stored.
    fn notice(self, text: String) {
        let state = self.state;
        self.reply.notice.set(true);
        self.reply.text.set(text);
        if let Some(key) = self.user_key {
            state.messages.with_untracked(|list| {
                if let Some(user) = list.iter().find(|m| m.key == key) {
                    user.notice.set(true);
                }
            });
        }
        // After `!reset` the conversation is empty: so is the transcript, but for the
        // command and its answer.
        if self.stored_after.get_value() == 0 {
            state
                .messages
                .update(|list| list.retain(|m| m.notice.get_untracked()));
        }
    }

    fn error(self, message: String) {
        self.finished.set_value(true);
        self.state.error.set(Some(message));
        self.reply.status.set(Some(ReplyStatus::Incomplete));
    }

    /// The stream ended: how, and what the transcript keeps of the turn.
    fn end(self, end: StreamEnd) {
        self.state.refresh_debug();
        self.reply.streaming.set(false);
        self.state.streaming.set(false);
        match end {
            StreamEnd::Closed if !self.finished.get_value() => self.cut_short(),
            StreamEnd::Closed => {}
            StreamEnd::Aborted => self.reply.status.set(Some(ReplyStatus::Stopped)),
            StreamEnd::Refused(message) => self.refused(message),
            StreamEnd::Network(message) => {
                self.reply.status.set(Some(ReplyStatus::Incomplete));
                self.state
                    .error
                    .set(Some(format!("Could not reach Parlor: {message}")));
            }
        }
        if self.reply.text.get_untracked().is_empty() {
            self.state.remove(self.reply.key);
        }
    }

    /// The connection closed before `done` or `error`.
    fn cut_short(self) {
        self.reply.status.set(Some(ReplyStatus::Incomplete));
        self.state.error.set(Some(
            "The connection to Parlor closed before the reply finished.".into(),
        ));
    }

    /// Parlor refused the request and stored nothing: take the turn back and return the
    /// text to the composer.
    fn refused(self, message: String) {
        let state = self.state;
        state.remove(self.reply.key);
        if let Some(key) = self.user_key {
            state.remove(key);
        }
        if let Some(text) = self.user_text.get_value() {
            state.draft.set(text);
        }
        state.attachments.set(self.attachments.get_value());
        state.error.set(Some(message));
    }
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
