//! This browser's conversations, newest first.

use crate::state::{encode, ChatState};
use leptos::prelude::*;

#[component]
pub fn Sidebar(state: ChatState, open: RwSignal<bool>) -> impl IntoView {
    view! {
        <nav class="sidebar" class:open=move || open.get() aria-label="Conversations">
            <div class="sidebar-head">
                <a class="brand" href="/">"Parlor"</a>
                <button
                    class="new-chat"
                    on:click=move |_| {
                        state.new_chat();
                        open.set(false);
                    }
                >
                    "New chat"
                </button>
            </div>
            <ul class="conversations">
                <For
                    each=move || state.conversations.get()
                    key=|c| c.session_id.clone()
                    let:conversation
                >
                    {
                        let id = conversation.session_id.clone();
                        let href = format!(
                            "/chat?agent={}&session={}",
                            encode(&conversation.agent_id),
                            encode(&conversation.session_id),
                        );
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
                            </li>
                        }
                    }
                </For>
            </ul>
        </nav>
    }
}
