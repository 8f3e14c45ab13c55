//! One chat turn, as its phases: resolve the conversation, admit the request, answer a `!`
//! command or store the message (or drop the reply to regenerate), plan the model call
//! (the domain's [`parlor_domain::plan`] decides what the model receives), then spawn the
//! reply, which relays the model's stream and stores it ([`reply`]).

mod commands;
mod reply;
mod summary;

use summary::StoredSummary;

use crate::browser;
use crate::histories::History;
use crate::llm::{LlmError, ModelRequest};
use crate::models::{token_counter, ModelSpec};
use crate::state::{BusyGuard, Services};
use crate::store::{now_ms, AccessDenied, ConversationInfo, ConversationStore, StoreError};
use parlor_app::ssr::BrowserSession;
use parlor_domain::command::{parse_command, Parsed};
use parlor_domain::context::{self, ContextEntry, ContextReport, Pruning};
use parlor_domain::history::{tail_hint, tail_suffices};
use parlor_domain::live_sessions::LimitReached;
use parlor_domain::message::title_of;
use parlor_domain::meter::measure;
use parlor_domain::plan::{plan, Plan, PlanInput};
use parlor_domain::{
    Agent, ChatEvent, HistorySettings, Message, MetaEvent, Role, SessionId, TurnReport,
};
use std::sync::Arc;
use tokio::sync::mpsc;
use tracing::Instrument;

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
    /// The message's context entries (checked).
    pub context: Vec<ContextEntry>,
    pub url_policy: Option<String>,
    pub url_length: Option<String>,
    /// The `X-Parlor-Admin-Token` header, for admin commands.
    pub admin_token: Option<String>,
    /// The id of the last user message `message` replaces (Edit).
    pub edit: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("{0}")]
    Access(#[from] AccessDenied),
    #[error("a reply is already being written in this conversation; wait for it or press Stop")]
    Busy,
    #[error("there is no user message to reply to")]
    NothingToRegenerate,
    #[error("no message with id {0:?} in this conversation")]
    NoMessage(String),
    #[error(
        "only the last user message can be edited in place; to edit an earlier one, fork the \
         conversation before it"
    )]
    NotLastUserMessage,
    #[error("the conversation changed while this was being done (a message saved by another tool, or a reset); reload it and try again")]
    Changed,
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

/// What every phase of a turn shares: where the conversation lives, for which agent, and
/// the settings this request resolved.
pub(crate) struct TurnContext<'a> {
    pub services: &'a Arc<Services>,
    pub history: &'a Arc<History>,
    pub agent: &'a Arc<Agent>,
    pub settings: HistorySettings,
}

/// Runs a turn. The conversation is the body's `session_id`, else the cookie's (when it is
/// one this browser may continue with this agent, and `new_conversation` is not set), else a
/// new one with an unguessable id. A message that is a `!` command is answered by Parlor.
pub async fn start(services: &Arc<Services>, input: TurnInput) -> Result<Turn, TurnError> {
    let history = services.histories.for_agent(&input.agent).clone();
    let (session_id, existing) = resolve_conversation(&history, &input).await?;
    let command = input
        .message
        .as_deref()
        .and_then(|text| match parse_command(text) {
            Parsed::Command(command) => Some(Ok(command)),
            Parsed::Invalid(usage) => Some(Err(usage)),
            _ => None,
        });
    let is_admin = matches!(&command, Some(Ok(c)) if c.is_admin());
    let busy = admit(services, &history, &session_id, &input, is_admin).await?;
    let turn = TurnContext {
        services,
        history: &history,
        agent: &input.agent,
        settings: services.history_settings(
            &input.agent,
            input.url_policy.as_deref(),
            input.url_length.as_deref(),
        ),
    };
    let is_new = existing.is_none();
    let mut info = conversation_info(existing, &session_id, &input);
    let (prepared, durable) = match (command, &input.message) {
        (Some(command), _) => {
            if is_new {
                // The owner is durable before anything of the conversation is stored or
                // acknowledged: a crash can never leave a browser's conversation without
                // its owner.
                history.store.put_info(&info).await?;
            }
            return commands::answer(&turn, command, info, busy).await;
        }
        (None, Some(text)) => {
            // The client's context first, then the operator's providers.
            let (provided, failed) = services.providers.run(&input.agent).await;
            let mut entries = input.context.clone();
            entries.extend(provided);
            if let Some(edited) = &input.edit {
                turn.rewind(&session_id, edited).await?;
            }
            let (mut prepared, durable) = turn
                .prepare_message(&mut info, text, &entries, is_new)
                .await?;
            if !failed.is_empty() {
                prepared.context.get_or_insert_default().failed = failed;
            }
            (prepared, Some(durable))
        }
        (None, None) => {
            if is_new {
                history.store.put_info(&info).await?;
            }
            (turn.drop_last_reply(&session_id).await?, None)
        }
    };
    let summary = turn
        .summary(&session_id, durable.as_ref().map(|d| &d.message))
        .await?;
    turn.reply(info, prepared, durable, summary, busy).await
}

