//! Conversations in and out of Parlor: the JSON export (Parlor's stored form), a readable
//! Markdown export, the imports Parlor accepts (its own export, or an OpenAI-style
//! `[{"role", "content"}]` array), and the line a search result shows.
//!
//! An import is checked whole before anything is written: [`parse_import`] either returns
//! every message or says which one is wrong.

use crate::context::{Chip, Part};
use crate::message::{title_of, Message, Role, SendMark, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod openai;
mod versions;

/// The `format` of Parlor's JSON export.
pub const EXPORT_FORMAT: &str = "parlor.conversation";
/// The version of the export's layout this Parlor writes and reads.
pub const EXPORT_VERSION: u32 = 1;

/// A conversation as Parlor exports it: its details and its messages exactly as stored
/// (ids, marks, context blocks and reply status included): `messages` is the chosen path,
/// `branches` the other versions, each naming the message it follows (see
/// [`crate::branch`]), so an import rebuilds the same tree with the same path chosen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Export {
    pub format: String,
    pub version: u32,
    pub agent_id: String,
    pub title: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// The conversation this one was forked from, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkLink>,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<crate::branch::Branch>,
}

/// Where a fork came from: its conversation, and the last message it copied.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkLink {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

impl Export {
    pub fn new(
        agent_id: &str,
        title: &str,
        created_ms: i64,
        updated_ms: i64,
        messages: Vec<Message>,
    ) -> Self {
        Self {
            format: EXPORT_FORMAT.into(),
            version: EXPORT_VERSION,
            agent_id: agent_id.into(),
            title: title.into(),
            created_ms,
            updated_ms,
            forked_from: None,
            messages,
            branches: Vec::new(),
        }
    }

    /// The conversation as readable Markdown: a heading per message with its role and time
    /// (UTC), its text, its attachments by name, and its mark.
    pub fn to_markdown(&self) -> String {
        let mut out = format!("# {}\n\n", one_line(&self.title, "Conversation"));
        out.push_str(&format!(
            "Agent `{}` · {} · exported from Parlor\n",
            self.agent_id,
            plural(self.messages.len(), "message")
        ));
        if let Some(origin) = &self.forked_from {
            out.push_str(&format!(
                "Forked from conversation `{}`\n",
                origin.session_id
            ));
        }
        for message in &self.messages {
            let role = match message.role {
                Role::System => "System",
                Role::User => "User",
                Role::Assistant => "Assistant",
                Role::Tool => "Tool",
            };
            out.push_str(&format!("\n## {role} · {}", utc_time(message.ts)));
            match message.send {
                Some(SendMark::Always) => out.push_str(" · always sent"),
                Some(SendMark::Never) => out.push_str(" · not sent"),
                None => {}
            }
            out.push_str("\n\n");
            out.push_str(message.text.trim_end());
            out.push('\n');
            if tool_markdown(&mut out, message) {
                continue;
            }
            let attached: Vec<String> = Chip::of_stored(&message.context)
                .into_iter()
                .map(|chip| format!("{} ({})", chip.source, chip.kind))
                .collect();
            if !attached.is_empty() {
                out.push_str(&format!("\nAttached: {}\n", attached.join(", ")));
            }
        }
        out
    }
}

/// A tool exchange's part of the Markdown export: the calls asked for (tool and arguments),
/// or a result (its tool, whether it failed, its text in a fence). `true` for a result.
fn tool_markdown(out: &mut String, message: &Message) -> bool {
    for call in &message.tool_calls {
        out.push_str(&format!(
            "\nCalls `{}` with `{}`\n",
            call.name, call.arguments
        ));
    }
    let Some(answer) = &message.tool else {
        return false;
    };
    let outcome = if answer.ok { "result" } else { "error" };
    let text: String = message.texts().collect::<Vec<_>>().concat();
    out.push_str(&format!(
        "`{}` {outcome}:\n\n~~~~\n{}\n~~~~\n",
        answer.name,
        text.trim_end()
    ));
    true
}

/// What an import brings: a title when the file had one, and the messages to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    pub title: String,
    /// The chosen path.
    pub messages: Vec<Message>,
    /// The other versions (a Parlor export's `branches`).
    pub branches: crate::branch::Branches,
}

