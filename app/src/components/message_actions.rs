//! A message's buttons: a reply's Copy, Regenerate and marks; a question's marks and Edit.
//!
//! The row is one piece of HTML made by [`actions_html`], with a single click handler that
//! reads the pressed button's `data-act`: a reactive row (a view per button, each with its
//! closures) cost the page's WASM about 6 KB more, brotli. When the row is drawn again (a
//! mark set, a turn starting), the button that had the keyboard's focus gets it back.

use crate::actions::Action;
use crate::state::{ChatState, UiMessage};
use leptos::prelude::*;
use parlor_domain::{Role, SendMark};

/// What the row shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Buttons {
    pub role: Role,
    /// The message is finished (not streaming) and not a command's notice.
    pub finished: bool,
    /// It is stored (it has an id): it can be marked, forked, edited.
    pub stored: bool,
    /// The last reply, with no turn running: it can be asked again.
    pub regenerate: bool,
    /// A turn is running: marks, Fork and Edit wait.
    pub busy: bool,
    pub copied: bool,
    pub send: Option<SendMark>,
    /// The question's editor is open (its buttons replace these).
    pub editing: bool,
}

#[component]
pub fn MessageActions(
    state: ChatState,
    message: UiMessage,
    last_assistant: Memo<Option<u64>>,
    editing: RwSignal<Option<String>>,
    mark_failed: RwSignal<Option<String>>,
) -> impl IntoView {
    let copied = RwSignal::new(false);
    let html = move || {
        let finished = !message.streaming.get() && !message.notice.get();
        let busy = state.streaming.active.get();
        actions_html(&Buttons {
            role: message.role,
            finished,
            stored: finished && message.id.with(Option::is_some),
            regenerate: last_assistant.get() == Some(message.key) && !busy,
            busy,
            copied: copied.get(),
            send: message.send.get(),
            editing: editing.with(Option::is_some),
        })
    };
    let host = NodeRef::<leptos::html::Div>::new();
    let first = untrack(html);
    #[cfg(feature = "hydrate")]
    let server_drawn = first.clone();
    #[cfg(feature = "hydrate")]
    Effect::new(move |drawn: Option<String>| {
        let next = html();
        if drawn.as_ref().unwrap_or(&server_drawn) != &next {
            if let Some(host) = host.get() {
                redraw_keeping_focus(&host, &next);
            }
        }
        next
    });
    let clicked = move |ev: leptos::ev::MouseEvent| {
        let Some(act) = super::target_attribute(&ev, "button[data-act]", "data-act") else {
            return;
        };
        let failed = mark_failed;
        let toggle = |mark| (message.send.get_untracked() != Some(mark)).then_some(mark);
        match act.as_str() {
            "copy" => {
                crate::stream::copy_to_clipboard(&message.text.get_untracked());
                copied.set(true);
                set_timeout(
                    move || copied.set(false),
                    std::time::Duration::from_millis(1500),
                );
            }
            "regenerate" => state.act(Action::Regenerate),
            "edit" => editing.set(Some(message.text.get_untracked())),
            "fork" => state.act(Action::Fork { message, failed }),
            "pin" => state.act(Action::Mark {
                message,
                send: toggle(SendMark::Always),
                failed,
            }),
            "exclude" => state.act(Action::Mark {
                message,
                send: toggle(SendMark::Never),
                failed,
            }),
            _ => {}
        }
    };
    view! { <div class="actions" node_ref=host inner_html=first on:click=clicked></div> }
}

/// Replaces the row's buttons; the one that had the focus (by its `data-act`) gets it back.
#[cfg(feature = "hydrate")]
fn redraw_keeping_focus(host: &web_sys::HtmlElement, html: &str) {
    use wasm_bindgen::JsCast;
    let focused = document()
        .active_element()
        .filter(|el| host.contains(Some(el)))
        .and_then(|el| el.get_attribute("data-act"));
    host.set_inner_html(html);
    let again = focused.and_then(|act| {
        host.query_selector(&format!("[data-act=\"{act}\"]"))
            .ok()
            .flatten()
    });
    if let Some(button) = again.and_then(|b| b.dyn_into::<web_sys::HtmlElement>().ok()) {
        let _ = button.focus();
    }
}

