//! A panic is written to the log as an error event, in the log's own format: under
//! `PARLOR_LOG_FORMAT=json` it is one JSON line like every other, so a log collector parses
//! it (Rust's default hook writes free text to stderr). The event names where the panic
//! happened and on which thread, and carries the backtrace when `RUST_BACKTRACE` asks for
//! one.

use std::backtrace::{Backtrace, BacktraceStatus};

/// Replaces the panic hook with one that logs through `tracing`.
pub fn log_panics() {
    std::panic::set_hook(Box::new(log_panic));
}

fn log_panic(info: &std::panic::PanicHookInfo<'_>) {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)");
    let location = info.location().map(ToString::to_string).unwrap_or_default();
    let thread = std::thread::current();
    let thread = thread.name().unwrap_or("unnamed");
    let backtrace = Backtrace::capture();
    if backtrace.status() == BacktraceStatus::Captured {
        tracing::error!(
            panic.location = %location,
            panic.thread = thread,
            panic.backtrace = %backtrace,
            "panicked: {message}"
        );
    } else {
        tracing::error!(panic.location = %location, panic.thread = thread, "panicked: {message}");
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_panic_is_one_json_line_of_the_log_with_its_place() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(move || writer.clone())
            .finish();
        // The hook is the process's: set only while this thread panics, then put back.
        let previous = std::panic::take_hook();
        super::log_panics();
        let panicked = std::thread::Builder::new()
            .name("worker-7".into())
            .spawn(move || {
                tracing::subscriber::with_default(subscriber, || {
                    let id = "c0ffee";
                    panic!("no conversation {id}");
                })
            })
            .unwrap()
            .join();
        std::panic::set_hook(previous);
        assert!(panicked.is_err());
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let event: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(event["level"], "ERROR", "{event}");
        let fields = &event["fields"];
        assert_eq!(
            fields["message"], "panicked: no conversation c0ffee",
            "{event}"
        );
        assert_eq!(fields["panic.thread"], "worker-7", "{event}");
        assert!(
            fields["panic.location"]
                .as_str()
                .is_some_and(|l| l.contains("ops/panics.rs:")),
            "{event}"
        );
    }
}