/// Why a file cannot be imported; nothing of it is stored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error(
        "not a conversation: expected a Parlor export (an object with \"format\": \
         \"parlor.conversation\") or an OpenAI-style array of {{\"role\", \"content\"}} messages"
    )]
    UnknownShape,
    #[error("this Parlor reads exports of version {EXPORT_VERSION}; the file is version {0}")]
    Version(u32),
    #[error("the export is not valid: {0}")]
    BadExport(String),
    #[error("message {index}: {reason}")]
    BadMessage { index: usize, reason: String },
    #[error("branch {index}: {reason}")]
    BadBranch { index: usize, reason: String },
    #[error("the conversation has no messages")]
    Empty,
}

/// Reads an import: Parlor's JSON export, or an OpenAI-style message array (text content,
/// as a string or as `text` parts). Messages without a time are stamped from `now_ms`, one
/// millisecond apart, in their order; every message gets its id.
pub fn parse_import(text: &str, now_ms: i64) -> Result<Imported, ImportError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| ImportError::NotJson(e.to_string()))?;
    let mut imported = match value {
        Value::Object(ref object) if object.contains_key("format") => parse_export(value)?,
        Value::Array(items) => parse_openai(items, now_ms)?,
        _ => return Err(ImportError::UnknownShape),
    };
    if imported.messages.is_empty() {
        return Err(ImportError::Empty);
    }
    if let Some(index) = first_unpaired(&imported.messages) {
        return Err(ImportError::BadMessage {
            index: index + 1,
            reason: "a tool call without all its results, or a result without its call, \
                     right after it"
                .into(),
        });
    }
    for message in &mut imported.messages {
        message.ensure_id();
    }
    versions::check(&mut imported)?;
    if imported.title.trim().is_empty() {
        imported.title = imported
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| title_of(&m.text))
            .unwrap_or_else(|| "Imported conversation".into());
    }
    Ok(imported)
}

fn parse_export(value: Value) -> Result<Imported, ImportError> {
    if value.get("format").and_then(Value::as_str) != Some(EXPORT_FORMAT) {
        return Err(ImportError::UnknownShape);
    }
    let version = value.get("version").and_then(Value::as_u64).unwrap_or(0);
    if version != u64::from(EXPORT_VERSION) {
        return Err(ImportError::Version(version.try_into().unwrap_or(u32::MAX)));
    }
    // Each message on its own first, so an error names the message.
    if let Some(messages) = value.get("messages").and_then(Value::as_array) {
        for (index, message) in messages.iter().enumerate() {
            serde_json::from_value::<Message>(message.clone()).map_err(|e| {
                ImportError::BadMessage {
                    index: index + 1,
                    reason: e.to_string(),
                }
            })?;
        }
    }
    let export: Export =
        serde_json::from_value(value).map_err(|e| ImportError::BadExport(e.to_string()))?;
    Ok(Imported {
        title: export.title,
        messages: export.messages,
        branches: crate::branch::Branches {
            branches: export.branches,
        },
    })
}

fn parse_openai(items: Vec<Value>, now_ms: i64) -> Result<Imported, ImportError> {
    let mut messages: Vec<Message> = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let bad = |reason: String| ImportError::BadMessage {
            index: index + 1,
            reason,
        };
        let Value::Object(object) = item else {
            return Err(bad("not an object with \"role\" and \"content\"".into()));
        };
        let ts = now_ms.saturating_add(index.try_into().unwrap_or(i64::MAX));
        messages.push(openai_message(&object, ts, &messages).map_err(bad)?);
    }
    Ok(Imported {
        title: String::new(),
        messages,
        branches: crate::branch::Branches::default(),
    })
}

