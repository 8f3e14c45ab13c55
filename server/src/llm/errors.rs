//! What an endpoint's failures say, in words a person understands.

use serde::Deserialize;

/// A token count as a provider reported it, read leniently: a count that is negative, a
/// fraction or not a number reads as 0 (rounded down), so one odd field does not lose the
/// reply.
pub(super) fn lenient_count<'de, D: serde::Deserializer<'de>>(from: D) -> Result<u64, D::Error> {
    let value = serde_json::Value::deserialize(from)?;
    Ok(match value {
        serde_json::Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f > 0.0).map(|f| f as u64))
            .unwrap_or(0),
        _ => 0,
    })
}

/// The same for an optional count (`null` or absent: `None`).
pub(super) fn lenient_optional<'de, D: serde::Deserializer<'de>>(
    from: D,
) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(from)?;
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value) => lenient_count(value)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// The innermost cause of an error, in words ("connection refused", …).
pub(super) fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(next) = current.source() {
        current = next;
    }
    match current.downcast_ref::<std::io::Error>().map(|e| e.kind()) {
        Some(std::io::ErrorKind::ConnectionRefused) => "connection refused".into(),
        Some(std::io::ErrorKind::ConnectionReset) => "connection reset".into(),
        _ => current.to_string(),
    }
}

/// The message of an OpenAI-style error body, or a short description of the status.
pub(super) fn error_message(body: &str, status: reqwest::StatusCode) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: ErrorDetail,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ErrorDetail {
        Object { message: String },
        Text(String),
    }
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(ErrorBody {
            error: ErrorDetail::Object { message } | ErrorDetail::Text(message),
        }) => message,
        Err(_) => {
            let reason = status.canonical_reason().unwrap_or("error");
            let snippet: String = body.trim().chars().take(200).collect();
            if snippet.is_empty() {
                reason.to_owned()
            } else {
                format!("{reason} ({snippet})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_yield_their_message() {
        let status = reqwest::StatusCode::UNAUTHORIZED;
        assert_eq!(
            error_message(
                r#"{"error":{"message":"Incorrect API key","type":"x"}}"#,
                status
            ),
            "Incorrect API key"
        );
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#, status),
            "model not found"
        );
        assert_eq!(error_message("", status), "Unauthorized");
        assert_eq!(
            error_message("<html>oops</html>", status),
            "Unauthorized (<html>oops</html>)"
        );
    }
}
