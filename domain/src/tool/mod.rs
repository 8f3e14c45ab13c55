//! The rules of tool calls that need no I/O (spec `tools.md`): the name a model sees for a
//! tool, the loop's limits and what the next model call may do under them, when a call
//! waits for approval, and the stub that replaces a result whose retention is over.
//!
//! The MCP client, the loop and storage build on these; nothing here runs a tool.

pub mod calls;
pub mod list;
pub mod rounds;

use serde::{Deserialize, Serialize};

/// A tool offered to the model on a turn: the name it sees, the server and tool it stands
/// for, and what the server says about it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Offered {
    /// `<server>__<tool>` (see [`model_name`]).
    pub name: String,
    pub server: String,
    pub tool: String,
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the arguments, as the server gives it.
    #[serde(default)]
    pub parameters: serde_json::Value,
}

/// The longest tool name a model is given.
pub const MAX_TOOL_NAME: usize = 64;

/// Whether `id` may name a tool server: 1 to 32 of `a-z`, `0-9`, `_` and `-`, without `__`
/// and not ending in `_`. So the first `__` of a model's name ends the server id, and no two
/// servers' tools can be given one name (`a__b` + `c` and `a` + `b__c` would be).
pub fn is_server_id(id: &str) -> bool {
    (1..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && !id.contains("__")
        && !id.ends_with('_')
}

/// The name the model sees for `tool` of server `server`: `<server>__<tool>`, every
/// character other than letters, digits, `_` and `-` replaced by `_`, cut to
/// [`MAX_TOOL_NAME`] characters.
pub fn model_name(server: &str, tool: &str) -> String {
    format!("{server}__{tool}")
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                true => c,
                false => '_',
            },
        )
        .take(MAX_TOOL_NAME)
        .collect()
}

/// Two tools the model would see under one name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tools {first} and {second} would both be called {name:?} by the model; rename one")]
pub struct NameClash {
    /// `<server>.<tool>` of each.
    pub first: String,
    pub second: String,
    pub name: String,
}

/// The model's names of `tools` (`(server, tool)` pairs), in order; a clash is an error
/// naming both tools.
pub fn model_names(tools: &[(&str, &str)]) -> Result<Vec<String>, NameClash> {
    let mut names: Vec<String> = Vec::with_capacity(tools.len());
    for (server, tool) in tools {
        let name = model_name(server, tool);
        if let Some(at) = names.iter().position(|n| *n == name) {
            let (first_server, first_tool) = tools[at];
            return Err(NameClash {
                first: format!("{first_server}.{first_tool}"),
                second: format!("{server}.{tool}"),
                name,
            });
        }
        names.push(name);
    }
    Ok(names)
}

/// When a call of a server waits for the user's approval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confirm {
    /// Calls run at once.
    #[default]
    Never,
    /// Every call waits.
    Always,
    /// A call waits until one was approved "always in this conversation".
    First,
}

impl Confirm {
    /// Whether a call waits, given whether the conversation already approved the server.
    pub fn waits(self, approved_in_conversation: bool) -> bool {
        match self {
            Confirm::Never => false,
            Confirm::Always => true,
            Confirm::First => !approved_in_conversation,
        }
    }
}

/// How far the loop of one turn may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Model calls that may ask for tools (1..=50).
    pub max_rounds: u32,
    /// Tool calls, all rounds together (1..=500).
    pub max_calls: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_rounds: 8,
            max_calls: 32,
        }
    }
}

/// A limit out of its range: the field and the range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be between {min} and {max} (got {got})")]
pub struct OutOfRange {
    pub field: &'static str,
    pub min: i64,
    pub max: i64,
    pub got: i64,
}

impl Limits {
    /// The limits an operator set (`None`: the default of each), checked.
    pub fn new(max_rounds: Option<i64>, max_calls: Option<i64>) -> Result<Limits, OutOfRange> {
        let default = Limits::default();
        let check = |field, value: Option<i64>, max, default: u32| match value {
            None => Ok(default),
            Some(got) if (1..=max).contains(&got) => Ok(got as u32),
            Some(got) => Err(OutOfRange {
                field,
                min: 1,
                max,
                got,
            }),
        };
        Ok(Limits {
            max_rounds: check("max_rounds", max_rounds, 50, default.max_rounds)?,
            max_calls: check("max_calls", max_calls, 500, default.max_calls)?,
        })
    }
}

/// Which limit ended a turn's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitReached {
    MaxRounds,
    MaxCalls,
}

/// What the loop does after a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run `calls` of the calls the model asked for, then call it again with tools.
    Run { calls: usize },
    /// Run `calls` (what is left of `max_calls`), then call the model once more, without
    /// tools, and say which limit was reached.
    Last { calls: usize, reached: LimitReached },
}

/// The loop's decision when round `round` (counted from 1) asked for `asked` calls and
/// `made` calls were run before it.
pub fn next(limits: Limits, round: u32, made: u32, asked: usize) -> Next {
    let left = limits.max_calls.saturating_sub(made) as usize;
    // This round uses up the calls left: whatever the model asks next could not run.
    if asked >= left {
        return Next::Last {
            calls: asked.min(left),
            reached: LimitReached::MaxCalls,
        };
    }
    if round >= limits.max_rounds {
        return Next::Last {
            calls: asked,
            reached: LimitReached::MaxRounds,
        };
    }
    Next::Run { calls: asked }
}

