//! The `mirror` model: Parlor's built-in offline model.
//!
//! It answers with a description of exactly what it received (how many messages, each
//! one's role and a short preview, and the system prompt), so anyone can try Parlor without
//! an API key and see the history a real model would get.

use crate::context::{image_type, Part};
use crate::message::title_of as preview;
use crate::message::{Message, Role};

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
            quote(&preview(&message.text))
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
}
