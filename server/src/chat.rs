//! One chat turn: store the user's message, decide what the model sees, stream the reply,
//! and store it, whatever happens to the browser or the upstream on the way.

use crate::histories::History;
use crate::llm::{LlmClient, LlmError, LlmEvent, ModelRequest};
use crate::session;
use crate::state::{BusyGuard, Services};
use crate::store::{now_ms, ConversationInfo, ConversationStore, StoreError};
use futures::StreamExt;
use parlor_app::ssr::BrowserSession;
use parlor_domain::history::{tail_hint, tail_suffices, trim_for_model};
use parlor_domain::markdown::StreamingMarkdown;
use parlor_domain::mirror::{preview, MIRROR_MODEL};
use parlor_domain::settings::SettingInputs;
use parlor_domain::{
    Agent, ChatEvent, Conversation, DebugInfo, DoneEvent, HistoryReport, HistorySettings, Message,
    MessageMeta, MetaEvent, Rendered, ReplyStatus, Role, SessionId, SettingsReport, TurnReport,
};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What a turn was asked to do.
pub struct TurnInput {
    pub agent: Arc<Agent>,
    /// The conversation to continue (the body's `session_id`); see [`start`] when absent.
    pub session_id: Option<SessionId>,
    /// The conversation named by the `parlor_chat` cookie.
    pub cookie_session: Option<SessionId>,
    /// Start a new conversation even if the cookie names one.
    pub new_conversation: bool,
    pub browser: Option<BrowserSession>,
    /// The user's new message, or `None` to reply again to the last one (Retry, Regenerate).
    pub message: Option<String>,
    pub url_policy: Option<String>,
    pub url_length: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("conversation not found")]
    ConversationNotFound,
    #[error("this conversation belongs to agent {0:?}")]
    WrongAgent(String),
    #[error("a reply is already being written in this conversation; wait for it or press Stop")]
    Busy,
    #[error("there is no user message to reply to")]
    NothingToRegenerate,
    #[error("history store unavailable, your message was not saved ({0})")]
    Store(#[from] StoreError),
}

/// A started turn: the facts about the model call, then the rest of its events.
pub struct Turn {
    pub meta: MetaEvent,
    pub events: mpsc::Receiver<ChatEvent>,
}

/// Runs a turn. The conversation is the body's `session_id`, else the cookie's (when it is
/// one this browser may continue with this agent, and `new_conversation` is not set), else a
/// new one with an unguessable id.
pub async fn start(services: &Arc<Services>, input: TurnInput) -> Result<Turn, TurnError> {
    let history = services.histories.for_agent(&input.agent).clone();
    let store = &history.store;
    let (session_id, existing) = match (&input.session_id, &input.cookie_session) {
        (Some(id), _) => {
            let info = store.info(id).await?;
            check_access(info.as_ref(), input.browser.as_ref(), &input.agent.id)?;
            (id.clone(), info)
        }
        (None, Some(id)) if !input.new_conversation => {
            let info = store.info(id).await?;
            match check_access(info.as_ref(), input.browser.as_ref(), &input.agent.id) {
                Ok(()) => (id.clone(), info),
                // The cookie is a hint, not a request: a conversation of another agent or
                // browser is simply not continued.
                Err(_) => (new_session_id(), None),
            }
        }
        _ => (new_session_id(), None),
    };
    let busy = services
        .claim(&history.id, &session_id)
        .ok_or(TurnError::Busy)?;

    let settings = resolve_settings(
        services,
        &input.agent,
        input.url_policy.as_deref(),
        input.url_length.as_deref(),
    );
    let now = now_ms();
    let (stored, stored_total) = match &input.message {
        Some(text) => {
            let message = Message::user(text.clone(), now);
            let (mut stored, total) = load_window(store.as_ref(), &session_id, &settings).await?;
            store
                .append(&session_id, std::slice::from_ref(&message))
                .await?;
            stored.push(message);
            (stored, total + 1)
        }
        None => {
            let mut stored = store.load(&session_id).await?;
            let last_user = stored
                .iter()
                .rposition(|m| m.role == Role::User)
                .ok_or(TurnError::NothingToRegenerate)?;
            if last_user + 1 < stored.len() {
                stored.truncate(last_user + 1);
                store.replace(&session_id, &stored).await?;
            }
            let total = stored.len();
            (stored, total)
        }
    };
    let info = match existing {
        Some(mut info) => {
            info.updated_ms = now;
            info
        }
        None => ConversationInfo {
            session_id: session_id.clone(),
            agent_id: input.agent.id.clone(),
            owner: input.browser.as_ref().map(session::owner),
            title: stored
                .iter()
                .find(|m| m.role == Role::User)
                .map(|m| preview(&m.text))
                .unwrap_or_default(),
            created_ms: now,
            updated_ms: now,
            last_turn: None,
        },
    };

    let plan = plan_request(&input.agent, &history, stored, stored_total, &settings);
    let model = model_name(services, &input.agent);
    tracing::debug!(
        "[History] Agent {} history settings: {{policy: \"{}\", length: {}, messageCount: {}}}",
        input.agent.id,
        settings.policy.value,
        settings.length.value,
        plan.report.messages_stored
    );
    if plan.report.messages_trimmed > 0 {
        tracing::debug!(
            "[History] Trimmed messages from {} to {}",
            plan.report.messages_stored,
            plan.report.messages_stored - plan.report.messages_trimmed
        );
    }
    let mut info = info;
    info.last_turn = Some(TurnReport::new(
        plan.report.clone(),
        model.clone().unwrap_or_default(),
    ));
    let meta = MetaEvent {
        session_id: session_id.to_string(),
        agent_id: input.agent.id.clone(),
        model: model.clone().unwrap_or_default(),
        provider: services.llm.provider().to_owned(),
        history: plan.report,
    };

    let (tx, rx) = mpsc::channel(64);
    let request = model.map(|model| ModelRequest {
        model,
        messages: plan.messages,
        temperature: input.agent.llm.as_ref().and_then(|l| l.temperature),
        max_tokens: input.agent.llm.as_ref().and_then(|l| l.max_tokens),
    });
    let request = request.ok_or_else(|| LlmError::NoModel {
        agent: input.agent.id.clone(),
    });
    tokio::spawn(write_reply(
        services.clone(),
        history,
        session_id,
        info,
        request,
        tx,
        busy,
    ));
    Ok(Turn { meta, events: rx })
}

