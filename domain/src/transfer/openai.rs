//! The OpenAI-style export: the chosen path as the `messages` array of a chat-completions
//! request, which Parlor's import also reads ([`super::parse_import`]), and most tools that
//! take a conversation do.

use super::Export;
use crate::block::ContextBlock;
use crate::message::{Message, Role};
use serde_json::{json, Value};

impl Export {
    /// The chosen path as OpenAI-style messages: `{"role", "content"}` with the text (a user
    /// message's text context after its text, as the model received it; images are left
    /// out), an assistant message's `tool_calls`, and each `tool` message's `tool_call_id`.
    /// The other versions, ids, times and marks are Parlor's and stay in its own export.
    pub fn to_openai(&self) -> Value {
        Value::Array(self.messages.iter().map(openai_message).collect())
    }
}

fn openai_message(message: &Message) -> Value {
    let content = with_context(&message.text, &message.context);
    match message.role {
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": message.answers().unwrap_or_default(),
            "content": content,
        }),
        Role::Assistant if !message.tool_calls.is_empty() => {
            let calls: Vec<Value> = message
                .tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })
                })
                .collect();
            let content = (!content.is_empty()).then_some(content);
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        role => json!({"role": role.as_str(), "content": content}),
    }
}

/// `text`, then the text of each context block (headers included), a blank line apart.
fn with_context(text: &str, context: &[ContextBlock]) -> String {
    let parts = std::iter::once(text.trim_end().to_owned())
        .chain(context.iter().filter_map(|b| {
            let text = b.part.sent_text()?;
            Some(text.trim_end().to_owned())
        }))
        .filter(|t| !t.is_empty());
    parts.collect::<Vec<_>>().join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Part;
    use crate::message::{ToolAnswer, ToolCall};

    fn exchange() -> Vec<Message> {
        let mut question = Message::new(Role::User, "What time is it?", 1);
        question.context.push(ContextBlock {
            part: Part::Text {
                text: "Page: the clock tower".into(),
            },
            retention: None,
        });
        question.context.push(ContextBlock {
            part: Part::Image {
                url: "data:image/png;base64,AAAA".into(),
            },
            retention: None,
        });
        let mut call = Message::new(Role::Assistant, "", 2);
        call.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "time__now".into(),
            arguments: "{\"zone\":\"UTC\"}".into(),
        });
        let answer = ToolAnswer {
            tool_call_id: "call_1".into(),
            name: "time__now".into(),
            ok: true,
            ms: 3,
            bytes: 5,
            removed_after: None,
        };
        let result = Message::tool_result(
            answer,
            vec![Part::Text {
                text: "12:00".into(),
            }],
            None,
            3,
        );
        vec![
            Message::new(Role::System, "Be brief.", 0),
            question,
            call,
            result,
            Message::new(Role::Assistant, "Noon.", 4),
        ]
    }

    #[test]
    fn the_chosen_path_exports_as_openai_messages_and_imports_back() {
        let mut export = Export::new("general", "Time", 0, 4, exchange());
        export.branches.push(crate::branch::Branch::new(
            None,
            vec![Message::new(Role::User, "another version", 9)],
        ));
        let messages = export.to_openai();
        assert_eq!(
            messages,
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What time is it?\n\nPage: the clock tower"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "time__now", "arguments": "{\"zone\":\"UTC\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
                {"role": "assistant", "content": "Noon."},
            ])
        );
        // Parlor reads it back: the same roles, texts and exchange (the version is not in it).
        let text = serde_json::to_string(&messages).unwrap();
        let imported = super::super::parse_import(&text, 100).unwrap();
        let roles: Vec<Role> = imported.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Assistant
            ]
        );
        assert_eq!(
            imported.messages[2].tool_calls,
            export.messages[2].tool_calls
        );
        assert_eq!(imported.messages[3].answers(), Some("call_1"));
        assert_eq!(imported.messages[4].text, "Noon.");
        assert!(imported.branches.is_empty());
    }
}
