//! The data behind the Leptos pages, for the app's server functions.

use crate::state::Services;
use parlor_app::api::{
    AgentCard, AgentInfo, ChatData, ChatPageData, ChatQuery, ConversationItem, DebugView, HomeData,
    StoredMessage,
};
use parlor_app::ssr::{Backend, BackendError, BrowserSession};
use parlor_domain::markdown::render_markdown;
use parlor_domain::{Role, SessionId};
use std::sync::Arc;

impl From<crate::store::StoreError> for BackendError {
    fn from(e: crate::store::StoreError) -> Self {
        BackendError::Store(e.to_string())
    }
}

pub struct PageBackend {
    pub services: Arc<Services>,
}

#[async_trait::async_trait]
impl Backend for PageBackend {
    async fn home(&self) -> HomeData {
        HomeData {
            agents: self
                .services
                .agents
                .list()
                .iter()
                .map(|a| AgentCard {
                    id: a.id.clone(),
                    name: a.name.clone(),
                    description: a.description.clone(),
                })
                .collect(),
            mirror: self.services.config.uses_mirror(),
        }
    }

    async fn chat(
        &self,
        query: ChatQuery,
        browser: Option<BrowserSession>,
    ) -> Result<ChatPageData, BackendError> {
        let services = &self.services;
        let Some(agent) = services.agents.get(&query.agent) else {
            return Ok(ChatPageData::UnknownAgent(query.agent));
        };
        let store = &services.histories.for_agent(&agent).store;
        let mut session_id = None;
        let mut messages = Vec::new();
        let mut conversation = None;
        let mut summarized = 0;
        if let Some(raw) = &query.session {
            let Ok(id) = SessionId::parse(raw) else {
                return Ok(ChatPageData::UnknownConversation);
            };
            let info = store.info(&id).await?;
            let owner = browser.as_ref().map(crate::browser::owner);
            let visible = info
                .as_ref()
                .is_some_and(|info| info.visible_to(owner.as_deref(), &agent.id).is_ok());
            if !visible {
                return Ok(ChatPageData::UnknownConversation);
            }
            messages = store.load(&id).await?;
            // Only summaries Parlor keeps for this agent's chain mark the transcript.
            if services.chain_for(&agent).names().contains(&"summary") {
                if let Some(summary) = store.summary(&id).await? {
                    let covers = parlor_domain::summary::Covers::of(&summary);
                    summarized = messages.iter().filter(|m| covers.includes(m)).count();
                }
            }
            session_id = Some(id.to_string());
            conversation = info;
        }
        let conversations = match &browser {
            Some(b) => services
                .histories
                .list_owned(&crate::browser::owner(b))
                .await?
                .into_iter()
                .map(|info| ConversationItem {
                    session_id: info.session_id.to_string(),
                    agent_id: info.agent_id,
                    // A conversation that so far only had commands has no title yet.
                    title: if info.title.is_empty() {
                        "New conversation".into()
                    } else {
                        info.title
                    },
                    updated_ms: info.updated_ms,
                })
                .collect(),
            None => Vec::new(),
        };
        let stored = messages.len();
        let chosen = conversation.as_ref().and_then(|c| c.model.as_deref());
        let (model, provider) = services.models.label(&agent, chosen);
        let debug = query.debug && services.config.debug_panel;
        // With the debug panel, each message shows its tokens for the conversation's model.
        let tokens = debug.then(|| {
            let spec = services.models.for_conversation(&agent, chosen);
            crate::models::token_counter(
                spec.as_ref()
                    .map(|m| m.upstream.as_str())
                    .unwrap_or_default(),
            )
        });
        Ok(ChatPageData::Ready(Box::new(ChatData {
            agent: AgentInfo {
                id: agent.id.clone(),
                name: agent.name.clone(),
                description: agent.description.clone(),
                initial_messages_html: agent
                    .initial_messages
                    .iter()
                    .map(|m| render_markdown(m))
                    .collect(),
                chat_prompts: agent.chat_prompts.clone(),
            },
            model: if model.is_empty() {
                "no model configured".into()
            } else {
                model
            },
            provider: provider.to_owned(),
            models: services.models.available(&agent),
            mirror: services.config.uses_mirror(),
            session_id,
            messages: messages
                .into_iter()
                .map(|m| StoredMessage {
                    tokens: tokens.as_ref().map(|t| t.count(&m)),
                    id: m.id().into_owned(),
                    send: m.send,
                    status: m.status(),
                    html: (m.role == Role::Assistant).then(|| render_markdown(&m.text)),
                    context: parlor_domain::context::Chip::of_stored(&m.context),
                    role: m.role,
                    text: m.text,
                })
                .collect(),
            conversations,
            meter: conversation
                .as_ref()
                .and_then(|c| c.last_turn.as_ref())
                .and_then(|t| t.meter.clone()),
            debug: debug.then(|| {
                let info = services.debug_info(
                    &agent,
                    conversation.as_ref(),
                    query.history_policy.as_deref(),
                    query.history_length.as_deref(),
                );
                DebugView {
                    first_sent: info.last_turn.as_ref().map(|t| t.history.first_sent_index),
                    html: parlor_app::components::debug_panel::render(info, stored),
                }
            }),
            max_context_bytes: services.config.max_context_bytes,
            summarized,
        })))
    }
}