fn new_session_id() -> SessionId {
    SessionId::from_random(uuid::Uuid::new_v4().as_u128())
}

/// The stored messages a turn needs for `settings`, and how many are stored in all. Reads
/// only the tail when the store can and the policy allows, so with Redis a turn's cost does
/// not grow with the conversation.
async fn load_window(
    store: &dyn ConversationStore,
    id: &SessionId,
    settings: &HistorySettings,
) -> Result<(Vec<Message>, usize), StoreError> {
    let (policy, length) = (settings.policy.value, settings.length.value);
    if let Some(count) = tail_hint(policy, length) {
        // The new user message is not stored yet: leave room for it in the check.
        let tail = store.load_tail(id, count).await?;
        let mut probe = tail.messages.clone();
        probe.push(Message::user(String::new(), 0));
        if tail.is_whole() || tail_suffices(&probe, policy, length) {
            return Ok((tail.messages, tail.total));
        }
    }
    let all = store.load(id).await?;
    let total = all.len();
    Ok((all, total))
}

/// The debug panel's facts: the settings as they resolve for this request, and the
/// conversation's last model call.
pub fn debug_info(
    services: &Services,
    agent: &Agent,
    conversation: Option<&ConversationInfo>,
    url_policy: Option<&str>,
    url_length: Option<&str>,
) -> DebugInfo {
    let settings = resolve_settings(services, agent, url_policy, url_length);
    DebugInfo {
        agent_id: agent.id.clone(),
        session_id: conversation.map(|c| c.session_id.to_string()),
        model: model_name(services, agent).unwrap_or_default(),
        provider: services.llm.provider().to_owned(),
        settings: SettingsReport::from_settings(&settings),
        last_turn: conversation.and_then(|c| c.last_turn.clone()),
    }
}

/// A conversation started in a browser belongs to that browser; others cannot see it.
/// Conversations started by API clients are reachable by their id alone.
pub fn check_access(
    info: Option<&ConversationInfo>,
    browser: Option<&BrowserSession>,
    agent_id: &str,
) -> Result<(), TurnError> {
    let Some(info) = info else { return Ok(()) };
    if let Some(owner) = &info.owner {
        if browser.map(session::owner).as_ref() != Some(owner) {
            return Err(TurnError::ConversationNotFound);
        }
    }
    if info.agent_id != agent_id {
        return Err(TurnError::WrongAgent(info.agent_id.clone()));
    }
    Ok(())
}

