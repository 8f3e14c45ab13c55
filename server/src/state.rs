//! Everything a request handler needs, built once at startup.

use crate::agents::AgentCatalog;
use crate::config::Config;
use crate::histories::Histories;
use crate::live::LiveSessions;
use crate::llm::LlmClient;
use crate::models::ModelSpec;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use parlor_domain::chain::Chain;
use parlor_domain::SessionId;
use std::collections::HashSet;
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
    pub llm: LlmClient,
    /// Conversations (history id, session) with a reply being written right now.
    pub busy: Mutex<HashSet<(String, SessionId)>>,
    /// The processors after the policy step, for agents without their own.
    pub chain: Chain,
    pub limits: Limits,
    /// Declared models (`[[models]]`).
    pub models: Vec<ModelSpec>,
    pub live: Arc<dyn LiveSessions>,
    /// Where admin changes are saved.
    pub config_path: PathBuf,
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
    /// Marks a conversation busy until the returned guard is dropped; `None` if it already is.
    pub fn claim(self: &Arc<Self>, history: &str, id: &SessionId) -> Option<BusyGuard> {
        let key = (history.to_owned(), id.clone());
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.insert(key.clone()).then(|| BusyGuard {
            services: self.clone(),
            key,
        })
    }
}

pub struct BusyGuard {
    services: Arc<Services>,
    key: (String, SessionId),
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
