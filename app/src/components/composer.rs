//! Where the user writes: Enter sends, Shift+Enter adds a line, Stop cancels a reply.

use crate::state::ChatState;
use leptos::ev::KeyboardEvent;
use leptos::prelude::*;

#[component]
pub fn Composer(state: ChatState, agent_name: String) -> impl IntoView {
    let on_keydown = move |ev: KeyboardEvent| {
        if ev.key() == "Enter" && !ev.shift_key() && !ev.is_composing() {
            ev.prevent_default();
            state.send_draft();
        }
    };
    let can_send = move || !state.streaming.get() && !state.draft.with(|d| d.trim().is_empty());
    view! {
        <form class="composer" on:submit=move |ev| {
            ev.prevent_default();
            state.send_draft();
        }>
            <textarea
                name="message"
                rows="1"
                placeholder=format!("Message {agent_name}…")
                aria-label="Message"
                prop:value=move || state.draft.get()
                on:input=move |ev| state.draft.set(event_target_value(&ev))
                on:keydown=on_keydown
            ></textarea>
            <Show
                when=move || state.streaming.get()
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
        </form>
    }
}
