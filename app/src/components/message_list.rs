//! The transcript: the conversation so far, the reply as it streams, and inline errors.

use super::message::MessageItem;
use crate::actions::Action;
use crate::state::ChatState;
use leptos::prelude::*;
use parlor_domain::Role;

#[component]
pub fn MessageList(
    state: ChatState,
    /// The agent's greeting, as sanitized HTML rendered by the server.
    initial_messages_html: Vec<String>,
    chat_prompts: Vec<String>,
) -> impl IntoView {
    let empty = move || state.transcript.messages.with(|m| m.is_empty());
    let last_assistant = Memo::new(move |_| {
        state.transcript.messages.with(|list| {
            list.last()
                .filter(|m| m.role == Role::Assistant)
                .map(|m| m.key)
        })
    });
    let unanswered = move || {
        !state.streaming.active.get()
            && state.streaming.error.with(Option::is_none)
            && state
                .transcript
                .messages
                .with(|list| list.last().is_some_and(|m| m.role == Role::User))
    };
    let transcript = NodeRef::<leptos::html::Section>::new();
    follow_new_content(state, transcript);
    let older = move || state.act(Action::LoadOlder(transcript));
    view! {
        <section
            node_ref=transcript
            class="transcript"
            aria-live="polite"
            aria-label="Conversation"
            on:scroll=move |_| {
                // Near the top: bring the page before the first message shown.
                if transcript.get_untracked().is_some_and(|s| s.scroll_top() < 400) {
                    older();
                }
            }
        >
            <Show when=move || state.transcript.first_index.get() != 0>
                <div class="older-row">
                    <button
                        class="older"
                        disabled=move || state.paging.loading.get()
                        on:click=move |_| older()
                    >
                        {move || {
                            if state.paging.loading.get() {
                                "Loading earlier messages…".to_owned()
                            } else {
                                format!("Show earlier messages ({} more)", state.transcript.first_index.get())
                            }
                        }}
                    </button>
                    {move || state.paging.error.get().map(|reason| view! {
                        <span class="error-text" role="alert">{reason}</span>
                    })}
                </div>
            </Show>
            <Show when=empty>
                <div class="intro">
                    {initial_messages_html
                        .iter()
                        .cloned()
                        .map(|html| {
                            view! {
                                <article class="message assistant intro-message">
                                    <div class="bubble markdown" inner_html=html></div>
                                </article>
                            }
                        })
                        .collect_view()}
                    <div class="suggestions">
                        {chat_prompts
                            .iter()
                            .cloned()
                            .map(|prompt| {
                                let text = prompt.clone();
                                view! {
                                    <button class="suggestion" on:click=move |_| state.act(Action::Send(text.clone()))>
                                        {prompt}
                                    </button>
                                }
                            })
                            .collect_view()}
                    </div>
                </div>
            </Show>
            <For each=move || state.transcript.messages.get() key=|m| m.key let:message>
                <MessageItem state message last_assistant/>
            </For>
            <Show when=unanswered>
                <div class="notice-row">
                    <span>"This message has no reply yet."</span>
                    <button class="retry" on:click=move |_| state.act(Action::Regenerate)>"Retry"</button>
                </div>
            </Show>
            {move || state.unloaded.get().map(|reason| view! {
                <div class="error-row" role="alert">
                    <span class="error-text">{reason}</span>
                </div>
            })}
            {move || {
                state
                    .streaming
                    .error
                    .get()
                    .map(|message| {
                        view! {
                            <div class="error-row" role="alert">
                                <span class="error-text">{message}</span>
                                <button class="retry" on:click=move |_| state.act(Action::Regenerate)>"Retry"</button>
                            </div>
                        }
                    })
            }}
        </section>
    }
}

/// Keeps the newest text in view while a reply streams, unless the reader has scrolled up.
fn follow_new_content(state: ChatState, transcript: NodeRef<leptos::html::Section>) {
    Effect::new(move |previous: Option<()>| {
        // Track new messages and the growth of the last one.
        let _ = state
            .transcript
            .messages
            .with(|list| list.last().map(|m| m.text.with(String::len)));
        if let Some(section) = transcript.get_untracked() {
            let distance = section.scroll_height() - section.scroll_top() - section.client_height();
            // On load, open at the latest messages; afterwards follow only a reader at the end.
            if previous.is_none() || distance < 160 {
                section.set_scroll_top(section.scroll_height());
            }
        }
    });
}