/// One OpenAI-style message: a system, user or assistant message with text content, an
/// assistant message asking for `tool_calls`, or a `tool` message answering one of the calls
/// of the assistant message before it (`before`: the messages read so far).
fn openai_message(
    object: &Map<String, Value>,
    ts: i64,
    before: &[Message],
) -> Result<Message, String> {
    let role = openai_role(object)?;
    let calls = match object.get("tool_calls") {
        Some(calls) if role == Role::Assistant => openai_calls(calls)?,
        Some(_) => return Err("only assistant messages carry \"tool_calls\"".into()),
        None => Vec::new(),
    };
    let text = match object.get("content") {
        None | Some(Value::Null) if !calls.is_empty() => String::new(),
        content => openai_text(content)?,
    };
    if text.trim().is_empty() && calls.is_empty() && role != Role::Tool {
        return Err("empty content".into());
    }
    let mut message = Message::new(role, String::new(), ts);
    message.tool_calls = calls;
    if role != Role::Tool {
        message.text = text;
        return Ok(message);
    }
    let id = object
        .get("tool_call_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let answered = before
        .iter()
        .rev()
        .take_while(|m| m.role != Role::User)
        .flat_map(|m| &m.tool_calls);
    let Some(call) = answered.into_iter().find(|c| c.id == id) else {
        return Err(format!(
            "a tool message answers call {id:?}, which no assistant message before it asked for"
        ));
    };
    let answer = crate::message::ToolAnswer {
        tool_call_id: id.to_owned(),
        name: call.name.clone(),
        ok: true,
        ms: 0,
        bytes: text.len() as u64,
        removed_after: None,
    };
    Ok(Message::tool_result(
        answer,
        vec![Part::Text { text }],
        None,
        ts,
    ))
}

/// A message's role as Parlor stores it (`developer` is a system message).
fn openai_role(object: &Map<String, Value>) -> Result<Role, String> {
    match object.get("role").and_then(Value::as_str) {
        Some("system" | "developer") => Ok(Role::System),
        Some("user") => Ok(Role::User),
        Some("assistant") => Ok(Role::Assistant),
        Some("tool") => Ok(Role::Tool),
        Some(other) => Err(format!(
            "role {other:?} cannot be imported (only system, developer, user, assistant \
             and tool)"
        )),
        None => Err("no \"role\"".into()),
    }
}

/// An assistant message's `tool_calls`: each with an `id` and a `function` (`name`,
/// `arguments` as text).
fn openai_calls(calls: &Value) -> Result<Vec<ToolCall>, String> {
    let Some(calls) = calls.as_array() else {
        return Err("\"tool_calls\" is not an array".into());
    };
    calls
        .iter()
        .enumerate()
        .map(|(n, call)| {
            let field = |key: &str| call["function"][key].as_str().map(str::to_owned);
            match (call["id"].as_str(), field("name")) {
                (Some(id), Some(name)) if !id.is_empty() && !name.is_empty() => Ok(ToolCall {
                    id: id.to_owned(),
                    name,
                    arguments: field("arguments").unwrap_or_else(|| "{}".into()),
                }),
                _ => Err(format!(
                    "tool call {}: needs an \"id\" and a function \"name\"",
                    n + 1
                )),
            }
        })
        .collect()
}

/// A message's text content: a string, or `text` parts joined by blank lines.
fn openai_text(content: Option<&Value>) -> Result<String, String> {
    match content {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (n, part) in parts.iter().enumerate() {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(text)) => texts.push(text),
                    _ => {
                        return Err(format!(
                            "content part {}: only text parts can be imported",
                            n + 1
                        ))
                    }
                }
            }
            Ok(texts.join("\n\n"))
        }
        _ => Err("no text \"content\"".into()),
    }
}

/// The position of the first message of a broken tool exchange (see
/// [`crate::exchange::paired`]), if any.
pub(crate) fn first_unpaired(messages: &[Message]) -> Option<usize> {
    if crate::exchange::paired(messages) {
        return None;
    }
    let ranges = crate::exchange::ranges(messages);
    let broken = ranges
        .iter()
        .find(|(start, end)| !crate::exchange::paired(&messages[*start..*end]));
    let orphan = || {
        (0..messages.len()).find(|&i| {
            messages[i].tool.is_some() && !ranges.iter().any(|(s, e)| (*s..*e).contains(&i))
        })
    };
    broken.map(|(start, _)| *start).or_else(orphan)
}

