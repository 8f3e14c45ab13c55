//! The data behind the Leptos pages, for the app's server functions.

use crate::state::Services;
use crate::store::ConversationInfo;
use crate::store::StoreError;
use parlor_app::api::{
    AgentCard, AgentInfo, ChatData, ChatHead, ChatPageData, ChatQuery, ConversationItem, DebugView,
    HomeData, OlderMessages, StoredMessage, ToolCard, PAGE_MESSAGES,
};
use parlor_app::ssr::{Backend, BackendError, BrowserSession};
use parlor_domain::chain::TokenCounter;
use parlor_domain::markdown::render_markdown;
use parlor_domain::{Agent, ConversationId, Message, Role};
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
    async fn daily_use(&self, account: &str) -> Option<parlor_domain::meter::DailyUse> {
        let accounts = self.services.accounts.as_deref()?;
        accounts.daily_use(account, crate::store::now_ms()).await
    }

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
        let (mut summarized, mut stored, mut versions) = (0, 0, Vec::new());
        if let Some(raw) = &query.session {
            let Some((id, info)) = self.visible(&agent, raw, browser.as_ref()).await? else {
                return Ok(ChatPageData::UnknownConversation);
            };
            // The latest page only: older messages load as the reader scrolls up.
            let tail = store.load_tail(&id, PAGE_MESSAGES).await?;
            stored = tail.total;
            messages = tail.messages;
            versions = versions_of(store.as_ref(), &id, stored - messages.len(), &messages).await?;
            summarized =
                summary_end(services, &agent, &id, stored - messages.len(), &messages).await?;
            session_id = Some(id.to_string());
            conversation = info;
        }
        let forked_from = self.forked_from(&agent, conversation.as_ref()).await?;
        let conversations = self.sidebar(browser.as_ref()).await?;
        let chosen = conversation.as_ref().and_then(|c| c.model.as_deref());
        let (model, provider) = services.models.label(&agent, chosen);
        let debug = query.debug && services.config.debug_panel;
        let tokens = debug.then(|| token_counter(services, &agent, chosen));
        Ok(ChatPageData::Ready(Box::new(ChatData {
            agent: agent_info(&agent),
            model: Some(model)
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "no model configured".into()),
            provider: provider.to_owned(),
            models: services.models.available(&agent),
            model_details: services.models.details(&agent),
            mirror: services.config.uses_mirror(),
            session_id,
            first_index: stored - messages.len(),
            messages: with_versions(stored_messages(messages, tokens.as_ref()), versions),
            conversations,
            meter: conversation
                .as_ref()
                .and_then(|c| c.last_turn.as_ref())
                .and_then(|t| t.meter.clone()),
            debug: self
                .debug_view(debug, &agent, conversation.as_ref(), &query, stored)
                .await?,
            max_context_bytes: services.config.max_context_bytes,
            summarized,
            forked_from,
            account: None,
        })))
    }
}

/// In front of the chat page (`GET /chat`, and `HEAD`): decides its head (does the page exist for this
/// browser, its title) with a cheap check, puts it into the request for the page to read,
/// and answers 404 when the page does not exist. The page is streamed, so this is what
/// lets its status and title be right before its first byte.
pub async fn decide_chat_head(
    axum::extract::State(services): axum::extract::State<Arc<Services>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let method = request.method();
    let is_read = method == axum::http::Method::GET || method == axum::http::Method::HEAD;
    // HEAD is answered as GET is: the same status.
    if !is_read || request.uri().path() != "/chat" {
        return next.run(request).await;
    }
    let params: std::collections::HashMap<String, String> =
        axum::extract::Query::try_from_uri(request.uri())
            .map(|axum::extract::Query(params)| params)
            .unwrap_or_default();
    let query = ChatQuery::from_params(|k| params.get(k).cloned());
    let browser = request.extensions().get::<BrowserSession>().cloned();
    let head = PageBackend { services }
        .chat_head(&query, browser)
        .await
        .unwrap_or_else(|e| ChatHead::Failed(e.to_string()));
    let found = matches!(head, ChatHead::Ready(_) | ChatHead::Failed(_));
    request.extensions_mut().insert(head);
    let mut response = super::head_first::head_first(next.run(request).await);
    if !found {
        *response.status_mut() = axum::http::StatusCode::NOT_FOUND;
    }
    response
}

impl PageBackend {
    /// The conversation `conversation` was forked from (its title, when it is still there).
    async fn forked_from(
        &self,
        agent: &Agent,
        conversation: Option<&ConversationInfo>,
    ) -> Result<Option<ConversationItem>, BackendError> {
        let Some(origin) = conversation.and_then(|c| c.forked_from.as_ref()) else {
            return Ok(None);
        };
        let store = &self.services.histories.for_agent(agent).store;
        let title = store
            .info(&origin.session_id)
            .await?
            .map_or_else(|| "a deleted conversation".to_owned(), |i| i.title);
        Ok(Some(ConversationItem {
            session_id: origin.session_id.to_string(),
            agent_id: agent.id.clone(),
            title,
            updated_ms: 0,
        }))
    }

