//! The MCP History Store's rules about dialogs, pure: which folder a dialog name reaches,
//! how saved entries get their timestamps, and which messages a query returns. The MCP
//! tools (`parlor mcp`) apply them to a file history.

use crate::conversation_id::ConversationId;
use crate::message::{Message, Role};

/// The longest folder name a mapped dialog name gets.
pub const MAX_DIALOG_CHARS: usize = 64;

/// Why a dialog name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DialogNameError {
    #[error("dialog {0:?} is not allowed: it would leave the history folder")]
    Escapes(String),
}

/// The folder a dialog name reaches. A valid Parlor session id is its own folder (so web
/// conversations are dialogs). Any other name: runs of `\ / : " * ? < > |` and of other
/// characters a session id cannot hold become `_`, runs of whitespace `-`; leading dots
/// become `_`; cut to 64 characters and lowercased; empty means `default`. The same name
/// always reaches the same folder. `.` and `..` are refused.
pub fn dialog_folder(name: &str) -> Result<ConversationId, DialogNameError> {
    if name == "." || name == ".." {
        return Err(DialogNameError::Escapes(name.to_owned()));
    }
    if let Ok(id) = ConversationId::parse(name) {
        return Ok(id);
    }
    let mut out = String::new();
    let mut last: Option<char> = None;
    for c in name.trim().chars() {
        let mapped = if c.is_whitespace() {
            '-'
        } else if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
            c.to_ascii_lowercase()
        } else {
            '_'
        };
        // A run of replaced characters becomes one.
        if matches!(mapped, '-' | '_') && last == Some(mapped) && !(c == '-' || c == '_') {
            continue;
        }
        out.push(mapped);
        last = Some(mapped);
    }
    let out: String = out.chars().take(MAX_DIALOG_CHARS).collect();
    let out = match out.trim_start_matches('.') {
        "" if out.is_empty() => "default".to_owned(),
        "" => return Err(DialogNameError::Escapes(name.to_owned())),
        rest => format!("{}{rest}", "_".repeat(usize::from(out.starts_with('.')))),
    };
    ConversationId::parse(&out).map_err(|_| DialogNameError::Escapes(name.to_owned()))
}

/// One message to save: a `ts` when the client gave one.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub role: Role,
    pub text: String,
    pub ts: Option<i64>,
    pub meta: Option<serde_json::Value>,
}

/// Gives every entry without a `ts` one, so that a dialog's timestamps never go backwards
/// and no two assigned ones are equal: each is `now`, or one more than the latest
/// timestamp before it (stored or just assigned), whichever is later. Given timestamps are
/// kept as they are.
pub fn stamp(entries: &[Entry], latest_stored: Option<i64>, now_ms: i64) -> Vec<i64> {
    let mut latest = latest_stored;
    entries
        .iter()
        .map(|entry| {
            let ts = entry
                .ts
                .unwrap_or_else(|| latest.map_or(now_ms, |l| now_ms.max(l + 1)));
            latest = Some(latest.map_or(ts, |l| l.max(ts)));
            ts
        })
        .collect()
}

/// `history_get_messages_since`: without `since`, the last `limit` messages; with it, the
/// first `limit` messages whose `ts` is greater (oldest first). `limit` is clamped to
/// 1..=200 (default 50).
pub fn since(messages: &[Message], since_ts: Option<i64>, limit: Option<i64>) -> Vec<&Message> {
    let limit = limit.unwrap_or(50).clamp(1, 200) as usize;
    let picked: Vec<usize> = match since_ts {
        None => (messages.len().saturating_sub(limit)..messages.len()).collect(),
        // Every newer message, wherever it is: a file written by hand or by another tool
        // may hold an older time after a newer one.
        Some(ts) => (0..messages.len())
            .filter(|&i| messages[i].ts > ts)
            .take(limit)
            .collect(),
    };
    // Whole tool exchanges: a window never begins or ends inside one.
    let mut whole: Vec<usize> = picked
        .into_iter()
        .flat_map(|i| crate::exchange::span(messages, i))
        .collect();
    whole.sort_unstable();
    whole.dedup();
    whole.into_iter().map(|i| &messages[i]).collect()
}

