//! What a connection may hold and how long it may take, before any request on it is read:
//! a client may keep at most so many connections open (a trusted proxy any number), a new
//! connection must send its first request's head within a time, and a connection on which
//! nothing moves either way for a while is closed. Without these, one client opening
//! connections that never finish a request (slowloris) held every file Parlor may open, and
//! no rate limit ever saw a request.

use crate::ops::rate_limit::network_of;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// The limits of [`Guarded`].
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections one client address (an IPv6 /64) may hold at once; 0: no limit.
    pub per_address: usize,
    /// Addresses that hold any number (trusted proxies: every client comes through them).
    pub exempt: Vec<IpAddr>,
    /// How long a new connection may take to send its first request's head.
    pub first_request: Duration,
    /// How long a connection may stay with nothing read or written.
    pub idle: Duration,
}

impl Limits {
    pub fn of(config: &crate::config::Config) -> Limits {
        Limits {
            per_address: config.connections.per_address,
            exempt: config
                .trusted_proxies
                .iter()
                .map(|ip| network_of(*ip))
                .collect(),
            first_request: config.connections.request_head,
            idle: config.connections.idle,
        }
    }
}

/// How often a chat reply's event stream sends a keep-alive: an idle time under twice this
/// would cut a reply whose model pauses.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

impl Limits {
    /// Warns when the idle time is under twice the chat stream's keep-alive: a reply whose
    /// model pauses that long would be cut.
    pub fn warn_if_replies_would_be_cut(&self) {
        if self.idle < KEEP_ALIVE * 2 {
            tracing::warn!(
                "PARLOR_IDLE_TIMEOUT_SECS={} is under twice the chat stream's keep-alive ({} s): \
                 a reply whose model pauses that long is cut",
                self.idle.as_secs(),
                KEEP_ALIVE.as_secs()
            );
        }
    }
}

type Open = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A listener that applies [`Limits`] to every connection it accepts.
pub struct Guarded {
    inner: TcpListener,
    limits: Arc<Limits>,
    open: Open,
}

impl Guarded {
    pub fn new(inner: TcpListener, limits: Limits) -> Guarded {
        Guarded {
            inner,
            limits: Arc::new(limits),
            open: Arc::default(),
        }
    }

    /// A place for a connection from `ip`, if it may have one.
    fn admit(&self, ip: IpAddr) -> Option<Option<Place>> {
        let key = network_of(ip);
        if self.limits.per_address == 0 || self.limits.exempt.contains(&key) {
            return Some(None);
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let held = open.entry(key).or_insert(0);
        if *held >= self.limits.per_address {
            return None;
        }
        *held += 1;
        Some(Some(Place {
            open: self.open.clone(),
            key,
        }))
    }
}

/// One connection's place in its address's count, given back when it closes.
struct Place {
    open: Open,
    key: IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = open.get_mut(&self.key) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                open.remove(&self.key);
            }
        }
    }
}

impl axum::serve::Listener for Guarded {
    type Io = GuardedIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedIo, SocketAddr) {
        loop {
            let (tcp, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            let Some(place) = self.admit(addr.ip()) else {
                crate::ops::metrics::rate_limited("connections");
                tracing::debug!("refused a connection from {addr}: it holds its limit");
                drop(tcp);
                continue;
            };
            // Pages stream in parts and replies as events: each part goes out when written.
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!("TCP_NODELAY not set on a connection: {e}");
            }
            return (GuardedIo::new(tcp, place, &self.limits), addr);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection under [`Limits`]: its first request's head must arrive in time, and a
/// connection that stays still too long ends with a timed-out error, which closes it.
pub struct GuardedIo {
    tcp: TcpStream,
    _place: Option<Place>,
    deadline: Pin<Box<Sleep>>,
    idle: Duration,
    /// How much of `\r\n\r\n` (the end of a head) the bytes read so far end with; 4 once
    /// the first head is in.
    head_end: u8,
}

impl GuardedIo {
    fn new(tcp: TcpStream, place: Option<Place>, limits: &Limits) -> GuardedIo {
        GuardedIo {
            tcp,
            _place: place,
            deadline: Box::pin(tokio::time::sleep(limits.first_request)),
            idle: limits.idle,
            head_end: 0,
        }
    }

    fn head_is_in(&self) -> bool {
        self.head_end == 4
    }

    /// Notes bytes read: the first head's end, then activity.
    fn read(&mut self, bytes: &[u8]) {
        if !self.head_is_in() {
            for byte in bytes {
                self.head_end = match (self.head_end, byte) {
                    (0 | 2, b'\r') => self.head_end + 1,
                    (1 | 3, b'\n') => self.head_end + 1,
                    (_, b'\r') => 1,
                    _ => 0,
                };
                if self.head_is_in() {
                    break;
                }
            }
        }
        self.moved();
    }

    /// Something moved: once the first head is in, the idle time starts again.
    fn moved(&mut self) {
        if self.head_is_in() {
            let next = Instant::now() + self.idle;
            self.deadline.as_mut().reset(next);
        }
    }

    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline.as_mut().poll(cx).is_ready()
    }

    /// What a write came to: written bytes are activity; a client that reads nothing back
    /// holds the connection as surely as one that sends nothing, so a blocked write ends at
    /// the deadline too.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.moved();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(timed_out(self.head_is_in()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn timed_out(head_is_in: bool) -> io::Error {
    let what = match head_is_in {
        true => "the connection stayed idle too long",
        false => "the request's head did not arrive in time",
    };
    io::Error::new(io::ErrorKind::TimedOut, what)
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = buf.filled()[before..].to_vec();
                if !new.is_empty() {
                    self.read(&new);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(timed_out(self.head_is_in()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.tcp).poll_write(cx, data);
        self.wrote(cx, written)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        self.wrote(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}
