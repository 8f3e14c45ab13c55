//! Whether a message read from a tool server may reach rmcp's parser: counted, not built.
//! rmcp parses a message into a generic tree before its types, so what bounds Parlor's memory
//! is how many values a message holds, not only its bytes.

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

/// The most JSON values (every object, array, string, number…) one message may hold: rmcp
/// parses a message into a generic tree first, at a few hundred bytes a value.
pub const MAX_VALUES: usize = 100_000;

/// What to do with a message read from a server.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it on as it came.
    Pass,
    /// Hand this on instead (an error answering the same request).
    Replace(Vec<u8>),
    /// Drop it (too large, and no request to answer).
    Drop,
}

/// Whether `message` may reach rmcp's parser: an answer with more than `max_items` content
/// items, or any message of more than [`MAX_VALUES`] values (or nested too deep to count),
/// is replaced by an error for its request, or dropped when it answers none.
pub fn verdict(message: &[u8], max_items: usize) -> Verdict {
    #[derive(Deserialize)]
    struct Shallow {
        id: Option<serde_json::Value>,
        result: Option<ShallowResult>,
    }
    #[derive(Deserialize)]
    struct ShallowResult {
        content: Option<Count>,
    }
    let values = serde_json::from_slice::<Values>(message).map_or(usize::MAX, |v| v.0);
    if values == usize::MAX && serde_json::from_slice::<IgnoredAny>(message).is_err() {
        // Not JSON at all: rmcp ignores it without building anything.
        return Verdict::Pass;
    }
    let shallow: Option<Shallow> = serde_json::from_slice(message).ok();
    let items = shallow
        .as_ref()
        .and_then(|s| s.result.as_ref()?.content.as_ref())
        .map_or(0, |c| c.0);
    let why = if items > max_items {
        format!(
            "The result held {} content items; at most {max_items} are accepted (max_result_items).",
            parlor_domain::numbers::group_digits(items as u64)
        )
    } else if values > MAX_VALUES {
        format!("The server sent a message of more than {MAX_VALUES} JSON values; it was refused.")
    } else {
        return Verdict::Pass;
    };
    let Some(id) = shallow.and_then(|s| s.id).filter(|id| !id.is_null()) else {
        return Verdict::Drop;
    };
    let error = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32603, "message": why},
    });
    serde_json::to_vec(&error).map_or(Verdict::Drop, Verdict::Replace)
}

/// The length of a JSON array, its items skipped unread.
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        struct Counting;
        impl<'de> Visitor<'de> for Counting {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(Counting)
    }
}

/// How many JSON values a document holds, counted without building them.
struct Values(usize);

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Values, D::Error> {
        struct Counting;
        impl<'de> Visitor<'de> for Counting {
            type Value = Values;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Values, E> {
                Ok(Values(1))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Values, E> {
                Ok(Values(1))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Values, E> {
                Ok(Values(1))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Values, E> {
                Ok(Values(1))
            }
            fn visit_str<E>(self, _: &str) -> Result<Values, E> {
                Ok(Values(1))
            }
            fn visit_unit<E>(self) -> Result<Values, E> {
                Ok(Values(1))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Values, A::Error> {
                let mut n = 1usize;
                while let Some(Values(k)) = seq.next_element::<Values>()? {
                    n = n.saturating_add(k);
                }
                Ok(Values(n))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Values, A::Error> {
                let mut n = 1usize;
                while map.next_key::<IgnoredAny>()?.is_some() {
                    n = n.saturating_add(map.next_value::<Values>()?.0);
                }
                Ok(Values(n))
            }
        }
        d.deserialize_any(Counting)
    }
}
