//! A conversation's rolling summary, as the history store keeps it in `summary.json`: how a
//! new summary merges into the current one, how a stored one is read, the maintenance signal
//! that says a dialog should be compacted, and the compact `flat` text of a dialog's detail.
//!
//! All pure: the MCP tools and the chat's `summary` processor share these rules.

use crate::message::{Message, Role};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The shape Parlor writes: what was decided and must hold, what is left to do, the known
/// problems and facts, and references (files, APIs, URLs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub version: u32,
    pub decisions: Vec<String>,
    pub constraints: Vec<String>,
    pub todos: Vec<String>,
    pub issues: Vec<String>,
    pub facts: Vec<String>,
    pub refs: Vec<Reference>,
}

/// A reference a summary keeps: `type` is `file`, `api` or `url`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hint: String,
}

/// Merges `next` into the current summary `prev` (`None` when there is none or it cannot be
/// read): objects and arrays merge, anything else is replaced by `next`.
pub fn merge_summary(prev: Option<Value>, next: Value) -> Value {
    match prev {
        Some(prev @ (Value::Object(_) | Value::Array(_))) => merge(prev, next),
        _ => next,
    }
}

/// Two objects merge key by key (the first's keys in its order, then the second's new
/// ones); two arrays merge without duplicates ([`dedup`]); anything else is the second.
pub fn merge(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Array(old), Value::Array(new)) => Value::Array(dedup(old, new)),
        (Value::Object(mut a), Value::Object(b)) => {
            for (key, value) in b {
                match a.get_mut(&key) {
                    // Merged in place, so the key keeps its position.
                    Some(slot) => *slot = merge(std::mem::take(slot), value),
                    None => {
                        a.insert(key, value);
                    }
                }
            }
            Value::Object(a)
        }
        (_, b) => b,
    }
}

/// The items of `new` in order, then those of `old`, each key once: the newer item wins
/// whole, and duplicates inside `new` go too.
pub fn dedup(old: Vec<Value>, new: Vec<Value>) -> Vec<Value> {
    let mut seen = std::collections::HashSet::new();
    new.into_iter()
        .chain(old)
        .filter(|item| seen.insert(item_key(item)))
        .collect()
}

/// An item's identity: an object's non-null `value`, else its non-null `id`, else the
/// whole item, each as compact JSON.
fn item_key(item: &Value) -> (u8, String) {
    let field = |name: &str| item.get(name).filter(|v| !v.is_null());
    match (field("value"), field("id")) {
        (Some(value), _) => (0, value.to_string()),
        (None, Some(id)) => (1, id.to_string()),
        _ => (2, item.to_string()),
    }
}

/// Reads `summary.json`'s text: JSON, or a JSON string whose content is JSON (written
/// double-encoded), read as that inner JSON. `None` when it is not JSON.
pub fn read_summary(text: &str) -> Option<Value> {
    match serde_json::from_str::<Value>(text).ok()? {
        Value::String(inner) => Some(serde_json::from_str(&inner).unwrap_or(Value::String(inner))),
        value => Some(value),
    }
}

/// When a dialog should be compacted: above either threshold (strictly).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Thresholds {
    pub max_messages: usize,
    pub max_bytes: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_messages: 200,
            max_bytes: 65_536,
        }
    }
}

/// The maintenance signal of a dialog, in the order its fields are written.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maintenance {
    pub action: String,
    pub importance: String,
    pub reason: String,
    pub guidance: String,
    pub thresholds: Thresholds,
    pub metrics: Metrics,
    pub backup: BackupPolicy,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    pub messages: usize,
    pub approx_bytes: usize,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupPolicy {
    pub enabled: bool,
    pub retention: usize,
}

/// What to do when the signal is raised.
pub const GUIDANCE: &str = "Compact this dialog: write a new summary from this detail (its \
    summary and every message line, not only the latest turns), call history_clear (it keeps \
    a backup), store the new summary with history_set_summary in merge mode, then save again \
    the essential messages, chosen from this detail's lines, with one history_save call.";

