//! One message of the transcript, in parts: its tags, its body, its facts (tokens, how it
//! ended), its actions with their marks, the editor of a question, and its context chips.

use super::tool_card::escape;
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
            class=move || {
                let send = message.send.get();
                classes(&[
                    ("message", true),
                    (role.as_str(), true),
                    ("pinned", send == Some(SendMark::Always)),
                    ("excluded", send == Some(SendMark::Never)),
                    ("not-sent", not_sent()),
                    ("editing", editing.with(Option::is_some)),
                    ("streaming", message.streaming.get()),
                    ("command-notice", role == Role::Assistant && message.notice.get()),
                    ("calls-only", message.calls.get() && message.text.with(String::is_empty)),
                ])
            }
            data-role=role.as_str()
        >
            <MessageTags message not_sent mark_failed/>
            // One shape for every message (see `MessageBody`): a tool message shows its card,
            // and the style hides its empty bubble and actions.
            <super::tool_card::ToolCardView state message/>
            <MessageBody message/>
            {move || editing.with(Option::is_some).then(|| view! {
                <EditForm state message editing/>
            })}
            {(!chips.is_empty()).then(|| view! { <Chips chips later_turns/> })}
            <MessageFacts state message/>
            <super::versions::VersionSwitch state message failed=mark_failed/>
            <super::message_actions::MessageActions state message last_assistant editing mark_failed/>
        </article>
        {move || summary_ends_here().then(|| view! {
            <div class="summarized-marker" role="note">"Messages above are summarized"</div>
        })}
    }
}

/// What the model sees of a message: not sent on the last call, pinned, excluded; and why
/// a mark could not be changed. Tags are HTML made here (see [`tag`]): a view per tag would
/// cost the page's WASM more.
#[component]
fn MessageTags(
    message: UiMessage,
    not_sent: impl Fn() -> bool + Copy + Send + Sync + 'static,
    mark_failed: RwSignal<Option<String>>,
) -> impl IntoView {
    let html = move || {
        let mut html = String::new();
        if not_sent() {
            let title = "Not sent to the model on the last turn";
            html.push_str(&tag("not-sent-tag", title, "not sent"));
        }
        match message.send.get() {
            Some(SendMark::Always) => {
                html.push_str(&tag("pinned-tag", "Always sent to the model", "pinned"));
            }
            Some(SendMark::Never) => {
                let title = "You chose not to send this message to the model";
                html.push_str(&tag("excluded-tag", title, "not sent: excluded"));
            }
            None => {}
        }
        if let Some(reason) = mark_failed.get() {
            html.push_str(&format!(
                "<span class=\"tag mark-error\" role=\"alert\">{}</span>",
                escape(&reason)
            ));
        }
        html
    };
    view! { <div class="tags" inner_html=html></div> }
}

/// A tag: its class, its title (fixed text) and its words, escaped.
fn tag(class: &str, title: &str, text: &str) -> String {
    let title = if title.is_empty() {
        String::new()
    } else {
        format!(" title=\"{title}\"")
    };
    format!("<span class=\"tag {class}\"{title}>{}</span>", escape(text))
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
    let html = move || {
        let mut html = String::new();
        // With the debug panel open: what the message costs in tokens.
        let shown = state.debug.with(Option::is_some);
        if let Some(n) = message.tokens.get().filter(|_| shown) {
            let title = "Tokens of this message for the conversation's model";
            let text = format!("{} tokens", parlor_domain::meter::group_digits(n));
            html.push_str(&tag("tokens-tag", title, &text));
        }
        match message.status.get() {
            Some(ReplyStatus::Stopped) => html.push_str(&tag("stopped-tag", "", "stopped")),
            Some(ReplyStatus::Incomplete) => {
                html.push_str(&tag("incomplete-tag", "", "incomplete"));
            }
            None => {}
        }
        html
    };
    view! { <div class="tags" inner_html=html></div> }
}

/// Edits a user message: Send makes a new version of it (see [`ChatState::edit`]), Cancel
/// keeps it.
#[component]
fn EditForm(
    state: ChatState,
    message: UiMessage,
    editing: RwSignal<Option<String>>,
) -> impl IntoView {
    view! {
        <form
            class="edit-form"
            on:submit=move |ev| {
                ev.prevent_default();
                if let Some(text) = editing.get_untracked() {
                    editing.set(None);
                    state.act(Action::Edit { message, text });
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

/// A class attribute: the names whose flag is set, space-separated.
pub(crate) fn classes(names: &[(&str, bool)]) -> String {
    let mut out = String::new();
    for (name, on) in names {
        if *on {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_has_the_classes_whose_flags_are_set() {
        let flags = [
            ("message", true),
            ("user", true),
            ("pinned", false),
            ("editing", true),
        ];
        assert_eq!(classes(&flags), "message user editing");
        assert_eq!(classes(&[("pinned", false)]), "");
    }

    #[test]
    fn a_tag_is_text_whatever_it_says() {
        let html = tag(
            "mark-error",
            "",
            "no message with id <img src=x onerror=alert(1)>",
        );
        assert_eq!(
            html,
            "<span class=\"tag mark-error\">no message with id &lt;img src=x onerror=alert(1)&gt;</span>"
        );
        assert!(
            tag("pinned-tag", "Always sent", "pinned").contains(" title=\"Always sent\">pinned<")
        );
    }
}
