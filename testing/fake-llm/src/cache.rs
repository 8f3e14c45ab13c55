//! A prompt cache as providers keep one: a request's prefix (tools, system prompt, then its
//! messages, each a unit of about a token per four bytes) is read from the cache when a
//! request of the last five minutes had the same units before it.
//!
//! With breakpoints (Anthropic's `cache_control`), only prefixes that end at a breakpoint
//! of the earlier request were written, and this request writes up to its own last
//! breakpoint; without them (OpenAI-compatible servers) any shared prefix is read.
//! Markers are not part of the prefix: moving a breakpoint does not change what is cached.

use serde_json::Value;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

const LIFETIME: Duration = Duration::from_secs(300);
const REMEMBERED: usize = 256;

/// One part of a prompt: a hash of what it sends, its tokens, and whether a breakpoint
/// closes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    hash: u64,
    tokens: u64,
    breakpoint: bool,
}

/// What a request found and left in the cache, in tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Used {
    pub read: u64,
    pub written: u64,
    pub fresh: u64,
}

#[derive(Default)]
pub struct PrefixCache {
    seen: Vec<(Instant, Vec<Unit>)>,
}

fn unit(value: &Value) -> Unit {
    let mut bare = value.clone();
    let breakpoint = strip_marks(&mut bare);
    let text = bare.to_string();
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    Unit {
        hash: hasher.finish(),
        tokens: (text.len() as u64 / 4).max(1),
        breakpoint,
    }
}

/// Removes `cache_control` everywhere in `value`; whether its last block had one.
fn strip_marks(value: &mut Value) -> bool {
    match value {
        Value::Object(map) => {
            let marked = map.remove("cache_control").is_some();
            let inner = map.values_mut().fold(false, |m, v| strip_marks(v) | m);
            marked || inner
        }
        Value::Array(items) => items.iter_mut().fold(false, |m, v| strip_marks(v) | m),
        _ => false,
    }
}

/// The units of a Messages request: its tools, its system prompt, each message.
pub fn units_of_messages(request: &Value) -> Vec<Unit> {
    let head = [&request["tools"], &request["system"]];
    let head = head.into_iter().filter(|v| !v.is_null()).map(unit);
    let messages = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(unit);
    head.chain(messages).collect()
}

/// The units of a Chat Completions request: its tools, each message.
pub fn units_of_chat(request: &Value) -> Vec<Unit> {
    let tools = Some(&request["tools"]).filter(|v| !v.is_null()).map(unit);
    let messages = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(unit);
    tools.into_iter().chain(messages).collect()
}

fn tokens(units: &[Unit]) -> u64 {
    units.iter().map(|u| u.tokens).sum()
}

impl PrefixCache {
    /// Looks `units` up (`breakpoints`: only marked prefixes are cached) and remembers them.
    pub fn lookup(&mut self, units: &[Unit], breakpoints: bool) -> Used {
        let now = Instant::now();
        self.seen
            .retain(|(at, _)| now.duration_since(*at) < LIFETIME);
        let shared = |earlier: &[Unit]| -> usize {
            let same = earlier
                .iter()
                .zip(units)
                .take_while(|(a, b)| a.hash == b.hash)
                .count();
            match breakpoints {
                false => same,
                // The longest written prefix: one that ends on an earlier breakpoint.
                true => (1..=same)
                    .rev()
                    .find(|&n| earlier[n - 1].breakpoint)
                    .unwrap_or(0),
            }
        };
        let read_units = self.seen.iter().map(|(_, u)| shared(u)).max().unwrap_or(0);
        let read = tokens(&units[..read_units]);
        let written = match breakpoints {
            false => 0,
            true => {
                let last = units
                    .iter()
                    .rposition(|u| u.breakpoint)
                    .map_or(0, |i| i + 1);
                tokens(&units[..last]).saturating_sub(read)
            }
        };
        if self.seen.len() >= REMEMBERED {
            self.seen.remove(0);
        }
        self.seen.push((now, units.to_vec()));
        Used {
            read,
            written,
            fresh: tokens(units) - read - written,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(texts: &[&str], mark_last: bool) -> Value {
        let mut messages: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": [{"type": "text", "text": t}]})
            })
            .collect();
        if mark_last {
            let last = messages.last_mut().unwrap();
            last["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        }
        json!({"system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": messages})
    }

    #[test]
    fn a_marked_prefix_is_read_back_and_an_unmarked_one_is_not() {
        let mut cache = PrefixCache::default();
        let first = units_of_messages(&messages(&["hello there", "hi", "how are you"], true));
        let used = cache.lookup(&first, true);
        assert_eq!(used.read, 0);
        assert_eq!(used.written, tokens(&first));
        // The next turn repeats the prefix (its marker moved on): all of it is read.
        let second = units_of_messages(&messages(
            &["hello there", "hi", "how are you", "fine", "good"],
            true,
        ));
        let used = cache.lookup(&second, true);
        assert_eq!(used.read, tokens(&first));
        assert_eq!(used.read + used.written + used.fresh, tokens(&second));
        // A cut changes the first message: only the system prompt is read.
        let cut = units_of_messages(&messages(&["how are you", "fine", "good"], true));
        assert_eq!(cache.lookup(&cut, true).read, tokens(&cut[..1]));
        // Without breakpoints any shared prefix counts.
        let mut plain = PrefixCache::default();
        let chat = |t: &[&str]| {
            units_of_chat(
                &json!({"messages": t.iter().map(|t| json!({"role": "user", "content": t})).collect::<Vec<_>>()}),
            )
        };
        plain.lookup(&chat(&["a", "b"]), false);
        assert_eq!(
            plain.lookup(&chat(&["a", "b", "c"]), false).read,
            tokens(&chat(&["a", "b"]))
        );
    }
}
