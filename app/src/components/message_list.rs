//! The transcript: the conversation so far, the reply as it streams, and inline errors.

use crate::actions::Action;
use crate::state::{ChatState, UiMessage};
use leptos::prelude::*;
use parlor_domain::context::Chip;
use parlor_domain::{ReplyStatus, Role, SendMark};

#[component]
pub fn MessageList(
    state: ChatState,
    /// The agent's greeting, as sanitized HTML rendered by the server.
    initial_messages_html: Vec<String>,
    chat_prompts: Vec<String>,
) -> impl IntoView {
    let empty = move || state.messages.with(|m| m.is_empty());
    let last_assistant = Memo::new(move |_| {
        state.messages.with(|list| {
            list.last()
                .filter(|m| m.role == Role::Assistant)
                .map(|m| m.key)
        })
    });
    let unanswered = move || {
        !state.streaming.get()
            && state.error.with(Option::is_none)
            && state
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
            <Show when=move || state.first_index.get() != 0>
                <div class="older-row">
                    <button
                        class="older"
                        disabled=move || state.older_loading.get()
                        on:click=move |_| older()
                    >
                        {move || {
                            if state.older_loading.get() {
                                "Loading earlier messages…".to_owned()
                            } else {
                                format!("Show earlier messages ({} more)", state.first_index.get())
                            }
                        }}
                    </button>
                    {move || state.older_error.get().map(|reason| view! {
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
            <For each=move || state.messages.get() key=|m| m.key let:message>
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

#[component]
fn MessageItem(
    state: ChatState,
    message: UiMessage,
    last_assistant: Memo<Option<u64>>,
) -> impl IntoView {
    let role = message.role;
    // The position among stored messages: commands and their notices are not stored.
    let key = message.key;
    let index = move || state.index_of(key);
    // With the debug panel open: messages the last model call did not receive.
    let not_sent = move || {
        let first_sent = state.debug.with(|d| d.as_ref().and_then(|d| d.first_sent));
        matches!((index(), first_sent), (Some(i), Some(first)) if i < first)
    };
    // User turns sent after this message: its context chips expire by them.
    let later_turns = move || state.later_turns(key);
    let chips = message.chips.get_value();
    // The rolling summary covers the messages up to this one.
    let summary_ends_here = move || {
        let covers = state.summarized.get();
        covers > 0 && index() == Some(covers - 1)
    };
    let copied = RwSignal::new(false);
    // The part of a streaming reply not yet rendered by the server shows as plain text.
    let tail = move || {
        let from = message.rendered_len.get();
        message.text.with(|t| {
            t.get(from..)
                .filter(|rest| !rest.is_empty())
                .map(str::to_owned)
        })
    };
    // One shape for every message (a view swapped by kind would cost the bundle several
    // KB): a reply's rendered HTML, then its text not rendered yet; a question or a notice
    // has no HTML, so all of its text is that plain tail.
    let body = view! {
        <div
            class="bubble"
            class:markdown=move || role == Role::Assistant && !message.notice.get()
            class:plain=move || role != Role::Assistant || message.notice.get()
        >
            <div class="rendered" inner_html=move || message.html.get()></div>
            {move || tail().map(|rest| view! { <p class="raw-tail">{rest}</p> })}
        </div>
    };
    let stored = move || {
        message.id.with(Option::is_some) && !message.streaming.get() && !message.notice.get()
    };
    let pinned = move || message.send.get() == Some(SendMark::Always);
    // Why the last change of a mark was refused (e.g. while a reply is being written).
    let mark_failed = RwSignal::new(None::<String>);
    let excluded = move || message.send.get() == Some(SendMark::Never);
    // The text being edited (user messages), while the editor is open.
    let editing = RwSignal::new(None::<String>);
    let marks = move || {
        view! {
            <MarkButton state message mark=SendMark::Always failed=mark_failed/>
            <MarkButton state message mark=SendMark::Never failed=mark_failed/>
            <button
                class="fork"
                disabled=move || state.streaming.get()
                title="A new conversation with the messages up to this one"
                on:click=move |_| state.act(Action::Fork { message, failed: mark_failed })
            >
                "Fork"
            </button>
        }
    };

    view! {
        <article
            class=format!("message {}", role.as_str())
            class:pinned=pinned
            class:excluded=excluded
            class:not-sent=not_sent
            class:editing=move || editing.with(Option::is_some)
            class:streaming=move || message.streaming.get()
            class:command-notice=move || role == Role::Assistant && message.notice.get()
            data-role=role.as_str()
        >
            <Show when=not_sent>
                <span class="tag not-sent-tag" title="Not sent to the model on the last turn">
                    "not sent"
                </span>
            </Show>
            <Show when=pinned>
                <span class="tag pinned-tag" title="Always sent to the model">"pinned"</span>
            </Show>
            <Show when=excluded>
                <span class="tag excluded-tag" title="You chose not to send this message to the model">
                    "not sent: excluded"
                </span>
            </Show>
            {move || mark_failed.get().map(|reason| view! {
                <span class="tag mark-error" role="alert">{reason}</span>
            })}
            {body}
            <Show when=move || editing.with(Option::is_some)>
                <EditForm state message editing failed=mark_failed/>
            </Show>
            {(!chips.is_empty()).then(|| view! { <Chips chips later_turns/> })}
            {move || {
                // With the debug panel open: what the message costs in tokens.
                let shown = state.debug.with(Option::is_some);
                message.tokens.get().filter(|_| shown).map(|n| view! {
                    <span class="tag tokens-tag" title="Tokens of this message for the conversation's model">
                        {format!("{} tokens", parlor_domain::meter::group_digits(n))}
                    </span>
                })
            }}
            {move || match message.status.get() {
                Some(ReplyStatus::Stopped) => Some(view! { <span class="tag stopped-tag">"stopped"</span> }),
                Some(ReplyStatus::Incomplete) => Some(view! { <span class="tag incomplete-tag">"incomplete"</span> }),
                None => None,
            }}
            <Show when=move || {
                role == Role::Assistant && !message.streaming.get() && !message.notice.get()
            }>
                <div class="actions">
                    <button
                        class="copy"
                        on:click=move |_| {
                            crate::stream::copy_to_clipboard(&message.text.get_untracked());
                            copied.set(true);
                            set_timeout(move || copied.set(false), std::time::Duration::from_millis(1500));
                        }
                    >
                        {move || if copied.get() { "Copied" } else { "Copy" }}
                    </button>
                    <Show when=move || {
                        last_assistant.get() == Some(message.key) && !state.streaming.get()
                    }>
                        <button class="regenerate" on:click=move |_| state.act(Action::Regenerate)>
                            "Regenerate"
                        </button>
                    </Show>
                    <Show when=stored>{marks}</Show>
                </div>
            </Show>
            <Show when=move || role == Role::User && stored() && editing.with(Option::is_none)>
                <div class="actions">
                    {marks}
                    <button
                        class="edit"
                        disabled=move || state.streaming.get()
                        title="Edit this message and send it again"
                        on:click=move |_| editing.set(Some(message.text.get_untracked()))
                    >
                        "Edit"
                    </button>
                </div>
            </Show>
        </article>
        <Show when=summary_ends_here>
            <div class="summarized-marker" role="note">"Messages above are summarized"</div>
        </Show>
    }
}

/// Edits a user message: Send replaces it (see [`ChatState::edit`]), Cancel keeps it.
#[component]
fn EditForm(
    state: ChatState,
    message: UiMessage,
    editing: RwSignal<Option<String>>,
    failed: RwSignal<Option<String>>,
) -> impl IntoView {
    view! {
        <form
            class="edit-form"
            on:submit=move |ev| {
                ev.prevent_default();
                if let Some(text) = editing.get_untracked() {
                    editing.set(None);
                    state.act(Action::Edit { message, text, failed });
                }
            }
        >
            <textarea
                aria-label="Edit the message"
                rows="3"
                prop:value=move || editing.get().unwrap_or_default()
                on:input=move |ev| editing.set(Some(event_target_value(&ev)))
            ></textarea>
            <div class="actions">
                <button type="submit" class="send-edit" disabled=move || state.streaming.get()>
                    "Send"
                </button>
                <button type="button" class="cancel-edit" on:click=move |_| editing.set(None)>
                    "Cancel"
                </button>
            </div>
        </form>
    }
}

/// Sets or clears one mark of a message: "Always send" / "Unpin", "Don't send" / "Send again".
#[component]
fn MarkButton(
    state: ChatState,
    message: UiMessage,
    mark: SendMark,
    failed: RwSignal<Option<String>>,
) -> impl IntoView {
    let (class, set_label, unset_label, title) = match mark {
        SendMark::Always => (
            "pin",
            "Always send",
            "Unpin",
            "Always send this message, even when the history policy would leave it out",
        ),
        SendMark::Never => (
            "exclude",
            "Don't send",
            "Send again",
            "Never send this message to the model (it stays in the conversation)",
        ),
    };
    let set = move || message.send.get() == Some(mark);
    view! {
        <button
            class=class
            aria-pressed=move || set().to_string()
            disabled=move || state.streaming.get()
            title=title
            on:click=move |_| state.act(Action::Mark { message, send: (!set()).then_some(mark), failed })
        >
            {move || if set() { unset_label } else { set_label }}
        </button>
    }
}

/// A message's context, a chip per source: what it is and how long the model sees it;
/// marked expired once the model no longer receives it.
#[component]
fn Chips(
    chips: Vec<Chip>,
    later_turns: impl Fn() -> usize + Copy + Send + Sync + 'static,
) -> impl IntoView {
    view! {
        <ul class="chips" aria-label="Attached context">
            {chips
                .into_iter()
                .map(|chip| {
                    let keep = chip.keep_label();
                    let expires = chip.clone();
                    let expired = Memo::new(move |_| expires.expired(later_turns()));
                    let shown = keep.clone();
                    view! {
                        <li
                            class="chip"
                            class:expired=expired
                            data-source=chip.source.clone()
                            title=move || {
                                if expired.get() {
                                    "No longer sent to the model, and no longer stored".to_owned()
                                } else {
                                    format!("Sent to the model: {keep}")
                                }
                            }
                        >
                            <span class="chip-source">{chip.source.clone()}</span>
                            <span class="chip-kind">{chip.kind.clone()}</span>
                            <span class="chip-keep">
                                {move || if expired.get() { "expired".to_owned() } else { shown.clone() }}
                            </span>
                        </li>
                    }
                })
                .collect_view()}
        </ul>
    }
}

/// Keeps the newest text in view while a reply streams, unless the reader has scrolled up.
fn follow_new_content(state: ChatState, transcript: NodeRef<leptos::html::Section>) {
    Effect::new(move |previous: Option<()>| {
        // Track new messages and the growth of the last one.
        let _ = state
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
