//! Tools: the MCP servers an operator declares (spec `tools.md`), with Parlor as their client.
//!
//! [`Tools`] starts every declared server ([`server`]), says which tools an agent is offered
//! on a turn, runs one call (with its timeout, cancelled by Stop) and turns every fault into
//! an error result for the model ([`result`]), and ends the servers when Parlor stops.

pub mod approval;
pub mod bounds;
pub mod builtin;
pub mod connect;
pub mod result;
pub mod server;
pub mod spec;
pub mod verdict;

use parlor_domain::message::ToolCall;
use parlor_domain::tool::list::MAX_TOOLS;
use parlor_domain::tool::{model_name, Limits, Offered};
use parlor_domain::Agent;
pub use result::Outcome;
use server::{Status, ToolServer};
use spec::{ServerSpec, ToolSpecs, Transport};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// The arguments of a call, as a JSON object.
pub type Arguments = serde_json::Map<String, serde_json::Value>;

/// Runs a call of the built-in `parlor` server for the current conversation's owner.
#[async_trait::async_trait]
pub trait Recall: Send + Sync {
    async fn call(&self, tool: &str, arguments: Arguments) -> Outcome;
}

/// Every declared tool server.
pub struct Tools {
    pub limits: Limits,
    /// Calls waiting for the user's approval.
    pub approvals: Arc<approval::Approvals>,
    servers: Vec<Arc<ToolServer>>,
    stop: CancellationToken,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Tools {
    /// Starts the servers' supervisors (on the current runtime).
    pub fn start(specs: ToolSpecs) -> Arc<Tools> {
        // The MCP HTTP client's rustls takes the process's provider: ring, as reqwest 0.12's
        // (an error only says one is installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let stop = CancellationToken::new();
        let servers: Vec<Arc<ToolServer>> =
            specs.servers.into_iter().map(ToolServer::new).collect();
        // Outside a runtime (a command that serves nothing) no server is started.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let tasks = servers
            .iter()
            .filter(|s| s.spec.transport != Transport::Builtin)
            .filter_map(|s| Some(runtime.as_ref()?.spawn(s.clone().supervise(stop.clone()))))
            .collect();
        Arc::new(Tools {
            limits: specs.limits,
            approvals: Default::default(),
            servers,
            stop,
            tasks: Mutex::new(tasks),
        })
    }

    /// No tool servers (tests, and deployments without any).
    pub fn none() -> Arc<Tools> {
        Tools::start(ToolSpecs::default())
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Each server's id and status.
    pub fn statuses(&self) -> Vec<(String, Status)> {
        self.servers
            .iter()
            .map(|s| {
                let status = match s.spec.transport {
                    Transport::Builtin => Status::Ready {
                        tools: builtin::TOOLS.len(),
                    },
                    _ => s.status(),
                };
                (s.spec.id.clone(), status)
            })
            .collect()
    }

    /// How long the results of server `id` are kept (kept for good when unknown).
    pub fn save_of(&self, id: &str) -> parlor_domain::context::Save {
        self.server(id)
            .map_or(parlor_domain::context::Save::Always, |s| s.spec.save)
    }

    /// The declared server `id`.
    pub fn spec(&self, id: &str) -> Option<&ServerSpec> {
        self.server(id).map(|s| &s.spec)
    }

    /// What was dropped from or changed in each server's tool list (servers with none left
    /// out).
    pub fn warnings(&self) -> Vec<(String, Vec<String>)> {
        self.servers
            .iter()
            .map(|s| (s.spec.id.clone(), s.warnings()))
            .filter(|(_, w)| !w.is_empty())
            .collect()
    }

    /// Whether every server's first start has ended (ready or failed).
    pub fn settled(&self) -> bool {
        self.servers
            .iter()
            .all(|s| s.spec.transport == Transport::Builtin || s.settled())
    }

    /// The servers `agent` may use.
    fn used_by<'a>(&'a self, agent: &'a Agent) -> impl Iterator<Item = &'a Arc<ToolServer>> + 'a {
        let uses = |id: &str| {
            agent
                .tools
                .iter()
                .any(|t| t == id || t.split_once('.').is_some_and(|(s, _)| s == id))
        };
        self.servers.iter().filter(move |s| uses(&s.spec.id))
    }

    /// The state of each server `agent` may use, for the debug panel.
    pub fn reports(&self, agent: &Agent) -> Vec<parlor_domain::event::tools::ServerReport> {
        let statuses = self.statuses();
        self.used_by(agent)
            .map(|s| {
                let state = statuses
                    .iter()
                    .find(|(id, _)| *id == s.spec.id)
                    .map(|(_, status)| status.to_string())
                    .unwrap_or_default();
                parlor_domain::event::tools::ServerReport {
                    id: s.spec.id.clone(),
                    state,
                    warnings: s.warnings(),
                }
            })
            .collect()
    }

    /// Waits for the servers `agent` may use that are starting, each at most its start
    /// timeout; returns those still not ready, with their state.
    pub async fn started_for(&self, agent: &Agent) -> Vec<(String, Status)> {
        let starting: Vec<_> = self
            .used_by(agent)
            .filter(|s| s.spec.transport != Transport::Builtin)
            .map(|s| s.started(s.start_timeout()))
            .collect();
        futures::future::join_all(starting).await;
        self.used_by(agent)
            .filter(|s| s.spec.transport != Transport::Builtin)
            .map(|s| (s.spec.id.clone(), s.status()))
            .filter(|(_, status)| !matches!(status, Status::Ready { .. }))
            .collect()
    }

    fn server(&self, id: &str) -> Option<&Arc<ToolServer>> {
        self.servers.iter().find(|s| s.spec.id == id)
    }

    /// The tools `agent` is offered now: those of its servers that answer, as each server's
    /// `allow` and the agent's list let through, at most [`MAX_TOOLS`]. Names cannot clash:
    /// a server's own list is refused when two of its tools share one, and server ids
    /// cannot make one (see [`parlor_domain::tool::is_server_id`]).
    pub fn offered(&self, agent: &Agent) -> Vec<Offered> {
        let mut out: Vec<Offered> = Vec::new();
        for entry in &agent.tools {
            let (id, only) = match entry.split_once('.') {
                Some((id, tool)) => (id, Some(tool)),
                None => (entry.as_str(), None),
            };
            let Some(server) = self.server(id) else {
                continue;
            };
            for tool in listed(server) {
                let allowed = server
                    .spec
                    .allow
                    .as_ref()
                    .is_none_or(|a| a.contains(&tool.tool));
                let chosen = only.is_none_or(|t| t == tool.tool);
                if allowed && chosen && !out.iter().any(|o| o.name == tool.name) {
                    if out.len() == MAX_TOOLS {
                        tracing::warn!(
                            "agent {:?} is given more than {MAX_TOOLS} tools; the rest are left out",
                            agent.id
                        );
                        return out;
                    }
                    out.push(tool);
                }
            }
        }
        out
    }

    /// Runs one call the model asked for; every fault is an error result.
    pub async fn call(
        &self,
        call: &ToolCall,
        offered: &[Offered],
        stop: &CancellationToken,
        recall: &dyn Recall,
    ) -> Outcome {
        let started = Instant::now();
        let mut outcome = self.run(call, offered, stop, recall).await;
        outcome.ms = started.elapsed().as_millis() as u64;
        outcome
    }

    async fn run(
        &self,
        call: &ToolCall,
        offered: &[Offered],
        stop: &CancellationToken,
        recall: &dyn Recall,
    ) -> Outcome {
        let Some(tool) = offered.iter().find(|t| t.name == call.name) else {
            let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
            return Outcome::error(format!(
                "Unknown tool {:?}. The tools offered are: {}.",
                call.name,
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                }
            ));
        };
        let arguments = match arguments(&call.arguments) {
            Ok(arguments) => arguments,
            Err(why) => return Outcome::error(why),
        };
        let Some(server) = self.server(&tool.server) else {
            return Outcome::error(format!("Tool server {:?} is not declared.", tool.server));
        };
        let spec = &server.spec;
        if spec.transport == Transport::Builtin {
            return tokio::select! {
                outcome = recall.call(&tool.tool, arguments) => outcome.bounded(spec.max_result_bytes),
                _ = tokio::time::sleep(spec.timeout) => timed_out(&call.name, spec.timeout),
                _ = stop.cancelled() => stopped(&call.name),
            };
        }
        // Errors too: a server's error text is cut like its results.
        let outcome = remote(server, &call.name, &tool.tool, arguments, stop).await;
        outcome.bounded(spec.max_result_bytes)
    }

