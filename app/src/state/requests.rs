//! The page's requests besides a turn: fork, import, rename, delete, pin or exclude, a new
//! chat, the debug panel again; and how each answer changes the page.

use super::transcript::UiMessage;
use super::{encode, json_string, ChatState};
use crate::api::{ConversationItem, ConversationRef};
use crate::stream;
use leptos::prelude::*;
use parlor_domain::SendMark;

impl ChatState {
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
        stream::spawn_request(
            "POST",
            url,
            Some(body),
            move |reply| match stream::read_answer::<ConversationRef>(reply) {
                Ok(fork) => {
                    self.transcript.keep_until(message.key, edited.is_none());
                    self.switch_to(fork);
                    match edited {
                        Some(text) => self.send(text),
                        None => self.refresh_debug(),
                    }
                }
                Err(reason) => failed.set(Some(reason)),
            },
        );
    }

    /// Forgets what the page knew of the conversation shown (a new one, a fork).
    fn leave_conversation(&self) {
        self.transcript.summarized.set(0);
        self.meter.set(None);
        self.streaming.error.set(None);
        self.debug.update(|d| {
            if let Some(d) = d {
                d.first_sent = None;
            }
        });
    }

    /// Shows `conversation` (just made from this one) as the current conversation.
    fn switch_to(&self, conversation: ConversationRef) {
        self.session_id.set(Some(conversation.session_id.clone()));
        stream::set_url_param("session", Some(&conversation.session_id));
        self.leave_conversation();
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
        stream::spawn_request(
            "POST",
            url,
            Some(text),
            move |reply| match stream::read_answer::<ConversationRef>(reply) {
                Ok(imported) => stream::open(&format!(
                    "/chat?agent={}&session={}",
                    encode(&imported.agent_id),
                    encode(&imported.session_id)
                )),
                Err(reason) => failed.set(Some(reason)),
            },
        );
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

    /// Renames a conversation of the sidebar.
    pub(crate) fn rename(
        self,
        item: ConversationItem,
        title: String,
        failed: RwSignal<Option<String>>,
    ) {
        let url = conversation_url(&item);
        let body = format!("{{\"title\":{}}}", json_string(&title));
        stream::spawn_request(
            "PATCH",
            url,
            Some(body),
            move |reply| match stream::read_answer::<ConversationRef>(reply) {
                Ok(renamed) => self.renamed(renamed),
                Err(reason) => failed.set(Some(reason)),
            },
        );
    }

    /// The sidebar shows a conversation's new title.
    fn renamed(&self, renamed: ConversationRef) {
        self.conversations.update(|list| {
            if let Some(c) = list.iter_mut().find(|c| c.session_id == renamed.session_id) {
                c.title = renamed.title;
            }
        });
    }

    /// Deletes a conversation of the sidebar; the page starts a new one if it was shown.
    pub(crate) fn delete(self, item: ConversationItem, failed: RwSignal<Option<String>>) {
        let url = conversation_url(&item);
        stream::spawn_request("DELETE", url, None, move |reply| match reply {
            Ok(_) => self.deleted(&item),
            Err(reason) => failed.set(Some(reason)),
        });
    }

    fn deleted(self, item: &ConversationItem) {
        self.conversations
            .update(|list| list.retain(|c| c.session_id != item.session_id));
        if self.session_id.get_untracked().as_deref() == Some(item.session_id.as_str()) {
            self.new_chat();
        }
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
            match stream::read_answer::<parlor_domain::MarkReply>(reply) {
                Ok(reply) => message.send.set(reply.send),
                Err(reason) => failed.set(Some(reason)),
            }
        });
    }

    /// Makes the version holding the message `id` the conversation's path, then shows the
    /// page again (the whole path after it may differ).
    pub(crate) fn choose(self, id: String, failed: RwSignal<Option<String>>) {
        let Some(session) = self.session_id.get_untracked() else {
            return;
        };
        let agent = self.agent_id.get_value();
        choose_then(&agent, &session, &id, failed, stream::reload);
    }

    /// Starts an empty conversation with the same agent.
    pub(crate) fn new_chat(self) {
        self.stop();
        self.transcript.clear();
        self.paging.error.set(None);
        self.session_id.set(None);
        self.leave_conversation();
        stream::set_url_param("session", None);
        self.refresh_debug();
    }

    /// Fetches the debug panel again (when it is open): the server renders it from what it
    /// stored about the conversation.
    pub(super) fn refresh_debug(self) {
        if self.debug.with_untracked(Option::is_none) {
            return;
        }
        self.debug_loading.set(true);
        stream::spawn_request("GET", self.debug_url(), None, move |html| {
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

    /// The conversation a turn's `meta` names becomes the page's (a new one goes to the top
    /// of the sidebar, titled by its first message); the one shown moves to the top.
    pub(super) fn adopt_conversation(&self, session_id: &str, first_text: Option<&str>) {
        if self.session_id.get_untracked().as_deref() == Some(session_id) {
            let shown = self
                .conversations
                .with_untracked(|list| list.iter().position(|c| c.session_id == session_id));
            if let Some(item) = shown {
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

/// `/api/chat/{agent}/sessions/{id}`, for a conversation of the sidebar.
fn conversation_url(item: &ConversationItem) -> String {
    format!(
        "/api/chat/{}/sessions/{}",
        encode(&item.agent_id),
        encode(&item.session_id)
    )
}

/// Chooses the version holding message `id` of a conversation, then opens `href`.
pub(crate) fn open_version(
    agent: &str,
    session: &str,
    id: &str,
    href: String,
    failed: RwSignal<Option<String>>,
) {
    choose_then(agent, session, id, failed, move || stream::open(&href));
}

fn choose_then(
    agent: &str,
    session: &str,
    id: &str,
    failed: RwSignal<Option<String>>,
    then: impl FnOnce() + 'static,
) {
    let url = format!(
        "/api/chat/{}/sessions/{}/messages/{}/choose",
        encode(agent),
        encode(session),
        encode(id)
    );
    failed.set(None);
    stream::spawn_request("POST", url, Some("{}".into()), move |reply| match reply {
        Ok(_) => then(),
        Err(reason) => failed.set(Some(reason)),
    });
}

#[cfg(test)]
mod tests {
    use super::super::tests::state;
    use super::*;

    fn item(id: &str, title: &str) -> ConversationItem {
        ConversationItem {
            session_id: id.into(),
            agent_id: "helper".into(),
            title: title.into(),
            updated_ms: 1,
        }
    }

    fn sidebar(state: &ChatState) -> Vec<(String, String)> {
        state.conversations.with_untracked(|l| {
            l.iter()
                .map(|c| (c.session_id.clone(), c.title.clone()))
                .collect()
        })
    }

    #[test]
    fn the_conversation_shown_moves_to_the_top_and_a_new_one_joins_the_sidebar() {
        let state = state(Some("b"));
        state
            .conversations
            .set(vec![item("a", "First"), item("b", "Second")]);
        state.adopt_conversation("b", Some("ignored"));
        assert_eq!(
            sidebar(&state),
            [("b".into(), "Second".into()), ("a".into(), "First".into())]
        );
        state.adopt_conversation("c", None);
        assert_eq!(state.session_id.get_untracked().as_deref(), Some("c"));
        assert_eq!(sidebar(&state)[0], ("c".into(), "New conversation".into()));
    }

    #[test]
    fn rename_and_delete_change_the_sidebar_and_deleting_the_shown_one_starts_anew() {
        let state = state(Some("b"));
        state
            .conversations
            .set(vec![item("a", "First"), item("b", "Second")]);
        state
            .transcript
            .push(parlor_domain::Role::User, "hello".into());
        state.renamed(ConversationRef {
            session_id: "a".into(),
            agent_id: "helper".into(),
            title: "Renamed".into(),
        });
        assert_eq!(sidebar(&state)[0], ("a".into(), "Renamed".into()));
        state.deleted(&item("a", ""));
        assert_eq!(state.session_id.get_untracked().as_deref(), Some("b"));
        assert_eq!(sidebar(&state).len(), 1);
        state.deleted(&item("b", ""));
        assert_eq!(state.session_id.get_untracked(), None);
        assert!(state.transcript.messages.with_untracked(Vec::is_empty));
        assert!(sidebar(&state).is_empty());
    }

    #[test]
    fn a_fork_becomes_the_conversation_shown() {
        let state = state(Some("a"));
        state.transcript.summarized.set(4);
        state.streaming.error.set(Some("old error".into()));
        state.switch_to(ConversationRef {
            session_id: "f".into(),
            agent_id: "helper".into(),
            title: "Fork of a".into(),
        });
        assert_eq!(state.session_id.get_untracked().as_deref(), Some("f"));
        assert_eq!(state.transcript.summarized.get_untracked(), 0);
        assert_eq!(state.streaming.error.get_untracked(), None);
        assert_eq!(sidebar(&state)[0], ("f".into(), "Fork of a".into()));
    }
}
