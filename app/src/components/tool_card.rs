//! A tool call as the chat page shows it: a collapsible card with the tool, its arguments
//! (pretty JSON), its result (a preview, "show all"), its time or error, a stub saying the
//! result was removed, and Approve / Deny while it waits. Everything is text (a result never
//! becomes HTML); an image result shows as an image only when the server kept it as one
//! (PNG, JPEG, GIF or WebP data under the size cap).

use crate::api::ToolCard;
use crate::state::{ChatState, UiMessage};
use leptos::prelude::*;

/// How many characters of a result show before "show all".
const PREVIEW_CHARS: usize = 500;

#[component]
pub fn ToolCardView(state: ChatState, message: UiMessage) -> impl IntoView {
    let all = RwSignal::new(false);
    move || {
        message.card.get().map(|card| {
            let (status, class) = status(&card, message.waiting.with(Option::is_some));
            let summary = format!("{} · {status}", card.tool);
            let long = card.text.chars().count() > PREVIEW_CHARS;
            let shown = move |text: &str| match all.get() || !long {
                true => text.to_owned(),
                false => format!("{}…", text.chars().take(PREVIEW_CHARS).collect::<String>()),
            };
            let text = card.text.clone();
            view! {
                <details class=format!("tool-card {class}") data-tool=card.tool.clone()
                    open=message.waiting.with(Option::is_some)>
                    <summary>{summary}</summary>
                    <div class="tool-arguments">
                        <span class="label">"Arguments"</span>
                        <pre>{pretty(&card.arguments)}</pre>
                    </div>
                    {(card.ok.is_some()).then(|| view! {
                        <div class="tool-result">
                            <span class="label">{if card.ok == Some(true) { "Result" } else { "Error" }}</span>
                            <pre>{move || shown(&text)}</pre>
                            {long.then(|| view! {
                                <button type="button" class="show-all" on:click=move |_| all.update(|a| *a = !*a)>
                                    {move || if all.get() { "Show less" } else { "Show all" }}
                                </button>
                            })}
                            {card.image.clone().map(|src| view! { <img class="tool-image" src=src alt="Image result"/> })}
                        </div>
                    })}
                    <Approval state message/>
                </details>
            }
        })
    }
}

/// Approve / Deny, while the call waits.
#[component]
fn Approval(state: ChatState, message: UiMessage) -> impl IntoView {
    move || {
        message.waiting.get().map(|waiting| {
            let approve = if waiting.first_use {
                "Approve (always in this conversation)"
            } else {
                "Approve"
            };
            view! {
                <div class="tool-approval" role="group" aria-label="This call waits for your approval">
                    <button type="button" class="approve" on:click=move |_| state.answer_call(message, true)>
                        {approve}
                    </button>
                    <button type="button" class="deny" on:click=move |_| state.answer_call(message, false)>
                        "Deny"
                    </button>
                </div>
            }
        })
    }
}

/// The card's state in words, and its class.
fn status(card: &ToolCard, waiting: bool) -> (String, &'static str) {
    match card.ok {
        _ if card.removed => (format!("result removed · {} ms", card.ms), "removed"),
        None if waiting => ("waiting for your approval".into(), "waiting"),
        None => ("running…".into(), "running"),
        Some(true) => (format!("{} ms · {} bytes", card.ms, card.bytes), "ok"),
        Some(false) => (format!("error · {} ms", card.ms), "error"),
    }
}

/// Arguments as indented JSON when they are JSON, else as given.
fn pretty(arguments: &str) -> String {
    #[cfg(feature = "hydrate")]
    {
        let parsed = js_sys::JSON::parse(arguments).ok();
        let indented = parsed.and_then(|value| {
            js_sys::JSON::stringify_with_replacer_and_space(
                &value,
                &wasm_bindgen::JsValue::NULL,
                &wasm_bindgen::JsValue::from(2),
            )
            .ok()
        });
        indented
            .and_then(|s| s.as_string())
            .unwrap_or_else(|| arguments.to_owned())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        serde_json::from_str::<serde_json::Value>(arguments)
            .ok()
            .and_then(|value| serde_json::to_string_pretty(&value).ok())
            .unwrap_or_else(|| arguments.to_owned())
    }
}
