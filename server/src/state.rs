//! Everything a request handler needs, built once at startup.

use crate::agents::AgentCatalog;
use crate::config::Config;
use crate::llm::LlmClient;
use crate::store::ConversationStore;
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
    pub store: Arc<dyn ConversationStore>,
    pub llm: LlmClient,
    /// Conversations with a reply being written right now.
    pub busy: Mutex<HashSet<SessionId>>,
}

impl Services {
    /// Marks a conversation busy until the returned guard is dropped; `None` if it already is.
    pub fn claim(self: &Arc<Self>, id: &SessionId) -> Option<BusyGuard> {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.insert(id.clone()).then(|| BusyGuard {
            services: self.clone(),
            id: id.clone(),
        })
    }
}

pub struct BusyGuard {
    services: Arc<Services>,
    id: SessionId,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.services
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}
