//! One chat turn: store the user's message, decide what the model sees, stream the reply,
//! and store it, whatever happens to the browser or the upstream on the way.

use crate::config_file::{apply_edit, Edit};
use crate::histories::History;
use crate::llm::{LlmClient, LlmError, LlmEvent, MirrorModel, ModelRequest};
use crate::models::{token_counter, ModelSpec, Provider};
use crate::session;
use crate::state::{BusyGuard, Services};
use crate::store::{now_ms, ConversationInfo, ConversationStore, StoreError};
use futures::StreamExt;
use parlor_app::ssr::BrowserSession;
use parlor_domain::chain::{
    effective_ctx, Chain, ChainContext, ChainError, ModelLimits, ModelSwitch, StepReport,
    POLICY_STEP,
};
use parlor_domain::command::{parse_command, Command, Parsed, HELP};
use parlor_domain::history::{tail_hint, tail_suffices, trim_for_model};
use parlor_domain::markdown::StreamingMarkdown;
use parlor_domain::mirror::{preview, MIRROR_MODEL};
use parlor_domain::sessions::LimitReached;
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
    /// The `X-Parlor-Admin-Token` header, for admin commands.
    pub admin_token: Option<String>,
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
    #[error("{0}")]
    LimitReached(#[from] LimitReached),
    #[error(
        "not allowed: this command changes server-wide settings; it needs the operator's admin \
         token (PARLOR_ADMIN_TOKEN) in the X-Parlor-Admin-Token header"
    )]
    NotAllowed,
}

/// A started turn: the facts about the model call, then the rest of its events.
pub struct Turn {
    pub meta: MetaEvent,
    pub events: mpsc::Receiver<ChatEvent>,
}