    /// Tells every server to end, without waiting.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Ends every server and waits until each has ended (no process outlives Parlor).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let tasks: Vec<_> = self
            .tasks
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        for task in tasks {
            let _ = task.await;
        }
    }
}

impl Drop for Tools {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A call's arguments: empty means `{}`; anything else must be a JSON object.
fn arguments(text: &str) -> Result<Arguments, String> {
    if text.trim().is_empty() {
        return Ok(Arguments::new());
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("The arguments must be a JSON object.".into()),
        Err(e) => Err(format!("The arguments are not valid JSON ({e}).")),
    }
}

/// The tools a server offers now, as the model would see them.
fn listed(server: &ToolServer) -> Vec<Offered> {
    let spec: &ServerSpec = &server.spec;
    let offered = |tool: &str, description: &str, parameters: serde_json::Value| Offered {
        name: model_name(&spec.id, tool),
        server: spec.id.clone(),
        tool: tool.to_owned(),
        description: description.to_owned(),
        parameters,
    };
    if spec.transport == Transport::Builtin {
        return builtin::TOOLS
            .iter()
            .map(|t| offered(t.name, t.description, (t.parameters)()))
            .collect();
    }
    let Some(live) = server.live() else {
        return Vec::new();
    };
    live.tools
        .iter()
        .map(|t| offered(&t.name, &t.description, t.schema.clone()))
        .collect()
}

fn timed_out(name: &str, timeout: std::time::Duration) -> Outcome {
    Outcome::error(format!(
        "{name} did not answer within {} s (its timeout); the call was cancelled.",
        timeout.as_secs()
    ))
}

fn stopped(name: &str) -> Outcome {
    Outcome::error(format!("{name} was cancelled: the user stopped the turn."))
}

/// A call to a server over MCP, within its timeout. A call that times out or is stopped is
/// cancelled at the server (`notifications/cancelled`, with the reason); a server whose calls
/// keep timing out is started again.
async fn remote(
    server: &ToolServer,
    name: &str,
    tool: &str,
    arguments: Arguments,
    stop: &CancellationToken,
) -> Outcome {
    use rmcp::model::{CallToolRequest, ClientRequest};
    let spec = &server.spec;
    let Some(live) = server.live() else {
        let why = match server.status() {
            Status::Down { error, .. } => error,
            Status::Starting => "it is starting".into(),
            other => other.to_string(),
        };
        return Outcome::error(format!("Tool server {:?} is not running ({why}).", spec.id));
    };
    let failed = |e: String| {
        let why = server.fault().unwrap_or(e);
        Outcome::error(format!("Tool server {:?} failed: {why}", spec.id))
    };
    let params = rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let options = rmcp::service::PeerRequestOptions::no_options();
    let mut handle = match live.peer.send_cancellable_request(request, options).await {
        Ok(handle) => handle,
        Err(e) => return failed(e.to_string()),
    };
    let waiting = Instant::now();
    let timeout = tokio::select! {
        answer = &mut handle.rx => {
            let waited_us = waiting.elapsed().as_micros() as u64;
            return Outcome { waited_us, ..answered(server, answer) };
        }
        _ = tokio::time::sleep(spec.timeout) => true,
        _ = stop.cancelled() => false,
    };
    if timeout {
        let reason = format!("no answer within {} s", spec.timeout.as_secs());
        cancel(handle, reason).await;
        server.timed_out();
        timed_out(name, spec.timeout)
    } else {
        cancel(handle, "the user stopped the turn".into()).await;
        stopped(name)
    }
}

type Answer = Result<
    Result<rmcp::model::ServerResult, rmcp::ServiceError>,
    tokio::sync::oneshot::error::RecvError,
>;

/// What a server's answer to a call comes to.
fn answered(server: &ToolServer, answer: Answer) -> Outcome {
    let spec = &server.spec;
    let failed = |e: String| {
        let why = server.fault().unwrap_or(e);
        Outcome::error(format!("Tool server {:?} failed: {why}", spec.id))
    };
    match answer {
        Ok(Ok(rmcp::model::ServerResult::CallToolResult(result))) => {
            server.answered();
            // Counted before anything is copied: a flood of items is refused as it came.
            if let Some(refused) = result::too_many(result.content.len(), spec.max_result_items) {
                return refused;
            }
            let json = serde_json::to_value(&result).unwrap_or_default();
            drop(result);
            result::read(&json, spec.max_result_bytes, spec.max_result_items)
        }
        Ok(Ok(_)) => {
            server.answered();
            failed("it answered something other than a tool result".into())
        }
        Ok(Err(e)) => failed(e.to_string()),
        Err(_) => failed("the connection ended".into()),
    }
}

/// Tells the server a call is abandoned, waiting at most a second (a server that does not
/// read its input must not hold the turn).
async fn cancel(handle: rmcp::service::RequestHandle<rmcp::RoleClient>, reason: String) {
    let sending = handle.cancel(Some(reason));
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), sending).await;
}