/// The row's HTML (no text in it comes from the conversation).
pub fn actions_html(b: &Buttons) -> String {
    let mut html = String::new();
    match b.role {
        Role::Assistant if b.finished => {
            let copy = if b.copied { "Copied" } else { "Copy" };
            html.push_str(&button("copy", None, false, copy, ""));
            if b.regenerate {
                html.push_str(&button("regenerate", None, false, "Regenerate", ""));
            }
            if b.stored {
                marks(b, &mut html);
            }
        }
        Role::User if b.stored && !b.editing => {
            marks(b, &mut html);
            let title = "Edit this message and send it again";
            html.push_str(&button("edit", None, b.busy, "Edit", title));
        }
        _ => {}
    }
    html
}

/// Pin, exclude and fork.
fn marks(b: &Buttons, html: &mut String) {
    for (mark, act, set_label, unset_label, title) in [
        (
            SendMark::Always,
            "pin",
            "Always send",
            "Unpin",
            "Always send this message, even when the history policy would leave it out",
        ),
        (
            SendMark::Never,
            "exclude",
            "Don't send",
            "Send again",
            "Never send this message to the model (it stays in the conversation)",
        ),
    ] {
        let set = b.send == Some(mark);
        let label = if set { unset_label } else { set_label };
        html.push_str(&button(act, Some(set), b.busy, label, title));
    }
    let title = "A new conversation with the messages up to this one";
    html.push_str(&button("fork", None, b.busy, "Fork", title));
}

fn button(act: &str, pressed: Option<bool>, disabled: bool, label: &str, title: &str) -> String {
    let pressed = pressed
        .map(|p| format!(" aria-pressed=\"{p}\""))
        .unwrap_or_default();
    let title = if title.is_empty() {
        String::new()
    } else {
        format!(" title=\"{title}\"")
    };
    let disabled = if disabled { " disabled" } else { "" };
    format!("<button type=\"button\" class=\"{act}\" data-act=\"{act}\"{pressed}{title}{disabled}>{label}</button>")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> Buttons {
        Buttons {
            role: Role::Assistant,
            finished: true,
            stored: true,
            regenerate: false,
            busy: false,
            copied: false,
            send: None,
            editing: false,
        }
    }

    /// The buttons' `data-act`s, in order.
    fn acts(html: &str) -> Vec<&str> {
        html.split("data-act=\"")
            .skip(1)
            .map(|rest| &rest[..rest.find('"').unwrap()])
            .collect()
    }

    #[test]
    fn a_reply_can_be_copied_marked_and_forked_and_the_last_one_asked_again() {
        assert_eq!(
            acts(&actions_html(&reply())),
            ["copy", "pin", "exclude", "fork"]
        );
        let last = actions_html(&Buttons {
            regenerate: true,
            ..reply()
        });
        assert_eq!(
            acts(&last),
            ["copy", "regenerate", "pin", "exclude", "fork"]
        );
        // Not stored yet (no id): copy only; still streaming or a notice: nothing.
        assert_eq!(
            acts(&actions_html(&Buttons {
                stored: false,
                ..reply()
            })),
            ["copy"]
        );
        assert_eq!(
            actions_html(&Buttons {
                finished: false,
                stored: false,
                ..reply()
            }),
            ""
        );
        assert!(actions_html(&Buttons {
            copied: true,
            ..reply()
        })
        .contains(">Copied<"));
    }

    #[test]
    fn a_question_has_its_marks_and_edit_until_its_editor_opens() {
        let question = Buttons {
            role: Role::User,
            ..reply()
        };
        assert_eq!(
            acts(&actions_html(&question)),
            ["pin", "exclude", "fork", "edit"]
        );
        assert_eq!(
            actions_html(&Buttons {
                editing: true,
                ..question.clone()
            }),
            ""
        );
        assert_eq!(
            actions_html(&Buttons {
                stored: false,
                ..question
            }),
            ""
        );
    }

    #[test]
    fn marks_say_whether_they_are_set_and_wait_while_a_turn_runs() {
        let pinned = actions_html(&Buttons {
            send: Some(SendMark::Always),
            ..reply()
        });
        assert!(
            pinned.contains("data-act=\"pin\" aria-pressed=\"true\""),
            "{pinned}"
        );
        assert!(pinned.contains(">Unpin<") && pinned.contains(">Don't send<"));
        let excluded = actions_html(&Buttons {
            send: Some(SendMark::Never),
            ..reply()
        });
        assert!(excluded.contains("data-act=\"exclude\" aria-pressed=\"true\""));
        assert!(excluded.contains(">Send again<") && excluded.contains(">Always send<"));
        let busy = actions_html(&Buttons {
            busy: true,
            ..reply()
        });
        assert_eq!(
            busy.matches(" disabled>").count(),
            3,
            "pin, exclude and fork: {busy}"
        );
        assert!(!busy.contains("class=\"copy\" data-act=\"copy\" disabled"));
    }
}