/// The first line of `text` containing `query` (compared case-insensitively), trimmed and
/// cut to about `max_chars` characters around the match.
pub fn matching_line(text: &str, query: &str, max_chars: usize) -> Option<String> {
    let query = query.trim().to_lowercase();
    if query.is_empty() {
        return None;
    }
    let line = text
        .lines()
        .map(str::trim)
        .find(|line| line.to_lowercase().contains(&query))?;
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= max_chars {
        return Some(line.to_owned());
    }
    // Where the match starts, in characters (lowercasing keeps the count for nearly all text;
    // the cut is clamped either way).
    let lower = line.to_lowercase();
    let at = lower
        .find(&query)
        .map(|byte| lower[..byte].chars().count())
        .unwrap_or(0)
        .min(chars.len());
    let start = at.saturating_sub(max_chars / 3);
    let end = (start + max_chars).min(chars.len());
    let start = end.saturating_sub(max_chars);
    let mut snippet: String = chars[start..end].iter().collect();
    if start > 0 {
        snippet.insert(0, '…');
    }
    if end < chars.len() {
        snippet.push('…');
    }
    Some(snippet)
}

/// Whether a message holds `query` in its text or in its attachments' text.
pub fn message_line(message: &Message, query: &str, max_chars: usize) -> Option<String> {
    matching_line(&message.text, query, max_chars).or_else(|| {
        message.context.iter().find_map(|block| match &block.part {
            Part::Text { text } => matching_line(text, query, max_chars),
            _ => None,
        })
    })
}

fn one_line(text: &str, fallback: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        fallback.into()
    } else {
        line
    }
}

fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `2026-11-24 17:46:03 UTC` for epoch milliseconds.
pub fn utc_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{ContextBlock, Part};

    fn conversation() -> Vec<Message> {
        let mut question = Message::user("What is in the notes?\nSecond line", 1_700_000_000_000);
        question.context = vec![
            ContextBlock {
                part: Part::Header {
                    source: "notes.md".into(),
                },
                retention: None,
            },
            ContextBlock {
                part: Part::Text {
                    text: "the launch code is blue".into(),
                },
                retention: None,
            },
        ];
        question.send = Some(SendMark::Always);
        let mut answer = Message::assistant("A colour.", 1_700_000_001_000);
        answer.ensure_id();
        vec![
            Message::system("Be brief.", 1_699_999_999_000),
            question,
            answer,
        ]
    }

    #[test]
    fn an_export_reads_back_as_the_same_messages() {
        let export = Export::new("general", "Notes", 1, 2, conversation());
        let json = serde_json::to_string(&export).unwrap();
        let imported = parse_import(&json, 0).unwrap();
        assert_eq!(imported.title, "Notes");
        let mut expected = conversation();
        for m in &mut expected {
            m.ensure_id();
        }
        assert_eq!(imported.messages, expected);
    }

    #[test]
    fn an_export_with_versions_imports_back_to_the_same_tree() {
        use crate::branch::{branch_off, choose};
        let mut path = conversation();
        for m in &mut path {
            m.ensure_id();
        }
        // A regenerated reply: the first one is a version.
        let change = branch_off(&path, 2, Default::default()).unwrap();
        change.apply(&mut path);
        let mut again = Message::assistant("Blue.", 1_700_000_002_000);
        again.ensure_id();
        path.push(again);
        let export = Export {
            branches: change.branches.branches.clone(),
            ..Export::new("general", "Notes", 1, 2, path.clone())
        };
        let json = serde_json::to_string(&export).unwrap();
        let imported = parse_import(&json, 0).unwrap();
        assert_eq!(imported.messages, path, "the chosen path");
        assert_eq!(
            imported.branches, change.branches,
            "and every other version"
        );
        let back = choose(&path, &imported.branches, &conversation()[2].id());
        assert!(back.unwrap().is_some(), "the old reply can be chosen again");
        // A version that hangs off nothing stored is refused, naming the problem.
        let mut broken = export.clone();
        broken.branches[0].parent = Some("nowhere".into());
        let error = parse_import(&serde_json::to_string(&broken).unwrap(), 0).unwrap_err();
        assert!(error.to_string().contains("does not lead back"), "{error}");
        // An export without versions (as older Parlors wrote) reads as one path.
        let older = Export::new("general", "Notes", 1, 2, path.clone());
        let json = serde_json::to_string(&older).unwrap();
        assert!(!json.contains("branches"));
        assert!(parse_import(&json, 0).unwrap().branches.is_empty());
    }

    #[test]
    fn deeply_nested_versions_import_and_ids_the_api_cannot_name_are_refused() {
        use crate::branch::{choose, Branch};
        let mut first = Message::user("start", 1);
        first.ensure_id();
        // 10,000 versions (the most an import brings), each hanging off the one before it.
        let mut parent = first.id().into_owned();
        let mut branches = Vec::new();
        for n in 0..10_000 {
            let mut m = Message::user(format!("v{n}"), 2 + n);
            m.ensure_id();
            let id = m.id().into_owned();
            branches.push(Branch::new(
                Some(std::mem::replace(&mut parent, id)),
                vec![m],
            ));
        }
        let export = Export {
            branches,
            ..Export::new("general", "Deep", 1, 2, vec![first.clone()])
        };
        let imported = parse_import(&serde_json::to_string(&export).unwrap(), 0).unwrap();
        assert_eq!(imported.branches.branches.len(), 10_000);
        let deepest = choose(&imported.messages, &imported.branches, &parent)
            .unwrap()
            .unwrap();
        assert_eq!(deepest.suffix.len(), 10_000, "the whole chain leads to it");
        let mut more = export.clone();
        more.branches.push(more.branches[0].clone());
        let error = parse_import(&serde_json::to_string(&more).unwrap(), 0).unwrap_err();
        assert!(error.to_string().contains("at most 10000"), "{error}");
        // Ids the API could not name in a URL are refused, on the path and in versions.
        for bad in ["", "../../x", ".hidden", "a/b"] {
            let mut odd = export.clone();
            odd.branches.truncate(1);
            odd.branches[0].messages[0].id = Some(bad.into());
            let error = parse_import(&serde_json::to_string(&odd).unwrap(), 0).unwrap_err();
            assert!(
                error.to_string().contains("an id is 1–128 of"),
                "{bad:?}: {error}"
            );
        }
        let mut odd = export.clone();
        odd.branches.truncate(1);
        odd.branches[0].parent = Some(String::new());
        let error = parse_import(&serde_json::to_string(&odd).unwrap(), 0).unwrap_err();
        assert!(error.to_string().contains("is not a message id"), "{error}");
    }

    #[test]
    fn markdown_names_roles_times_attachments_and_marks() {
        let md = Export::new("general", "Notes", 1, 2, conversation()).to_markdown();
        assert!(md.starts_with("# Notes\n"), "{md}");
        assert!(md.contains("Agent `general` · 3 messages"), "{md}");
        assert!(
            md.contains("## User · 2023-11-14 22:13:20 UTC · always sent\n\nWhat is in the notes?\nSecond line\n"),
            "{md}"
        );
        assert!(md.contains("Attached: notes.md (text)"), "{md}");
        assert!(
            md.contains("## Assistant · 2023-11-14 22:13:21 UTC\n\nA colour.\n"),
            "{md}"
        );
    }

    #[test]
    fn utc_times_are_right_around_leap_years_and_before_1970() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_time(1_709_251_199_000), "2024-02-29 23:59:59 UTC");
        assert_eq!(utc_time(-1000), "1969-12-31 23:59:59 UTC");
    }

    #[test]
    fn an_openai_array_imports_in_order_with_text_parts_joined() {
        let json = r#"[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": "Hi!"}
        ]"#;
        let imported = parse_import(json, 5_000).unwrap();
        let got: Vec<_> = imported
            .messages
            .iter()
            .map(|m| (m.role, m.text.as_str(), m.ts, m.id.is_some()))
            .collect();
        assert_eq!(
            got,
            [
                (Role::System, "Be brief.", 5_000, true),
                (Role::User, "Hello\n\nthere", 5_001, true),
                (Role::Assistant, "Hi!", 5_002, true),
            ]
        );
        assert_eq!(imported.title, "Hello there");
    }

    #[test]
    fn openai_tool_calls_and_results_import_as_exchanges_and_broken_ones_do_not() {
        let calls = r#"{"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "clock__now", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "clock__zone", "arguments": "{\"z\":1}"}}]}"#;
        let whole = format!(
            r#"[{{"role": "user", "content": "time?"}}, {calls},
            {{"role": "tool", "tool_call_id": "c2", "content": "UTC"}},
            {{"role": "tool", "tool_call_id": "c1", "content": [{{"type": "text", "text": "12:00"}}]}},
            {{"role": "assistant", "content": "It is 12:00 UTC."}}]"#
        );
        let imported = parse_import(&whole, 0).unwrap();
        let m = &imported.messages;
        assert_eq!(m[1].tool_calls[1].arguments, "{\"z\":1}");
        assert_eq!(m[2].answers(), Some("c2"));
        assert_eq!(m[2].tool.as_ref().unwrap().name, "clock__zone");
        assert_eq!(m[3].texts().collect::<String>(), "12:00");
        assert!(crate::exchange::paired(m));
        // A call left without one of its results is refused, naming the call.
        let broken = format!(
            r#"[{{"role": "user", "content": "time?"}}, {calls},
            {{"role": "tool", "tool_call_id": "c1", "content": "12:00"}},
            {{"role": "assistant", "content": "?"}}]"#
        );
        let err = parse_import(&broken, 0).unwrap_err().to_string();
        assert!(
            err.starts_with("message 2: a tool call without all its results"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_import_names_what_is_wrong() {
        let err = |json: &str| parse_import(json, 0).unwrap_err().to_string();
        assert!(err("{").starts_with("not JSON"));
        assert!(err(r#"{"hello": 1}"#).starts_with("not a conversation"));
        assert!(err("[]").contains("no messages"));
        assert_eq!(
            err(r#"[{"role": "user", "content": "a"}, {"role": "function", "content": "b"}]"#),
            "message 2: role \"function\" cannot be imported (only system, developer, user, \
             assistant and tool)"
        );
        assert_eq!(
            err(r#"[{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "x", "content": "b"}]"#),
            "message 2: a tool message answers call \"x\", which no assistant message before it asked for"
        );
        assert_eq!(
            err(
                r#"[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]"#
            ),
            "message 1: content part 1: only text parts can be imported"
        );
        assert_eq!(
            err(r#"[{"role": "user"}]"#),
            "message 1: no text \"content\""
        );
        assert_eq!(
            err(r#"[{"role": "user", "content": "  "}]"#),
            "message 1: empty content"
        );
        assert!(err(r#"{"format": "parlor.conversation", "version": 9}"#).contains("version 9"));
        let bad_message = r#"{"format": "parlor.conversation", "version": 1, "agent_id": "a",
            "title": "t", "created_ms": 0, "updated_ms": 0,
            "messages": [{"role": "user", "text": "ok", "ts": 1}, {"role": "robot", "text": "x", "ts": 2}]}"#;
        assert!(
            err(bad_message).starts_with("message 2: unknown variant `robot`"),
            "{}",
            err(bad_message)
        );
    }

    #[test]
    fn the_matching_line_is_found_case_insensitively_and_cut_around_the_match() {
        assert_eq!(
            matching_line("first\n  The Launch code  \nlast", "launch", 80).as_deref(),
            Some("The Launch code")
        );
        assert_eq!(matching_line("nothing here", "launch", 80), None);
        assert_eq!(matching_line("anything", "  ", 80), None);
        let long = format!("{} needle {}", "a".repeat(300), "b".repeat(300));
        let cut = matching_line(&long, "NEEDLE", 60).unwrap();
        assert!(cut.contains("needle"), "{cut}");
        assert!(cut.starts_with('…') && cut.ends_with('…'), "{cut}");
        assert!(cut.chars().count() <= 62, "{cut}");
    }

    #[test]
    fn attachments_are_searched_after_the_text() {
        let messages = conversation();
        assert_eq!(
            message_line(&messages[1], "blue", 80).as_deref(),
            Some("the launch code is blue")
        );
        assert_eq!(
            message_line(&messages[1], "second", 80).as_deref(),
            Some("Second line")
        );
    }
}
