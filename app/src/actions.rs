//! What the user can ask the chat page to do, and where the code that does it lives.

use crate::api::ConversationItem;
use crate::state::{encode, ChatState, UiMessage};
use crate::stream;
use leptos::prelude::*;
use parlor_domain::SendMark;

/// Something the user asked the chat page to do.
///
/// The page's views only name these ([`ChatState::act`]); the code that carries them out
/// runs in [`run_turn`] (sending a turn and reading its stream, a new chat) or in
/// [`run_other`] (fork, import, rename, delete, marks, attachments, search, older
/// messages), which the browser build splits into WASM modules of their own (`cargo leptos
/// build --split`; the code both use goes into a third, shared). The browser fetches the turn's
/// the first time the user sends, or starts to (the composer gets focus), so a reader who
/// only opens a conversation downloads neither, and one who only chats never fetches the
/// others.
pub enum Action {
    /// Send the composer's text with its attachments.
    SendDraft,
    /// Send this text (a suggested prompt, `!model …`).
    Send(String),
    /// Send `text` in place of the user message `message`.
    Edit {
        message: UiMessage,
        text: String,
    },
    /// Go on from the version of a message that holds the message `id` (‹ ›).
    Choose {
        id: String,
        failed: RwSignal<Option<String>>,
    },
    /// Open a search hit on a version that is not chosen: choose it, then open `href`.
    OpenVersion {
        agent: String,
        session: String,
        version: String,
        href: String,
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
    /// Answer the tool call of `card`, which waits for the user: `once`, `conversation`
    /// (allowed for the rest of the conversation) or `deny`.
    AnswerCall {
        card: UiMessage,
        answer: String,
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
            let done = if action.is_turn() {
                run_turn(self, action).await
            } else {
                run_other(self, action).await
            };
            match done {
                Ok(()) => self.unloaded.set(None),
                Err(Unloaded) => self.unloaded.set(Some(UNLOADED.into())),
            }
        });
    }

    /// Fetches the code for sending a message ahead of the first one.
    pub fn prepare(self) {
        leptos::task::spawn_local(async move {
            // A failure is reported when an action needs the code.
            let _ = fetch_turns().await;
        });
    }
}

impl Action {
    /// Whether the action sends a turn and reads its stream, or starts a new chat (the code
    /// a chat needs, in a module of its own); the others are in a second module.
    fn is_turn(&self) -> bool {
        matches!(
            self,
            Action::SendDraft
                | Action::Send(_)
                | Action::Edit { .. }
                | Action::AnswerCall { .. }
                | Action::Regenerate
                | Action::NewChat
        )
    }
}

/// Sends a turn and reads its stream (see [`Action::is_turn`]; in the browser, in a WASM
/// module of its own, the one the first message fetches).
#[leptos::wasm_split::wasm_split(
    parlor_turns,
    wasm_split_path = ::leptos::wasm_split,
    preload(fetch_turns),
    fallible
)]
fn run_turn(state: ChatState, action: Action) -> Result<(), Unloaded> {
    match action {
        Action::SendDraft => state.send_draft(),
        Action::Send(text) => state.send(text),
        Action::Edit { message, text } => state.edit(message, text),
        Action::AnswerCall { card, answer } => state.answer_call(card, &answer),
        Action::Regenerate => state.regenerate(),
        Action::NewChat => state.new_chat(),
        // The others are carried out by `run_other` (see `ChatState::act`).
        _ => {}
    }
    Ok(())
}

/// Carries out the actions that send no turn (in the browser, in a second WASM module).
#[leptos::wasm_split::wasm_split(
    parlor_other_actions,
    wasm_split_path = ::leptos::wasm_split,
    fallible
)]
fn run_other(state: ChatState, action: Action) -> Result<(), Unloaded> {
    match action {
        Action::Fork { message, failed } => state.fork(message, None, failed),
        Action::Choose { id, failed } => state.choose(id, failed),
        Action::OpenVersion {
            agent,
            session,
            version,
            href,
            failed,
        } => crate::state::open_version(&agent, &session, &version, href, failed),
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
        // Turns are carried out by `run_turn`.
        _ => {}
    }
    Ok(())
}