/// What later turns receive in place of a result whose retention is over (`turns`: how
/// long it was kept; `None`: it was kept for its own turn only).
pub fn stub(tool: &str, turns: Option<u32>, bytes: u64) -> String {
    let size = crate::numbers::group_digits(bytes);
    match turns {
        Some(1) => format!("[result of {tool} removed after 1 turn: {size} bytes]"),
        Some(n) => format!("[result of {tool} removed after {n} turns: {size} bytes]"),
        None => format!("[result of {tool} not kept: {size} bytes]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn server_ids_are_short_lowercase_words() {
        for ok in ["clock", "a", "my-server_2", &"x".repeat(32)] {
            assert!(is_server_id(ok), "{ok}");
        }
        for bad in [
            "",
            "Clock",
            "has space",
            "dot.ted",
            &"x".repeat(33),
            "é",
            "a__b",
            "a_",
        ] {
            assert!(!is_server_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_model_sees_server_and_tool_joined_and_cleaned() {
        assert_eq!(
            model_name("clock", "get_current_time"),
            "clock__get_current_time"
        );
        assert_eq!(model_name("fs", "read.file v2"), "fs__read_file_v2");
        let long = model_name("everything", &"t".repeat(100));
        assert_eq!(long.chars().count(), MAX_TOOL_NAME);
        assert!(long.starts_with("everything__ttt"));
    }

    #[test]
    fn a_clash_names_both_tools() {
        let clash = model_names(&[("fs", "read.file"), ("fs", "read_file")]).unwrap_err();
        assert_eq!(clash.first, "fs.read.file");
        assert_eq!(clash.second, "fs.read_file");
        assert_eq!(clash.name, "fs__read_file");
        assert!(clash.to_string().contains("fs.read.file"));
        let names = model_names(&[("a", "x"), ("b", "x")]).unwrap();
        assert_eq!(names, ["a__x", "b__x"]);
    }

    #[test]
    fn approval_waits_as_the_server_says() {
        assert!(!Confirm::Never.waits(false));
        assert!(Confirm::Always.waits(true));
        assert!(Confirm::First.waits(false));
        assert!(!Confirm::First.waits(true));
        let parsed: Confirm = serde_json::from_str("\"first\"").unwrap();
        assert_eq!(parsed, Confirm::First);
        assert!(serde_json::from_str::<Confirm>("\"sometimes\"").is_err());
    }

    #[test]
    fn limits_are_checked_and_default_to_8_and_32() {
        assert_eq!(Limits::new(None, None).unwrap(), Limits::default());
        assert_eq!(Limits::default().max_rounds, 8);
        assert_eq!(Limits::default().max_calls, 32);
        assert_eq!(
            Limits::new(Some(50), Some(500)).unwrap(),
            Limits {
                max_rounds: 50,
                max_calls: 500
            }
        );
        let err = Limits::new(Some(0), None).unwrap_err();
        assert_eq!(err.field, "max_rounds");
        let err = Limits::new(None, Some(501)).unwrap_err();
        assert_eq!(err.field, "max_calls");
        assert!(err.to_string().contains("between 1 and 500"));
    }

    #[test]
    fn the_last_round_is_made_without_tools_and_names_its_limit() {
        let limits = Limits {
            max_rounds: 3,
            max_calls: 5,
        };
        assert_eq!(next(limits, 1, 0, 2), Next::Run { calls: 2 });
        assert_eq!(
            next(limits, 3, 2, 1),
            Next::Last {
                calls: 1,
                reached: LimitReached::MaxRounds
            }
        );
        // Asking for more calls than are left runs what is left, then ends.
        assert_eq!(
            next(limits, 2, 4, 3),
            Next::Last {
                calls: 1,
                reached: LimitReached::MaxCalls
            }
        );
    }

    #[test]
    fn stubs_say_what_was_removed_and_when() {
        assert_eq!(
            stub("clock__get_current_time", Some(2), 1204),
            "[result of clock__get_current_time removed after 2 turns: 1,204 bytes]"
        );
        assert_eq!(
            stub("t", Some(1), 5),
            "[result of t removed after 1 turn: 5 bytes]"
        );
        assert_eq!(stub("t", None, 0), "[result of t not kept: 0 bytes]");
    }

    proptest! {
        /// The loop always ends: no more than `max_rounds` rounds and `max_calls` calls,
        /// whatever the model asks for.
        #[test]
        fn the_loop_never_passes_its_limits(
            rounds in 1u32..=50,
            calls in 1u32..=500,
            asks in prop::collection::vec(0usize..40, 1..80),
        ) {
            let limits = Limits { max_rounds: rounds, max_calls: calls };
            let (mut made, mut round) = (0u32, 0u32);
            let mut ended = false;
            for asked in asks.into_iter().filter(|&a| a > 0) {
                round += 1;
                match next(limits, round, made, asked) {
                    Next::Run { calls } => made += calls as u32,
                    Next::Last { calls, .. } => {
                        made += calls as u32;
                        ended = true;
                        break;
                    }
                }
            }
            prop_assert!(made <= calls);
            prop_assert!(round <= rounds);
            if round == rounds { prop_assert!(ended); }
        }
    }
}