impl Maintenance {
    /// The signal for a whole dialog of `messages` messages taking `bytes` bytes (messages
    /// and summary as compact JSON), if it exceeds a threshold.
    pub fn check(
        messages: usize,
        bytes: usize,
        thresholds: Thresholds,
        backup_retention: usize,
    ) -> Option<Maintenance> {
        let reason = if messages > thresholds.max_messages {
            "messages_count_exceeds_comfort_zone"
        } else if bytes > thresholds.max_bytes {
            "bytes_exceed_comfort_zone"
        } else {
            return None;
        };
        Some(Maintenance {
            action: "compact".into(),
            importance: "high".into(),
            reason: reason.into(),
            guidance: GUIDANCE.into(),
            thresholds,
            metrics: Metrics {
                messages,
                approx_bytes: bytes,
            },
            backup: BackupPolicy {
                enabled: true,
                retention: backup_retention,
            },
        })
    }
}

/// The `flat` text of a dialog's detail: `M:` and the maintenance signal, `S:` and the
/// summary (each as compact JSON, when present), then a `U: ` or `A: ` line per message
/// with `\`, line feeds and carriage returns escaped; lines joined by `\n`.
pub fn flat(
    maintenance: Option<&Maintenance>,
    summary: Option<&Value>,
    messages: &[Message],
) -> String {
    let mut lines = Vec::with_capacity(messages.len() + 2);
    if let Some(m) = maintenance {
        lines.push(format!(
            "M:{}",
            serde_json::to_string(m).unwrap_or_default()
        ));
    }
    if let Some(s) = summary {
        lines.push(format!("S:{s}"));
    }
    for message in messages {
        let tag = if message.role == Role::User { "U" } else { "A" };
        let text = crate::exchange::line(message);
        lines.push(format!("{tag}: {}", escape_line(&text)));
    }
    lines.join("\n")
}

fn escape_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// What the debug panel and the `meta` event say about a conversation's rolling summary.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryReport {
    /// Whether this model call received it.
    pub sent: bool,
    /// How many stored messages it covers: the first `covers` of the transcript.
    pub covers: usize,
    /// When it was last updated (epoch milliseconds; 0: never by Parlor).
    pub updated_ms: i64,
    /// Its size in tokens, as the model would receive it.
    pub tokens: u64,
    /// The summary as the model receives it (compact JSON).
    pub text: String,
    /// Why the last update failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The maintenance signal of the whole conversation, when it is raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
}

impl SummaryReport {
    /// The report of `summary`, sent or not.
    pub fn new(summary: &Value, sent: bool, tokens: u64, failure: Option<String>) -> Self {
        let covers = Covers::of(summary);
        SummaryReport {
            sent,
            covers: covers.messages,
            updated_ms: covers.updated_ms,
            tokens,
            text: for_model(summary),
            failure,
            maintenance: None,
        }
    }
}

/// The key under which a summary Parlor keeps records what it covers.
pub const COVERS: &str = "covers";

/// Which messages a summary covers: every stored message whose `ts` is at most `until_ts`
/// (`messages` of them when it was last updated, at `updated_ms`). Kept inside the summary,
/// so the summary and its coverage are written together: a crash leaves the old pair or the
/// new one, and a message is summarized once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Covers {
    pub messages: usize,
    pub until_ts: i64,
    pub updated_ms: i64,
    /// What keeping the summary has cost so far, in nano-USD (priced models only): the
    /// conversation's cost meter adds it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spent_nano_usd: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Covers {
    /// What `summary` says it covers (nothing when it says nothing).
    pub fn of(summary: &Value) -> Covers {
        summary
            .get(COVERS)
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default()
    }

    /// Whether a message is covered.
    pub fn includes(&self, message: &Message) -> bool {
        message.ts <= self.until_ts && self.messages > 0
    }
}

/// Where a run reads from to find what `covers` leaves out of the messages before
/// `first_sent`: just before the first message it does not count. The covered messages are
/// the first `covers.messages` (a run covers what precedes the sent part, and Parlor stamps
/// times that never go back), so only those after them are read, with the one before as a
/// check.
pub fn read_from(covers: &Covers, first_sent: usize) -> usize {
    covers.messages.min(first_sent).saturating_sub(1)
}

/// The messages a run summarizes, from `read`: the stored messages `from..first_sent`
/// (`from` as [`read_from`] says). `None` when that part cannot tell: fewer messages came
/// back (the conversation is shorter now), or the one before the uncovered part is not
/// covered (the conversation changed at its start); then the run reads the whole
/// conversation and takes [`pending_in_whole`].
pub fn pending_in(
    covers: &Covers,
    read: &[Message],
    from: usize,
    first_sent: usize,
) -> Option<Vec<Message>> {
    if read.len() != first_sent.saturating_sub(from) {
        return None;
    }
    // The message before the uncovered part, read as a check.
    let check = covers.messages.min(first_sent) > 0;
    if check && !read.first().is_some_and(|m| covers.includes(m)) {
        return None;
    }
    Some(uncovered(covers, &read[usize::from(check)..]))
}

