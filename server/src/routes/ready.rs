//! `GET /readyz`: whether this process can serve chats now: every history's store answers
//! (Redis `PING`, a writable folder) and a model is configured. 200 when ready, 503
//! otherwise, so a load balancer sends no traffic to a process that would fail it, while
//! `/healthz` (the process is alive) stays 200. Anyone learns ready or not; the reasons
//! (store errors, tool servers' states, which may name commands and addresses) are for an
//! admin's login or the admin token (`X-Parlor-Admin-Token`).

use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize, utoipa::ToSchema)]
pub struct Readiness {
    pub ready: bool,
    /// Why, for admins only.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub details: Option<ReadyDetails>,
}

/// What an admin sees of readiness.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ReadyDetails {
    /// Each history: `ok`, or why its store cannot be used.
    pub histories: BTreeMap<String, String>,
    /// Where replies come from: `mirror` (offline) or `openai`.
    pub upstream: &'static str,
    /// Each tool server: `ready (n tools)`, `starting`, or why it is down. Parlor is not
    /// ready until each has started or failed once; a server that is down later does not
    /// make it unready (its calls answer a tool error).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_servers: BTreeMap<String, String>,
    /// Each tool server's tools that were dropped or changed, and why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_warnings: BTreeMap<String, Vec<String>>,
    /// Each LLM provider (`openai`: the environment's; the `[[providers]]` entries): `ok`,
    /// `not called yet`, or its last error and how long ago. A failing provider does not
    /// make Parlor unready (other models may work).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, String>,
    /// The OpenID provider (`PARLOR_AUTH=oidc`): `ok`, or why it cannot be reached. Logins
    /// already made go on working, so it does not make Parlor unready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login_provider: Option<String>,
}

#[utoipa::path(
    get,
    path = "/readyz",
    responses(
        (status = 200, description = "Every history's store answers (the details for admins)", body = Readiness),
        (status = 503, description = "A store cannot be used (the reasons per history for admins)", body = Readiness),
    ),
    security((), ("admin_token" = []))
)]
pub async fn get_ready(
    State(app): State<AppState>,
    user: Option<axum::Extension<crate::accounts::User>>,
    token: Option<axum::Extension<crate::gate::AdminByToken>>,
) -> (StatusCode, Json<Readiness>) {
    let admin = token.is_some() || user.is_some_and(|axum::Extension(u)| u.admin);
    let (ready, details) = check(&app.services).await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let details = admin.then_some(details);
    (status, Json(Readiness { ready, details }))
}

/// Whether Parlor is ready, and why (see [`get_ready`]).
pub async fn check(services: &crate::state::Services) -> (bool, ReadyDetails) {
    let mut histories = BTreeMap::new();
    for id in services.histories.ids() {
        let Some(history) = services.histories.get(id) else {
            continue;
        };
        let state = match history.store.ping().await {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.to_string(),
        };
        histories.insert(id.to_owned(), state);
    }
    // Until every tool server has started or failed, a turn could wait for one.
    let ready = histories.values().all(|state| state == "ok") && services.tools.settled();
    let upstream = if services.config.uses_mirror() {
        "mirror"
    } else {
        "openai"
    };
    let tool_servers = services
        .tools
        .statuses()
        .into_iter()
        .map(|(id, status)| (id, status.to_string()))
        .collect();
    let login_provider = match services
        .accounts
        .as_deref()
        .and_then(|a| a.provider.as_ref())
    {
        Some(provider) => Some(provider.status().await),
        None => None,
    };
    let details = ReadyDetails {
        histories,
        upstream,
        tool_servers,
        tool_warnings: services.tools.warnings().into_iter().collect(),
        providers: services.models.health(),
        login_provider,
    };
    (ready, details)
}

impl ReadyDetails {
    /// Sets `/metrics`' readiness gauges from these details: a part is up when it is `ok`
    /// (a history, the login provider), `ready` (a tool server), or `ok` or not called yet
    /// (a provider).
    pub fn record(&self, ready: bool) {
        let histories = self
            .histories
            .iter()
            .map(|(id, s)| ("history", id.as_str(), s == "ok"));
        let tools = self
            .tool_servers
            .iter()
            .map(|(id, s)| ("tool_server", id.as_str(), s.starts_with("ready")));
        let providers = self
            .providers
            .iter()
            .map(|(id, s)| ("provider", id.as_str(), s == "ok" || s == "not called yet"));
        let login = self
            .login_provider
            .iter()
            .map(|s| ("login_provider", "oidc", s == "ok"));
        crate::ops::metrics::readiness(ready, histories.chain(tools).chain(providers).chain(login));
        for (server, warnings) in &self.tool_warnings {
            crate::ops::metrics::tool_warnings(server, warnings.len());
        }
    }
}