pub fn resolve_settings(
    services: &Services,
    agent: &Agent,
    url_policy: Option<&str>,
    url_length: Option<&str>,
) -> HistorySettings {
    let env = &services.config.history;
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

/// The model to call for `agent`: `mirror` offline, else `PARLOR_MODEL` or the template's.
pub fn model_name(services: &Services, agent: &Agent) -> Option<String> {
    if matches!(services.llm, LlmClient::Mirror(_)) {
        return Some(MIRROR_MODEL.to_owned());
    }
    services
        .config
        .model_override
        .clone()
        .or_else(|| agent.llm.as_ref().and_then(|l| l.model.clone()))
}

pub struct RequestPlan {
    pub messages: Vec<Message>,
    pub report: HistoryReport,
}

/// The messages a model call sends: the history's system message and the agent's system
/// prompt, then the stored conversation trimmed by the resolved settings; and the facts the
/// debug panel shows about it. `stored` is the end of the conversation (all of it, or a tail
/// long enough for the policy); `stored_count` is how many messages it holds in all.
pub fn plan_request(
    agent: &Agent,
    history: &History,
    stored: Vec<Message>,
    stored_count: usize,
    settings: &HistorySettings,
) -> RequestPlan {
    let mut conversation = Conversation::new();
    if let Some(system) = &history.system_message {
        conversation.push(Message::system(system.clone(), 0));
    }
    if !agent.system_prompt.is_empty() {
        conversation.push(Message::system(agent.system_prompt.clone(), 0));
    }
    for message in stored {
        conversation.push(message);
    }
    let trimmed = trim_for_model(
        &conversation,
        settings.policy.value,
        settings.length.value,
        settings.preserve_system,
    );
    let sent_from_conversation = trimmed
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .count();
    let estimated_tokens = trimmed
        .messages
        .iter()
        .map(|m| m.text.chars().count() as u64 / 4 + 4)
        .sum();
    let report = HistoryReport {
        settings: SettingsReport::from_settings(settings),
        messages_stored: stored_count,
        messages_sent: trimmed.messages.len(),
        messages_trimmed: stored_count - sent_from_conversation,
        first_sent_index: stored_count - sent_from_conversation,
        estimated_tokens,
    };
    RequestPlan {
        messages: trimmed.to_owned_messages(),
        report,
    }
}

enum Outcome {
    Finished(DoneEvent),
    Failed(String),
    /// The browser went away (Stop, closed tab): nobody is listening any more.
    Abandoned,
}

/// Streams the reply to the browser and stores it. Runs as its own task, so the reply is
/// stored even when the browser disconnects; dropping the upstream stream cancels the
/// upstream request.
#[allow(clippy::too_many_arguments)]
async fn write_reply(
    services: Arc<Services>,
    history: Arc<History>,
    session_id: SessionId,
    info: ConversationInfo,
    request: Result<ModelRequest, LlmError>,
    tx: mpsc::Sender<ChatEvent>,
    _busy: BusyGuard,
) {
    let model = request.as_ref().ok().map(|r| r.model.clone());
    let mut text = String::new();
    let reply = async {
        match request {
            Ok(request) => relay(&services.llm, request, &tx, &mut text).await,
            Err(e) => Outcome::Failed(e.to_string()),
        }
    };
    // The user's message is already stored; the conversation's title and time are written
    // while the model starts answering, so that write adds nothing to the first token.
    let (saved_info, outcome) = tokio::join!(history.store.put_info(&info), reply);
    if let Err(e) = saved_info {
        tracing::error!("could not store the details of conversation {session_id}: {e}");
    }
    // The model's own token count replaces the estimate in the debug report.
    if let Outcome::Finished(DoneEvent {
        usage: Some(usage), ..
    }) = &outcome
    {
        let mut info = info;
        info.last_turn = info.last_turn.map(|t| t.with_usage(Some(usage)));
        if let Err(e) = history.store.put_info(&info).await {
            tracing::error!("could not store the token count of {session_id}: {e}");
        }
    }
    let status = match &outcome {
        Outcome::Finished(_) => None,
        Outcome::Failed(_) => Some(ReplyStatus::Incomplete),
        Outcome::Abandoned => Some(ReplyStatus::Stopped),
    };
    if !text.is_empty() {
        let reply = Message {
            role: Role::Assistant,
            text,
            ts: now_ms(),
            meta: Some(MessageMeta { status, model }),
        };
        if let Err(e) = history.store.append(&session_id, &[reply]).await {
            tracing::error!("could not store the reply in {session_id}: {e}");
            let _ = tx
                .send(ChatEvent::Error {
                    message: format!("The reply could not be saved: {e}"),
                })
                .await;
            return;
        }
    }
    match outcome {
        Outcome::Finished(done) => {
            let _ = tx.send(ChatEvent::Done(done)).await;
        }
        Outcome::Failed(message) => {
            tracing::warn!("model call for {session_id} failed: {message}");
            let _ = tx.send(ChatEvent::Error { message }).await;
        }
        Outcome::Abandoned => {}
    }
}

async fn relay(
    llm: &LlmClient,
    request: ModelRequest,
    tx: &mpsc::Sender<ChatEvent>,
    text: &mut String,
) -> Outcome {
    let mut stream = tokio::select! {
        started = llm.stream(request) => match started {
            Ok(stream) => stream,
            Err(e) => return Outcome::Failed(e.to_string()),
        },
        _ = tx.closed() => return Outcome::Abandoned,
    };
    let mut markdown = StreamingMarkdown::new();
    loop {
        let item = tokio::select! {
            biased;
            _ = tx.closed() => return Outcome::Abandoned,
            item = stream.next() => item,
        };
        match item {
            Some(Ok(LlmEvent::Delta(piece))) => {
                text.push_str(&piece);
                let rendered = markdown.push(&piece).map(|html| Rendered {
                    html,
                    upto: markdown.rendered_len(),
                });
                if tx
                    .send(ChatEvent::Delta {
                        text: piece,
                        rendered,
                    })
                    .await
                    .is_err()
                {
                    return Outcome::Abandoned;
                }
            }
            Some(Ok(LlmEvent::Finished { reason, usage })) => {
                return Outcome::Finished(DoneEvent {
                    finish_reason: reason,
                    usage,
                    html: Some(markdown.finish()),
                })
            }
            Some(Err(e)) => return Outcome::Failed(e.to_string()),
            None => return Outcome::Failed(LlmError::Dropped.to_string()),
        }
    }
}