/// Runs a turn. The conversation is the body's `session_id`, else the cookie's (when it is
/// one this browser may continue with this agent, and `new_conversation` is not set), else a
/// new one with an unguessable id. A message that is a `!` command is answered by Parlor.
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
    let command = match input.message.as_deref().map(parse_command) {
        Some(Parsed::Command(command)) => Some(Ok(command)),
        Some(Parsed::Invalid(usage)) => Some(Err(usage)),
        _ => None,
    };
    let is_admin = matches!(&command, Some(Ok(c)) if c.is_admin());
    if is_admin && !admin_allowed(services, input.admin_token.as_deref()) {
        return Err(TurnError::NotAllowed);
    }
    let busy = services
        .claim(&history.id, &session_id)
        .ok_or(TurnError::Busy)?;
    let now = now_ms();
    // Administrators can always get in, or they could not raise a limit that was reached.
    let max_users = if is_admin {
        0
    } else {
        services.limits.max_users()
    };
    let live_key = match &input.browser {
        Some(browser) => session::live_key(browser),
        None => format!("api:{}:{session_id}", history.id),
    };
    services
        .live
        .touch(&live_key, now, max_users, true)
        .await??;

    let settings = resolve_settings(
        services,
        &input.agent,
        input.url_policy.as_deref(),
        input.url_length.as_deref(),
    );
    let mut info = match existing {
        Some(mut info) => {
            info.updated_ms = now;
            info
        }
        None => ConversationInfo {
            session_id: session_id.clone(),
            agent_id: input.agent.id.clone(),
            owner: input.browser.as_ref().map(session::owner),
            title: String::new(),
            created_ms: now,
            updated_ms: now,
            last_turn: None,
            model: None,
        },
    };
    if let Some(command) = command {
        let turn = TurnContext {
            services,
            history: &history,
            agent: &input.agent,
            settings: &settings,
        };
        return turn.command(command, info, busy).await;
    }

    let (stored, stored_total) = match &input.message {
        Some(text) => {
            let message = Message::user(text.clone(), now);
            let window = load_window(store.as_ref(), &session_id, &settings, &message).await?;
            store
                .append(&session_id, std::slice::from_ref(&message))
                .await?;
            window
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
    if info.title.is_empty() {
        if let Some(first) = stored.iter().find(|m| m.role == Role::User) {
            info.title = preview(&first.text);
        }
    }

    let model = session_model(services, &input.agent, info.model.as_deref());
    let plan = plan_request(
        services,
        &input.agent,
        &history,
        stored,
        stored_total,
        &settings,
        model.as_ref(),
    );
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
    let model_label = model
        .as_ref()
        .map(|m| m.name().to_owned())
        .unwrap_or_default();
    info.last_turn = Some(TurnReport::new(plan.report.clone(), model_label.clone()));
    let meta = MetaEvent {
        session_id: session_id.to_string(),
        agent_id: input.agent.id.clone(),
        model: model_label,
        provider: provider_label(services, model.as_ref()).to_owned(),
        history: plan.report,
    };

    let (tx, rx) = mpsc::channel(64);
    let request = match (model, plan.error) {
        (_, Some(e)) => Err(e.to_string()),
        (None, None) => Err(LlmError::NoModel {
            agent: input.agent.id.clone(),
        }
        .to_string()),
        (Some(model), None) => Ok((
            client_for(services, &model),
            ModelRequest {
                model: model.upstream.clone(),
                messages: plan.messages,
                temperature: input.agent.llm.as_ref().and_then(|l| l.temperature),
                max_tokens: input.agent.llm.as_ref().and_then(|l| l.max_tokens),
            },
        )),
    };
    tokio::spawn(write_reply(history, session_id, info, request, tx, busy));
    Ok(Turn { meta, events: rx })
}

fn admin_allowed(services: &Services, token: Option<&str>) -> bool {
    match (&services.config.admin_token, token) {
        (Some(expected), Some(given)) => {
            // Compare without stopping at the first difference.
            let (a, b) = (expected.expose().as_bytes(), given.as_bytes());
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
        }
        _ => false,
    }
}

/// The model a session talks to: the one chosen with `!model`, else the agent's.
pub fn session_model(
    services: &Services,
    agent: &Agent,
    chosen: Option<&str>,
) -> Option<ModelSpec> {
    let name = chosen
        .map(str::to_owned)
        .or_else(|| model_name(services, agent))?;
    Some(model_named(services, &name))
}

/// The declared model of that name, or an undeclared OpenAI-compatible one.
fn model_named(services: &Services, name: &str) -> ModelSpec {
    find_model(services, name).unwrap_or_else(|| ModelSpec::implicit(name, Provider::OpenAi))
}

fn find_model(services: &Services, name: &str) -> Option<ModelSpec> {
    services.models.iter().find(|m| m.name() == name).cloned()
}

/// The models `!model` offers: the declared ones and the agent's own.
pub fn available_models(services: &Services, agent: &Agent) -> Vec<String> {
    let mut names: Vec<String> = services
        .models
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    if let Some(own) = model_name(services, agent) {
        if !names.contains(&own) {
            names.insert(0, own);
        }
    }
    names
}

/// Offline (no upstream configured) every model is answered by the mirror.
fn client_for(services: &Services, model: &ModelSpec) -> LlmClient {
    match (&services.llm, model.provider) {
        (LlmClient::OpenAi(client), Provider::OpenAi) => LlmClient::OpenAi(client.clone()),
        _ => LlmClient::Mirror(MirrorModel {
            delay: services.config.mirror_delay,
        }),
    }
}

pub fn provider_label(services: &Services, model: Option<&ModelSpec>) -> &'static str {
    match model {
        Some(model) => client_for(services, model).provider(),
        None => services.llm.provider(),
    }
}

/// What a command needs to know about the turn it answers.
struct TurnContext<'a> {
    services: &'a Arc<Services>,
    history: &'a Arc<History>,
    agent: &'a Arc<Agent>,
    settings: &'a HistorySettings,
}

