//! The chat page's parts.

mod composer;
#[cfg(feature = "ssr")]
pub mod debug_panel;
#[cfg(feature = "ssr")]
mod debug_tools;
mod message;
mod message_actions;
mod message_list;
mod meter;
#[cfg(feature = "ssr")]
pub mod search_results;
mod sidebar;
mod tool_card;
mod versions;

pub use composer::Composer;
pub use message_list::MessageList;
pub use meter::ContextMeter;
pub use sidebar::Sidebar;
/// Text as HTML text or an attribute value (the tool cards and the server's plain pages).
pub use tool_card::escape as escape_html;

/// The `attribute` of the element matching `selector` that an event happened in (the
/// target itself or an ancestor): how the parts of the page drawn as HTML (tool cards, a
/// message's buttons, the sidebar's list, the attachments) tell which button was used.
pub(crate) fn target_attribute(
    event: &leptos::ev::Event,
    selector: &str,
    attribute: &str,
) -> Option<String> {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        event
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .and_then(|e| e.closest(selector).ok().flatten())
            .and_then(|e| e.get_attribute(attribute))
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (event, selector, attribute);
        None
    }
}
