//! The `mirror` model: Parlor's built-in offline model.
//!
//! It answers with a description of exactly what it received (how many messages, each
//! one's role and a short preview, and the system prompt), so anyone can try Parlor without
//! an API key and see the history a real model would get.

use crate::context::{image_type, Part};
use crate::message::title_of as preview;
use crate::message::{Message, Role, ToolCall};

/// The model name the mirror answers to.
pub const MIRROR_MODEL: &str = "mirror";

/// The mirror's full reply for a request carrying `messages`.
pub fn describe_request(messages: &[&Message]) -> String {
    let mut out = format!(
        "**Mirror model** (offline): I received **{} message{}**.\n\n",
        messages.len(),
        if messages.len() == 1 { "" } else { "s" }
    );
    for (i, message) in messages.iter().enumerate() {
        out.push_str(&format!(
            "{}. `{}`: {}\n",
            i + 1,
            message.role,
            line(message)
        ));
        describe_context(&mut out, message);
    }
    let system: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.text.as_str())
        .collect();
    if system.is_empty() {
        out.push_str("\nThere was no system prompt.");
    } else {
        out.push_str(&format!(
            "\nSystem prompt: {}",
            quote(&preview(&system.join(" ")))
        ));
    }
    out
}

/// A message's line: its text's preview; for a tool exchange, the calls asked for or the
/// result received (the result's text follows as a block).
fn line(message: &Message) -> String {
    if let Some(answer) = &message.tool {
        let outcome = if answer.ok { "ok" } else { "error" };
        return format!("result of {} ({outcome})", quote(&answer.name));
    }
    let text = quote(&preview(&message.text));
    if message.tool_calls.is_empty() {
        return text;
    }
    let calls: Vec<String> = message
        .tool_calls
        .iter()
        .map(|c| format!("{} {}", quote(&c.name), quote(&preview(&c.arguments))))
        .collect();
    format!("{text}, asking for {}", calls.join(", "))
}

/// What the mirror asks for when tools are offered and the request ends with a user message
/// `/tool <tool> <json arguments>`: that one call (arguments `{}` when none are given; given
/// ones are passed as written, valid JSON or not).
pub fn tool_request(messages: &[&Message], tools_offered: bool) -> Option<ToolCall> {
    let last = messages.last().filter(|m| m.role == Role::User)?;
    let rest = last.text.trim_start().strip_prefix("/tool")?;
    if !tools_offered || !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim();
    let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let arguments = arguments.trim();
    (!name.is_empty()).then(|| ToolCall {
        id: format!("mirror_{}", last.ts),
        name: name.to_owned(),
        arguments: if arguments.is_empty() {
            "{}"
        } else {
            arguments
        }
        .to_owned(),
    })
}

/// Lists a message's context blocks under it: one line per source, naming each block.
fn describe_context(out: &mut String, message: &Message) {
    let mut line = String::new();
    for block in &message.context {
        match &block.part {
            Part::Header { source } => {
                flush(out, &mut line);
                line = format!("   - context from {}:", quote(source));
            }
            Part::Text { text } => line.push_str(&format!(" text {}", quote(&preview(text)))),
            Part::Image { url } => {
                line.push_str(&format!(" image ({})", image_type(url).unwrap_or("image")))
            }
        }
    }
    flush(out, &mut line);
}

fn flush(out: &mut String, line: &mut String) {
    if !line.is_empty() {
        out.push_str(line);
        out.push('\n');
        line.clear();
    }
}

/// Splits a reply into word-sized pieces for streaming; concatenated they give `text` back.
pub fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive(char::is_whitespace)
}

