//! The turn being streamed: sending a message (or asking again), the reply's events as they
//! arrive, and how the turn ends.

use super::transcript::UiMessage;
use super::ChatState;
use crate::attach::Attachment;
use crate::events::{PageEvent, PageMeta};
use crate::stream::{self, AbortHandle, StreamEnd};
use leptos::prelude::*;
use parlor_domain::context::Chip;
use parlor_domain::{ChatRequest, DoneEvent, Rendered, ReplyStatus, Role};

/// Whether a reply is being written, and what went wrong with the last one.
#[derive(Clone, Copy, Default)]
pub struct Streaming {
    pub active: RwSignal<bool>,
    /// An error from the last turn, shown inline with Retry.
    pub error: RwSignal<Option<String>>,
    abort: StoredValue<AbortHandle>,
}

/// The user's side of a turn: the message on screen, its text and its attachments.
struct UserTurn {
    message: UiMessage,
    text: String,
    attachments: Vec<Attachment>,
    /// The stored user message this one replaces (Edit).
    edit: Option<String>,
}

impl ChatState {
    /// Sends the composer's text with its attachments.
    pub(crate) fn send_draft(self) {
        if let Some((text, attachments)) = self.composer.take(self.streaming.active) {
            self.send_turn(text, attachments, None);
        }
    }

    /// Sends `text` as the user's next message.
    pub(crate) fn send(self, text: String) {
        self.send_turn(text, Vec::new(), None);
    }

