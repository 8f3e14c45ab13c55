//! A streamed reply as server-sent events, read the same way for every protocol: an idle
//! timeout between pieces, a clear error when the stream ends before the model finished,
//! and no event longer than [`MAX_EVENT_BYTES`] held (a server that never ends a line is
//! cut, not buffered). Each protocol says what one event means ([`Protocol`]).

use super::{LlmError, LlmEvent, LlmStream};
use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use std::time::Duration;

/// The longest line of a stream Parlor reads (a model's event is a few kilobytes, a tool
/// call's arguments are held to 1 MiB).
pub(super) const MAX_EVENT_BYTES: usize = 1 << 20;
/// The most events and bytes one reply may stream (a reply of 32,000 tokens is about as many
/// events and a few MiB): a server that never stops talking is cut, whatever it sends.
pub(super) const MAX_STREAM_EVENTS: usize = 500_000;
pub(super) const MAX_STREAM_BYTES: usize = 256 << 20;

/// What one event brought.
pub enum Piece {
    /// Nothing to pass on (an empty event, a ping, usage, a finish reason before the end).
    Nothing,
    Text(String),
    /// The stream's last item.
    Last(Result<LlmEvent, LlmError>),
}

/// A protocol's reading of its events.
pub trait Protocol: Send + 'static {
    fn read(&mut self, event: &Event) -> Piece;
    /// The stream closed without a last event: finished if the protocol knows it was.
    fn closed(&mut self) -> Result<LlmEvent, LlmError>;
}

/// Why the bytes stopped.
#[derive(Debug)]
enum Cut {
    Transport,
    TooLong,
    Endless,
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::Transport => f.write_str("the connection failed"),
            Cut::TooLong => write!(f, "a line longer than {} MiB", MAX_EVENT_BYTES >> 20),
            Cut::Endless => write!(f, "more than {} MiB in one reply", MAX_STREAM_BYTES >> 20),
        }
    }
}

/// `bytes`, failing once a line runs past [`MAX_EVENT_BYTES`].
fn bounded(
    bytes: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, Cut>> + Send + 'static {
    bytes.scan((0usize, 0usize), |(open_line, total), chunk| {
        let item = match chunk {
            Err(_) => Err(Cut::Transport),
            Ok(chunk) => {
                *open_line = match chunk.iter().rposition(|&b| b == b'\n' || b == b'\r') {
                    Some(at) => chunk.len() - at - 1,
                    None => *open_line + chunk.len(),
                };
                *total += chunk.len();
                match (*open_line > MAX_EVENT_BYTES, *total > MAX_STREAM_BYTES) {
                    (true, _) => Err(Cut::TooLong),
                    (_, true) => Err(Cut::Endless),
                    _ => Ok(chunk),
                }
            }
        };
        futures::future::ready(Some(item))
    })
}

type Events = std::pin::Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<Cut>>> + Send>>;

struct Reader<P> {
    events: Events,
    protocol: P,
    ended: bool,
    timeout: Duration,
    /// Events read so far (at most [`MAX_STREAM_EVENTS`]).
    read: usize,
}

/// The reply in `response`'s body, read by `protocol`, waiting at most `timeout` for each
/// piece.
pub(super) fn read<P: Protocol>(
    response: reqwest::Response,
    protocol: P,
    timeout: Duration,
) -> LlmStream {
    let reader = Reader {
        events: Box::pin(bounded(response.bytes_stream()).eventsource()),
        protocol,
        ended: false,
        timeout,
        read: 0,
    };
    futures::stream::unfold(reader, Reader::next).boxed()
}

impl<P: Protocol> Reader<P> {
    async fn next(mut self) -> Option<(Result<LlmEvent, LlmError>, Self)> {
        if self.ended {
            return None;
        }
        loop {
            let event = match tokio::time::timeout(self.timeout, self.events.next()).await {
                Err(_) => {
                    let secs = self.timeout.as_secs();
                    return self.end(Err(LlmError::Timeout { secs }));
                }
                Ok(None) => {
                    let last = self.protocol.closed();
                    return self.end(last);
                }
                Ok(Some(Err(EventStreamError::Transport(Cut::Transport)))) => {
                    return self.end(Err(LlmError::Dropped))
                }
                Ok(Some(Err(e))) => {
                    let detail = e.to_string();
                    return self.end(Err(LlmError::Malformed { detail }));
                }
                Ok(Some(Ok(event))) => event,
            };
            self.read += 1;
            if self.read > MAX_STREAM_EVENTS {
                let detail = format!("more than {MAX_STREAM_EVENTS} events in one reply");
                return self.end(Err(LlmError::Malformed { detail }));
            }
            match self.protocol.read(&event) {
                Piece::Nothing => continue,
                Piece::Text(text) => return Some((Ok(LlmEvent::Delta(text)), self)),
                Piece::Last(last) => return self.end(last),
            }
        }
    }

    fn end(
        mut self,
        item: Result<LlmEvent, LlmError>,
    ) -> Option<(Result<LlmEvent, LlmError>, Self)> {
        self.ended = true;
        Some((item, self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_that_never_ends_is_cut_at_the_bound() {
        let piece = Bytes::from(vec![b'x'; 1 << 18]);
        let endless = futures::stream::repeat_with(move || Ok(piece.clone()));
        let items: Vec<_> = bounded(endless).take(6).collect().await;
        assert!(items[..4].iter().all(Result::is_ok));
        assert!(matches!(items[4], Err(Cut::TooLong)), "{:?}", items[4]);
        // Lines that end are never counted together.
        let lines = futures::stream::repeat_with(|| Ok(Bytes::from(vec![b'y'; 1 << 19])))
            .take(20)
            .enumerate()
            .map(|(i, chunk)| match (i % 2, chunk) {
                (1, Ok(_)) => Ok(Bytes::from_static(b"\n\n")),
                (_, chunk) => chunk,
            });
        assert!(bounded(lines).all(|c| async move { c.is_ok() }).await);
    }

    /// Reads every event and passes nothing on (as a stream of tool-call pieces is read).
    struct Silent;

    impl Protocol for Silent {
        fn read(&mut self, _: &Event) -> Piece {
            Piece::Nothing
        }
        fn closed(&mut self) -> Result<LlmEvent, LlmError> {
            Err(LlmError::Dropped)
        }
    }

    #[tokio::test]
    async fn a_server_that_never_stops_sending_small_events_is_cut() {
        let events = futures::stream::repeat_with(|| {
            Ok::<_, std::io::Error>(Bytes::from_static(b"data: {}\n\ndata: {}\n\n"))
        });
        let response = axum::http::Response::new(reqwest::Body::wrap_stream(events));
        let mut stream = read(response.into(), Silent, Duration::from_secs(5));
        match stream.next().await {
            Some(Err(LlmError::Malformed { detail })) => {
                assert!(detail.contains("500000 events"), "{detail}")
            }
            other => panic!("not cut: {other:?}"),
        }
        assert!(stream.next().await.is_none());
    }
}
