//! How a model endpoint has answered lately, for an admin's `/readyz`: when it last
//! answered a request, and its last error (without the key).

use std::sync::{Arc, Mutex};

/// Shared by a client's clones.
#[derive(Clone, Default)]
pub struct Health(Arc<Mutex<Seen>>);

#[derive(Default)]
struct Seen {
    last_ok_ms: Option<i64>,
    last_error: Option<(i64, String)>,
}

impl Health {
    /// Notes a request's outcome: answered (`None`), or the error, as the user saw it.
    pub fn note(&self, error: Option<String>) {
        if let Ok(mut seen) = self.0.lock() {
            let now = crate::store::now_ms();
            match error {
                None => seen.last_ok_ms = Some(now),
                Some(why) => seen.last_error = Some((now, why)),
            }
        }
    }

    /// `ok`, `not called yet`, `failing: <error> (n s ago)` while its last request failed,
    /// or `ok (last error n s ago: <error>)`.
    pub fn describe(&self) -> String {
        let Ok(seen) = self.0.lock() else {
            return "unknown".into();
        };
        let ago = |ms: i64| (crate::store::now_ms() - ms).max(0) / 1000;
        match (&seen.last_error, seen.last_ok_ms) {
            (Some((at, why)), ok) if ok.is_none_or(|ok| ok < *at) => {
                format!("failing: {why} ({} s ago)", ago(*at))
            }
            (Some((at, why)), _) => format!("ok (last error {} s ago: {why})", ago(*at)),
            (None, Some(_)) => "ok".into(),
            (None, None) => "not called yet".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_last_outcome_decides_and_an_old_error_is_still_told() {
        let health = super::Health::default();
        assert_eq!(health.describe(), "not called yet");
        health.note(Some("refused".into()));
        assert!(health.describe().starts_with("failing: refused ("));
        std::thread::sleep(std::time::Duration::from_millis(2));
        health.note(None);
        assert!(
            health.describe().starts_with("ok (last error "),
            "{}",
            health.describe()
        );
    }
}
