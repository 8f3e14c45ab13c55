//! The chat page's parts.

mod composer;
#[cfg(feature = "ssr")]
pub mod debug_panel;
#[cfg(feature = "ssr")]
mod debug_tools;
mod message;
mod message_list;
mod meter;
#[cfg(feature = "ssr")]
pub mod search_results;
mod sidebar;
mod tool_card;

pub use composer::Composer;
pub use message_list::MessageList;
pub use meter::ContextMeter;
pub use sidebar::Sidebar;
/// Text as HTML text or an attribute value (the tool cards and the server's plain pages).
pub use tool_card::escape as escape_html;