/// Quotes a preview so Markdown in it shows as text rather than formatting.
fn quote(text: &str) -> String {
    let escaped: String = text
        .chars()
        .flat_map(|c| {
            let needs_escape = matches!(
                c,
                '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '|' | '!' | '~'
            );
            needs_escape.then_some('\\').into_iter().chain([c])
        })
        .collect();
    format!("“{escaped}”")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_count_roles_previews_and_system_prompt() {
        let system = Message::system("You are a pirate.", 0);
        let user = Message::user("Hello there", 1);
        let reply = Message::assistant("long ".repeat(30), 2);
        let text = describe_request(&[&system, &user, &reply]);
        assert!(text.contains("I received **3 messages**"), "{text}");
        assert!(text.contains("1. `system`: “You are a pirate.”"), "{text}");
        assert!(text.contains("2. `user`: “Hello there”"), "{text}");
        assert!(text.contains("3. `assistant`: “long long"), "{text}");
        assert!(text.contains('…'), "long messages are shortened: {text}");
        assert!(
            text.ends_with("System prompt: “You are a pirate.”"),
            "{text}"
        );
    }

    #[test]
    fn names_the_context_blocks_of_each_message() {
        use crate::context::{build, Block, ContextEntry, Save};
        let png = "data:image/png;base64,iVBORw0KGgo=";
        let entries = [
            ContextEntry {
                source: "screen".into(),
                blocks: vec![
                    Block::Text {
                        text: "error: *boom*".into(),
                    },
                    Block::Image { url: png.into() },
                ],
                display: true,
                save: Save::No,
            },
            ContextEntry {
                source: "clock".into(),
                blocks: vec![Block::Text {
                    text: "12:00".into(),
                }],
                display: true,
                save: Save::No,
            },
        ];
        let user = build("look", &entries, 1).display;
        let text = describe_request(&[&user]);
        assert!(
            text.contains(
                "   - context from “screen”: text “error: \\*boom\\*” image (image/png)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("   - context from “clock”: text “12:00”\n"),
            "{text}"
        );
    }

    #[test]
    fn says_when_there_is_no_system_prompt() {
        let user = Message::user("hi", 1);
        let text = describe_request(&[&user]);
        assert!(text.contains("**1 message**"));
        assert!(text.ends_with("There was no system prompt."));
    }

    #[cfg(feature = "markdown")]
    #[test]
    fn previews_cannot_inject_markup() {
        let user = Message::user("<b>x</b> [l](javascript:1)", 1);
        let html = crate::markdown::render_markdown(&describe_request(&[&user]));
        assert!(!html.contains("<b>") && !html.contains("<a"), "{html}");
    }

    #[test]
    fn words_concatenate_back_to_the_text() {
        let text = "one two\n\nthree  four";
        assert_eq!(words(text).collect::<String>(), text);
        assert!(words(text).count() >= 4);
    }

    #[test]
    fn a_tool_command_asks_for_that_call_and_the_next_round_shows_the_result() {
        let ask = Message::user("/tool clock__now {\"tz\": \"UTC\"}", 7);
        let call = tool_request(&[&ask], true).unwrap();
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("mirror_7", "clock__now")
        );
        assert_eq!(call.arguments, "{\"tz\": \"UTC\"}");
        // Without tools offered (the last call of a loop), or not a command: no call.
        assert_eq!(tool_request(&[&ask], false), None);
        assert_eq!(tool_request(&[&Message::user("/toolbox x", 1)], true), None);
        assert_eq!(tool_request(&[&Message::user("/tool", 1)], true), None);
        let bare = tool_request(&[&Message::user("/tool t", 1)], true).unwrap();
        assert_eq!(bare.arguments, "{}");
        // The next round ends with the result: described, result text included.
        let mut asked = Message::assistant("", 8);
        asked.tool_calls = vec![call];
        let answer = crate::message::ToolAnswer {
            tool_call_id: "mirror_7".into(),
            name: "clock__now".into(),
            ok: true,
            ms: 2,
            bytes: 5,
            removed_after: None,
        };
        let text = Part::Text {
            text: "12:00 UTC".into(),
        };
        let result = Message::tool_result(answer, vec![text], None, 9);
        assert_eq!(tool_request(&[&ask, &asked, &result], true), None);
        let described = describe_request(&[&ask, &asked, &result]);
        assert!(
            described.contains("asking for “clock\\_\\_now”"),
            "{described}"
        );
        assert!(
            described.contains("3. `tool`: result of “clock\\_\\_now” (ok)"),
            "{described}"
        );
        assert!(described.contains("12:00 UTC"), "{described}");
    }
}
