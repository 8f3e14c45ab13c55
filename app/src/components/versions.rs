//! A message's ‹ n/m ›: the versions an edit or a regeneration left, the previous and the
//! next one a click (or Enter, Space) away. Choosing one makes it the conversation's path
//! on the server; the page then shows that path.

use crate::actions::Action;
use crate::state::{ChatState, UiMessage};
use leptos::prelude::*;

#[component]
pub fn VersionSwitch(
    state: ChatState,
    message: UiMessage,
    failed: RwSignal<Option<String>>,
) -> impl IntoView {
    move || {
        let versions = message.versions.get()?;
        let busy = move || state.streaming.active.get();
        let button = move |target: Option<String>, class: &'static str, label, sign| {
            let none = target.is_none();
            let choose = move |_| {
                if let Some(id) = target.clone() {
                    state.act(Action::Choose { id, failed });
                }
            };
            view! {
                <button type="button" class=class aria-label=label title=label
                    disabled=move || none || busy() on:click=choose>{sign}</button>
            }
        };
        let count = format!("{}/{}", versions.n, versions.of);
        let spoken = format!("version {} of {}", versions.n, versions.of);
        Some(view! {
            <nav class="versions" aria-label="Versions of this message">
                {button(versions.prev, "version-prev", "Previous version", "‹")}
                <span class="version-count" aria-label=spoken>{count}</span>
                {button(versions.next, "version-next", "Next version", "›")}
            </nav>
        })
    }
}