/// What a turn must make durable before it acknowledges anything: the conversation's
/// details when they are new or changed (its owner first of all), then the user's message.
/// Written while the model call starts (see [`TurnContext::reply`]).
struct Durable {
    /// Write the details first: a new conversation (its owner), or a longer retention.
    info: bool,
    message: Message,
}

/// What a turn's model call is planned from.
struct Prepared {
    /// The stored messages the plan needs, pruned, ending with the message sent now.
    tail: Vec<Message>,
    /// The pinned messages stored before `tail`, with their positions.
    older_pins: Vec<(usize, Message)>,
    /// How many messages the conversation holds in all.
    total: usize,
    context: Option<ContextReport>,
}

/// The conversation a request continues, and what is stored about it (`None`: a new one).
async fn resolve_conversation(
    history: &History,
    input: &TurnInput,
) -> Result<(SessionId, Option<ConversationInfo>), TurnError> {
    let owner = input.browser.as_ref().map(browser::owner);
    let visible = |info: &Option<ConversationInfo>| match info {
        Some(info) => info.visible_to(owner.as_deref(), &input.agent.id),
        None => Ok(()),
    };
    match (&input.session_id, &input.cookie_session) {
        (Some(id), _) => {
            let info = history.store.info(id).await?;
            visible(&info)?;
            // A name for a new conversation: only API clients choose one (a browser's are
            // made here), and only a name under which nothing is stored: anything there
            // (another tool's messages or summary, backups) has no web owner, so no request
            // may claim it by guessing its name.
            if info.is_none() && (input.browser.is_some() || history.store.exists(id).await?) {
                return Err(AccessDenied::NotFound.into());
            }
            Ok((id.clone(), info))
        }
        (None, Some(id)) if !input.new_conversation => {
            let info = history.store.info(id).await?;
            // The cookie is a hint, not a request: a conversation of another agent or
            // browser is simply not continued.
            match visible(&info) {
                Ok(()) => Ok((id.clone(), info)),
                Err(_) => Ok((crate::conversations::new_session_id(), None)),
            }
        }
        _ => Ok((crate::conversations::new_session_id(), None)),
    }
}

/// Admission: admin commands need the token; one reply at a time per conversation; a
/// browser that is not live yet only within `max_users` (administrators always get in, or
/// they could not raise a limit that was reached). The returned guard keeps the
/// conversation busy.
async fn admit(
    services: &Arc<Services>,
    history: &History,
    session_id: &SessionId,
    input: &TurnInput,
    is_admin: bool,
) -> Result<BusyGuard, TurnError> {
    if is_admin
        && !services
            .config
            .admin_token_matches(input.admin_token.as_deref())
    {
        return Err(TurnError::NotAllowed);
    }
    let mut busy = services
        .claim(&history.id, session_id)
        .ok_or(TurnError::Busy)?;
    // Another process sharing the store may be writing a reply here too.
    let shared = history.store.lock_reply(session_id).await?;
    busy.hold(shared.ok_or(TurnError::Busy)?);
    // Browsers are the sessions `max_users` counts; API clients without the browser cookie
    // take no slot (they cannot starve browsers).
    if let Some(browser) = &input.browser {
        let max_users = if is_admin {
            0
        } else {
            services.limits.max_users()
        };
        let key = browser::live_key(browser);
        services
            .live
            .touch(&key, now_ms(), max_users, true)
            .await??;
    }
    Ok(busy)
}