    /// The sidebar: the conversations this browser started, newest first.
    async fn sidebar(
        &self,
        browser: Option<&BrowserSession>,
    ) -> Result<Vec<ConversationItem>, BackendError> {
        let Some(browser) = browser else {
            return Ok(Vec::new());
        };
        let owner = crate::ops::browser::owner(browser);
        let owned = self.services.histories.list_owned(&owner).await?;
        Ok(owned
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
            .collect())
    }

    /// The debug panel as the server renders it into the page.
    async fn debug_view(
        &self,
        shown: bool,
        agent: &Agent,
        conversation: Option<&ConversationInfo>,
        query: &ChatQuery,
        stored: usize,
    ) -> Result<Option<DebugView>, StoreError> {
        if !shown {
            return Ok(None);
        }
        let mut info = self.services.debug_info(
            agent,
            conversation,
            query.history_policy.as_deref(),
            query.history_length.as_deref(),
        );
        if let Some(c) = conversation {
            let store = &self.services.histories.for_agent(agent).store;
            info.versions =
                crate::conversation::versions::facts(store.as_ref(), &c.session_id).await?;
        }
        Ok(Some(DebugView {
            first_sent: info.last_turn.as_ref().map(|t| t.history.first_sent_index),
            html: parlor_app::components::debug_panel::render(info, stored),
        }))
    }
    /// Whether the chat page for `query` exists for `browser`, and its agent's name:
    /// cheap (no messages read), so the page's head goes out first.
    async fn chat_head(
        &self,
        query: &ChatQuery,
        browser: Option<BrowserSession>,
    ) -> Result<ChatHead, BackendError> {
        let Some(agent) = self.services.agents.get(&query.agent) else {
            return Ok(ChatHead::UnknownAgent(query.agent.clone()));
        };
        if let Some(raw) = &query.session {
            if self.visible(&agent, raw, browser.as_ref()).await?.is_none() {
                return Ok(ChatHead::UnknownConversation);
            }
        }
        Ok(ChatHead::Ready(agent.name.clone()))
    }

    /// The conversation `raw` names, if this browser may see it through `agent`.
    async fn visible(
        &self,
        agent: &Agent,
        raw: &str,
        browser: Option<&BrowserSession>,
    ) -> Result<Option<(ConversationId, Option<ConversationInfo>)>, BackendError> {
        let Ok(id) = ConversationId::parse(raw) else {
            return Ok(None);
        };
        let store = &self.services.histories.for_agent(agent).store;
        let info = store.info(&id).await?;
        // With accounts on, a page shows no conversation without an owner, not even to an
        // admin (who reaches those through the API, and can give them an owner).
        let accounts_on = self.services.accounts.is_some();
        let viewer = crate::ops::browser::viewer(browser, false, accounts_on);
        let visible = info
            .as_ref()
            .is_some_and(|info| info.visible_to(&viewer, &agent.id).is_ok());
        Ok(visible.then_some((id, info)))
    }
}

/// The page of messages before the stored position `before` of a conversation (`info`)
/// the caller may see, where the message at `before` has the id `before_id`. When the
/// history dropped its oldest messages since (`max_turns`), the page ends before that
/// message wherever it is now, and is empty if it is gone.
pub async fn older(
    services: &Services,
    agent: &Agent,
    id: &ConversationId,
    info: &ConversationInfo,
    before: usize,
    before_id: &str,
    debug: bool,
) -> Result<OlderMessages, StoreError> {
    let store = &services.histories.for_agent(agent).store;
    // The page and the message it ends before, which must still be at `before`...
    let start = before.saturating_sub(PAGE_MESSAGES);
    let mut page = store.load_range(id, start, before + 1).await?;
    let (first_index, messages) =
        if page.len() == before + 1 - start && page.last().is_some_and(|m| m.id() == before_id) {
            page.pop();
            (start, page)
        } else {
            // ...or where it is now.
            let mut all = store.load(id).await?;
            let Some(at) = all.iter().position(|m| m.id() == before_id) else {
                return Ok(OlderMessages::default());
            };
            all.truncate(at);
            let start = at.saturating_sub(PAGE_MESSAGES);
            all.drain(..start);
            (start, all)
        };
    let summarized = summary_end(services, agent, id, first_index, &messages).await?;
    let tokens = (debug && services.config.debug_panel)
        .then(|| token_counter(services, agent, info.model.as_deref()));
    let versions = versions_of(store.as_ref(), id, first_index, &messages).await?;
    let (messages, html) = with_versions(stored_messages(messages, tokens.as_ref()), versions)
        .into_iter()
        .map(|mut shown| {
            let html = shown.html.take().unwrap_or_default();
            (shown, html)
        })
        .unzip();
    Ok(OlderMessages {
        messages,
        html,
        first_index,
        summarized,
    })
}

