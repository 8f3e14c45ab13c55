//! The built-in `parlor` tool server: an agent recalls the conversations of the current
//! conversation's owner, never another's (spec `tools.md`, "Beyond peers"). The tools are
//! declared here; they run where the owner and the histories are known ([`super::Recall`]).

use serde_json::{json, Value};

/// One built-in tool.
pub struct BuiltinTool {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: fn() -> Value,
}

pub const SEARCH: &str = "search_conversations";
pub const READ: &str = "read_conversation";

pub const TOOLS: [BuiltinTool; 2] = [
    BuiltinTool {
        name: SEARCH,
        description: "Searches the user's earlier conversations for a word or phrase; returns each matching conversation's session_id, title and matching line.",
        parameters: || {
            json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "the words to look for"}
            }, "required": ["query"]})
        },
    },
    BuiltinTool {
        name: READ,
        description: "Reads the last messages of one of the user's conversations, by session_id.",
        parameters: || {
            json!({"type": "object", "properties": {
                "session_id": {"type": "string"},
                "last": {"type": "integer", "minimum": 1, "maximum": 50, "description": "how many of its last messages (default 10)"}
            }, "required": ["session_id"]})
        },
    },
];
