//! Everything a request handler needs, built once at startup.

use crate::config::agents::AgentCatalog;
use crate::config::Config;
use crate::llm::models::Models;
use crate::ops::live::LiveSessions;
use crate::store::histories::Histories;
use crate::store::ConversationInfo;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use parlor_domain::chain::Chain;
use parlor_domain::plan::agent_ceiling;
use parlor_domain::settings::SettingInputs;
use parlor_domain::{Agent, ConversationId, DebugInfo, HistorySettings, SettingsReport};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, FromRef)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub services: Arc<Services>,
}

pub struct Services {
    pub config: Config,
    pub agents: AgentCatalog,
    pub histories: Histories,
    /// The models conversations can use and the clients that reach them.
    pub models: Models,
    /// The operator's context providers (`[[context]]`).
    pub providers: crate::context_providers::Providers,
    /// Conversations (history id, session) with a reply being written right now.
    pub busy: Mutex<HashSet<(String, ConversationId)>>,
    /// The processors after the policy step, for agents without their own.
    pub chain: Chain,
    pub limits: Limits,
    pub live: Arc<dyn LiveSessions>,
    /// Where admin changes are saved.
    pub config_path: PathBuf,
    /// The replies being written, for a shutdown that waits for them.
    pub replies: Replies,
    /// The replies being written, by conversation, for the stop endpoint.
    pub stops: Stops,
    /// The summarizer runs of this process and their last failures.
    pub summarizers: Summarizers,
    /// `[history] summary_model`: the model that keeps summaries (else the conversation's).
    pub summary_model: Option<String>,
    /// Signs and checks browser session cookies.
    pub cookie_key: crate::config::cookie_key::CookieKey,
    /// The operator's tool servers (`[[mcp_servers]]`) and the loop's limits.
    pub tools: Arc<crate::tools::Tools>,
    /// The values users set for their own tool servers (`user_secrets`).
    pub tool_secrets: Arc<crate::store::secrets::Secrets>,
    /// The accounts, when `PARLOR_AUTH` is not `none`.
    pub accounts: Option<Arc<crate::accounts::Accounts>>,
}

/// The replies this process is writing, by history and conversation: `POST …/stop` ends
/// one even when the browser's stream stays open (a proxy that keeps it).
#[derive(Default)]
pub struct Stops {
    running: Mutex<HashMap<(String, ConversationId), (u64, tokio_util::sync::CancellationToken)>>,
    next: AtomicU64,
}

/// A reply's entry in [`Stops`]: its token; removed when the reply ends.
pub struct StopGuard {
    stops: Arc<Services>,
    key: (String, ConversationId),
    serial: u64,
    pub token: tokio_util::sync::CancellationToken,
}

impl Stops {
    /// Stops the reply being written in `session` of `history`; `false` when none is.
    pub fn stop(&self, history: &str, session: &ConversationId) -> bool {
        let key = (history.to_owned(), session.clone());
        let running = self.running.lock().ok().and_then(|r| r.get(&key).cloned());
        running.is_some_and(|(_, token)| {
            token.cancel();
            true
        })
    }
}

impl Services {
    /// Registers the reply about to be written in `session` of `history`.
    pub fn stoppable(self: &Arc<Self>, history: &str, session: &ConversationId) -> StopGuard {
        let token = tokio_util::sync::CancellationToken::new();
        let serial = self.stops.next.fetch_add(1, Ordering::Relaxed);
        let key = (history.to_owned(), session.clone());
        if let Ok(mut running) = self.stops.running.lock() {
            running.insert(key.clone(), (serial, token.clone()));
        }
        StopGuard {
            stops: self.clone(),
            key,
            serial,
            token,
        }
    }
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        if let Ok(mut running) = self.stops.stops.running.lock() {
            // Only its own entry: a later reply of the conversation may have replaced it.
            if running
                .get(&self.key)
                .is_some_and(|(s, _)| *s == self.serial)
            {
                running.remove(&self.key);
            }
        }
    }
}

/// Every reply task, tracked whether or not its browser is still there, so that shutting
/// down can let them finish, or tell them to store what they have, before Parlor exits.
#[derive(Clone, Default)]
pub struct Replies {
    tracker: tokio_util::task::TaskTracker,
    stop: tokio_util::sync::CancellationToken,
}

impl Replies {
    pub fn spawn<F>(&self, reply: impl FnOnce(tokio_util::sync::CancellationToken) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(reply(self.stop.clone()));
    }

    /// How many replies are being written.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }

    /// Waits (at most `grace`) for the running replies to finish; then tells the others to
    /// stop and store what they have, and waits (at most `store_for`) for that.
    pub async fn drain(&self, grace: std::time::Duration, store_for: std::time::Duration) {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "{} reply(ies) still running after {grace:?}: storing what they have",
                self.tracker.len()
            );
            self.stop.cancel();
            let _ = tokio::time::timeout(store_for, self.tracker.wait()).await;
        }
    }
}

/// Server-wide settings that admin commands change while Parlor runs.
pub struct Limits {
    agent_max_ctx: AtomicUsize,
    max_users: AtomicUsize,
    idle_timeout_minutes: AtomicU64,
}

