//! What the user can ask the chat page to do, and where the code that does it lives.

use crate::api::ConversationItem;
use crate::state::{encode, ChatState, UiMessage};
use crate::stream;
use leptos::prelude::*;
use parlor_domain::SendMark;

/// Something the user asked the chat page to do.
///
/// The page's views only name these ([`ChatState::act`]); the code that carries them out
/// (sending a turn and reading its stream, edit, fork, import, rename, delete, marks,
/// attachments, older messages) runs in [`run_action`], which the browser build splits into
/// a second WASM module (`cargo leptos build --split`). The browser fetches it the first time
/// the user acts, or starts to (the composer gets focus), so a reader who only opens a
/// conversation does not download it.
pub enum Action {
    /// Send the composer's text with its attachments.
    SendDraft,
    /// Send this text (a suggested prompt, `!model …`).
    Send(String),
    /// Send `text` in place of the user message `message`.
    Edit {
        message: UiMessage,
        text: String,
        failed: RwSignal<Option<String>>,
    },
    /// Fork the conversation through `message`.
    Fork {
        message: UiMessage,
        failed: RwSignal<Option<String>>,
    },
    /// Pin, exclude or clear the mark of a stored message.
    Mark {
        message: UiMessage,
        send: Option<SendMark>,
        failed: RwSignal<Option<String>>,
    },
    Rename {
        item: ConversationItem,
        title: String,
        failed: RwSignal<Option<String>>,
    },
    Delete {
        item: ConversationItem,
        failed: RwSignal<Option<String>>,
    },
    /// Approve or deny the tool call of `card`, which waits for the user.
    AnswerCall {
        card: UiMessage,
        approve: bool,
    },
    /// Ask again for a reply to the last user message (Retry, Regenerate).
    Regenerate,
    NewChat,
    /// Search this browser's conversations for `text`: the server's answer (its HTML, or why
    /// it failed) goes to `results`, unless `latest` says a later search was started since.
    Search {
        text: String,
        results: RwSignal<Option<Result<String, String>>>,
        latest: Box<dyn Fn() -> bool>,
    },
    /// Bring the messages before the first one shown, keeping the reader's place in
    /// `transcript`.
    LoadOlder(NodeRef<leptos::html::Section>),
    /// Read files picked or dropped on the composer and attach them.
    #[cfg(feature = "hydrate")]
    Attach(Vec<web_sys::File>),
    /// Read a conversation file and import it.
    #[cfg(feature = "hydrate")]
    Import {
        file: web_sys::File,
        failed: RwSignal<Option<String>>,
    },
}

/// What the page says when the code for an action cannot be fetched.
const UNLOADED: &str = "This part of Parlor's page could not be loaded (is the server reachable? \
     If Parlor was updated, reload the page). Nothing was sent; try again.";

/// The code for an action could not be fetched.
pub struct Unloaded;

impl From<leptos::wasm_split::SplitLoaderError> for Unloaded {
    fn from(_: leptos::wasm_split::SplitLoaderError) -> Self {
        Unloaded
    }
}

impl ChatState {
    /// Carries out `action` once its code is loaded; when it cannot be, the page says so and
    /// nothing is lost (a draft stays in the composer).
    pub fn act(self, action: Action) {
        leptos::task::spawn_local(async move {
            match run_action(self, action).await {
                Ok(()) => self.unloaded.set(None),
                Err(Unloaded) => self.unloaded.set(Some(UNLOADED.into())),
            }
        });
    }

    /// Fetches the code for the page's actions ahead of the first one.
    pub fn prepare(self) {
        leptos::task::spawn_local(async move {
            // A failure is reported when an action needs the code.
            let _ = fetch_actions().await;
        });
    }
}

/// Carries out `action` (see [`Action`]: in the browser, in a WASM module of its own).
#[leptos::wasm_split::wasm_split(
    parlor_actions,
    wasm_split_path = ::leptos::wasm_split,
    preload(fetch_actions),
    fallible
)]
fn run_action(state: ChatState, action: Action) -> Result<(), Unloaded> {
    match action {
        Action::SendDraft => state.send_draft(),
        Action::Send(text) => state.send(text),
        Action::Edit {
            message,
            text,
            failed,
        } => state.edit(message, text, failed),
        Action::Fork { message, failed } => state.fork(message, None, failed),
        Action::Mark {
            message,
            send,
            failed,
        } => state.mark(message, send, failed),
        Action::Rename {
            item,
            title,
            failed,
        } => state.rename(item, title, failed),
        Action::Delete { item, failed } => state.delete(item, failed),
        Action::AnswerCall { card, approve } => state.answer_call(card, approve),
        Action::Regenerate => state.regenerate(),
        Action::NewChat => state.new_chat(),
        Action::LoadOlder(transcript) => state.load_older(transcript),
        Action::Search {
            text,
            results,
            latest,
        } => {
            let url = format!("/api/conversations/search?format=html&q={}", encode(&text));
            stream::spawn_request("GET", url, None, move |reply| {
                if latest() {
                    results.set(Some(reply));
                }
            });
        }
        #[cfg(feature = "hydrate")]
        Action::Attach(files) => state.read_files(files),
        #[cfg(feature = "hydrate")]
        Action::Import { file, failed } => state.read_import(file, failed),
    }
    Ok(())
}
