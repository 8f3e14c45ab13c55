//! A tool's answer as Parlor keeps it: content blocks (text; images of the four web formats),
//! its size, and whether it is an error. Every fault of a call is such an answer too, an
//! error text for the model, never an error of the turn.

use parlor_domain::block::Part;
use serde_json::Value;

/// What one call answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub ok: bool,
    pub content: Vec<Part>,
    /// The size of the whole answer as received, in bytes (before any cut).
    pub bytes: u64,
    pub ms: u64,
    /// Microseconds spent waiting for the server's answer (Parlor's own time per round is
    /// measured without it).
    pub waited_us: u64,
}

impl Outcome {
    /// An error for the model: `text` says what went wrong.
    pub fn error(text: impl Into<String>) -> Outcome {
        let text = text.into();
        Outcome {
            ok: false,
            bytes: text.len() as u64,
            content: vec![Part::Text { text }],
            ms: 0,
            waited_us: 0,
        }
    }

    /// The answer within `max_bytes`, cut with a marker as a server's result is (the built-in
    /// server's answers are bounded like any other).
    pub fn bounded(mut self, max_bytes: usize) -> Outcome {
        let total = self.content.iter().map(size).sum::<usize>() as u64;
        self.bytes = self.bytes.max(total);
        self.content = cut(self.content, max_bytes, total);
        self
    }

    /// The answer's text, images named, as one string (previews, search).
    pub fn text(&self) -> String {
        let parts: Vec<String> = self
            .content
            .iter()
            .map(|part| match part {
                Part::Image { url } => format!("[image {}]", media(url)),
                other => other.sent_text().unwrap_or_default().into_owned(),
            })
            .collect();
        parts.join("\n")
    }
}

fn media(url: &str) -> &str {
    parlor_domain::context::image_type(url).unwrap_or("image")
}

/// The image types a result may carry as an image (others are named in text).
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The error of a result of `items` content items when at most `max_items` are accepted.
pub fn too_many(items: usize, max_items: usize) -> Option<Outcome> {
    (items > max_items).then(|| {
        Outcome::error(format!(
            "The result held {} content items; at most {max_items} are accepted \
             (max_result_items).",
            group(items)
        ))
    })
}

/// A `tools/call` result (as JSON) as kept: each content item a part, cut to `max_bytes`
/// with a marker saying so. A result of more than `max_items` content items is a tool error.
pub fn read(result: &Value, max_bytes: usize, max_items: usize) -> Outcome {
    let ok = result["isError"].as_bool() != Some(true);
    let items = result["content"].as_array().map_or(&[][..], Vec::as_slice);
    if let Some(refused) = too_many(items.len(), max_items) {
        return refused;
    }
    let mut parts: Vec<Part> = items.iter().map(part).collect();
    if parts.is_empty() {
        if let Some(structured) = result.get("structuredContent") {
            parts.push(Part::Text {
                text: structured.to_string(),
            });
        }
    }
    let bytes = parts.iter().map(size).sum::<usize>() as u64;
    Outcome {
        ok,
        content: cut(parts, max_bytes, bytes),
        bytes,
        ms: 0,
        waited_us: 0,
    }
}

fn group(n: usize) -> String {
    parlor_domain::numbers::group_digits(n as u64)
}

fn size(part: &Part) -> usize {
    match part {
        Part::Text { text } => text.len(),
        Part::Image { url } => url.len(),
        Part::Header { source } => source.len(),
    }
}

