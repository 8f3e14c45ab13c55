//! This browser's conversations, newest first: open, rename, delete, and search them (the
//! server searches titles and messages, and renders the results: see
//! `components::search_results`).

use super::tool_card::escape;
use crate::actions::Action;
use crate::api::ConversationItem;
use crate::state::{encode, ChatState};
use leptos::prelude::*;

/// How long typing pauses before the search is sent.
const SEARCH_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

fn chat_href(agent_id: &str, session_id: &str) -> String {
    format!(
        "/chat?agent={}&session={}",
        encode(agent_id),
        encode(session_id)
    )
}

#[component]
pub fn Sidebar(state: ChatState, open: RwSignal<bool>) -> impl IntoView {
    let query = RwSignal::new(String::new());
    // `None` while no search is shown; the latest answer's HTML (or why it failed) otherwise.
    let results = RwSignal::new(None::<Result<String, String>>);
    // Which search is the latest: an older answer arriving late is dropped.
    let generation = StoredValue::new(0u64);
    let on_input = move |ev| {
        let text = event_target_value(&ev);
        query.set(text.clone());
        generation.update_value(|g| *g += 1);
        if text.trim().is_empty() {
            results.set(None);
            return;
        }
        let mine = generation.get_value();
        set_timeout(
            move || {
                if generation.get_value() != mine {
                    return;
                }
                state.act(Action::Search {
                    text,
                    results,
                    latest: Box::new(move || generation.get_value() == mine),
                });
            },
            SEARCH_PAUSE,
        );
    };
    let failed = RwSignal::new(None::<String>);
    view! {
        <nav class="sidebar" class:open=move || open.get() aria-label="Conversations">
            <div class="sidebar-head">
                <a class="brand" href="/">"Parlor"</a>
                <button
                    class="new-chat"
                    on:click=move |_| {
                        state.act(Action::NewChat);
                        open.set(false);
                    }
                >
                    "New chat"
                </button>
            </div>
            <input
                class="search"
                type="search"
                placeholder="Search conversations"
                aria-label="Search conversations"
                prop:value=move || query.get()
                on:input=on_input
            />
            {move || failed.get().map(|reason| view! { <p class="sidebar-error" role="alert">{reason}</p> })}
            <div
                class="search-answer"
                hidden=move || results.with(Option::is_none)
                inner_html=move || match results.get() {
                    Some(Ok(html)) => html,
                    _ => String::new(),
                }
                on:click=move |ev| open_version(state, failed, ev)
            ></div>
            {move || results.get().and_then(Result::err).map(|reason| view! {
                <p class="sidebar-error" role="alert">{reason}</p>
            })}
            <Show when=move || results.with(Option::is_none)>
                <Conversations state failed/>
            </Show>
        </nav>
    }
}

/// A search hit on a version that is not chosen: that version is chosen, then the
/// conversation opens on it.
fn open_version(state: ChatState, failed: RwSignal<Option<String>>, ev: leptos::ev::MouseEvent) {
    let attribute = |name| super::target_attribute(&ev, "a[data-version]", name);
    let (Some(agent), Some(session), Some(version), Some(href)) = (
        attribute("data-agent"),
        attribute("data-session"),
        attribute("data-version"),
        attribute("href"),
    ) else {
        return;
    };
    ev.prevent_default();
    state.act(Action::OpenVersion {
        agent,
        session,
        version,
        href,
        failed,
    });
}

/// The list is one piece of HTML made by [`conversations_html`], every title escaped, with
/// a single click handler for its Rename and Delete buttons: a reactive list (a keyed `For`
/// and a view per item) costs the page's WASM several KB more.
#[component]
fn Conversations(state: ChatState, failed: RwSignal<Option<String>>) -> impl IntoView {
    let html = move || {
        state.session_id.with(|active| {
            state
                .conversations
                .with(|items| conversations_html(items, active.as_deref()))
        })
    };
    view! {
        <ul class="conversations" inner_html=html on:click=move |ev| clicked(state, failed, ev)></ul>
    }
}

/// The sidebar's items: a link to each conversation (the open one marked active), with its
/// Rename and Delete buttons (they carry the conversation's position in the list).
pub fn conversations_html(items: &[ConversationItem], active: Option<&str>) -> String {
    let mut html = String::new();
    for (at, item) in items.iter().enumerate() {
        let title = escape(&item.title);
        let class = if active == Some(item.session_id.as_str()) {
            " class=\"active\""
        } else {
            ""
        };
        html.push_str(&format!(
            "<li><a href=\"{}\" rel=\"external\"{class}>{title}</a>\
             <button class=\"rename\" title=\"Rename\" aria-label=\"Rename “{title}”\" data-rename=\"{at}\">✎</button>\
             <button class=\"delete\" title=\"Delete\" aria-label=\"Delete “{title}”\" data-delete=\"{at}\">×</button></li>",
            escape(&chat_href(&item.agent_id, &item.session_id)),
        ));
    }
    html
}

/// A click on an item's Rename or Delete.
fn clicked(state: ChatState, failed: RwSignal<Option<String>>, event: leptos::ev::MouseEvent) {
    let item = |attribute: &str| {
        let at = super::target_attribute(&event, &format!("button[{attribute}]"), attribute)?;
        let at = at.parse::<usize>().ok()?;
        state.conversations.with_untracked(|c| c.get(at).cloned())
    };
    let action = if let Some(item) = item("data-rename") {
        ask_title(&item.title).map(|title| Action::Rename {
            item,
            title,
            failed,
        })
    } else if let Some(item) = item("data-delete") {
        confirm_delete(&item).then_some(Action::Delete { item, failed })
    } else {
        None
    };
    if let Some(action) = action {
        failed.set(None);
        state.act(action);
    }
}

/// The browser's own prompt for a new title (`None`: cancelled or unchanged).
fn ask_title(current: &str) -> Option<String> {
    #[cfg(feature = "hydrate")]
    {
        let title = window()
            .prompt_with_message_and_default("Rename the conversation", current)
            .ok()
            .flatten()?;
        (title.trim() != current).then_some(title)
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = current;
        None
    }
}

/// The browser's own confirmation before a deletion.
fn confirm_delete(item: &ConversationItem) -> bool {
    #[cfg(feature = "hydrate")]
    {
        window()
            .confirm_with_message(&format!(
                "Delete “{}”? It disappears from your conversations.",
                item.title
            ))
            .unwrap_or(false)
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = item;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(session_id: &str, title: &str) -> ConversationItem {
        ConversationItem {
            session_id: session_id.into(),
            agent_id: "general".into(),
            title: title.into(),
            updated_ms: 0,
        }
    }

    #[test]
    fn the_list_links_each_conversation_marks_the_open_one_and_stays_text() {
        let items = [
            item("s1", "<img src=x onerror=alert(1)>"),
            item("s 2&", "Plans"),
        ];
        let html = conversations_html(&items, Some("s 2&"));
        assert!(!html.contains("<img"), "a title is never markup: {html}");
        assert!(html.contains(">&lt;img src=x onerror=alert(1)&gt;</a>"));
        assert!(html.contains("aria-label=\"Rename “Plans”\""));
        assert_eq!(html.matches("class=\"active\"").count(), 1);
        assert!(
            html.contains("href=\"/chat?agent=general&amp;session=s%202%26\" rel=\"external\" class=\"active\">Plans</a>"),
            "{html}"
        );
        // The buttons name their item by its place in the list.
        assert!(html.contains(
            "class=\"delete\" title=\"Delete\" aria-label=\"Delete “Plans”\" data-delete=\"1\""
        ));
        assert_eq!(conversations_html(&[], None), "");
    }
}
