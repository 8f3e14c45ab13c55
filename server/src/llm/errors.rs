//! What an endpoint's failures say, in words a person understands.

use serde::Deserialize;

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