/// One content item of a result.
fn part(item: &Value) -> Part {
    let text = |s: &str| Part::Text { text: s.to_owned() };
    let str_of = |key: &str| item[key].as_str().unwrap_or_default();
    match str_of("type") {
        "text" => text(str_of("text")),
        "image" if IMAGE_TYPES.contains(&str_of("mimeType")) => Part::Image {
            url: format!("data:{};base64,{}", str_of("mimeType"), str_of("data")),
        },
        "image" | "audio" => {
            let kind = str_of("type");
            let bytes = str_of("data").len() * 3 / 4;
            text(&format!("[{kind} {}: {bytes} bytes]", str_of("mimeType")))
        }
        "resource" => {
            let resource = &item["resource"];
            let uri = resource["uri"].as_str().unwrap_or_default();
            match resource["text"].as_str() {
                Some(body) => text(&format!("[resource {uri}]\n{body}")),
                None => {
                    let bytes = resource["blob"].as_str().map_or(0, |b| b.len() * 3 / 4);
                    text(&format!("[resource {uri}: {bytes} bytes]"))
                }
            }
        }
        "resource_link" => text(&format!("[link {} ({})]", str_of("uri"), str_of("name"))),
        _ => text(&item.to_string()),
    }
}

/// `parts` within `max` bytes: texts are cut at a character boundary, images that do not fit
/// are named instead, and a last text says how much was cut.
fn cut(parts: Vec<Part>, max: usize, total: u64) -> Vec<Part> {
    if total as usize <= max {
        return parts;
    }
    let mut room = max;
    let mut out = Vec::new();
    for part in parts {
        let take = size(&part);
        if take <= room {
            room -= take;
            out.push(part);
            continue;
        }
        if let Part::Text { text } = &part {
            let mut end = room;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            out.push(Part::Text {
                text: text[..end].to_owned(),
            });
        }
        room = 0;
    }
    out.push(Part::Text {
        text: format!("[result cut: {max} of {total} bytes kept (max_result_bytes)]"),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_items_become_parts_and_errors_stay_errors() {
        let result = json!({"content": [
            {"type": "text", "text": "12:00"},
            {"type": "image", "mimeType": "image/png", "data": "iVBO"},
            {"type": "image", "mimeType": "image/tiff", "data": "AAAA"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
        ], "isError": true});
        let outcome = read(&result, 1000, 64);
        assert!(!outcome.ok);
        assert_eq!(
            outcome.content[0],
            Part::Text {
                text: "12:00".into()
            }
        );
        assert_eq!(
            outcome.content[1],
            Part::Image {
                url: "data:image/png;base64,iVBO".into()
            }
        );
        assert_eq!(
            outcome.content[2],
            Part::Text {
                text: "[image image/tiff: 3 bytes]".into()
            }
        );
        assert!(outcome.text().contains("[resource file:///a]\nbody"));
        let structured = read(
            &json!({"content": [], "structuredContent": {"a": 1}}),
            100,
            64,
        );
        assert!(structured.ok);
        assert_eq!(structured.text(), r#"{"a":1}"#);
    }

    #[test]
    fn more_items_than_allowed_is_a_tool_error() {
        let items: Vec<Value> = (0..100_000)
            .map(|_| json!({"type": "text", "text": ""}))
            .collect();
        let outcome = read(&json!({"content": items}), 1000, 64);
        assert!(!outcome.ok);
        assert_eq!(outcome.content.len(), 1);
        assert!(
            outcome.text().contains("100,000 content items; at most 64"),
            "{}",
            outcome.text()
        );
        let few: Vec<Value> = (0..64)
            .map(|_| json!({"type": "text", "text": "a"}))
            .collect();
        assert!(read(&json!({"content": few}), 1000, 64).ok);
    }

    #[test]
    fn a_long_result_is_cut_with_a_marker() {
        let result = json!({"content": [{"type": "text", "text": "é".repeat(100)}]});
        let outcome = read(&result, 51, 64);
        assert_eq!(outcome.bytes, 200);
        let Part::Text { text } = &outcome.content[0] else {
            panic!()
        };
        assert_eq!(text.len(), 50, "cut on a character boundary");
        assert_eq!(
            outcome.content[1],
            Part::Text {
                text: "[result cut: 51 of 200 bytes kept (max_result_bytes)]".into()
            }
        );
    }
}
