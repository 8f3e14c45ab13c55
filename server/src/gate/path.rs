//! The spelling of a request's path, checked before anything routes it: a path that could
//! mean another path to some part of the stack (a dot segment, an encoded slash or
//! backslash, a control character) is refused, so every layer sees the path the gate saw.

/// Why a path is refused, said to the client.
#[derive(Debug, PartialEq, Eq)]
pub struct BadPath(pub &'static str);

/// Checks the raw (still percent-encoded) path of a request. Accepted: `/`, and `/`-separated
/// segments that are neither empty (no `//`), nor `.` or `..` however they are encoded, and
/// that hold no backslash, encoded `/` or `\`, and no control character (raw or encoded).
/// A trailing `/` is a spelling the route table may or may not name.
pub fn check(path: &str) -> Result<(), BadPath> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(BadPath("a path starts with /"));
    };
    if rest.is_empty() {
        return Ok(());
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() && i != last {
            return Err(BadPath("a path has no empty segment (//)"));
        }
        check_segment(segment)?;
    }
    Ok(())
}

fn check_segment(segment: &str) -> Result<(), BadPath> {
    let mut decoded = Vec::with_capacity(segment.len());
    let bytes = segment.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if byte == b'%' {
            let pair = bytes.get(i + 1..i + 3);
            let value = pair
                .and_then(|p| std::str::from_utf8(p).ok())
                .and_then(|p| u8::from_str_radix(p, 16).ok());
            let Some(value) = value else {
                return Err(BadPath("a % in a path starts two hex digits"));
            };
            match value {
                b'/' => return Err(BadPath("a path has no encoded slash (%2F)")),
                b'\\' => return Err(BadPath("a path has no backslash")),
                _ => {}
            }
            decoded.push(value);
            i += 3;
            continue;
        }
        if byte == b'\\' {
            return Err(BadPath("a path has no backslash"));
        }
        decoded.push(byte);
        i += 1;
    }
    if decoded.iter().any(|b| b.is_ascii_control()) {
        return Err(BadPath("a path has no control character"));
    }
    if decoded == b"." || decoded == b".." {
        return Err(BadPath("a path has no . or .. segment"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_pass() {
        for path in [
            "/",
            "/chat",
            "/chat/",
            "/api/chat/general/sessions/a.b",
            "/pkg/parlor.3f2a.wasm",
            "/api/chat/general/sessions/x..y",
            "/api/chat/general/sessions/%41bc",
            "/a/...",
        ] {
            assert_eq!(check(path), Ok(()), "{path}");
        }
    }

    #[test]
    fn paths_that_mean_another_path_are_refused() {
        for path in [
            "",
            "chat",
            "/auth/../chat",
            "/auth/./chat",
            "/auth/%2e%2e/chat",
            "/auth/%2E%2E/chat",
            "/auth/.%2e/chat",
            "/auth/%2e./chat",
            "/auth/%2e/chat",
            "/..",
            "/.",
            "/auth/..",
            "//chat",
            "/auth//chat",
            "/auth%2fchat",
            "/auth%2Fchat",
            "/auth\\chat",
            "/auth%5cchat",
            "/auth%5C..%5Cchat",
            "/chat%00",
            "/chat%0a",
            "/chat%0D%0Aset-cookie:x",
            "/chat%09",
            "/chat%7f",
            "/chat%",
            "/chat%2",
            "/chat%zz",
        ] {
            assert!(check(path).is_err(), "{path}");
        }
    }
}
