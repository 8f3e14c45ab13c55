//! Everything a request handler needs, built once at startup.

use crate::agents::AgentCatalog;
use crate::config::Config;
use crate::histories::Histories;
use crate::llm::LlmClient;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use parlor_domain::SessionId;
use std::collections::HashSet;
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