impl Limits {
    pub fn new(agent_max_ctx: usize, max_users: usize, idle_timeout_minutes: u64) -> Self {
        Limits {
            agent_max_ctx: AtomicUsize::new(agent_max_ctx),
            max_users: AtomicUsize::new(max_users),
            idle_timeout_minutes: AtomicU64::new(idle_timeout_minutes),
        }
    }
    pub fn agent_max_ctx(&self) -> usize {
        self.agent_max_ctx.load(Ordering::Relaxed)
    }
    pub fn max_users(&self) -> usize {
        self.max_users.load(Ordering::Relaxed)
    }
    pub fn idle_timeout_minutes(&self) -> u64 {
        self.idle_timeout_minutes.load(Ordering::Relaxed)
    }
    pub fn set_agent_max_ctx(&self, n: usize) {
        self.agent_max_ctx.store(n, Ordering::Relaxed)
    }
    pub fn set_max_users(&self, n: usize) {
        self.max_users.store(n, Ordering::Relaxed)
    }
    pub fn set_idle_timeout_minutes(&self, n: u64) {
        self.idle_timeout_minutes.store(n, Ordering::Relaxed)
    }
}

impl Services {
    /// The history settings of a model call for `agent`, from the operator's environment,
    /// the page URL (when allowed) and the agent's template.
    pub fn history_settings(
        &self,
        agent: &Agent,
        url_policy: Option<&str>,
        url_length: Option<&str>,
    ) -> HistorySettings {
        let env = &self.config.history;
        HistorySettings::resolve(&SettingInputs {
            env_policy: env.policy,
            env_length: env.length,
            url_policy,
            url_length,
            url_overrides_allowed: env.url_overrides,
            template_policy: agent.history_policy,
            template_length: agent.history_length,
            preserve_system: agent.preserve_system_messages,
        })
    }

    /// The processors after the policy step for `agent`: its template's, else the configured.
    pub fn chain_for(&self, agent: &Agent) -> Chain {
        agent
            .history_processors
            .as_ref()
            .and_then(|names| Chain::from_names(names).ok())
            .unwrap_or_else(|| self.chain.clone())
    }

    /// The agent's window ceiling: the server-wide `agent_max_ctx`, lowered (never raised)
    /// by the template's `maxContext`.
    pub fn max_ctx_for(&self, agent: &Agent) -> usize {
        agent_ceiling(self.limits.agent_max_ctx(), agent.max_context)
    }

    /// The debug panel's facts: the settings as they resolve for this request, and the
    /// conversation's last model call.
    pub fn debug_info(
        &self,
        agent: &Agent,
        conversation: Option<&ConversationInfo>,
        url_policy: Option<&str>,
        url_length: Option<&str>,
    ) -> DebugInfo {
        let settings = self.history_settings(agent, url_policy, url_length);
        let (model, provider) = self
            .models
            .label(agent, conversation.and_then(|c| c.model.as_deref()));
        DebugInfo {
            agent_id: agent.id.clone(),
            session_id: conversation.map(|c| c.session_id.to_string()),
            model,
            provider: provider.to_owned(),
            settings: SettingsReport::from_settings(&settings),
            last_turn: conversation.and_then(|c| c.last_turn.as_deref().cloned()),
            forked_from: conversation.and_then(|c| c.forked_from.as_ref().map(|f| f.link())),
            tool_servers: self
                .tools
                .reports(agent, conversation.and_then(|c| c.owner.as_deref())),
            // Read from the store by the callers that show it (see `versions::facts`).
            versions: None,
        }
    }

    /// Marks a conversation busy until the returned guard is dropped; `None` if it already is.
    pub fn claim(self: &Arc<Self>, history: &str, id: &ConversationId) -> Option<BusyGuard> {
        let key = (history.to_owned(), id.clone());
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.insert(key.clone()).then(|| BusyGuard {
            services: self.clone(),
            key,
            shared: None,
        })
    }
}

pub struct BusyGuard {
    services: Arc<Services>,
    key: (String, ConversationId),
    /// The lock shared with other processes, for stores they share (Redis).
    shared: Option<crate::store::ReplyLock>,
}

impl BusyGuard {
    /// Adds the store's cross-process lock; released with the guard.
    pub fn hold(&mut self, lock: crate::store::ReplyLock) {
        self.shared = Some(lock);
    }

    /// Frees the conversation for the next reply, here and in every process, before the
    /// caller tells the browser the reply is over.
    pub async fn release(mut self) {
        if let Some(shared) = self.shared.take() {
            shared.release().await;
        }
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.services
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// The summarizer runs of this process, and the last failure of each conversation (for the
/// debug panel).
#[derive(Default)]
pub struct Summarizers {
    pub(crate) running: Mutex<HashSet<(String, ConversationId)>>,
    failures: Mutex<HashMap<(String, ConversationId), String>>,
}

impl Summarizers {
    /// Why the last run for the conversation failed, if it did.
    pub fn failure(&self, history: &str, id: &ConversationId) -> Option<String> {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(history.to_owned(), id.clone()))
            .cloned()
    }

    pub(crate) fn record(&self, key: (String, ConversationId), result: Option<String>) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Some(error) => failures.insert(key, error),
            None => failures.remove(&key),
        };
    }
}
