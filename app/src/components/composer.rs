//! Where the user writes: Enter sends, Shift+Enter adds a line, Stop cancels a reply.
//! Files (text, code, Markdown, images) can be attached with the button or by dropping
//! them on the composer, each with how long the conversation keeps it.

use super::tool_card::escape;
use crate::actions::Action;
use crate::attach::{save_of, size_label, value_of, Attachment, CHOICES};
use crate::state::ChatState;
use leptos::ev::{DragEvent, Event, KeyboardEvent};
use leptos::prelude::*;

#[component]
pub fn Composer(state: ChatState, agent_name: String) -> impl IntoView {
    let on_keydown = move |ev: KeyboardEvent| {
        if ev.key() == "Enter" && !ev.shift_key() && !ev.is_composing() {
            ev.prevent_default();
            state.act(Action::SendDraft);
        }
    };
    let can_send = move || {
        !state.streaming.active.get() && !state.composer.draft.with(|d| d.trim().is_empty())
    };
    let dragging = RwSignal::new(false);
    let on_drop = move |ev: DragEvent| {
        ev.prevent_default();
        dragging.set(false);
        read_dropped(state, ev);
    };
    view! {
        <form
            class="composer"
            class:dragging=move || dragging.get()
            on:submit=move |ev| {
                ev.prevent_default();
                state.act(Action::SendDraft);
            }
            on:focusin=move |_| state.prepare()
            on:dragover=move |ev: DragEvent| {
                ev.prevent_default();
                dragging.set(true);
            }
            on:dragleave=move |_| dragging.set(false)
            on:drop=on_drop
        >
            <Attachments state/>
            <div class="composer-row">
                <label class="attach" title="Attach text files or images (or drop them here)">
                    "Attach"
                    <input
                        type="file"
                        name="attach"
                        multiple
                        accept="text/*,image/png,image/jpeg,image/gif,image/webp,.md,.json,.toml,.yaml,.yml,.rs,.py,.js,.ts,.go,.java,.c,.h,.cpp,.sh,.sql,.log,.csv"
                        on:change=move |ev| read_picked(state, ev)
                    />
                </label>
                <textarea
                    name="message"
                    rows="1"
                    placeholder=format!("Message {agent_name}…")
                    aria-label="Message"
                    prop:value=move || state.composer.draft.get()
                    on:input=move |ev| state.composer.draft.set(event_target_value(&ev))
                    on:keydown=on_keydown
                ></textarea>
                <Show
                    when=move || state.streaming.active.get()
                    fallback=move || {
                        view! {
                            <button class="send" type="submit" disabled=move || !can_send()>
                                "Send"
                            </button>
                        }
                    }
                >
                    <button class="stop" type="button" on:click=move |_| state.stop()>
                        "Stop"
                    </button>
                </Show>
            </div>
        </form>
    }
}

/// The files waiting to go with the next message, each with its retention picker. The list
/// is HTML made by [`attachments_html`] (every name escaped), with one handler for the
/// pickers and one for the Remove buttons: a reactive list costs the page's WASM more.
#[component]
fn Attachments(state: ChatState) -> impl IntoView {
    let list = state.composer.attachments;
    // A picker's choice is kept without drawing the list again (the picker shows it).
    let picked = move |ev: Event| {
        let Some((id, value)) = target_of(&ev, "select[data-id]") else {
            return;
        };
        let save = save_of(&value);
        list.update_untracked(|list| {
            if let Some(a) = list.iter_mut().find(|a| a.id == id) {
                a.save = save;
            }
        });
    };
    let removed = move |ev: leptos::ev::MouseEvent| {
        if let Some((id, _)) = target_of(&ev, "button[data-id]") {
            list.update(|list| list.retain(|a| a.id != id));
        }
    };
    view! {
        {move || {
            state
                .composer
                .attach_error
                .get()
                .map(|e| view! { <p class="attach-error" role="alert">{e}</p> })
        }}
        <ul
            class="attachments"
            hidden=move || list.with(Vec::is_empty)
            inner_html=move || list.with(|list| attachments_html(list))
            on:change=picked
            on:click=removed
        ></ul>
    }
}

/// The attachment an event's element (matching `selector`) belongs to, and the element's
/// value.
fn target_of(event: &Event, selector: &str) -> Option<(u64, String)> {
    let id = super::target_attribute(event, selector, "data-id")?;
    Some((id.parse().ok()?, event_target_value(event)))
}

/// Each file: its name, kind and size, how long to keep it, and Remove.
pub fn attachments_html(list: &[Attachment]) -> String {
    let mut html = String::new();
    for attachment in list {
        let (id, name) = (attachment.id, escape(&attachment.name));
        let kind = if attachment.is_image() {
            "image"
        } else {
            "text"
        };
        let current = value_of(attachment.save);
        let options: String = CHOICES
            .iter()
            .map(|(value, label)| {
                let selected = if *value == current { " selected" } else { "" };
                format!("<option value=\"{value}\"{selected}>{label}</option>")
            })
            .collect();
        html.push_str(&format!(
            "<li class=\"attachment\" data-name=\"{name}\"><span class=\"attachment-name\">{name}</span>\
             <span class=\"attachment-size\">{kind}, {}</span>\
             <select class=\"keep\" data-id=\"{id}\" aria-label=\"How long to keep {name}\">{options}</select>\
             <button type=\"button\" class=\"remove-attachment\" data-id=\"{id}\" aria-label=\"Remove {name}\">×</button></li>",
            size_label(attachment.size)
        ));
    }
    html
}

/// Reads the files chosen with the Attach button.
fn read_picked(state: ChatState, ev: Event) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let input = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok());
        if let Some(input) = input {
            if let Some(files) = input.files() {
                state.act(Action::Attach(files_of(&files)));
            }
            // Choosing the same file again is a new choice.
            input.set_value("");
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (state, ev);
}

/// Reads the files dropped on the composer.
fn read_dropped(state: ChatState, ev: DragEvent) {
    #[cfg(feature = "hydrate")]
    if let Some(files) = ev.data_transfer().and_then(|d| d.files()) {
        state.act(Action::Attach(files_of(&files)));
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (state, ev);
}

/// The files of a list, taken now: the list empties when the input is reset or the drop
/// event ends, before the action reads them.
#[cfg(feature = "hydrate")]
fn files_of(list: &web_sys::FileList) -> Vec<web_sys::File> {
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use parlor_domain::context::{Block, Save};

    #[test]
    fn each_file_shows_its_name_as_text_and_its_retention_picked() {
        let file = Attachment {
            id: 7,
            name: "\"><script>alert(1)</script>.md".into(),
            block: Block::Text {
                text: "notes".into(),
            },
            size: 2048,
            save: Save::Always,
        };
        let html = attachments_html(&[file]);
        assert!(
            !html.contains("<script"),
            "a file's name is never markup: {html}"
        );
        assert!(html.contains("data-name=\"&quot;&gt;&lt;script&gt;"));
        assert!(html.contains("<span class=\"attachment-size\">text, 2 KB</span>"));
        assert!(html.contains("<option value=\"always\" selected>always</option>"));
        assert_eq!(html.matches(" selected").count(), 1);
        assert_eq!(
            html.matches("data-id=\"7\"").count(),
            2,
            "the picker and Remove"
        );
    }
}