impl TurnContext<'_> {
    /// Answers a `!` command: a `meta` event (the window that applies now), a `notice`, and
    /// `done`. Commands and notices are not stored in the conversation.
    async fn command(
        &self,
        command: Result<Command, String>,
        mut info: ConversationInfo,
        _busy: BusyGuard,
    ) -> Result<Turn, TurnError> {
        let services = self.services;
        let store = &self.history.store;
        let id = info.session_id.clone();
        let notice = match command {
            Err(usage) => usage,
            Ok(Command::Help) => HELP.to_owned(),
            Ok(Command::Model(None)) => {
                let current = session_model(services, self.agent, info.model.as_deref());
                format!(
                    "Current model: '{}'. Available: {}.",
                    current.as_ref().map(|m| m.name()).unwrap_or("none"),
                    available_models(services, self.agent).join(", ")
                )
            }
            Ok(Command::Model(Some(name))) => {
                let available = available_models(services, self.agent);
                if !available.contains(&name) {
                    format!(
                        "Unknown model '{name}'; nothing changed. Available: {}.",
                        available.join(", ")
                    )
                } else {
                    let from = session_model(services, self.agent, info.model.as_deref());
                    let to = model_named(services, &name);
                    let stored = store.load(&id).await?;
                    let (removed, kept) = self.switch_window(stored, from.as_ref(), &to);
                    info.model = Some(name.clone());
                    let mut notice = format!("Model set to '{name}'.");
                    if removed > 0 {
                        notice.push_str(&format!(
                            "\nHistory trimmed: {removed} message(s) removed ({kept} kept)."
                        ));
                    }
                    notice
                }
            }
            Ok(Command::Reset) => {
                let backup = store.clear(&id).await?;
                info.last_turn = None;
                match backup {
                    Some(backup) => {
                        format!("Conversation cleared. A backup was kept ({}).", backup.id)
                    }
                    None => "Conversation cleared.".to_owned(),
                }
            }
            Ok(admin) => self.admin(admin).await,
        };

        let stored = store.load(&id).await?;
        let total = stored.len();
        let model = session_model(services, self.agent, info.model.as_deref());
        let plan = plan_request(
            services,
            self.agent,
            self.history,
            stored,
            total,
            self.settings,
            model.as_ref(),
        );
        let model_label = model
            .as_ref()
            .map(|m| m.name().to_owned())
            .unwrap_or_default();
        info.last_turn = Some(TurnReport::new(plan.report.clone(), model_label.clone()));
        store.put_info(&info).await?;
        let meta = MetaEvent {
            session_id: id.to_string(),
            agent_id: self.agent.id.clone(),
            model: model_label,
            provider: provider_label(services, model.as_ref()).to_owned(),
            history: plan.report,
        };
        let (tx, rx) = mpsc::channel(2);
        let _ = tx.try_send(ChatEvent::Notice { text: notice });
        let _ = tx.try_send(ChatEvent::Done(DoneEvent {
            finish_reason: "command".into(),
            usage: None,
            html: None,
        }));
        Ok(Turn { meta, events: rx })
    }

    /// Runs each processor's `on_model_switch` in chain order on what the policy keeps:
    /// (messages that fall out of the window, messages kept).
    fn switch_window(
        &self,
        stored: Vec<Message>,
        from: Option<&ModelSpec>,
        to: &ModelSpec,
    ) -> (usize, usize) {
        let services = self.services;
        let conversation: Conversation = stored.into_iter().collect();
        let kept = trim_for_model(
            &conversation,
            self.settings.policy.value,
            self.settings.length.value,
            false,
        )
        .to_owned_messages();
        let before = kept.len();
        let tokens = token_counter(&to.upstream);
        let ctx = ChainContext {
            model: &to.limits,
            effective_ctx: effective_ctx(agent_max_ctx(services, self.agent), &to.limits),
            tokens: tokens.as_ref(),
        };
        let fallback = ModelLimits::default();
        let switch = ModelSwitch {
            from: from.map(|m| &m.limits).unwrap_or(&fallback),
            to: &to.limits,
        };
        let after = match chain_for(services, self.agent).run_model_switch(kept, &switch, &ctx) {
            Ok(outcome) => outcome.messages.len(),
            Err(_) => 0,
        };
        (before.saturating_sub(after), after)
    }

    /// Applies an admin command (the token was checked) and saves it unless temporary.
    async fn admin(&self, command: Command) -> String {
        let services = self.services;
        let limits = &services.limits;
        let (edit, what, temporary) = match command {
            Command::MaxCtx { value, temporary } => {
                limits.set_agent_max_ctx(value);
                (
                    Edit::AgentMaxCtx(value),
                    format!("agent_max_ctx set to {value}"),
                    temporary,
                )
            }
            Command::MaxUsers(n) => {
                limits.set_max_users(n);
                let label = if n == 0 {
                    "no limit".to_owned()
                } else {
                    n.to_string()
                };
                (
                    Edit::MaxUsers(n),
                    format!("max_users set to {label}"),
                    false,
                )
            }
            Command::SessionTimeout(minutes) => {
                limits.set_idle_timeout_minutes(minutes);
                let label = if minutes == 0 {
                    "never (reaper off)".to_owned()
                } else {
                    format!("{minutes} minute(s)")
                };
                (
                    Edit::IdleTimeoutMinutes(minutes),
                    format!("session_idle_timeout_minutes set to {label}"),
                    false,
                )
            }
            _ => unreachable!("not an admin command"),
        };
        tracing::info!("admin: {what}");
        if temporary {
            return format!("{what} (until Parlor restarts).");
        }
        let path = services.config_path.clone();
        let data_dir = services.config.data_dir.clone();
        let saved = tokio::task::spawn_blocking(move || apply_edit(&path, &edit, &data_dir))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        match saved {
            Ok(()) => format!("{what} (saved to {}).", services.config_path.display()),
            Err(e) => format!("{what} for now, but it could not be saved: {e}"),
        }
    }
}

