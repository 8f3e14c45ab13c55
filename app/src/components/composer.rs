//! Where the user writes: Enter sends, Shift+Enter adds a line, Stop cancels a reply.
//! Files (text, code, Markdown, images) can be attached with the button or by dropping
//! them on the composer, each with how long the conversation keeps it.

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

/// The files waiting to go with the next message, each with its retention picker.
#[component]
fn Attachments(state: ChatState) -> impl IntoView {
    view! {
        {move || {
            state
                .composer
                .attach_error
                .get()
                .map(|e| view! { <p class="attach-error" role="alert">{e}</p> })
        }}
        <Show when=move || !state.composer.attachments.with(Vec::is_empty)>
            <ul class="attachments">
                <For each=move || state.composer.attachments.get() key=|a| a.id let:attachment>
                    <AttachmentItem state attachment/>
                </For>
            </ul>
        </Show>
    }
}

#[component]
fn AttachmentItem(state: ChatState, attachment: Attachment) -> impl IntoView {
    let id = attachment.id;
    let current = value_of(attachment.save);
    let name = attachment.name.clone();
    let kind = if attachment.is_image() {
        "image"
    } else {
        "text"
    };
    let set_save = move |ev: Event| {
        let save = save_of(&event_target_value(&ev));
        state.composer.attachments.update(|list| {
            if let Some(a) = list.iter_mut().find(|a| a.id == id) {
                a.save = save;
            }
        });
    };
    view! {
        <li class="attachment" data-name=name.clone()>
            <span class="attachment-name">{name.clone()}</span>
            <span class="attachment-size">{format!("{kind}, {}", size_label(attachment.size))}</span>
            <select class="keep" aria-label=format!("How long to keep {name}") on:change=set_save>
                {CHOICES
                    .iter()
                    .map(|(value, label)| {
                        view! {
                            <option value=*value selected=*value == current>
                                {*label}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
            <button
                type="button"
                class="remove-attachment"
                aria-label=format!("Remove {name}")
                on:click=move |_| state.composer.attachments.update(|list| list.retain(|a| a.id != id))
            >
                "×"
            </button>
        </li>
    }
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
