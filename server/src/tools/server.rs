//! One tool server, kept running: a stdio server is started, restarted with backoff when it
//! exits, and ended (its standard input closed, then SIGTERM, then kill, to its whole
//! process group) when Parlor stops; a streamable HTTP server is connected to, and
//! reconnected to the same way. A server whose calls time out [`HUNG_AFTER`] times in a row
//! is taken down and started again. While it is down its calls answer a tool error; its
//! status is what `/readyz` and the debug panel show.

use super::connect::{self, Client, Connection, Fault};
use super::spec::ServerSpec;
use parlor_domain::tool::list::Listed;
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

/// The first pause before a server is started again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Starting a server (and listing its tools) may take as long as one of its calls, and at
/// least this long.
const MIN_START_TIMEOUT: Duration = Duration::from_secs(2);
/// Calls timed out in a row after which a server is taken to have stopped answering.
pub const HUNG_AFTER: u32 = 3;

/// What a server is doing, as `/readyz` and the debug panel report it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Status {
    Starting,
    Ready {
        tools: usize,
    },
    /// It failed to start, exited or stopped answering; it is started again after
    /// `retry_secs`.
    Down {
        error: String,
        retry_secs: u64,
    },
    Stopped,
    /// A per-user server: one process or session per user, `running` now.
    PerUser {
        running: usize,
    },
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Starting => f.write_str("starting"),
            Status::Ready { tools } => write!(f, "ready ({tools} tools)"),
            Status::Down { error, retry_secs } => {
                write!(f, "down: {error} (retrying in {retry_secs} s)")
            }
            Status::Stopped => f.write_str("stopped"),
            Status::PerUser { running } => write!(f, "per user ({running} running)"),
        }
    }
}

impl Status {
    /// As anyone who may chat sees it (the debug panel): a server that is down says so, but
    /// not why; its error may name a command or a URL with its secrets, and is for admins
    /// (`/readyz`, the log).
    pub fn for_users(&self) -> String {
        match self {
            Status::Down { retry_secs, .. } => format!("down (retrying in {retry_secs} s)"),
            other => other.to_string(),
        }
    }
}

/// A server that answers: the peer to call and the tools it offers (checked).
#[derive(Clone)]
pub struct Live {
    pub peer: Peer<RoleClient>,
    pub tools: Arc<Vec<Listed>>,
}

/// One declared server and its current connection.
pub struct ToolServer {
    pub spec: ServerSpec,
    live: RwLock<Option<Live>>,
    status: watch::Sender<Status>,
    /// What was dropped from or changed in its tool list, and why.
    warnings: RwLock<Vec<String>>,
    /// Why Parlor closed the current connection, when it did.
    fault: Fault,
    /// Calls timed out in a row.
    timeouts: AtomicU32,
    /// Asks the supervisor to take the server down and start it again.
    restart: Notify,
    /// The first start has ended (ready or failed).
    settled: AtomicBool,
}

impl ToolServer {
    pub fn new(spec: ServerSpec) -> Arc<ToolServer> {
        Arc::new(ToolServer {
            spec,
            live: RwLock::new(None),
            status: watch::Sender::new(Status::Starting),
            warnings: RwLock::default(),
            fault: Fault::default(),
            timeouts: AtomicU32::new(0),
            restart: Notify::new(),
            settled: AtomicBool::new(false),
        })
    }

    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// Whether its first start has ended, ready or not.
    pub fn settled(&self) -> bool {
        self.settled.load(Ordering::Relaxed)
    }

