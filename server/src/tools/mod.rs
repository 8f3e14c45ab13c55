//! Tools: the MCP servers an operator declares (spec `tools.md`), with Parlor as their client.
//!
//! [`Tools`] starts every declared server ([`server`]), says which tools an agent is offered
//! on a turn, runs one call (with its timeout, cancelled by Stop) and turns every fault into
//! an error result for the model ([`result`]), and ends the servers when Parlor stops.

pub mod approval;
pub mod bounds;
pub mod builtin;
pub mod connect;
mod remote;
pub mod result;
pub mod server;
pub mod spec;
pub mod users;
pub mod verdict;

use parlor_domain::message::ToolCall;
use parlor_domain::tool::list::MAX_TOOLS;
use parlor_domain::tool::{model_name, Limits, Offered};
use parlor_domain::Agent;
use remote::{remote, stopped, timed_out};
pub use result::Outcome;
use server::{Status, ToolServer};
use spec::{Scope, ServerSpec, ToolSpecs, Transport};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often per-user servers are looked at for being idle.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Where per-user servers find the values each user set for them (`user_secrets`).
#[async_trait::async_trait]
pub trait UserValues: Send + Sync {
    /// The values `user` set for server `server`, by name.
    async fn values(
        &self,
        user: &str,
        server: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, String>;
}

/// Why each of a turn's per-user servers is unavailable to its user (server id, why).
#[derive(Default)]
pub struct Prepared {
    pub unavailable: Vec<(String, String)>,
}

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
    /// Each user's own servers (`scope = "per_user"`).
    users: Arc<users::Users>,
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
        let mut tasks: Vec<_> = servers
            .iter()
            .filter(|s| supervised(&s.spec))
            .filter_map(|s| Some(runtime.as_ref()?.spawn(s.clone().supervise(stop.clone()))))
            .collect();
        let users = Arc::new(users::Users::new(specs.user_root));
        let per_user = servers.iter().any(|s| s.spec.scope != Scope::Shared);
        if let (true, Some(runtime)) = (per_user, &runtime) {
            tasks.push(runtime.spawn(end_idle(users.clone(), servers.clone(), stop.clone())));
        }
        Arc::new(Tools {
            limits: specs.limits,
            approvals: Default::default(),
            servers,
            users,
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
                let status = match (&s.spec.transport, &s.spec.scope) {
                    (Transport::Builtin, _) => Status::Ready {
                        tools: builtin::TOOLS.len(),
                    },
                    (_, Scope::PerUser(_)) => Status::PerUser {
                        running: self.users.count(&s.spec.id),
                    },
                    _ => s.status(),
                };
                (s.spec.id.clone(), status)
            })
            .collect()
    }

    /// How long the results of server `id` are kept (kept for good when unknown).
    pub fn save_of(&self, id: &str) -> parlor_domain::context::Save {
        self.declared(id)
            .map_or(parlor_domain::context::Save::Always, |s| s.spec.save)
    }

    /// The declared server `id`.
    pub fn spec(&self, id: &str) -> Option<&ServerSpec> {
        self.declared(id).map(|s| &s.spec)
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
            .all(|s| !supervised(&s.spec) || s.settled())
    }

    /// The declared servers `agent` may use.
    fn declared_for<'a>(
        &'a self,
        agent: &'a Agent,
    ) -> impl Iterator<Item = &'a Arc<ToolServer>> + 'a {
        let uses = |id: &str| {
            agent
                .tools
                .iter()
                .any(|t| t == id || t.split_once('.').is_some_and(|(s, _)| s == id))
        };
        self.servers.iter().filter(move |s| uses(&s.spec.id))
    }

    /// The servers `agent` may use for `user` that have a process or session: the shared
    /// ones and the user's own that run.
    fn used_by(&self, agent: &Agent, user: Option<&str>) -> Vec<Arc<ToolServer>> {
        self.declared_for(agent)
            .filter_map(|s| self.server(&s.spec.id, user))
            .collect()
    }

    /// The state of each server `agent` may use, for `user`'s debug panel.
    pub fn reports(
        &self,
        agent: &Agent,
        user: Option<&str>,
    ) -> Vec<parlor_domain::event::tools::ServerReport> {
        let statuses = self.statuses();
        self.declared_for(agent)
            .map(|s| {
                let id = &s.spec.id;
                let own = match (&s.spec.scope, user) {
                    (Scope::Shared, _) => None,
                    (Scope::PerUser(_), None) => Some(None),
                    (Scope::PerUser(_), Some(user)) => Some(self.users.server(id, user)),
                };
                let state = match &own {
                    None => statuses
                        .iter()
                        .find(|(sid, _)| sid == id)
                        .map(|(_, status)| status.for_users())
                        .unwrap_or_default(),
                    Some(None) => {
                        "per user: not running for you (it starts on your next turn)".into()
                    }
                    Some(Some(mine)) => format!("per user: {}", mine.status().for_users()),
                };
                let warnings = own.flatten().map_or_else(|| s.warnings(), |m| m.warnings());
                parlor_domain::event::tools::ServerReport {
                    id: id.clone(),
                    state,
                    warnings,
                }
            })
            .collect()
    }

    /// Starts (or keeps) `user`'s own servers that `agent` may use, with the values they
    /// set; says why each one that cannot run for them does not.
    pub async fn prepare(
        &self,
        agent: &Agent,
        user: Option<&str>,
        secrets: &dyn UserValues,
    ) -> Prepared {
        let mut prepared = Prepared::default();
        for server in self.declared_for(agent) {
            let (spec, Scope::PerUser(per_user)) = (&server.spec, &server.spec.scope) else {
                continue;
            };
            let opened = match user {
                None => Err("it serves each user apart, and this conversation has no user".into()),
                Some(user) => self.open(spec, per_user, user, secrets).await,
            };
            match opened {
                Ok(()) => {}
                Err(why) => prepared.unavailable.push((spec.id.clone(), why)),
            }
        }
        prepared
    }

    async fn open(
        &self,
        spec: &ServerSpec,
        per_user: &spec::PerUser,
        user: &str,
        secrets: &dyn UserValues,
    ) -> Result<(), String> {
        let values = match per_user.secrets.is_empty() {
            true => Default::default(),
            false => secrets.values(user, &spec.id).await?,
        };
        let missing: Vec<&str> = per_user
            .secrets
            .iter()
            .filter(|n| !values.contains_key(*n))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "it needs your {} (set them on {SECRETS_PAGE})",
                missing.join(", ")
            ));
        }
        self.users.open(spec, per_user, user, &values, &self.stop)
    }

    /// Ends `user`'s own server `id` (their values for it changed).
    pub fn user_changed(&self, id: &str, user: &str) {
        self.users.end(id, user);
    }

    /// Ends the per-user servers idle for `idle` or more (tests; Parlor itself ends each
    /// after its `idle_minutes`).
    pub fn end_idle(&self, idle: std::time::Duration) {
        drop(
            self.users
                .end_idle(&self.servers, Some(idle), Instant::now()),
        );
    }

    /// The per-user servers with the `user_secrets` each asks for.
    pub fn asking_secrets(&self) -> Vec<(&str, &[String])> {
        self.servers
            .iter()
            .filter_map(|s| match &s.spec.scope {
                Scope::PerUser(p) if !p.secrets.is_empty() => {
                    Some((s.spec.id.as_str(), p.secrets.as_slice()))
                }
                _ => None,
            })
            .collect()
    }

    /// Waits for the servers `agent` may use for `user` that are starting, each at most its
    /// start timeout; returns those still not ready, with their state.
    pub async fn started_for(&self, agent: &Agent, user: Option<&str>) -> Vec<(String, Status)> {
        let used: Vec<_> = self
            .used_by(agent, user)
            .into_iter()
            .filter(|s| s.spec.transport != Transport::Builtin)
            .collect();
        futures::future::join_all(used.iter().map(|s| s.started(s.start_timeout()))).await;
        used.iter()
            .map(|s| (s.spec.id.clone(), s.status()))
            .filter(|(_, status)| !matches!(status, Status::Ready { .. }))
            .collect()
    }

    /// Server `id` as `user` reaches it: the shared one, or the user's own when it runs.
    fn server(&self, id: &str, user: Option<&str>) -> Option<Arc<ToolServer>> {
        let declared = self.servers.iter().find(|s| s.spec.id == id)?;
        match (&declared.spec.scope, user) {
            (Scope::Shared, _) => Some(declared.clone()),
            (Scope::PerUser(_), Some(user)) => self.users.server(id, user),
            (Scope::PerUser(_), None) => None,
        }
    }

    fn declared(&self, id: &str) -> Option<&Arc<ToolServer>> {
        self.servers.iter().find(|s| s.spec.id == id)
    }

    /// The tools `agent` is offered now for `user`: those of its servers that answer (the
    /// user's own, for per-user servers), as each server's
    /// `allow` and the agent's list let through, at most [`MAX_TOOLS`]. Names cannot clash:
    /// a server's own list is refused when two of its tools share one, and server ids
    /// cannot make one (see [`parlor_domain::tool::is_server_id`]).
    pub fn offered(&self, agent: &Agent, user: Option<&str>) -> Vec<Offered> {
        let mut out: Vec<Offered> = Vec::new();
        for entry in &agent.tools {
            let (id, only) = match entry.split_once('.') {
                Some((id, tool)) => (id, Some(tool)),
                None => (entry.as_str(), None),
            };
            let Some(server) = self.server(id, user) else {
                continue;
            };
            for tool in listed(&server) {
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

    /// Runs one call the model asked for, on `user`'s behalf; every fault is an error
    /// result.
    pub async fn call(
        &self,
        call: &ToolCall,
        (offered, user): (&[Offered], Option<&str>),
        stop: &CancellationToken,
        recall: &dyn Recall,
    ) -> Outcome {
        let started = Instant::now();
        let mut outcome = self.run(call, (offered, user), stop, recall).await;
        outcome.ms = started.elapsed().as_millis() as u64;
        outcome
    }

    async fn run(
        &self,
        call: &ToolCall,
        (offered, user): (&[Offered], Option<&str>),
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
        let Some(server) = self.server(&tool.server, user) else {
            return Outcome::error(format!("Tool server {:?} is not running.", tool.server));
        };
        let spec = &server.spec;
        if spec.transport == Transport::Builtin {
            return tokio::select! {
                outcome = recall.call(&tool.tool, arguments) => outcome.bounded(spec.max_result_bytes),
                _ = tokio::time::sleep(spec.timeout) => timed_out(&call.name, spec.timeout),
                _ = stop.cancelled() => stopped(&call.name),
            };
        }
        // A per-user server is held while the call runs (not ended to make room).
        let _held = user.and_then(|user| self.users.lease(&tool.server, user));
        // Errors too: a server's error text is cut like its results.
        let outcome = remote(&server, &call.name, &tool.tool, arguments, stop).await;
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
        for task in tasks.into_iter().chain(self.users.end_all()) {
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

/// Where users set the values per-user servers ask for.
pub const SECRETS_PAGE: &str = "/account/tools";

/// Whether Parlor keeps a process or session of its own for `spec` from the start (a
/// per-user server's start on a user's first turn; the built-in one has none).
fn supervised(spec: &ServerSpec) -> bool {
    spec.transport != Transport::Builtin && spec.scope == Scope::Shared
}

/// Ends the per-user servers left idle, every [`IDLE_CHECK`], until Parlor stops.
async fn end_idle(
    users: Arc<users::Users>,
    servers: Vec<Arc<ToolServer>>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(IDLE_CHECK);
    loop {
        tokio::select! {
            _ = tick.tick() => drop(users.end_idle(&servers, None, Instant::now())),
            _ = stop.cancelled() => return,
        }
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