/// The messages a run summarizes, from the whole stored conversation.
pub fn pending_in_whole(covers: &Covers, stored: &[Message], first_sent: usize) -> Vec<Message> {
    uncovered(covers, &stored[..first_sent.min(stored.len())])
}

fn uncovered(covers: &Covers, messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .filter(|m| !covers.includes(m))
        .cloned()
        .collect()
}

/// A summary that covers nothing (what a path has once its summary left with the messages it
/// described), keeping what summaries have cost so far.
pub fn nothing_covered(spent_nano_usd: u64) -> Value {
    let covers = Covers {
        spent_nano_usd,
        ..Covers::default()
    };
    serde_json::json!({ COVERS: covers })
}

/// Whether a summary says nothing: an object with nothing but its coverage record (or with
/// only empty lists and strings), or `null`. Such a summary is not sent.
pub fn says_nothing(summary: &Value) -> bool {
    match summary {
        Value::Null => true,
        Value::Object(map) => map.iter().all(|(key, value)| {
            key == COVERS
                || value.is_null()
                || value.as_array().is_some_and(Vec::is_empty)
                || value.as_str().is_some_and(str::is_empty)
        }),
        _ => false,
    }
}

/// The summary as the model receives it: compact JSON without Parlor's coverage record.
pub fn for_model(summary: &Value) -> String {
    match summary {
        Value::Object(map) if map.contains_key(COVERS) => {
            let mut map = map.clone();
            map.shift_remove(COVERS);
            Value::Object(map).to_string()
        }
        other => other.to_string(),
    }
}

/// Merges what a summarizer produced for `covered` (newly summarized messages) into the
/// current summary and records the new coverage, and what producing it cost (`cost`, in
/// nano-USD, added to what the summary cost before).
pub fn fold(
    prev: Option<Value>,
    produced: Value,
    covered: &[Message],
    (now_ms, cost): (i64, u64),
) -> Value {
    let before = prev.as_ref().map(Covers::of).unwrap_or_default();
    let mut merged = merge_summary(prev, produced);
    let covers = Covers {
        messages: before.messages + covered.len(),
        until_ts: covered
            .iter()
            .map(|m| m.ts)
            .max()
            .unwrap_or(before.until_ts)
            .max(before.until_ts),
        updated_ms: now_ms,
        spent_nano_usd: before.spent_nano_usd + cost,
    };
    if let Value::Object(map) = &mut merged {
        map.insert(
            COVERS.into(),
            serde_json::to_value(covers).unwrap_or_default(),
        );
    }
    merged
}

/// The offline summarizer (the mirror model's): the first sentence of each user message
/// as a fact, so summaries work, and are tested, without an API key.
pub fn mirror_summary(messages: &[Message]) -> Value {
    let facts: Vec<Value> = messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| Value::String(first_sentence(&m.text)))
        .filter(|f| f.as_str().is_some_and(|s| !s.is_empty()))
        .collect();
    serde_json::json!({"version": 1, "facts": facts})
}

fn first_sentence(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let end = line
        .char_indices()
        .find(|&(i, c)| matches!(c, '.' | '!' | '?') && line[i + c.len_utf8()..].starts_with(' '))
        .map_or(line.len(), |(i, c)| i + c.len_utf8());
    line[..end].chars().take(200).collect()
}

/// A model's answer to the summarizing request: the first JSON object in it (models often
/// wrap JSON in a code block or a sentence).
pub fn parse_model_summary(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    serde_json::from_str::<Value>(text.get(start..=end)?)
        .ok()
        .filter(Value::is_object)
}

/// What a model is asked to do when it keeps a conversation's summary.
pub const SUMMARIZER_PROMPT: &str =
    "You keep the rolling summary of a conversation. You are given \
    the current summary (JSON) and messages that are no longer sent to the assistant. Reply with \
    only a JSON object of the shape {\"version\": 1, \"decisions\": [], \"constraints\": [], \
    \"todos\": [], \"issues\": [], \"facts\": [], \"refs\": [{\"type\": \"file|api|url\", \
    \"value\": \"...\", \"hint\": \"...\"}]} holding what those messages add: short strings, no \
    repetition of what the summary already says.";

/// What opens the system message that carries the summary.
pub const SUMMARY_LABEL: &str = "Summary of the earlier conversation (the messages before this \
    point that are not repeated below), as JSON:";