    /// What was dropped from or changed in its tool list.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.read().map(|w| w.clone()).unwrap_or_default()
    }

    /// The connection, when the server answers.
    pub fn live(&self) -> Option<Live> {
        self.live.read().ok().and_then(|l| l.clone())
    }

    /// Why Parlor closed the last connection, if it did.
    pub fn fault(&self) -> Option<String> {
        self.fault.lock().ok().and_then(|f| f.clone())
    }

    /// How long a start may take.
    pub fn start_timeout(&self) -> Duration {
        self.spec.timeout.max(MIN_START_TIMEOUT)
    }

    /// Waits while the server is starting, at most `limit`.
    pub async fn started(&self, limit: Duration) {
        let mut status = self.status.subscribe();
        let _ = tokio::time::timeout(limit, status.wait_for(|s| *s != Status::Starting)).await;
    }

    /// A call answered: the count of timeouts in a row starts again.
    pub fn answered(&self) {
        self.timeouts.store(0, Ordering::Relaxed);
    }

    /// A call timed out; after [`HUNG_AFTER`] in a row the server is started again.
    pub fn timed_out(&self) {
        if self.timeouts.fetch_add(1, Ordering::Relaxed) + 1 >= HUNG_AFTER {
            // Wakes the supervisor that serves the connection now; no permit is left for
            // the next one (several calls timing out together restart it once).
            self.restart.notify_waiters();
        }
    }

    fn set(&self, status: Status, live: Option<Live>) {
        if let Ok(mut l) = self.live.write() {
            *l = live;
        }
        if !matches!(status, Status::Starting) {
            self.settled.store(true, Ordering::Relaxed);
        }
        self.status.send_replace(status);
    }

    fn offer(&self, checked: parlor_domain::tool::list::Checked, peer: Peer<RoleClient>) {
        if let Ok(mut w) = self.warnings.write() {
            *w = checked.warnings.iter().map(ToString::to_string).collect();
        }
        let live = Live {
            peer,
            tools: Arc::new(checked.tools),
        };
        let count = live.tools.len();
        tracing::info!("tool server {:?} is ready ({count} tools)", self.spec.id);
        self.set(Status::Ready { tools: count }, Some(live));
    }

    /// Keeps the server running until `stop` is cancelled; returns once it has ended.
    pub async fn supervise(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            self.set(Status::Starting, None);
            if let Ok(mut fault) = self.fault.lock() {
                *fault = None;
            }
            self.timeouts.store(0, Ordering::Relaxed);
            let client = Client::default();
            // Started on a task of its own: a panic in a transport is a start that failed.
            let limit = self.start_timeout();
            let starting = tokio::spawn({
                let server = self.clone();
                let client = client.clone();
                async move {
                    let connecting = connect::connect(&server.spec, client, server.fault.clone());
                    tokio::time::timeout(limit, connecting).await
                }
            });
            tokio::pin!(starting);
            let started = tokio::select! {
                started = &mut starting => started,
                _ = stop.cancelled() => {
                    // Dropping the start kills what it started (its whole process group).
                    starting.abort();
                    let _ = starting.await;
                    break;
                }
            };
            let started = started.unwrap_or_else(|e| Ok(Err(format!("the client failed ({e})"))));
            let error = match started {
                Ok(Ok(connection)) => {
                    backoff = FIRST_BACKOFF;
                    match self.serve(connection, client, &stop).await {
                        Ended::Stopped => break,
                        Ended::Exited(why) => why,
                    }
                }
                Ok(Err(error)) => error,
                Err(_) => format!("did not start within {} s", limit.as_secs()),
            };
            tracing::warn!("tool server {:?} is down: {error}", self.spec.id);
            let retry_secs = backoff.as_secs();
            self.set(Status::Down { error, retry_secs }, None);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        self.set(Status::Stopped, None);
    }

    /// Offers the server's tools (listed again when it says they changed) until the
    /// connection ends, Parlor stops, or the server is taken to be hung.
    async fn serve(
        &self,
        connection: Connection,
        client: Client,
        stop: &CancellationToken,
    ) -> Ended {
        let Connection {
            service,
            process,
            checked,
        } = connection;
        let peer = service.peer().clone();
        self.offer(checked, peer.clone());
        let token = service.cancellation_token();
        let waiting = service.waiting();
        tokio::pin!(waiting);
        let ended = loop {
            tokio::select! {
                _ = stop.cancelled() => break Ended::Stopped,
                _ = self.restart.notified() => break Ended::Exited(format!(
                    "it stopped answering ({HUNG_AFTER} calls in a row timed out)"
                )),
                _ = client.tools_changed.notified() => {
                    // Read again within the start timeout; Parlor stopping does not wait.
                    let listing = tokio::time::timeout(
                        self.start_timeout(),
                        connect::tools(&self.spec.id, &peer),
                    );
                    let listed = tokio::select! {
                        listed = listing => listed,
                        _ = stop.cancelled() => break Ended::Stopped,
                    };
                    match listed {
                        Ok(Ok(checked)) => self.offer(checked, peer.clone()),
                        Ok(Err(e)) => tracing::warn!("tool server {:?}: {e}", self.spec.id),
                        Err(_) => tracing::warn!(
                            "tool server {:?} did not list its tools again in time",
                            self.spec.id
                        ),
                    }
                }
                quit = &mut waiting => {
                    let why = self.fault().unwrap_or_else(|| format!("the connection ended ({quit:?})"));
                    if let Some(group) = process {
                        group.end().await;
                    }
                    return Ended::Exited(why);
                }
            }
        };
        // Closing the transport closes a stdio server's input; the group is then given time
        // to end, then SIGTERM, then killed: waited for, so no process outlives Parlor.
        token.cancel();
        self.set(Status::Starting, None);
        let _ = waiting.await;
        if let Some(group) = process {
            group.end().await;
        }
        ended
    }
}

enum Ended {
    Stopped,
    Exited(String),
}