/// The ‹ n/m › of each message of `window` (the chosen path's messages from position
/// `first`): read only when the conversation has other versions.
async fn versions_of(
    store: &dyn crate::store::ConversationStore,
    id: &ConversationId,
    first: usize,
    window: &[Message],
) -> Result<Vec<Option<parlor_domain::branch::Versions>>, StoreError> {
    let branches = store.branches(id).await?;
    if branches.is_empty() {
        return Ok(Vec::new());
    }
    let before = match first.checked_sub(1) {
        Some(at) => store.load_range(id, at, first).await?.pop(),
        None => None,
    };
    Ok(branches.versions(window, before.as_ref()))
}

fn with_versions(
    mut shown: Vec<StoredMessage>,
    versions: Vec<Option<parlor_domain::branch::Versions>>,
) -> Vec<StoredMessage> {
    for (message, versions) in shown.iter_mut().zip(versions) {
        message.versions = versions;
    }
    shown
}

/// Where the rolling summary ends (how many of the first stored messages it covers),
/// when that end is among `messages`, which start at the stored position `first`; 0
/// when it is not or when this agent's chain keeps no summary.
/// The agent as the chat page shows it (its greeting rendered).
fn agent_info(agent: &Agent) -> AgentInfo {
    AgentInfo {
        id: agent.id.clone(),
        name: agent.name.clone(),
        description: agent.description.clone(),
        initial_messages_html: agent
            .initial_messages
            .iter()
            .map(|m| render_markdown(m))
            .collect(),
        chat_prompts: agent.chat_prompts.clone(),
    }
}

async fn summary_end(
    services: &Services,
    agent: &Agent,
    id: &ConversationId,
    first: usize,
    messages: &[Message],
) -> Result<usize, StoreError> {
    // Only summaries Parlor keeps for this agent's chain mark the transcript.
    if !services.chain_for(agent).names().contains(&"summary") {
        return Ok(0);
    }
    let store = &services.histories.for_agent(agent).store;
    let Some(summary) = store.summary(id).await? else {
        return Ok(0);
    };
    let covers = parlor_domain::summary::Covers::of(&summary);
    let covered = messages.iter().filter(|m| covers.includes(m)).count();
    Ok(if covered > 0 { first + covered } else { 0 })
}

/// With the debug panel, each message shows its tokens for the conversation's model.
fn token_counter(
    services: &Services,
    agent: &Agent,
    chosen: Option<&str>,
) -> Arc<dyn TokenCounter> {
    let spec = services.models.for_conversation(agent, chosen);
    crate::llm::models::token_counter(
        spec.as_ref()
            .map(|m| m.upstream.as_str())
            .unwrap_or_default(),
    )
}

/// Stored messages as the chat page shows them: a tool result's card names the arguments
/// its call was made with (from the call before it, when the page holds it).
pub(crate) fn stored_messages(
    messages: Vec<Message>,
    tokens: Option<&Arc<dyn TokenCounter>>,
) -> Vec<StoredMessage> {
    let arguments: std::collections::HashMap<String, String> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|c| (c.id.clone(), c.arguments.clone()))
        .collect();
    messages
        .into_iter()
        .map(|m| {
            let card = card(&m, &arguments);
            StoredMessage {
                card,
                ..stored_message(m, tokens)
            }
        })
        .collect()
}

/// A tool result's card.
fn card(m: &Message, arguments: &std::collections::HashMap<String, String>) -> Option<ToolCard> {
    let answer = m.tool.as_ref()?;
    let mut text = Vec::new();
    let mut image = None;
    for block in &m.context {
        match &block.part {
            parlor_domain::block::Part::Image { url } if image.is_none() => {
                image = Some(url.clone())
            }
            part => text.extend(part.sent_text().map(|t| t.into_owned())),
        }
    }
    Some(ToolCard {
        call_id: answer.tool_call_id.clone(),
        tool: answer.name.clone(),
        arguments: arguments
            .get(&answer.tool_call_id)
            .cloned()
            .unwrap_or_default(),
        ok: Some(answer.ok),
        ms: answer.ms,
        bytes: answer.bytes,
        text: text.join("\n"),
        image: image.filter(|url| parlor_domain::context::image_type(url).is_some()),
        removed: answer.removed_after.is_some(),
    })
}

/// A stored message as the chat page shows it.
fn stored_message(m: Message, tokens: Option<&Arc<dyn TokenCounter>>) -> StoredMessage {
    StoredMessage {
        tokens: tokens.map(|t| t.count(&m)),
        id: m.id().into_owned(),
        send: m.send,
        status: m.status(),
        html: (m.role == Role::Assistant).then(|| render_markdown(&m.text)),
        context: parlor_domain::context::Chip::of_stored(&m.context),
        role: m.role,
        calls: !m.tool_calls.is_empty(),
        card: None,
        versions: None,
        text: m.text,
    }
}
