//! Keeps the API key out of everything Parlor shows or logs: an upstream's error text can
//! echo the key, whole or cut short (a proxy's error page ending in `sk-…`), or another
//! bearer token.

use std::collections::HashSet;

/// The shortest piece of the key that is redacted wherever it appears.
const MIN_FRAGMENT: usize = 8;
/// Replaces what was removed.
pub const REDACTED: &str = "[redacted]";

/// `text` with every fragment of `key` of at least 8 bytes, every `Bearer <token>` and every
/// `sk-…` token replaced by `[redacted]`.
pub fn redact(text: &str, key: Option<&str>) -> String {
    let without_key = match key.filter(|k| !k.is_empty()) {
        Some(key) => redact_fragments(text, key),
        None => text.to_owned(),
    };
    redact_tokens(&without_key)
}

/// Replaces the longest run at each position that is a piece of `key` (8 bytes or more).
fn redact_fragments(text: &str, key: &str) -> String {
    let (text_bytes, key_bytes) = (text.as_bytes(), key.as_bytes());
    if key_bytes.len() < MIN_FRAGMENT {
        return text.replace(key, REDACTED);
    }
    let windows: HashSet<&[u8]> = key_bytes.windows(MIN_FRAGMENT).collect();
    let mut out = Vec::with_capacity(text_bytes.len());
    let mut i = 0;
    while i < text_bytes.len() {
        let end = i + MIN_FRAGMENT;
        if end <= text_bytes.len() && windows.contains(&text_bytes[i..end]) {
            let mut len = MIN_FRAGMENT;
            while i + len < text_bytes.len() && contains(key_bytes, &text_bytes[i..=i + len]) {
                len += 1;
            }
            out.extend_from_slice(REDACTED.as_bytes());
            i += len;
        } else {
            out.push(text_bytes[i]);
            i += 1;
        }
    }
    // A cut can fall inside a multi-byte character only if the key holds non-ASCII text;
    // such bytes are replaced rather than kept.
    String::from_utf8_lossy(&out).into_owned()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+' | '/' | '=')
}

/// Replaces the token after `Bearer ` (any case) and any word starting `sk-` that is longer
/// than a few characters: the shape of API keys and bearer tokens, whoever's they are.
fn redact_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let lower_start = rest.get(..7).map(str::to_ascii_lowercase);
        let token_start = if lower_start.as_deref() == Some("bearer ") {
            out.push_str(&rest[..7]);
            rest = &rest[7..];
            Some(0)
        } else if rest.starts_with("sk-") && !out.ends_with(is_token_char) {
            Some(3)
        } else {
            None
        };
        if let Some(prefix) = token_start {
            let len = rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len());
            if len >= prefix + 4 {
                out.push_str(REDACTED);
                rest = &rest[len..];
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-proj-4f9Qx7LmZ2vB8nT1cR6yW0";

    #[test]
    fn the_whole_key_and_any_long_piece_of_it_are_redacted() {
        let page = format!("<h1>502</h1><p>upstream rejected key {}…</p>", &KEY[..14]);
        let out = redact(&page, Some(KEY));
        assert!(!out.contains(&KEY[..8]), "{out}");
        assert!(out.contains("rejected key [redacted]…"), "{out}");
        // A piece from the middle, without the sk- prefix.
        let out = redact(&format!("token=..{}..", &KEY[9..22]), Some(KEY));
        assert_eq!(out, "token=..[redacted]..");
        let out = redact(&format!("key {KEY} again {KEY}"), Some(KEY));
        assert_eq!(out, "key [redacted] again [redacted]");
    }

    #[test]
    fn short_coincidences_and_ordinary_text_stay() {
        let text = "HTTP 502: Bad gateway (proj) at 2026-11-23, retry later; skip-this";
        assert_eq!(redact(text, Some(KEY)), text);
        assert_eq!(redact("tasks are done", None), "tasks are done");
        assert_eq!(
            redact("ünï ✓ cödé", Some("xünïcödé-key-value")),
            "ünï ✓ cödé"
        );
    }

    #[test]
    fn bearer_tokens_and_key_shaped_words_are_redacted_whoever_they_belong_to() {
        assert_eq!(
            redact("Authorization: Bearer abc.def-123_xyz", None),
            "Authorization: Bearer [redacted]"
        );
        assert_eq!(
            redact("AUTHORIZATION: bearer eyJhbGciOi", None),
            "AUTHORIZATION: bearer [redacted]"
        );
        assert_eq!(
            redact("invalid key sk-other0123456789, see docs", None),
            "invalid key [redacted], see docs"
        );
        // Too short to be a key, or part of another word: kept.
        assert_eq!(redact("risk-free sk-1", None), "risk-free sk-1");
    }
}
