//! Tool calls on screen while a turn streams: each call a card under the reply, its result
//! when it arrives, an approval the user answers, and the limit that ended the loop.
//!
//! The transcript keeps the stored order: the reply being written becomes the round's call
//! message (with the text said before the calls), each call's card follows, and the text
//! after the calls goes into a new reply.

use super::streaming::TurnView;
use super::transcript::{UiMessage, Waiting};
use super::ChatState;
use crate::api::ToolCard;
use crate::stream;
use leptos::prelude::*;
use parlor_domain::event::{
    ApprovalEvent, LimitEvent, ToolCallEvent, ToolResultEvent, UnavailableEvent,
};
use parlor_domain::tool::LimitReached;
use parlor_domain::Role;

impl TurnView {
    /// The model asked for a call: its card, under the message that asked.
    pub(super) fn tool_call(self, event: ToolCallEvent) {
        let transcript = self.state.transcript;
        // A result since the last call: this is a new round, asked by a new message.
        if self.results_seen.get_value() {
            self.results_seen.set_value(false);
            self.next_reply();
        }
        let asking = self.reply();
        asking.calls.set(true);
        asking.streaming.set(false);
        let card = transcript.push(Role::Tool, String::new());
        card.card.set(Some(ToolCard {
            call_id: event.id,
            tool: event.tool,
            arguments: event.arguments,
            ..ToolCard::default()
        }));
    }

    /// A call's result.
    pub(super) fn tool_result(self, event: ToolResultEvent) {
        self.results_seen.set_value(true);
        if let Some(card) = self.card(&event.id) {
            card.card.update(|c| {
                if let Some(c) = c {
                    c.ok = Some(event.ok);
                    c.ms = event.ms;
                    c.bytes = event.bytes;
                    c.text = event.error.unwrap_or(event.preview);
                }
            });
            card.waiting.set(None);
        }
    }

    /// A call waits for the user: its card offers Approve and Deny.
    pub(super) fn approval(self, event: ApprovalEvent) {
        if let Some(card) = self.card(&event.id) {
            card.waiting.set(Some(Waiting {
                first_use: event.first_use,
            }));
        }
    }

    /// A limit ended the loop: said under the cards (not stored).
    pub(super) fn limit(self, event: LimitEvent) {
        let which = match event.reached {
            LimitReached::MaxRounds => "max_rounds",
            LimitReached::MaxCalls => "max_calls",
        };
        let text = format!(
            "The tool limit {which} = {} was reached: the model answers without tools.",
            event.limit
        );
        let notice = self.state.transcript.push(Role::Assistant, text);
        notice.notice.set(true);
        self.results_seen.set_value(true);
    }

    /// A tool server is not available to this user on this turn: said above the reply, with
    /// a link to where the user sets what it needs (not stored).
    pub(super) fn unavailable(self, event: UnavailableEvent) {
        let text = format!(
            "The tools of {} are not available to you: {}.",
            event.server, event.why
        );
        let mut html = format!("<p>{}</p>", crate::components::escape_html(&text));
        // A link only to a page of this site (the server names it; never another site).
        let own = |url: &str| url.starts_with('/') && !url.starts_with("//") && !url.contains('\\');
        if let Some(url) = event.settings_url.filter(|u| own(u)) {
            let url = crate::components::escape_html(&url);
            html.push_str(&format!(
                "<p><a href=\"{url}\">Set your tool credentials</a></p>"
            ));
        }
        let reply = self.reply().key;
        let notice = self
            .state
            .transcript
            .insert_before(reply, Role::Assistant, text);
        notice.notice.set(true);
        notice
            .rendered_len
            .set(notice.text.with_untracked(String::len));
        notice.html.set(html);
    }

    /// The reply continues after a round's calls: a new message, as stored.
    pub(super) fn reply_after_calls(self) {
        if self.reply().calls.get_untracked() {
            self.next_reply();
        }
    }

    /// The card of call `id` in this turn.
    fn card(self, id: &str) -> Option<UiMessage> {
        self.state.transcript.messages.with_untracked(|list| {
            list.iter()
                .rev()
                .find(|m| {
                    m.card
                        .with_untracked(|c| c.as_ref().is_some_and(|c| c.call_id == id))
                })
                .copied()
        })
    }
}

impl ChatState {
    /// Answers the call of `card`, which waits in this conversation: `once`, `conversation`
    /// or `deny`.
    pub(crate) fn answer_call(self, card: UiMessage, answer: &str) {
        let (Some(session), Some(id)) = (
            self.session_id.get_untracked(),
            card.card
                .with_untracked(|c| c.as_ref().map(|c| c.call_id.clone())),
        ) else {
            return;
        };
        let url = format!(
            "{}/sessions/{}/tool-calls/{}",
            self.agent_url(),
            super::encode(&session),
            super::encode(&id)
        );
        card.waiting.set(None);
        let body = match answer {
            "once" => r#"{"approve":true,"scope":"once"}"#,
            "conversation" => r#"{"approve":true,"scope":"conversation"}"#,
            _ => r#"{"approve":false}"#,
        };
        let body = body.to_owned();
        stream::spawn_request("POST", url, Some(body), move |reply| {
            if let Err(reason) = reply {
                card.card.update(|c| {
                    if let Some(c) = c {
                        c.text = format!("The answer was not taken: {reason}");
                    }
                });
            }
        });
    }
}
