//! The chat page's parts.

mod composer;
mod debug_panel;
mod message_list;
mod sidebar;

pub use composer::Composer;
pub use debug_panel::DebugPanel;
pub use message_list::MessageList;
pub use sidebar::Sidebar;
