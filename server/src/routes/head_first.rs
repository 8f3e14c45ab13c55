//! The chat page's head leaves before its conversation is rendered.
//!
//! The page is streamed in order: its head and shell, then the conversation once it is
//! read. When the read finished before the server wrote the head, hyper would take both
//! parts in one write, so the browser waited for the whole render (about 2 ms for 40 long
//! replies) before it could fetch the stylesheet and the WASM. [`HeadFirst`] gives the
//! connection one chance to send what it has after the first part.

use futures::Stream;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A body stream that pauses once, right after its first chunk, so the connection writes
/// that chunk before the rest is made. The pause wakes itself at once: nothing waits on it.
pub struct HeadFirst<S> {
    inner: S,
    state: Pause,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pause {
    BeforeHead,
    AfterHead,
    Done,
}

impl<S> HeadFirst<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            state: Pause::BeforeHead,
        }
    }
}

impl<S: Stream + Unpin> Stream for HeadFirst<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if self.state == Pause::AfterHead {
            self.state = Pause::Done;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = Pin::new(&mut self.inner).poll_next(cx);
        if self.state == Pause::BeforeHead && matches!(next, Poll::Ready(Some(_))) {
            self.state = Pause::AfterHead;
        }
        next
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

/// The response with its body sent head first.
pub fn head_first(response: axum::response::Response) -> axum::response::Response {
    response.map(|body| axum::body::Body::from_stream(HeadFirst::new(body.into_data_stream())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Counting(AtomicUsize);
    impl futures::task::ArcWake for Counting {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_connection_gets_a_chance_to_write_the_head_alone() {
        let parts = futures::stream::iter(["<head>", "<main>", "</main>"]);
        let mut body = HeadFirst::new(parts);
        let wakes = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = futures::task::waker(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut poll = || Pin::new(&mut body).poll_next(&mut cx);
        assert_eq!(poll(), Poll::Ready(Some("<head>")));
        // Every later part was ready, yet the stream pauses once, and asks to be polled again.
        assert_eq!(poll(), Poll::Pending);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll(), Poll::Ready(Some("<main>")));
        assert_eq!(poll(), Poll::Ready(Some("</main>")));
        assert_eq!(poll(), Poll::Ready(None));
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "it pauses only once");
    }

    #[test]
    fn an_empty_body_never_pauses() {
        let mut body = HeadFirst::new(futures::stream::empty::<&str>());
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(Pin::new(&mut body).poll_next(&mut cx), Poll::Ready(None));
    }
}
