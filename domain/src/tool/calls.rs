//! Tool calls as a model streams them: each call's id and name come first, its arguments in
//! pieces over later chunks, several calls side by side, each under its index. The
//! assembler puts them together, bounded: at most [`MAX_CALLS_HELD`] calls and
//! [`MAX_ARGUMENT_BYTES`] of arguments each are held, whatever the model sends.

use crate::message::ToolCall;
use std::collections::BTreeMap;

/// The most calls one reply is held to (the loop runs at most `max_calls`, at most 500).
pub const MAX_CALLS_HELD: usize = 500;
/// The most argument bytes held for one call; longer arguments are cut (and so are not
/// valid JSON, which the call's result then says).
pub const MAX_ARGUMENT_BYTES: usize = 1 << 20;
/// The longest tool name held (names the model streams in pieces stop growing there).
const MAX_NAME_BYTES: usize = 256;
/// The most argument bytes held for all the calls of one reply together.
pub const MAX_TOTAL_ARGUMENT_BYTES: usize = 4 << 20;

/// One streamed piece of a call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    pub index: u64,
    pub id: Option<String>,
    pub name: Option<String>,
    pub arguments: Option<String>,
}

/// Calls being assembled, by index.
#[derive(Clone, Debug, Default)]
pub struct Assembler {
    calls: BTreeMap<u64, ToolCall>,
    /// Pieces of calls beyond [`MAX_CALLS_HELD`], dropped.
    pub dropped: usize,
    /// Argument bytes held, all calls together.
    held: usize,
}

impl Assembler {
    pub fn add(&mut self, piece: Piece) {
        let held = self.calls.len();
        let call = match self.calls.get_mut(&piece.index) {
            Some(call) => call,
            None if held >= MAX_CALLS_HELD => {
                self.dropped += 1;
                return;
            }
            None => self.calls.entry(piece.index).or_insert(ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            }),
        };
        if let Some(id) = piece.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        if let Some(name) = piece.name {
            // Most servers send the name whole once; some repeat it or send it in pieces.
            if (!call.name.ends_with(&name) || call.name.is_empty())
                && call.name.len() + name.len() <= MAX_NAME_BYTES
            {
                call.name.push_str(&name);
            }
        }
        if let Some(arguments) = piece.arguments {
            let room = MAX_ARGUMENT_BYTES
                .saturating_sub(call.arguments.len())
                .min(MAX_TOTAL_ARGUMENT_BYTES.saturating_sub(self.held));
            let mut cut = arguments.len().min(room);
            while !arguments.is_char_boundary(cut) {
                cut -= 1;
            }
            call.arguments.push_str(&arguments[..cut]);
            self.held += cut;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The calls in index order; a call the model gave no id gets `call_<n>` (`n` its place),
    /// and ids given twice are made unique, so every result can name its call.
    pub fn finish(self) -> Vec<ToolCall> {
        let mut seen = std::collections::BTreeSet::new();
        self.calls
            .into_values()
            .enumerate()
            .map(|(n, mut call)| {
                if call.id.is_empty() || !seen.insert(call.id.clone()) {
                    call.id = format!("call_{n}");
                    while !seen.insert(call.id.clone()) {
                        call.id.push('_');
                    }
                }
                call
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(index: u64, id: Option<&str>, name: Option<&str>, args: Option<&str>) -> Piece {
        Piece {
            index,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments: args.map(Into::into),
        }
    }

    #[test]
    fn all_calls_together_hold_at_most_the_total_bound() {
        let mut calls = Assembler::default();
        let mega = "x".repeat(MAX_ARGUMENT_BYTES);
        for index in 0..10 {
            calls.add(piece(index, Some("c"), Some("n"), Some(&mega)));
            calls.add(piece(index, None, Some(&"n".repeat(200)), None));
        }
        let calls = calls.finish();
        let held: usize = calls.iter().map(|c| c.arguments.len()).sum();
        assert_eq!(held, MAX_TOTAL_ARGUMENT_BYTES);
        assert!(calls.iter().all(|c| c.name.len() <= MAX_NAME_BYTES));
    }

    #[test]
    fn two_calls_in_pieces_are_put_together_in_order() {
        let mut calls = Assembler::default();
        calls.add(piece(1, Some("b"), Some("clock__convert"), Some("")));
        calls.add(piece(0, Some("a"), Some("clock__now"), None));
        calls.add(piece(0, None, None, Some("{\"tz\":")));
        calls.add(piece(1, None, None, Some("{}")));
        calls.add(piece(0, None, None, Some("\"UTC\"}")));
        let calls = calls.finish();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("a", "clock__now")
        );
        assert_eq!(calls[0].arguments, "{\"tz\":\"UTC\"}");
        assert_eq!(calls[1].arguments, "{}");
    }

    #[test]
    fn missing_and_repeated_ids_are_made_unique() {
        let mut calls = Assembler::default();
        calls.add(piece(0, None, Some("t"), None));
        calls.add(piece(1, Some("x"), Some("t"), None));
        calls.add(piece(2, Some("x"), Some("t"), None));
        let ids: Vec<String> = calls.finish().into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["call_0", "x", "call_2"]);
    }

    #[test]
    fn a_flood_of_calls_and_arguments_is_bounded() {
        let mut calls = Assembler::default();
        for i in 0..1000 {
            calls.add(piece(i * 7, Some(&format!("c{i}")), Some("t"), Some("{}")));
        }
        assert_eq!(calls.dropped, 500);
        let mut big = Assembler::default();
        for _ in 0..3 {
            big.add(piece(
                0,
                None,
                None,
                Some(&"é".repeat(MAX_ARGUMENT_BYTES / 2)),
            ));
        }
        let held = big.finish();
        assert!(held[0].arguments.len() <= MAX_ARGUMENT_BYTES);
        assert_eq!(calls.finish().len(), MAX_CALLS_HELD);
    }
}