    pub(super) fn send_turn(
        self,
        text: String,
        attachments: Vec<Attachment>,
        edit: Option<String>,
    ) {
        if self.streaming.active.get_untracked() {
            return;
        }
        let user = self.transcript.push(Role::User, text.clone());
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
    pub(crate) fn edit(self, message: UiMessage, text: String) {
        if text.trim().is_empty() || self.streaming.active.get_untracked() {
            return;
        }
        // The question and what followed it stay as a version (‹ › brings them back).
        self.transcript.keep_until(message.key, false);
        self.send_turn(text, Vec::new(), message.id.get_untracked());
    }

    /// Asks for a new reply to the last user message (Retry after an error, Regenerate).
    pub(crate) fn regenerate(self) {
        if self.streaming.active.get_untracked() {
            return;
        }
        self.transcript.drop_last_reply();
        self.start_turn(None);
    }

    /// Stop: the stream is closed, and the server is told (a proxy that keeps the
    /// upstream connection open when the browser lets go would hide the close).
    pub fn stop(self) {
        self.streaming.abort.update_value(|a| a.abort());
        if let Some(session) = self.session_id.get_untracked() {
            let url = format!(
                "{}/sessions/{}/stop",
                self.agent_url(),
                super::encode(&session)
            );
            // A 404 (the reply had ended already) needs no answer.
            stream::spawn_request("POST", url, Some("{}".into()), |_| {});
        }
    }

    /// The request of a turn: this conversation (or a new one), the user's message and
    /// context, or a regeneration.
    fn request(&self, user: Option<&UserTurn>) -> ChatRequest {
        let session_id = self.session_id.get_untracked();
        ChatRequest {
            // The page always says which conversation it shows, or that it starts a new one.
            new_conversation: session_id.is_none(),
            session_id,
            message: user.map(|u| u.text.clone()),
            regenerate: user.is_none(),
            context: user
                .map(|u| u.attachments.iter().map(Attachment::entry).collect())
                .unwrap_or_default(),
            edit: user.and_then(|u| u.edit.clone()),
        }
    }

    /// Shows the turn's (empty) reply and the turn it belongs to.
    fn turn_view(self, user: Option<UserTurn>) -> TurnView {
        self.streaming.error.set(None);
        let reply = self.transcript.push(Role::Assistant, String::new());
        reply.streaming.set(true);
        self.streaming.active.set(true);
        self.transcript.owned(|| TurnView {
            state: self,
            reply: StoredValue::new(reply),
            results_seen: StoredValue::new(false),
            user_key: user.as_ref().map(|u| u.message.key),
            user_text: StoredValue::new(user.as_ref().map(|u| u.text.clone())),
            attachments: StoredValue::new(user.map(|u| u.attachments).unwrap_or_default()),
            finished: StoredValue::new(false),
            stored_after: StoredValue::new(usize::MAX),
        })
    }

    fn start_turn(self, user: Option<UserTurn>) {
        let body = serde_json::to_string(&self.request(user.as_ref())).unwrap_or_default();
        let turn = self.turn_view(user);
        let url = self.api_url();
        self.streaming.abort.update_value(|abort| {
            stream::spawn_chat(
                url,
                body,
                abort,
                move |event| turn.event(event),
                move |end| turn.end(end),
            )
        });
    }
}

/// One turn on screen: the reply being written, and what the turn's events update.
#[derive(Clone, Copy)]
pub(super) struct TurnView {
    pub(super) state: ChatState,
    /// The reply being written (after a round of tool calls, a new one).
    reply: StoredValue<UiMessage>,
    /// A tool result arrived since the last call (the next call opens a new round).
    pub(super) results_seen: StoredValue<bool>,
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
            PageEvent::ToolCall(call) => self.tool_call(call),
            PageEvent::ToolResult(result) => self.tool_result(result),
            PageEvent::Approval(asked) => self.approval(asked),
            PageEvent::Limit(limit) => self.limit(limit),
            PageEvent::Unavailable(event) => self.unavailable(event),
        }
    }

    /// The reply being written.
    pub(super) fn reply(self) -> UiMessage {
        self.reply.get_value()
    }

    /// Starts a new reply message (after a round of tool calls).
    pub(super) fn next_reply(self) {
        let reply = self.state.transcript.push(Role::Assistant, String::new());
        reply.streaming.set(true);
        self.reply.set_value(reply);
    }

    /// The user's message of this turn, when it is still shown.
    fn user(self) -> Option<UiMessage> {
        self.user_key
            .and_then(|key| self.state.transcript.find(key))
    }

    /// The turn's conversation, model, history report and meter.
    fn meta(self, meta: PageMeta) {
        let state = self.state;
        let first_text = self.user_text.get_value();
        state.adopt_conversation(&meta.session_id, first_text.as_deref());
        state.model.set(meta.model.clone());
        state.provider.set(meta.provider.clone());
        self.stored_after.set_value(meta.history.messages_stored);
        if let (Some(user), Some(id)) = (self.user(), meta.message_id.clone()) {
            user.id.set(Some(id));
            user.tokens.set(meta.message_tokens);
        }
        // The new version an edit (the question) or a regeneration (the reply) made.
        if let Some(versions) = meta.versions {
            self.user()
                .unwrap_or_else(|| self.reply())
                .versions
                .set(Some(versions));
        }
        if let Some(covers) = meta.history.summary {
            state.transcript.summarized.set(covers);
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
        self.reply_after_calls();
        let reply = self.reply();
        reply.text.update(|t| t.push_str(text));
        if let Some(rendered) = rendered {
            reply.html.update(|h| h.push_str(&rendered.html));
            reply.rendered_len.set(rendered.upto);
        }
    }

    /// The reply is complete: the model's token count, the whole reply's HTML.
    fn done(self, done: DoneEvent) {
        self.finished.set_value(true);
        self.reply_after_calls();
        if done.message_id.is_some() {
            self.reply().id.set(done.message_id.clone());
        }
        self.reply().tokens.set(done.message_tokens);
        if done.meter.is_some() {
            // The provider's count and the cost replace the estimate.
            self.state.meter.set(done.meter);
        }
        if let Some(html) = done.html {
            let reply = self.reply();
            reply.html.set(html);
            reply
                .rendered_len
                .set(reply.text.with_untracked(String::len));
        }
    }

    /// Parlor's answer to a command: neither it nor the command is stored.
    fn notice(self, text: String) {
        let state = self.state;
        self.reply().notice.set(true);
        self.reply().text.set(text);
        if let Some(user) = self.user() {
            user.notice.set(true);
        }
        // After `!reset` the conversation is empty: so is the transcript, but for the
        // command and its answer.
        if self.stored_after.get_value() == 0 {
            state
                .transcript
                .messages
                .update(|list| list.retain(|m| m.notice.get_untracked()));
        }
    }

    fn error(self, message: String) {
        self.finished.set_value(true);
        self.state.streaming.error.set(Some(message));
        self.reply().status.set(Some(ReplyStatus::Incomplete));
    }

    /// The stream ended: how, and what the transcript keeps of the turn.
    fn end(self, end: StreamEnd) {
        let state = self.state;
        state.refresh_debug();
        self.reply().streaming.set(false);
        state.streaming.active.set(false);
        match end {
            StreamEnd::Closed if !self.finished.get_value() => {
                // The connection closed before `done` or `error`.
                self.reply().status.set(Some(ReplyStatus::Incomplete));
                state.streaming.error.set(Some(
                    "The connection to Parlor closed before the reply finished.".into(),
                ));
            }
            StreamEnd::Closed => {}
            StreamEnd::Aborted => self.reply().status.set(Some(ReplyStatus::Stopped)),
            StreamEnd::Refused(message) => self.refused(message),
            StreamEnd::Network(message) => {
                self.reply().status.set(Some(ReplyStatus::Incomplete));
                state
                    .streaming
                    .error
                    .set(Some(format!("Could not reach Parlor: {message}")));
            }
        }
        // A reply that said nothing goes, unless it asked for tools (it is stored).
        let reply = self.reply();
        if reply.text.get_untracked().is_empty() && !reply.calls.get_untracked() {
            state.transcript.remove(reply.key);
        }
    }

    /// Parlor refused the request and stored nothing: take the turn back and return the
    /// text to the composer.
    fn refused(self, message: String) {
        let state = self.state;
        state.transcript.remove(self.reply().key);
        if let Some(key) = self.user_key {
            state.transcript.remove(key);
        }
        if let Some(text) = self.user_text.get_value() {
            state.composer.draft.set(text);
        }
        state.composer.attachments.set(self.attachments.get_value());
        state.streaming.error.set(Some(message));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::state;
    use super::*;
    use crate::events::PageHistory;

    fn texts(state: &ChatState) -> Vec<String> {
        state
            .transcript
            .messages
            .with_untracked(|l| l.iter().map(|m| m.text.get_untracked()).collect())
    }

    fn user_turn(state: ChatState, text: &str) -> TurnView {
        let message = state.transcript.push(Role::User, text.into());
        state.turn_view(Some(UserTurn {
            message,
            text: text.into(),
            attachments: Vec::new(),
            edit: None,
        }))
    }

    fn meta(session: &str, stored: usize) -> PageMeta {
        PageMeta {
            session_id: session.into(),
            model: "small".into(),
            provider: "openai".into(),
            history: PageHistory {
                messages_stored: stored,
                first_sent_index: 0,
                summary: None,
            },
            message_id: Some("m1".into()),
            meter: None,
            message_tokens: Some(5),
            versions: None,
        }
    }

    #[test]
    fn tool_calls_show_as_cards_between_the_asking_message_and_the_answer() {
        use parlor_domain::event::{ApprovalEvent, ToolCallEvent, ToolResultEvent};
        let state = state(None);
        let turn = user_turn(state, "time?");
        turn.event(PageEvent::Meta(meta("s1", 1)));
        turn.delta("Let me look. ", None);
        let call = |id: &str| {
            PageEvent::ToolCall(ToolCallEvent {
                id: id.into(),
                tool: "clock__now".into(),
                server: "clock".into(),
                arguments: "{}".into(),
            })
        };
        turn.event(call("c1"));
        turn.event(call("c2"));
        turn.event(PageEvent::Approval(ApprovalEvent {
            id: "c2".into(),
            tool: "clock__now".into(),
            server: "clock".into(),
            arguments: "{}".into(),
            timeout_secs: 30,
            first_use: true,
        }));
        let result = |id: &str, ok: bool| {
            PageEvent::ToolResult(ToolResultEvent {
                id: id.into(),
                ok,
                bytes: 5,
                ms: 3,
                preview: if ok { "12:00".into() } else { String::new() },
                error: (!ok).then(|| "denied".into()),
            })
        };
        let list = || state.transcript.messages.get_untracked();
        assert!(list()[3].waiting.get_untracked().unwrap().first_use);
        turn.event(result("c1", true));
        turn.event(result("c2", false));
        assert_eq!(list()[3].waiting.get_untracked(), None);
        turn.delta("It is 12:00.", None);
        turn.end(StreamEnd::Closed);
        // As stored: the question, the message that asked (with what it said), the two
        // calls, then the answer.
        let roles: Vec<Role> = list().iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::Assistant
            ]
        );
        assert_eq!(texts(&state)[1], "Let me look. ");
        assert!(list()[1].calls.get_untracked());
        let first = list()[2].card.get_untracked().unwrap();
        assert_eq!((first.ok, first.text.as_str()), (Some(true), "12:00"));
        let second = list()[3].card.get_untracked().unwrap();
        assert_eq!((second.ok, second.text.as_str()), (Some(false), "denied"));
        assert_eq!(texts(&state)[4], "It is 12:00.");
        assert_eq!(state.transcript.index_of(list()[4].key), Some(4));
        // A second round's calls are asked by a message of their own.
        let turn = user_turn(state, "again");
        turn.event(call("c3"));
        turn.event(result("c3", true));
        turn.event(call("c4"));
        turn.event(result("c4", true));
        turn.end(StreamEnd::Aborted);
        let roles: Vec<Role> = list()[5..].iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Assistant,
                Role::Tool
            ]
        );
    }

    #[test]
    fn a_streamed_reply_grows_then_ends_done() {
        let state = state(None);
        let turn = user_turn(state, "Hello");
        assert!(state.streaming.active.get_untracked());
        turn.event(PageEvent::Meta(meta("s1", 2)));
        assert_eq!(state.session_id.get_untracked().as_deref(), Some("s1"));
        assert_eq!(state.model.get_untracked(), "small");
        let user = turn.user().unwrap();
        assert_eq!(user.id.get_untracked().as_deref(), Some("m1"));
        assert_eq!(user.tokens.get_untracked(), Some(5));
        // The new conversation is at the top of the sidebar, titled by its first message.
        let top = state.conversations.with_untracked(|l| l[0].clone());
        assert_eq!(
            (top.session_id.as_str(), top.title.as_str()),
            ("s1", "Hello")
        );
        turn.delta("Hi ", None);
        turn.delta("there", None);
        assert_eq!(texts(&state), ["Hello", "Hi there"]);
        turn.done(DoneEvent {
            finish_reason: "stop".into(),
            usage: None,
            html: Some("<p>Hi there</p>".into()),
            message_id: Some("r1".into()),
            meter: None,
            message_tokens: Some(2),
        });
        turn.end(StreamEnd::Closed);
        assert!(!state.streaming.active.get_untracked());
        assert_eq!(state.streaming.error.get_untracked(), None);
        assert_eq!(turn.reply().html.get_untracked(), "<p>Hi there</p>");
        assert_eq!(turn.reply().rendered_len.get_untracked(), "Hi there".len());
        assert_eq!(turn.reply().status.get_untracked(), None);
    }

    #[test]
    fn a_stream_cut_short_keeps_what_arrived_marked_incomplete() {
        let state = state(None);
        let turn = user_turn(state, "Hello");
        turn.delta("Half an ans", None);
        turn.end(StreamEnd::Closed);
        assert_eq!(
            turn.reply().status.get_untracked(),
            Some(ReplyStatus::Incomplete)
        );
        assert!(state.streaming.error.get_untracked().is_some());
        assert_eq!(texts(&state), ["Hello", "Half an ans"]);
        // Stopped by the user.
        let turn = user_turn(state, "Again");
        turn.delta("Some", None);
        turn.end(StreamEnd::Aborted);
        assert_eq!(
            turn.reply().status.get_untracked(),
            Some(ReplyStatus::Stopped)
        );
        // An empty reply is not kept.
        let turn = user_turn(state, "Third");
        turn.end(StreamEnd::Aborted);
        assert_eq!(texts(&state).last().map(String::as_str), Some("Third"));
    }

    #[test]
    fn a_refused_turn_goes_back_to_the_composer() {
        let state = state(None);
        let turn = user_turn(state, "Too long");
        turn.end(StreamEnd::Refused("over the budget".into()));
        assert!(texts(&state).is_empty());
        assert_eq!(state.composer.draft.get_untracked(), "Too long");
        assert_eq!(
            state.streaming.error.get_untracked().as_deref(),
            Some("over the budget")
        );
    }

    #[test]
    fn a_command_and_its_notice_are_not_stored_and_reset_empties_the_transcript() {
        let state = state(None);
        state.transcript.push(Role::User, "earlier".into());
        let turn = user_turn(state, "!reset");
        turn.event(PageEvent::Meta(meta("s1", 0)));
        turn.notice("The conversation was reset.".into());
        assert_eq!(texts(&state), ["!reset", "The conversation was reset."]);
        assert!(turn.user().unwrap().notice.get_untracked());
        assert_eq!(state.transcript.index_of(turn.reply().key), None);
    }

    #[test]
    fn an_error_event_ends_the_reply_incomplete() {
        let state = state(None);
        let turn = user_turn(state, "Hello");
        turn.event(PageEvent::Error {
            message: "upstream failed".into(),
        });
        turn.end(StreamEnd::Closed);
        assert_eq!(
            turn.reply().status.get_untracked(),
            Some(ReplyStatus::Incomplete)
        );
        assert_eq!(
            state.streaming.error.get_untracked().as_deref(),
            Some("upstream failed")
        );
    }

    #[test]
    fn a_turn_asks_for_this_conversation_or_a_new_one() {
        let state = state(None);
        let request = state.request(None);
        assert!(request.new_conversation && request.regenerate);
        state.session_id.set(Some("s1".into()));
        let message = state.transcript.push(Role::User, "hi".into());
        let user = UserTurn {
            message,
            text: "hi".into(),
            attachments: Vec::new(),
            edit: Some("m0".into()),
        };
        let request = state.request(Some(&user));
        assert!(!request.new_conversation && !request.regenerate);
        assert_eq!(request.session_id.as_deref(), Some("s1"));
        assert_eq!(request.edit.as_deref(), Some("m0"));
    }
}