/// The conversation's details for this turn: the stored ones, touched now, or new ones
/// owned by the requesting browser.
fn conversation_info(
    existing: Option<ConversationInfo>,
    session_id: &SessionId,
    input: &TurnInput,
) -> ConversationInfo {
    let now = now_ms();
    match existing {
        Some(info) => ConversationInfo {
            updated_ms: now,
            ..info
        },
        None => ConversationInfo {
            agent_id: input.agent.id.clone(),
            owner: input.browser.as_ref().map(browser::owner),
            ..ConversationInfo::bare(session_id, Some(now))
        },
    }
}

impl TurnContext<'_> {
    /// Prunes the context blocks whose time is up and builds the user's message. Returns
    /// what the plan needs (the pruned stored messages, then the message as sent now: its
    /// displayed variant) and what must be made durable before the turn is acknowledged
    /// (the persisted variant, and the details when they are new or changed).
    async fn prepare_message(
        &self,
        info: &mut ConversationInfo,
        text: &str,
        entries: &[ContextEntry],
        is_new: bool,
    ) -> Result<(Prepared, Durable), TurnError> {
        let id = &info.session_id;
        let mut built = context::build(text, entries, now_ms());
        // Stored with its id (the one it would derive: both variants share it).
        built.persisted.ensure_id();
        built.display.id.clone_from(&built.persisted.id);
        let store = self.history.store.as_ref();
        // A new conversation has nothing stored to read (a name a request chose was found
        // empty when the conversation was resolved).
        let (history, total) = if is_new {
            (Vec::new(), 0)
        } else {
            load_window(
                store,
                id,
                &self.settings,
                &built.display,
                info.context_turns,
            )
            .await?
        };
        let offset = total - history.len();
        // Pinned messages older than the tail: read only for conversations with pins.
        let older_pins = if info.pinned > 0 && offset > 0 {
            let all = store.load(id).await?;
            all.into_iter()
                .take(offset)
                .enumerate()
                .filter(|(_, m)| m.is_pinned())
                .collect()
        } else {
            Vec::new()
        };
        let pruning = self.prune(id, offset, history).await?;
        let context_turns = crate::conversations::longest_retention(&pruning.messages).max(
            crate::conversations::longest_retention(std::slice::from_ref(&built.persisted)),
        );
        // A longer retention is durable before the message: a later turn must read back far
        // enough to prune it.
        let info_changed = is_new || context_turns > info.context_turns;
        info.context_turns = context_turns;
        let context = Some(ContextReport::new(entries, &pruning)).filter(|r| !r.is_empty());
        let total = total - removed(&pruning) + 1;
        let mut tail = pruning.messages;
        tail.push(built.display);
        let prepared = Prepared {
            tail,
            older_pins,
            total,
            context,
        };
        let durable = Durable {
            info: info_changed,
            message: built.persisted,
        };
        Ok((prepared, durable))
    }

    /// Starts the reply task, in the request's span (its request id), also after the
    /// response; the receiver ends when the task does.
    fn spawn_reply(
        &self,
        reply: reply::Reply,
        request: Result<(crate::llm::LlmClient, ModelRequest), reply::ReplyError>,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let span = tracing::Span::current();
        let (ended_tx, ended) = tokio::sync::oneshot::channel::<()>();
        self.services.replies.spawn(move |stop| {
            async move {
                let _ended = ended_tx;
                reply.write(request, stop).await
            }
            .instrument(span)
        });
        ended
    }

    /// Makes the turn durable and tells the reply task whether the details were stored
    /// with it. When that fails, the reply task gives up without storing (`durable_tx` is
    /// dropped), and the refusal goes out once it has ended: the conversation is then free
    /// for the next message.
    async fn make_durable_or_end(
        &self,
        info: &ConversationInfo,
        durable: Option<&Durable>,
        durable_tx: tokio::sync::oneshot::Sender<bool>,
        ended: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), TurnError> {
        if let Some(durable) = durable {
            if let Err(e) = self.make_durable(info, durable).await {
                drop(durable_tx);
                let _ = ended.await;
                return Err(e.into());
            }
        }
        // A new conversation's details were just stored as the reply task has them.
        let _ = durable_tx.send(durable.is_some_and(|d| d.info));
        Ok(())
    }

    /// Writes what a turn must make durable before it is acknowledged, in order: the
    /// details (a new conversation's owner is never missing from a stored message), then
    /// the message.
    async fn make_durable(
        &self,
        info: &ConversationInfo,
        durable: &Durable,
    ) -> Result<(), StoreError> {
        let store = &self.history.store;
        let message = std::slice::from_ref(&durable.message);
        if durable.info {
            store.create(info, message).await
        } else {
            store.append(&info.session_id, message).await
        }
    }

    /// For Edit: removes the last user message `message_id` and what follows it, so the
    /// edited text takes its place.
    async fn rewind(&self, id: &SessionId, message_id: &str) -> Result<(), TurnError> {
        let store = &self.history.store;
        let stored = store.load(id).await?;
        let index = stored
            .iter()
            .position(|m| m.id() == message_id)
            .ok_or_else(|| TurnError::NoMessage(message_id.to_owned()))?;
        if stored[index].role != Role::User
            || stored[index + 1..].iter().any(|m| m.role == Role::User)
        {
            return Err(TurnError::NotLastUserMessage);
        }
        let (total, last) = (stored.len(), stored[stored.len() - 1].clone());
        // Only what was read is cut: a message saved since (over MCP, say) is never lost.
        if !store.truncate_if(id, index, total, &last).await? {
            return Err(TurnError::Changed);
        }
        Ok(())
    }

    /// For Retry and Regenerate: drops what follows the last user message (the reply to
    /// write again), prunes what precedes it, and returns the conversation.
    async fn drop_last_reply(&self, id: &SessionId) -> Result<Prepared, TurnError> {
        let store = &self.history.store;
        let mut stored = store.load(id).await?;
        let last_user = stored
            .iter()
            .rposition(|m| m.role == Role::User)
            .ok_or(TurnError::NothingToRegenerate)?;
        if last_user + 1 < stored.len() {
            let (total, last) = (stored.len(), stored[stored.len() - 1].clone());
            if !store.truncate_if(id, last_user + 1, total, &last).await? {
                return Err(TurnError::Changed);
            }
            stored.truncate(last_user + 1);
        }
        let current = stored.pop().ok_or(TurnError::NothingToRegenerate)?;
        let total = stored.len() + 1;
        let pruning = self.prune(id, 0, stored).await?;
        let context = Some(ContextReport::new(&[], &pruning)).filter(|r| !r.is_empty());
        let total = total - removed(&pruning);
        let mut tail = pruning.messages;
        tail.push(current);
        Ok(Prepared {
            tail,
            older_pins: Vec::new(),
            total,
            context,
        })
    }

    /// The pruning pass: removes from the store, for good, the context blocks of `history`
    /// (the stored messages before the one being sent, the first at `offset`) whose time
    /// is up.
    async fn prune(
        &self,
        id: &SessionId,
        offset: usize,
        history: Vec<Message>,
    ) -> Result<Pruning, TurnError> {
        let pruning = context::prune(history);
        if !pruning.edits.is_empty() {
            self.history.store.prune(id, offset, &pruning.edits).await?;
        }
        if pruning.messages.iter().any(|m| !m.context.is_empty()) || !pruning.edits.is_empty() {
            tracing::debug!(
                "[History] Context pruning in {}: {} block(s) expired, {} message(s) rewritten, \
                 {} removed",
                id,
                pruning.expired.len(),
                pruning.edits.len() - removed(&pruning),
                removed(&pruning)
            );
        }
        Ok(pruning)
    }

    /// Plans the model call for the conversation's current model.
    pub(crate) fn plan(
        &self,
        model: Option<&ModelSpec>,
        tail: Vec<Message>,
        older_pins: &[(usize, Message)],
        total: usize,
        context: Option<ContextReport>,
        summary: Option<&str>,
    ) -> Plan {
        let limits = model.map(|m| m.limits.clone()).unwrap_or_default();
        let tokens = token_counter(model.map(|m| m.upstream.as_str()).unwrap_or_default());
        let system: Vec<String> = self
            .history
            .system_message
            .iter()
            .chain(Some(&self.agent.system_prompt).filter(|p| !p.is_empty()))
            .cloned()
            .collect();
        plan(PlanInput {
            system: &system,
            tail: &tail.into(),
            stored_total: total,
            settings: &self.settings,
            chain: &self.services.chain_for(self.agent),
            model: &limits,
            max_ctx: self.services.max_ctx_for(self.agent),
            tokens: tokens.as_ref(),
            context,
            summary,
            older_pins,
            // Full before this message: `max_turns` may have dropped the question of a
            // reply that now opens the stored conversation.
            capped: self
                .history
                .store
                .max_turns()
                .is_some_and(|max| total > max.get()),
        })
    }

    /// The `meta` event of a planned call, and the report kept with the conversation: what
    /// was decided, and how full the model's window is with it.
    pub(crate) fn meta(
        &self,
        info: &mut ConversationInfo,
        model: Option<&ModelSpec>,
        plan: &Plan,
    ) -> MetaEvent {
        let name = model.map(|m| m.name().to_owned()).unwrap_or_default();
        let tokens = token_counter(model.map(|m| m.upstream.as_str()).unwrap_or_default());
        let mut meter = measure(
            &plan.messages,
            tokens.as_ref(),
            model.and_then(|m| m.window),
        );
        if model.is_some_and(|m| m.prices.is_some()) {
            // Priced: the conversation's cost so far shows before this call's is known.
            meter.cost = Some(parlor_domain::meter::Cost {
                turn_nano_usd: None,
                conversation_nano_usd: info.spent_nano_usd,
            });
        }
        info.last_turn = Some(Box::new(TurnReport {
            meter: Some(meter.clone()),
            ..TurnReport::new(plan.report.clone(), name.clone())
        }));
        MetaEvent {
            session_id: info.session_id.to_string(),
            agent_id: self.agent.id.clone(),
            model: name,
            provider: self.services.models.provider_label(model).to_owned(),
            history: plan.report.clone(),
            message_id: None,
            meter: Some(meter),
            message_tokens: None,
        }
    }

    /// Plans the call, spawns the task that streams the reply and stores it, and meanwhile
    /// makes the turn's message durable: the model call starts while the write is synced,
    /// and the turn is acknowledged (its `meta`, then the reply's events) only once the
    /// write is durable. If the write fails, nothing is acknowledged: the model call is
    /// dropped and nothing of the reply is stored.
    async fn reply(
        &self,
        mut info: ConversationInfo,
        prepared: Prepared,
        durable: Option<Durable>,
        summary: Option<StoredSummary>,
        busy: BusyGuard,
    ) -> Result<Turn, TurnError> {
        let Prepared {
            tail,
            older_pins,
            total,
            context,
        } = prepared;
        if info.title.is_empty() {
            if let Some(first) = tail.iter().find(|m| m.role == Role::User) {
                info.title = title_of(&first.text);
            }
        }
        let model = self
            .services
            .models
            .for_conversation(self.agent, info.model.as_deref());
        let sent_summary = summary
            .as_ref()
            .and_then(|s| s.summary.as_ref())
            .map(parlor_domain::summary::for_model);
        let message_id = tail.last().map(|m| m.id().into_owned());
        let tokens = token_counter(
            model
                .as_ref()
                .map(|m| m.upstream.as_str())
                .unwrap_or_default(),
        );
        let message_tokens = tail.last().map(|m| tokens.count(m));
        let mut plan = self.plan(
            model.as_ref(),
            tail,
            &older_pins,
            total,
            context,
            sent_summary.as_deref(),
        );
        if let Some(summary) = &summary {
            plan.report.summary = Some(Box::new(self.summary_report(
                summary,
                &plan,
                model.as_ref(),
                &info,
            )));
        }
        self.log_decision(&plan);
        let mut meta = self.meta(&mut info, model.as_ref(), &plan);
        meta.message_id = message_id;
        meta.message_tokens = message_tokens;
        let prices = model.as_ref().and_then(|m| m.prices);
        let request = match (model, plan.error) {
            (_, Some(e)) => Err(e.into()),
            (None, None) => Err(LlmError::NoModel {
                agent: self.agent.id.clone(),
            }
            .into()),
            (Some(model), None) => Ok((
                self.services.models.client_for(&model),
                ModelRequest {
                    model: model.upstream.clone(),
                    messages: plan.messages,
                    temperature: self.agent.llm.as_ref().and_then(|l| l.temperature),
                    max_tokens: self.agent.llm.as_ref().and_then(|l| l.max_tokens),
                },
            )),
        };
        let (tx, rx) = mpsc::channel(64);
        let then = self.summarize_after(&info, plan.report.first_sent_index);
        let (durable_tx, durable_rx) = tokio::sync::oneshot::channel();
        let details = info.clone();
        let reply = reply::Reply {
            history: self.history.clone(),
            info,
            tx,
            busy: Some(busy),
            then,
            prices,
            tokens,
            durable: durable_rx,
        };
        let ended = self.spawn_reply(reply, request);
        self.make_durable_or_end(&details, durable.as_ref(), durable_tx, ended)
            .await?;
        Ok(Turn { meta, events: rx })
    }

    /// The decision in the log, in AgentDock's words (debug level).
    fn log_decision(&self, plan: &Plan) {
        let report = &plan.report;
        tracing::debug!(
            "[History] Agent {} history settings: {{policy: \"{}\", length: {}, messageCount: {}}}",
            self.agent.id,
            self.settings.policy.value,
            self.settings.length.value,
            report.messages_stored
        );
        if report.messages_trimmed > 0 {
            tracing::debug!(
                "[History] Trimmed messages from {} to {}",
                report.messages_stored,
                report.messages_stored - report.messages_trimmed
            );
        }
    }
}