/// The system message the `summary` processor sends for `summary` (compact JSON).
pub fn summary_message(summary: &str) -> Message {
    Message::system(format!("{SUMMARY_LABEL}\n{summary}"), 0)
}

/// An empty object, for callers building summaries field by field.
pub fn empty_object() -> Value {
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(a: Value, b: Value) -> String {
        merge_summary(Some(a), b).to_string()
    }

    #[test]
    fn the_specs_merge_examples_hold() {
        assert_eq!(
            merged(
                json!({"decisions": ["a", "b"]}),
                json!({"decisions": ["c", "a"]})
            ),
            r#"{"decisions":["c","a","b"]}"#
        );
        assert_eq!(
            merged(json!({"version": 1, "todos": ["x"]}), json!({"version": 2})),
            r#"{"version":2,"todos":["x"]}"#
        );
        assert_eq!(
            merged(
                json!({"refs": [{"value": "a.rs", "hint": "old"}]}),
                json!({"refs": [{"value": "a.rs", "hint": "new"}, {"value": "u"}]})
            ),
            r#"{"refs":[{"value":"a.rs","hint":"new"},{"value":"u"}]}"#
        );
        assert_eq!(
            merged(
                json!({"meta": {"a": 1, "b": {"c": 1}}}),
                json!({"meta": {"b": {"d": 2}}})
            ),
            r#"{"meta":{"a":1,"b":{"c":1,"d":2}}}"#
        );
    }

    #[test]
    fn merge_keeps_the_first_objects_key_order_and_replaces_what_does_not_merge() {
        assert_eq!(
            merged(json!({"z": 1, "a": [1]}), json!({"b": 2, "z": 3})),
            r#"{"z":3,"a":[1],"b":2}"#
        );
        assert_eq!(merged(json!({"a": [1]}), json!({"a": "s"})), r#"{"a":"s"}"#);
        assert_eq!(merged(json!([1, 2]), json!([2, 3, 3])), "[2,3,1]");
        assert_eq!(
            merge_summary(Some(json!("text")), json!({"a": 1})),
            json!({"a": 1})
        );
        assert_eq!(merge_summary(None, json!([1])), json!([1]));
        // Keys: by value, else id, else the whole item; a null value does not count.
        assert_eq!(
            merged(
                json!([{"id": 1, "x": "old"}, {"value": null, "id": 2}, {"k": 1}]),
                json!([{"id": 1, "x": "new"}, {"value": null, "id": 2, "y": 1}, {"k": 1}])
            ),
            r#"[{"id":1,"x":"new"},{"value":null,"id":2,"y":1},{"k":1}]"#
        );
    }

    #[test]
    fn a_double_encoded_summary_reads_as_its_inner_json() {
        assert_eq!(read_summary(r#"{"a":1}"#), Some(json!({"a": 1})));
        assert_eq!(read_summary(r#""{\"a\":1}""#), Some(json!({"a": 1})));
        assert_eq!(read_summary(r#""plain""#), Some(json!("plain")));
        assert_eq!(read_summary("{oops"), None);
    }

    #[test]
    fn the_signal_is_raised_strictly_above_a_threshold_in_the_specs_key_order() {
        let t = Thresholds {
            max_messages: 2,
            max_bytes: 100,
        };
        assert_eq!(Maintenance::check(2, 100, t, 5), None);
        let by_count = Maintenance::check(3, 10, t, 5).unwrap();
        assert_eq!(by_count.reason, "messages_count_exceeds_comfort_zone");
        let by_bytes = Maintenance::check(1, 101, t, 5).unwrap();
        assert_eq!(by_bytes.reason, "bytes_exceed_comfort_zone");
        let json = serde_json::to_string(&by_bytes).unwrap();
        let keys = [
            "\"action\":",
            "\"importance\":",
            "\"reason\":",
            "\"guidance\":",
            "\"thresholds\":{\"maxMessages\":2,\"maxBytes\":100}",
            "\"metrics\":{\"messages\":1,\"approxBytes\":101}",
            "\"backup\":{\"enabled\":true,\"retention\":5}",
        ];
        let positions: Vec<usize> = keys.iter().map(|k| json.find(k).expect(k)).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{json}");
    }

    #[test]
    fn fold_merges_records_coverage_and_the_model_never_sees_it() {
        let messages = [
            Message::user("I use Rust. It is fast.", 10),
            Message::assistant("Noted", 11),
            Message::user("Deploy on Fridays? Never!", 12),
        ];
        let produced = mirror_summary(&messages);
        assert_eq!(
            produced,
            json!({"version": 1, "facts": ["I use Rust.", "Deploy on Fridays?"]})
        );
        let first = fold(None, produced, &messages[..2], (100, 0));
        assert_eq!(
            Covers::of(&first),
            Covers {
                messages: 2,
                until_ts: 11,
                updated_ms: 100,
                spent_nano_usd: 0,
            }
        );
        assert!(Covers::of(&first).includes(&messages[1]));
        assert!(!Covers::of(&first).includes(&messages[2]));
        let second = fold(
            Some(first),
            json!({"facts": ["x"]}),
            &messages[2..],
            (200, 5),
        );
        assert_eq!(
            Covers::of(&second),
            Covers {
                messages: 3,
                until_ts: 12,
                updated_ms: 200,
                spent_nano_usd: 5,
            }
        );
        assert_eq!(
            for_model(&second),
            r#"{"version":1,"facts":["x","I use Rust.","Deploy on Fridays?"]}"#
        );
        assert_eq!(Covers::of(&json!({"facts": []})), Covers::default());
    }

    #[test]
    fn a_models_answer_is_read_from_its_json_object() {
        assert_eq!(
            parse_model_summary("Here:\n```json\n{\"facts\": [\"a\"]}\n```"),
            Some(json!({"facts": ["a"]}))
        );
        assert_eq!(parse_model_summary("Echo: hello"), None);
        assert_eq!(parse_model_summary("{not json}"), None);
    }

    #[test]
    fn flat_lines_escape_backslashes_and_line_breaks_only() {
        let messages = [
            Message::user("two\nlines\r\tand a \\ tab", 1),
            Message::assistant("ok", 2),
            Message::system("s", 3),
        ];
        let text = flat(None, Some(&json!({"facts": ["x"]})), &messages);
        assert_eq!(
            text,
            "S:{\"facts\":[\"x\"]}\nU: two\\nlines\\r\tand a \\\\ tab\nA: ok\nA: s"
        );
        assert_eq!(flat(None, None, &[]), "");
        let signal = Maintenance::check(
            5,
            0,
            Thresholds {
                max_messages: 1,
                max_bytes: 9,
            },
            5,
        );
        assert!(
            flat(signal.as_ref(), None, &messages[1..2]).starts_with("M:{\"action\":\"compact\"")
        );
    }

    #[test]
    fn a_run_reads_only_what_the_summary_does_not_cover_and_finds_the_same() {
        let stored: Vec<Message> = (0..40)
            .map(|i| Message::user(format!("m{i}"), 100 + i as i64))
            .collect();
        for covered in 0..=30 {
            let covers = Covers {
                messages: covered,
                until_ts: if covered == 0 {
                    0
                } else {
                    100 + covered as i64 - 1
                },
                updated_ms: 1,
                ..Covers::default()
            };
            for first_sent in [0, 1, covered, covered + 1, 35, 40] {
                let from = read_from(&covers, first_sent);
                let end = first_sent.min(stored.len());
                let read = &stored[from.min(end)..end];
                let pending = pending_in(&covers, read, from, first_sent).expect("readable");
                assert_eq!(
                    pending,
                    pending_in_whole(&covers, &stored, first_sent),
                    "covered {covered}, first sent {first_sent}"
                );
                assert!(
                    from + 1 >= covered.min(first_sent),
                    "reads no covered message but one"
                );
            }
        }
    }

    #[test]
    fn a_conversation_changed_at_its_start_or_shorter_is_read_whole() {
        let stored: Vec<Message> = (0..20)
            .map(|i| Message::user(format!("m{i}"), 100 + i as i64))
            .collect();
        // The summary covers 10 messages up to m9; then the 5 oldest were trimmed away, so
        // position 9 holds m14, which it does not cover.
        let covers = Covers {
            messages: 10,
            until_ts: 109,
            updated_ms: 1,
            ..Covers::default()
        };
        let trimmed = &stored[5..];
        let from = read_from(&covers, 12);
        assert_eq!(pending_in(&covers, &trimmed[from..12], from, 12), None);
        let whole = pending_in_whole(&covers, trimmed, 12);
        let texts: Vec<_> = whole.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["m10", "m11", "m12", "m13", "m14", "m15", "m16"]);
        // Fewer messages came back than were asked for.
        assert_eq!(pending_in(&covers, &stored[9..11], 9, 12), None);
    }
}