/// The processors after the policy step for `agent`: its template's, else the configured.
pub fn chain_for(services: &Services, agent: &Agent) -> Chain {
    agent
        .history_processors
        .as_ref()
        .and_then(|names| Chain::from_names(names).ok())
        .unwrap_or_else(|| services.chain.clone())
}

/// The agent's window ceiling: its template's `maxContext`, else the server-wide value.
pub fn agent_max_ctx(services: &Services, agent: &Agent) -> usize {
    agent
        .max_context
        .unwrap_or_else(|| services.limits.agent_max_ctx())
}

fn new_session_id() -> SessionId {
    SessionId::from_random(uuid::Uuid::new_v4().as_u128())
}

/// The stored messages a turn needs for `settings`, and how many are stored in all. Reads
/// only the tail when the store can and the policy allows, so with Redis a turn's cost does
/// not grow with the conversation.
/// Both are returned with `new` (the user's message, not stored yet) at the end.
async fn load_window(
    store: &dyn ConversationStore,
    id: &SessionId,
    settings: &HistorySettings,
    new: &Message,
) -> Result<(Vec<Message>, usize), StoreError> {
    let (policy, length) = (settings.policy.value, settings.length.value);
    if let Some(count) = tail_hint(policy, length) {
        let mut tail = store.load_tail(id, count).await?;
        let whole = tail.is_whole();
        tail.messages.push(new.clone());
        if whole || tail_suffices(&tail.messages, policy, length) {
            return Ok((tail.messages, tail.total + 1));
        }
    }
    let mut all = store.load(id).await?;
    all.push(new.clone());
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
    let model = session_model(
        services,
        agent,
        conversation.and_then(|c| c.model.as_deref()),
    );
    DebugInfo {
        agent_id: agent.id.clone(),
        session_id: conversation.map(|c| c.session_id.to_string()),
        model: model
            .as_ref()
            .map(|m| m.name().to_owned())
            .unwrap_or_default(),
        provider: provider_label(services, model.as_ref()).to_owned(),
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
    /// Set when the chain refused the request (the message alone is over the budget).
    pub error: Option<ChainError>,
}

/// The messages a model call sends: the history's system message and the agent's system
/// prompt, then the stored conversation trimmed by the resolved policy and transformed by
/// the processor chain; and the facts the debug panel shows about it. `stored` is the end of
/// the conversation (all of it, or a tail long enough for the policy); `stored_count` is how
/// many messages it holds in all.
pub fn plan_request(
    services: &Services,
    agent: &Agent,
    history: &History,
    stored: Vec<Message>,
    stored_count: usize,
    settings: &HistorySettings,
    model: Option<&ModelSpec>,
) -> RequestPlan {
    let loaded_from = stored_count - stored.len();
    let mut conversation = Conversation::new();
    if let Some(system) = &history.system_message {
        conversation.push(Message::system(system.clone(), 0));
    }
    if !agent.system_prompt.is_empty() {
        conversation.push(Message::system(agent.system_prompt.clone(), 0));
    }
    let systems = conversation.len();
    for message in stored {
        conversation.push(message);
    }
    let trimmed = trim_for_model(
        &conversation,
        settings.policy.value,
        settings.length.value,
        settings.preserve_system,
    );
    let policy_kept = trimmed.messages.len();
    let policy_sent_stored = trimmed
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .count();
    let limits = model.map(|m| m.limits.clone()).unwrap_or_default();
    let tokens = token_counter(model.map(|m| m.upstream.as_str()).unwrap_or_default());
    let window = effective_ctx(agent_max_ctx(services, agent), &limits);
    let ctx = ChainContext {
        model: &limits,
        effective_ctx: window,
        tokens: tokens.as_ref(),
    };
    let mut steps = vec![StepReport {
        name: POLICY_STEP.to_owned(),
        removed: stored_count - policy_sent_stored,
        kept: policy_kept,
    }];
    let (messages, error) = match chain_for(services, agent).run(trimmed.to_owned_messages(), &ctx)
    {
        Ok(outcome) => {
            steps.extend(outcome.steps);
            (outcome.messages, None)
        }
        Err(e) => (Vec::new(), Some(e)),
    };
    // Every step removes from the front (or merges neighbours), so what is sent is the end
    // of the stored conversation from its first sent message on.
    let first_sent_index = match messages.iter().find(|m| m.role != Role::System) {
        Some(first) => conversation.messages()[systems..]
            .iter()
            .position(|m| m.ts == first.ts && m.role == first.role)
            .map(|i| loaded_from + i)
            .unwrap_or(stored_count - policy_sent_stored),
        None => stored_count,
    };
    let estimated_tokens = messages.iter().map(|m| tokens.count(m)).sum();
    let report = HistoryReport {
        settings: SettingsReport::from_settings(settings),
        messages_stored: stored_count,
        messages_sent: messages.len(),
        messages_trimmed: first_sent_index,
        first_sent_index,
        estimated_tokens,
        chain: steps,
        effective_ctx: window,
        token_budget: limits.token_budget,
    };
    RequestPlan {
        messages,
        report,
        error,
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
async fn write_reply(
    history: Arc<History>,
    session_id: SessionId,
    info: ConversationInfo,
    request: Result<(LlmClient, ModelRequest), String>,
    tx: mpsc::Sender<ChatEvent>,
    _busy: BusyGuard,
) {
    let model = request.as_ref().ok().map(|(_, r)| r.model.clone());
    let mut text = String::new();
    let reply = async {
        match request {
            Ok((client, request)) => relay(&client, request, &tx, &mut text).await,
            Err(e) => Outcome::Failed(e),
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