/// The stored messages a turn needs for `settings` (the new message, `new`, not among them)
/// and how many are stored in all. Reads only the tail when the store can and the policy
/// allows, so with Redis a turn's cost does not grow with the conversation; the tail then
/// also reaches `context_turns` user messages back, so pruning sees every context block
/// whose time may be up.
async fn load_window(
    store: &dyn ConversationStore,
    id: &SessionId,
    settings: &HistorySettings,
    new: &Message,
    context_turns: u32,
) -> Result<(Vec<Message>, usize), StoreError> {
    let (policy, length) = (settings.policy.value, settings.length.value);
    let reach = context_turns as usize;
    if let Some(count) = tail_hint(policy, length) {
        let count = count.max(reach.saturating_add(1).saturating_mul(2));
        let mut tail = store.load_tail(id, count).await?;
        let whole = tail.is_whole();
        let users = tail
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .count();
        tail.messages.push(new.clone());
        let suffices = tail_suffices(&tail.messages, policy, length) && users > reach;
        tail.messages.pop();
        if whole || suffices {
            return Ok((tail.messages, tail.total));
        }
    }
    let all = store.load(id).await?;
    let total = all.len();
    Ok((all, total))
}

/// How many messages a pruning pass removed.
fn removed(pruning: &Pruning) -> usize {
    pruning.edits.iter().filter(|e| e.new.is_none()).count()
}
