//! One message of the transcript, in parts: its tags, its body, its facts (tokens, how it
//! ended), its actions with their marks, the editor of a question, and its context chips.

use crate::actions::Action;
use crate::state::{ChatState, UiMessage};
use leptos::prelude::*;
use parlor_domain::context::Chip;
use parlor_domain::{ReplyStatus, Role, SendMark};

/// One message of the transcript: its tags, its body, its context chips and what can be
/// done with it.
#[component]
pub fn MessageItem(
    state: ChatState,
    message: UiMessage,
    last_assistant: Memo<Option<u64>>,
) -> impl IntoView {
    let role = message.role;
    // The position among stored messages: commands and their notices are not stored.
    let key = message.key;
    let index = move || state.transcript.index_of(key);
    // With the debug panel open: messages the last model call did not receive.
    let not_sent = move || {
        let first_sent = state.debug.with(|d| d.as_ref().and_then(|d| d.first_sent));
        matches!((index(), first_sent), (Some(i), Some(first)) if i < first)
    };
    // User turns sent after this message: its context chips expire by them.
    let later_turns = move || state.transcript.later_turns(key);
    let chips = message.chips.get_value();
    // The rolling summary covers the messages up to this one.
    let summary_ends_here = move || {
        let covers = state.transcript.summarized.get();
        covers > 0 && index() == Some(covers - 1)
    };
    // Why the last change of a mark was refused (e.g. while a reply is being written).
    let mark_failed = RwSignal::new(None::<String>);
    // The text being edited (user messages), while the editor is open.
    let editing = RwSignal::new(None::<String>);
    view! {
        <article
            class=format!("message {}", role.as_str())
            class:pinned=move || message.send.get() == Some(SendMark::Always)
            class:excluded=move || message.send.get() == Some(SendMark::Never)
            class:not-sent=not_sent
            class:editing=move || editing.with(Option::is_some)
            class:streaming=move || message.streaming.get()
            class:command-notice=move || role == Role::Assistant && message.notice.get()
            class:calls-only=move || message.calls.get() && message.text.with(String::is_empty)
            data-role=role.as_str()
        >
            <MessageTags message not_sent mark_failed/>
            // One shape for every message (see `MessageBody`): a tool message shows its card,
            // and the style hides its empty bubble and actions.
            <super::tool_card::ToolCardView state message/>
            <MessageBody message/>
            <Show when=move || editing.with(Option::is_some)>
                <EditForm state message editing failed=mark_failed/>
            </Show>
            {(!chips.is_empty()).then(|| view! { <Chips chips later_turns/> })}
            <MessageFacts state message/>
            <MessageActions state message last_assistant editing mark_failed/>
        </article>
        <Show when=summary_ends_here>
            <div class="summarized-marker" role="note">"Messages above are summarized"</div>
        </Show>
    }
}

/// What the model sees of a message: not sent on the last call, pinned, excluded; and why
/// a mark could not be changed.
#[component]
fn MessageTags(
    message: UiMessage,
    not_sent: impl Fn() -> bool + Copy + Send + Sync + 'static,
    mark_failed: RwSignal<Option<String>>,
) -> impl IntoView {
    view! {
        <Show when=not_sent>
            <span class="tag not-sent-tag" title="Not sent to the model on the last turn">
                "not sent"
            </span>
        </Show>
        <Show when=move || message.send.get() == Some(SendMark::Always)>
            <span class="tag pinned-tag" title="Always sent to the model">"pinned"</span>
        </Show>
        <Show when=move || message.send.get() == Some(SendMark::Never)>
            <span class="tag excluded-tag" title="You chose not to send this message to the model">
                "not sent: excluded"
            </span>
        </Show>
        {move || mark_failed.get().map(|reason| view! {
            <span class="tag mark-error" role="alert">{reason}</span>
        })}
    }
}

/// The message's text. One shape for every message (a view swapped by kind would cost the
/// bundle several KB): a reply's rendered HTML, then its text not rendered yet; a question
/// or a notice has no HTML, so all of its text is that plain tail.
#[component]
fn MessageBody(message: UiMessage) -> impl IntoView {
    let role = message.role;
    // The part of a streaming reply not yet rendered by the server shows as plain text.
    let tail = move || {
        let from = message.rendered_len.get();
        message.text.with(|t| {
            t.get(from..)
                .filter(|rest| !rest.is_empty())
                .map(str::to_owned)
        })
    };
    view! {
        <div
            class="bubble"
            class:markdown=move || role == Role::Assistant && !message.notice.get()
            class:plain=move || role != Role::Assistant || message.notice.get()
        >
            <div class="rendered" inner_html=move || message.html.get()></div>
            {move || tail().map(|rest| view! { <p class="raw-tail">{rest}</p> })}
        </div>
    }
}

/// Its tokens (with the debug panel open) and how a reply ended when it did not finish.
#[component]
fn MessageFacts(state: ChatState, message: UiMessage) -> impl IntoView {
    view! {
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
    }
}

/// A reply's Copy, Regenerate and marks; a question's marks and Edit.
#[component]
fn MessageActions(
    state: ChatState,
    message: UiMessage,
    last_assistant: Memo<Option<u64>>,
    editing: RwSignal<Option<String>>,
    mark_failed: RwSignal<Option<String>>,
) -> impl IntoView {
    let role = message.role;
    let copied = RwSignal::new(false);
    let stored = move || {
        message.id.with(Option::is_some) && !message.streaming.get() && !message.notice.get()
    };
    let marks = move || view! { <Marks state message failed=mark_failed/> };
    view! {
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
                    last_assistant.get() == Some(message.key) && !state.streaming.active.get()
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
                    disabled=move || state.streaming.active.get()
                    title="Edit this message and send it again"
                    on:click=move |_| editing.set(Some(message.text.get_untracked()))
                >
                    "Edit"
                </button>
            </div>
        </Show>
    }
}

/// Pin, exclude and fork.
#[component]
fn Marks(state: ChatState, message: UiMessage, failed: RwSignal<Option<String>>) -> impl IntoView {
    view! {
        <MarkButton state message mark=SendMark::Always failed/>
        <MarkButton state message mark=SendMark::Never failed/>
        <button
            class="fork"
            disabled=move || state.streaming.active.get()
            title="A new conversation with the messages up to this one"
            on:click=move |_| state.act(Action::Fork { message, failed })
        >
            "Fork"
        </button>
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
                <button type="submit" class="send-edit" disabled=move || state.streaming.active.get()>
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
            disabled=move || state.streaming.active.get()
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
