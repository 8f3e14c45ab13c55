//! The request id every log line of a request carries and its response returns: the
//! `x-request-id` a proxy set, when it is one, or a new one. A client's own value is only
//! kept when it looks like an id (at most 128 of `A-Z a-z 0-9 . _ : -`, sent once): anything
//! else (a 250 KB header, text made to read like a log line) is replaced, never logged.

use axum::extract::Request;
use axum::http::HeaderName;

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// The longest request id kept, in bytes.
pub const MAX_LEN: usize = 128;

/// Whether `value` is kept as a request id.
fn is_id(value: &[u8]) -> bool {
    !value.is_empty()
        && value.len() <= MAX_LEN
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// `request` without a request id it sent that is not one (a new one is made for it).
pub async fn keep_only_ids(mut request: Request) -> Request {
    let values = request.headers().get_all(&HEADER);
    let mut sent = values.iter();
    let kept = matches!((sent.next(), sent.next()), (Some(one), None) if is_id(one.as_bytes()));
    if !kept {
        request.headers_mut().remove(&HEADER);
    }
    request
}

/// The span a request's log lines belong to: method, path and request id.
pub fn span(request: &Request) -> tracing::Span {
    let id = request
        .headers()
        .get(&HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %id,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_looks_like_an_id_is_kept() {
        for id in ["abc", "0f8e-11:proxy.a_b", &"a".repeat(MAX_LEN)] {
            assert!(is_id(id.as_bytes()), "{id}");
        }
        let long = "a".repeat(MAX_LEN + 1);
        for bad in ["", "a b", "x\"y", "id=1 level=ERROR", "ä", long.as_str()] {
            assert!(!is_id(bad.as_bytes()), "{bad:?}");
        }
    }
}
