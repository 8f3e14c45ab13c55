//! This browser's conversations, newest first: open, rename, delete, and search them (the
//! server searches titles and messages, and renders the results: see
//! `components::search_results`).

use crate::actions::Action;
use crate::api::ConversationItem;
use crate::state::{encode, ChatState};
use leptos::prelude::*;

/// How long typing pauses before the search is sent.
const SEARCH_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

fn chat_href(agent_id: &str, session_id: &str) -> String {
    format!(
        "/chat?agent={}&session={}",
        encode(agent_id),
        encode(session_id)
    )
}

#[component]
pub fn Sidebar(state: ChatState, open: RwSignal<bool>) -> impl IntoView {
    let query = RwSignal::new(String::new());
    // `None` while no search is shown; the latest answer's HTML (or why it failed) otherwise.
    let results = RwSignal::new(None::<Result<String, String>>);
    // Which search is the latest: an older answer arriving late is dropped.
    let generation = StoredValue::new(0u64);
    let on_input = move |ev| {
        let text = event_target_value(&ev);
        query.set(text.clone());
        generation.update_value(|g| *g += 1);
        if text.trim().is_empty() {
            results.set(None);
            return;
        }
        let mine = generation.get_value();
        set_timeout(
            move || {
                if generation.get_value() != mine {
                    return;
                }
                state.act(Action::Search {
                    text,
                    results,
                    latest: Box::new(move || generation.get_value() == mine),
                });
            },
            SEARCH_PAUSE,
        );
    };
    let failed = RwSignal::new(None::<String>);
    view! {
        <nav class="sidebar" class:open=move || open.get() aria-label="Conversations">
            <div class="sidebar-head">
                <a class="brand" href="/">"Parlor"</a>
                <button
                    class="new-chat"
                    on:click=move |_| {
                        state.act(Action::NewChat);
                        open.set(false);
                    }
                >
                    "New chat"
                </button>
            </div>
            <input
                class="search"
                type="search"
                placeholder="Search conversations"
                aria-label="Search conversations"
                prop:value=move || query.get()
                on:input=on_input
            />
            {move || failed.get().map(|reason| view! { <p class="sidebar-error" role="alert">{reason}</p> })}
            <div
                class="search-answer"
                hidden=move || results.with(Option::is_none)
                inner_html=move || match results.get() {
                    Some(Ok(html)) => html,
                    _ => String::new(),
                }
            ></div>
            {move || results.get().and_then(Result::err).map(|reason| view! {
                <p class="sidebar-error" role="alert">{reason}</p>
            })}
            <Show when=move || results.with(Option::is_none)>
                <Conversations state failed/>
            </Show>
        </nav>
    }
}

#[component]
fn Conversations(state: ChatState, failed: RwSignal<Option<String>>) -> impl IntoView {
    view! {
        <ul class="conversations">
            <For
                each=move || state.conversations.get()
                key=|c| (c.session_id.clone(), c.title.clone())
                let:conversation
            >
                {
                    let id = conversation.session_id.clone();
                    let href = chat_href(&conversation.agent_id, &conversation.session_id);
                    let (renamed, deleted) = (conversation.clone(), conversation.clone());
                    view! {
                        <li>
                            <a
                                href=href
                                rel="external"
                                class:active=move || {
                                    state.session_id.with(|s| s.as_deref() == Some(id.as_str()))
                                }
                            >
                                {conversation.title.clone()}
                            </a>
                            <button
                                class="rename"
                                title="Rename"
                                aria-label=format!("Rename “{}”", conversation.title)
                                on:click=move |_| {
                                    if let Some(title) = ask_title(&renamed.title) {
                                        failed.set(None);
                                        state.act(Action::Rename { item: renamed.clone(), title, failed });
                                    }
                                }
                            >
                                "✎"
                            </button>
                            <button
                                class="delete"
                                title="Delete"
                                aria-label=format!("Delete “{}”", conversation.title)
                                on:click=move |_| {
                                    if confirm_delete(&deleted) {
                                        failed.set(None);
                                        state.act(Action::Delete { item: deleted.clone(), failed });
                                    }
                                }
                            >
                                "×"
                            </button>
                        </li>
                    }
                }
            </For>
        </ul>
    }
}

/// The browser's own prompt for a new title (`None`: cancelled or unchanged).
fn ask_title(current: &str) -> Option<String> {
    #[cfg(feature = "hydrate")]
    {
        let title = window()
            .prompt_with_message_and_default("Rename the conversation", current)
            .ok()
            .flatten()?;
        (title.trim() != current).then_some(title)
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = current;
        None
    }
}

/// The browser's own confirmation before a deletion.
fn confirm_delete(item: &ConversationItem) -> bool {
    #[cfg(feature = "hydrate")]
    {
        window()
            .confirm_with_message(&format!(
                "Delete “{}”? It disappears from your conversations.",
                item.title
            ))
            .unwrap_or(false)
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = item;
        false
    }
}
