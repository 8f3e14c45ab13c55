//! Paging: the messages before the first one shown, fetched when the reader scrolls up.

use super::{encode, ChatState};
use crate::api::OlderMessages;
use crate::stream;
use leptos::prelude::*;

/// The older messages' fetch.
#[derive(Clone, Copy, Default)]
pub struct Paging {
    /// Older messages are being fetched (the reader scrolled up).
    pub loading: RwSignal<bool>,
    /// Why older messages could not be loaded.
    pub error: RwSignal<Option<String>>,
}

impl ChatState {
    /// The address of the page of messages before the first one shown; `None` when there
    /// is none or one is being fetched.
    fn older_url(&self) -> Option<(String, String)> {
        let before = self.transcript.first_index.get_untracked();
        if before == 0 || self.paging.loading.get_untracked() {
            return None;
        }
        let session = self.session_id.get_untracked()?;
        let first = self.transcript.first_stored_id()?;
        let mut url = format!(
            "{}/sessions/{}/messages?before={before}&before_id={}",
            self.agent_url(),
            encode(&session),
            encode(&first)
        );
        if self.debug.with_untracked(Option::is_some) {
            url.push_str("&debug=true");
        }
        Some((session, url))
    }

    /// Fetches the page of messages before the first one shown; `None` when there is none,
    /// one is being fetched, or it failed (then the paging error says why).
    async fn fetch_older(self) -> Option<OlderMessages> {
        let (session, url) = self.older_url()?;
        self.paging.loading.set(true);
        self.paging.error.set(None);
        let reply = stream::read_answer::<OlderMessages>(stream::request("GET", url, None).await);
        self.paging.loading.set(false);
        match reply {
            // The conversation changed meanwhile (a new chat, a fork): not for this page.
            _ if self.session_id.get_untracked().as_ref() != Some(&session) => None,
            Ok(page) => Some(page),
            Err(reason) => {
                self.paging.error.set(Some(format!(
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
        if page.summarized > 0 {
            self.transcript.summarized.set(page.summarized);
        }
        self.transcript
            .prepend(page.messages, page.html, page.first_index);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::state;
    use leptos::prelude::*;

    #[test]
    fn older_pages_are_asked_for_only_when_there_are_some() {
        let state = state(None);
        // The whole conversation is shown (first index 0): nothing to fetch.
        assert_eq!(state.older_url(), None);
        state.transcript.first_index.set(40);
        // No conversation yet.
        assert_eq!(state.older_url(), None);
        state.session_id.set(Some("s 1".into()));
        let first = state.transcript.push(parlor_domain::Role::User, "q".into());
        first.id.set(Some("m/1".into()));
        let (session, url) = state.older_url().expect("a page to fetch");
        assert_eq!(session, "s 1");
        assert_eq!(
            url,
            "/api/chat/helper/sessions/s%201/messages?before=40&before_id=m%2F1"
        );
        // One fetch at a time.
        state.paging.loading.set(true);
        assert_eq!(state.older_url(), None);
    }
}
