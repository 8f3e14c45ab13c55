//! Parlor's domain: what a conversation is made of and which part of it reaches a model.
//!
//! This crate has no I/O, no async runtime and no UI framework, so it compiles for the
//! server and for the browser (WASM) alike and its tests run in seconds. Everything else in
//! Parlor depends on it; it depends on nothing of Parlor's.

pub mod account;
pub mod agent;
pub mod block;
pub mod branch;
pub mod cache;
pub mod chain;
pub mod command;
pub mod context;
pub mod conversation;
pub mod conversation_id;
pub mod dialog;
pub mod event;
pub mod exchange;
pub mod history;
pub mod live_sessions;
#[cfg(feature = "markdown")]
pub mod markdown;
pub mod message;
pub mod meter;
pub mod mirror;
pub mod numbers;
pub mod plan;
pub mod settings;
pub mod summary;
pub mod tool;
pub mod transfer;
pub mod turn;

pub use agent::{Agent, AgentTemplate, LlmNode, TemplateWarning};
pub use conversation_id::{ConversationId, ConversationIdError};
pub use event::{
    ApiError, ChatEvent, ChatRequest, ChatRequestError, DebugInfo, DoneEvent, HistoryReport,
    MarkReply, MarkRequest, MarksReport, MetaEvent, Rendered, SettingsReport, TurnReport, Usage,
    ValidChatRequest,
};
pub use history::{trim_for_model, Conversation, HistoryLength, HistoryPolicy, Trimmed};
pub use message::{Message, MessageMeta, ReplyStatus, Role, SendMark};
pub use settings::{HistorySettings, Resolved, SettingSource};
