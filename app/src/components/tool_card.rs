//! A tool call as the chat page shows it: a collapsible card with the tool, its arguments
//! (pretty JSON), its result (a preview, "Show all"), its time or error, a stub saying the
//! result was removed, and Allow once / Allow in this conversation / Deny while it waits.
//!
//! The card is one piece of HTML made here, every text in it escaped (a result never becomes
//! markup), with a single click handler for its buttons: the view code a reactive card would
//! need (a dozen nested views and closures) would cost the page's WASM tens of KB. "Show all"
//! is a native `<details>`. An image result shows as an image only when the server kept it
//! as one (PNG, JPEG, GIF or WebP data under the size cap).

use crate::actions::Action;
use crate::api::ToolCard;
use crate::state::{ChatState, UiMessage};
use leptos::prelude::*;

/// How many characters of a result show before "Show all".
const PREVIEW_CHARS: usize = 500;

#[component]
pub fn ToolCardView(state: ChatState, message: UiMessage) -> impl IntoView {
    let html = move || {
        let waiting = message.waiting.get();
        message.card.with(|card| {
            card.as_ref()
                .map(|card| card_html(card, waiting.map(|w| w.first_use)))
                .unwrap_or_default()
        })
    };
    view! { <div class="tool-card-host" inner_html=html on:click=move |ev| clicked(state, message, ev)></div> }
}

/// A click on Allow once, Allow in this conversation or Deny (the buttons carry
/// `data-approve`: `once`, `conversation` or `deny`).
fn clicked(state: ChatState, message: UiMessage, event: leptos::ev::MouseEvent) {
    if let Some(answer) = super::target_attribute(&event, "button[data-approve]", "data-approve") {
        state.act(Action::AnswerCall {
            card: message,
            answer,
        });
    }
}

/// The card's HTML; `waiting`: it waits for approval (`true`: may be approved for the
/// conversation).
pub fn card_html(card: &ToolCard, waiting: Option<bool>) -> String {
    let (status, class) = status(card, waiting.is_some());
    let mut html = format!(
        "<details class=\"tool-card {class}\" data-tool=\"{}\"{}><summary>{} · {}</summary>\
         <div class=\"tool-arguments\"><span class=\"label\">Arguments</span><pre>{}</pre></div>",
        escape(&card.tool),
        if waiting.is_some() { " open" } else { "" },
        escape(&card.tool),
        escape(&status),
        escape(&pretty(&card.arguments)),
    );
    if let Some(ok) = card.ok {
        let label = if ok { "Result" } else { "Error" };
        let mut chars = card.text.chars();
        let preview: String = chars.by_ref().take(PREVIEW_CHARS).collect();
        html.push_str(&format!(
            "<div class=\"tool-result\"><span class=\"label\">{label}</span><pre>{}</pre>",
            escape(&preview)
        ));
        if chars.next().is_some() {
            html.push_str(&format!(
                "<details class=\"show-all\"><summary>Show all</summary><pre>{}</pre></details>",
                escape(&card.text)
            ));
        }
        if let Some(src) = card.image.as_deref().filter(|s| is_web_image(s)) {
            html.push_str(&format!(
                "<img class=\"tool-image\" src=\"{}\" alt=\"Image result\">",
                escape(src)
            ));
        }
        html.push_str("</div>");
    }
    if let Some(first_use) = waiting {
        // A server that asks on first use may be allowed for the rest of the conversation.
        let conversation = if first_use {
            "<button type=\"button\" class=\"approve-conversation\" data-approve=\"conversation\">\
             Allow in this conversation</button>"
        } else {
            ""
        };
        html.push_str(&format!(
            "<div class=\"tool-approval\" role=\"group\" aria-label=\"This call waits for your approval\">\
             <button type=\"button\" class=\"approve\" data-approve=\"once\">Allow once</button>\
             {conversation}<button type=\"button\" class=\"deny\" data-approve=\"deny\">Deny</button></div>"
        ));
    }
    html.push_str("</details>");
    html
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

/// A `data:` URL of a PNG, JPEG, GIF or WebP image, base64.
fn is_web_image(src: &str) -> bool {
    ["png", "jpeg", "gif", "webp"]
        .iter()
        .any(|kind| src.starts_with(&format!("data:image/{kind};base64,")))
}

/// Text as HTML text or attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_is_text_whatever_the_tool_answers() {
        let card = ToolCard {
            call_id: "c1".into(),
            tool: "x__<b>".into(),
            arguments: r#"{"q": "<script>alert(1)</script>"}"#.into(),
            ok: Some(true),
            ms: 3,
            bytes: 40,
            text: "<img src=x onerror=alert(1)>".repeat(30),
            image: Some("javascript:alert(1)".into()),
            removed: false,
        };
        let html = card_html(&card, None);
        assert!(
            !html.contains("<script") && !html.contains("<img src=x"),
            "{html}"
        );
        assert!(
            !html.contains("<b>") && !html.contains("javascript:"),
            "{html}"
        );
        assert!(html.contains("&lt;script&gt;"));
        assert!(
            html.contains("<summary>Show all</summary>"),
            "a long result folds"
        );
        let first_use = card_html(
            &ToolCard {
                ok: None,
                ..card.clone()
            },
            Some(true),
        );
        assert!(first_use.contains("class=\"tool-card waiting\""));
        assert!(first_use.contains("data-approve=\"once\">Allow once"));
        assert!(first_use.contains("data-approve=\"conversation\">Allow in this conversation"));
        assert!(first_use.contains("data-approve=\"deny\">Deny"));
        let always = card_html(&ToolCard { ok: None, ..card }, Some(false));
        assert!(always.contains("Allow once") && !always.contains("in this conversation"));
    }
}