/// `history_get_dialog_detail`'s `recentTurns`: how many of the last messages (not pairs)
/// to return, 6 when not given; negative is refused.
pub fn recent_count(recent_turns: Option<i64>) -> Result<usize, String> {
    match recent_turns.unwrap_or(6) {
        n if n < 0 => Err(format!("recentTurns must be 0 or more (got {n})")),
        n => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> String {
        dialog_folder(name).unwrap().as_str().to_owned()
    }

    #[test]
    fn dialog_names_map_to_one_folder_and_never_leave_the_store() {
        assert_eq!(
            folder("05e978c30d764411b3a42f4498bf79a4"),
            "05e978c30d764411b3a42f4498bf79a4"
        );
        assert_eq!(
            folder("My-Project_1"),
            "My-Project_1",
            "a session id is itself"
        );
        assert_eq!(folder("My Project: v2?"), "my-project_-v2_");
        assert_eq!(folder("a/b\\c"), "a_b_c");
        assert_eq!(folder("a//b"), "a_b", "a run becomes one");
        assert_eq!(folder("café au lait"), "caf_-au-lait");
        assert_eq!(folder(""), "default");
        assert_eq!(folder(".hidden"), "_hidden");
        assert_eq!(folder(&"x ".repeat(100)).chars().count(), MAX_DIALOG_CHARS);
        assert_eq!(folder("Same Name"), folder("Same Name"));
        for bad in [".", ".."] {
            assert!(dialog_folder(bad).is_err(), "{bad}");
        }
        assert_eq!(folder("../etc"), "__etc", "no path survives");
    }

    fn entry(ts: Option<i64>) -> Entry {
        Entry {
            role: Role::User,
            text: "t".into(),
            ts,
            meta: None,
        }
    }

    #[test]
    fn assigned_timestamps_never_go_back_and_never_repeat() {
        assert_eq!(stamp(&[entry(None), entry(None)], None, 100), [100, 101]);
        assert_eq!(
            stamp(&[entry(None)], Some(500), 100),
            [501],
            "after the stored ones"
        );
        assert_eq!(
            stamp(&[entry(Some(0)), entry(None)], Some(5), 100),
            [0, 100],
            "given ones kept"
        );
        assert_eq!(
            stamp(&[entry(Some(900)), entry(None)], None, 100),
            [900, 901]
        );
    }

    #[test]
    fn since_and_recent_select_as_the_spec_says() {
        let messages: Vec<Message> = (0..10)
            .map(|i| Message::user(i.to_string(), i * 10))
            .collect();
        let texts = |m: Vec<&Message>| m.iter().map(|m| m.text.clone()).collect::<Vec<_>>();
        assert_eq!(texts(since(&messages, None, Some(2))), ["8", "9"]);
        assert_eq!(texts(since(&messages, Some(40), Some(2))), ["5", "6"]);
        assert_eq!(
            texts(since(&messages, Some(90), None)),
            Vec::<String>::new()
        );
        assert_eq!(since(&messages, None, Some(0)).len(), 1, "clamped to 1");
        assert_eq!(since(&messages, None, Some(1000)).len(), 10);
        // An older time between newer ones (a file edited by hand) skips only itself.
        let mixed = [
            Message::user("a", 50),
            Message::user("old", 5),
            Message::user("b", 60),
            Message::user("c", 70),
        ];
        assert_eq!(texts(since(&mixed, Some(10), None)), ["a", "b", "c"]);
        assert_eq!(texts(since(&mixed, Some(10), Some(2))), ["a", "b"]);
        assert_eq!(recent_count(Some(3)), Ok(3));
        assert_eq!(recent_count(Some(0)), Ok(0));
        assert_eq!(recent_count(None), Ok(6));
        assert!(recent_count(Some(-1)).unwrap_err().contains("recentTurns"));
    }
}
