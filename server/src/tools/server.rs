//! One tool server, kept running: a stdio server is started, restarted with backoff when it
//! exits, and ended (its standard input closed, then SIGTERM, then kill) when Parlor stops;
//! a streamable HTTP server is connected to, and reconnected to the same way. While it is
//! down its calls answer a tool error; its status is what `/readyz` and the debug panel show.

use super::spec::{ServerSpec, Transport};
use rmcp::model::Tool;
use rmcp::service::{Peer, RunningService};
use rmcp::{RoleClient, ServiceExt};
use serde::Serialize;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The first pause before a server is started again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Starting a server (and listing its tools) may take as long as one of its calls, and at
/// least this long.
const MIN_START_TIMEOUT: Duration = Duration::from_secs(2);

/// What a server is doing, as `/readyz` and the debug panel report it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Status {
    Starting,
    Ready {
        tools: usize,
    },
    /// It failed to start or exited; it is started again after `retry_secs`.
    Down {
        error: String,
        retry_secs: u64,
    },
    Stopped,
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
        }
    }
}

/// A server that answers: the peer to call and the tools it lists.
#[derive(Clone)]
pub struct Live {
    pub peer: Peer<RoleClient>,
    pub tools: Arc<Vec<Tool>>,
}

/// One declared server and its current connection.
pub struct ToolServer {
    pub spec: ServerSpec,
    live: RwLock<Option<Live>>,
    status: RwLock<Status>,
}

impl ToolServer {
    pub fn new(spec: ServerSpec) -> Arc<ToolServer> {
        Arc::new(ToolServer {
            spec,
            live: RwLock::new(None),
            status: RwLock::new(Status::Starting),
        })
    }

    pub fn status(&self) -> Status {
        self.status
            .read()
            .map(|s| s.clone())
            .unwrap_or(Status::Stopped)
    }

    /// The connection, when the server answers.
    pub fn live(&self) -> Option<Live> {
        self.live.read().ok().and_then(|l| l.clone())
    }

    fn set(&self, status: Status, live: Option<Live>) {
        if let Ok(mut s) = self.status.write() {
            *s = status;
        }
        if let Ok(mut l) = self.live.write() {
            *l = live;
        }
    }

    /// Keeps the server running until `stop` is cancelled; returns once it has ended.
    pub async fn supervise(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            self.set(Status::Starting, None);
            // Started on a task of its own: a panic in a transport is a start that failed.
            let limit = self.spec.timeout.max(MIN_START_TIMEOUT);
            let starting = tokio::spawn({
                let server = self.clone();
                async move { tokio::time::timeout(limit, server.connect()).await }
            });
            let started = starting
                .await
                .unwrap_or_else(|e| Ok(Err(format!("the client failed ({e})"))));
            let error = match started {
                Ok(Ok((service, tools))) => {
                    backoff = FIRST_BACKOFF;
                    let live = Live {
                        peer: service.peer().clone(),
                        tools: Arc::new(tools),
                    };
                    let count = live.tools.len();
                    tracing::info!("tool server {:?} is ready ({count} tools)", self.spec.id);
                    self.set(Status::Ready { tools: count }, Some(live));
                    match self.serve(service, &stop).await {
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

    /// Waits for the connection to end, or ends it when Parlor stops.
    async fn serve(
        &self,
        service: RunningService<RoleClient, ()>,
        stop: &CancellationToken,
    ) -> Ended {
        let token = service.cancellation_token();
        let waiting = service.waiting();
        tokio::pin!(waiting);
        tokio::select! {
            _ = stop.cancelled() => {
                token.cancel();
                // Closing the transport ends a stdio server (stdin closed, then SIGTERM, then
                // kill): waited for, so no process outlives Parlor's shutdown.
                let _ = waiting.await;
                Ended::Stopped
            }
            quit = &mut waiting => Ended::Exited(format!("the connection ended ({quit:?})")),
        }
    }

    async fn connect(&self) -> Result<(RunningService<RoleClient, ()>, Vec<Tool>), String> {
        let service = match &self.spec.transport {
            Transport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear().envs(env).kill_on_drop(true);
                let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::inherit())
                    .spawn()
                    .map_err(|e| format!("cannot start {command:?}: {e}"))?;
                ().serve(transport).await.map_err(|e| e.to_string())?
            }
            Transport::Http { url, headers } => {
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                config.custom_headers = headers
                    .iter()
                    .filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?)))
                    .collect();
                let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
                ().serve(transport).await.map_err(|e| e.to_string())?
            }
            Transport::Builtin => return Err("the built-in server runs in process".into()),
        };
        let tools = service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| format!("cannot list its tools: {e}"))?;
        Ok((service, tools))
    }
}

enum Ended {
    Stopped,
    Exited(String),
}
