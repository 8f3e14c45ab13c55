//! One chat turn, as input and output around the domain's decisions
//! ([`parlor_domain::turn`]): resolve the conversation and admit the request; answer a `!`
//! command ([`commands`]); otherwise **read** what the domain asks for, **decide** (the
//! domain: what to cut, prune and store, and the plan of what the model receives),
//! **write** it, then call the model and store its reply ([`reply`]).

mod approval;
mod budget;
mod call;
mod commands;
mod cut;
mod reading;
mod reply;
mod summary;
pub(crate) mod tools;

use crate::ops::browser;
use crate::state::{BusyGuard, Services};
use crate::store::histories::History;
use crate::store::{now_ms, AccessDenied, ConversationInfo, StoreError};
use parlor_app::ssr::BrowserSession;
use parlor_domain::command::{parse_command, Command, Parsed, Usage};
use parlor_domain::context::ContextEntry;
use parlor_domain::live_sessions::LimitReached;
use parlor_domain::turn::{self, Ask, Decided, Decision, Refusal};
use parlor_domain::{Agent, ChatEvent, ConversationId, HistorySettings, MetaEvent};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What a turn was asked to do.
pub struct TurnInput {
    pub agent: Arc<Agent>,
    /// The conversation to continue (the body's `session_id`); see [`start`] when absent.
    pub session_id: Option<ConversationId>,
    /// The conversation named by the `parlor_chat` cookie.
    pub cookie_session: Option<ConversationId>,
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
    /// The account chatting, when accounts are on.
    pub user: Option<crate::accounts::User>,
}

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("{0}")]
    Access(#[from] AccessDenied),
    #[error("a reply is already being written in this conversation; wait for it or press Stop")]
    Busy,
    #[error(transparent)]
    Refused(#[from] Refusal),
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
    #[error(
        "your daily quota of {per_day} model tokens is used up ({used} today); it starts again \
         at {resets} UTC"
    )]
    Quota {
        used: u64,
        per_day: u64,
        resets: String,
    },
}

/// A started turn: the facts about the model call, then the rest of its events.
pub struct Turn {
    /// Boxed: a turn waiting for its write holds little (see `TurnContext::reply`).
    pub meta: Box<MetaEvent>,
    pub events: mpsc::Receiver<ChatEvent>,
}

/// What every phase of a turn shares: where the conversation lives, for which agent, and
/// the settings this request resolved.
pub(crate) struct TurnContext<'a> {
    pub services: &'a Arc<Services>,
    pub history: &'a Arc<History>,
    pub agent: &'a Arc<Agent>,
    pub settings: HistorySettings,
    /// The tokens reserved against the daily quota of the account chatting; the reply
    /// settles them.
    pub reserved: std::sync::Mutex<Option<crate::accounts::quota::Reserved>>,
    /// The account chatting (its quota counts the summaries the turn leads to).
    pub user: Option<crate::accounts::User>,
}

/// Runs a turn. The conversation is the body's `session_id`, else the cookie's (when it is
/// one this browser may continue with this agent, and `new_conversation` is not set), else a
/// new one with an unguessable id. A message that is a `!` command is answered by Parlor.
///
/// A command's future (large, and rare) and the decision (large, and kept in place while
/// the write is synced) are boxed: a thousand turns can be waiting for their writes at once.
/// What the store read ahead for the turn (`_read`, see `reading`) goes when it ends.
pub async fn start(services: &Arc<Services>, input: TurnInput) -> Result<Turn, TurnError> {
    let history = services.histories.for_agent(&input.agent).clone();
    let (session_id, existing, _read) = resolve_conversation(services, &history, &input).await?;
    let command = input.message.as_deref().and_then(command_in);
    let is_admin = matches!(&command, Some(Ok(c)) if c.is_admin());
    let reserved = match command {
        None => reserve_quota(services, input.user.as_ref(), &input, existing.as_ref()).await?,
        Some(_) => None,
    };
    let busy = admit(services, &history, &session_id, &input, is_admin).await?;
    let turn = TurnContext {
        services,
        history: &history,
        agent: &input.agent,
        reserved: std::sync::Mutex::new(reserved),
        user: input.user.clone(),
        settings: services.history_settings(
            &input.agent,
            input.url_policy.as_deref(),
            input.url_length.as_deref(),
        ),
    };
    let is_new = existing.is_none();
    let info = conversation_info(existing, &session_id, &input);
    let text = match command {
        Some(command) => {
            if is_new {
                // The owner is durable before anything of the conversation is stored or
                // acknowledged: a crash never leaves a conversation without its owner.
                history.store.put_info(&info).await?;
            }
            return Box::pin(commands::answer(&turn, command, info, busy)).await;
        }
        None => input.message.as_deref(),
    };
    // The client's context first, then the operator's providers.
    let mut entries = input.context.clone();
    let mut failed = Vec::new();
    if text.is_some() {
        let provided;
        (provided, failed) = services.providers.run(&input.agent).await;
        entries.extend(provided);
    }
    let ask = match text {
        Some(text) => Ask::Message {
            text,
            entries: &entries,
            edit: input.edit.as_deref(),
            now_ms: now_ms(),
        },
        None => Ask::Regenerate,
    };
    let mut decision = Box::new(turn.decide(&ask, &info, is_new).await?);
    turn.cut_and_prune(&mut decision).await?;
    if !failed.is_empty() {
        decision.sent.context.get_or_insert_default().failed = failed;
    }
    let summary = turn.summary(&session_id, decision.store.as_ref()).await?;
    turn.reply(decision, summary, busy).await
}

/// The `!` command a message is, or its usage when it is malformed.
fn command_in(text: &str) -> Option<Result<Command, Usage>> {
    match parse_command(text) {
        Parsed::Command(command) => Some(Ok(command)),
        Parsed::Invalid(usage) => Some(Err(usage)),
        _ => None,
    }
}

/// The conversation a request continues, and what is stored about it (`None`: a new one).
async fn resolve_conversation(
    services: &Services,
    history: &History,
    input: &TurnInput,
) -> Result<(ConversationId, Option<ConversationInfo>, reading::ReadAhead), TurnError> {
    let mut read_ahead = reading::ReadAhead::new(&history.store);
    let admin = input.user.as_ref().is_some_and(|u| u.admin);
    let viewer = browser::viewer(input.browser.as_ref(), admin, services.accounts.is_some());
    let visible = |info: &Option<ConversationInfo>| match info {
        Some(info) => info.visible_to(&viewer, &input.agent.id),
        None => Ok(()),
    };
    let (id, info) = match (&input.session_id, &input.cookie_session) {
        (Some(id), _) => {
            let info = read_ahead.info(id).await?;
            visible(&info)?;
            // A name for a new conversation: only API clients choose one (a browser's are
            // made here), and only a name under which nothing is stored: anything there
            // (another tool's messages or summary, backups) has no web owner, so no request
            // may claim it by guessing its name.
            if info.is_none() && (input.browser.is_some() || history.store.exists(id).await?) {
                return Err(AccessDenied::NotFound.into());
            }
            (id.clone(), info)
        }
        (None, Some(id)) if !input.new_conversation => {
            let info = read_ahead.info(id).await?;
            // A hint, not a request: another agent's or browser's conversation is not
            // continued, nor a name claimed (the `session_id` rule above).
            let claims =
                info.is_none() && (input.browser.is_some() || history.store.exists(id).await?);
            match visible(&info) {
                Ok(()) if !claims => (id.clone(), info),
                _ => (crate::conversation::new_conversation_id(), None),
            }
        }
        _ => (crate::conversation::new_conversation_id(), None),
    };
    Ok((id, info, read_ahead))
}

/// Reserves a turn's estimate (its message, and what the conversation's last call sent)
/// against the account's daily quota (`PARLOR_TOKENS_PER_DAY`): refused once the day's use
/// has reached it; admins are exempt.
async fn reserve_quota(
    services: &Services,
    user: Option<&crate::accounts::User>,
    input: &TurnInput,
    existing: Option<&ConversationInfo>,
) -> Result<Option<crate::accounts::quota::Reserved>, TurnError> {
    let (Some(accounts), Some(user)) = (services.accounts.as_ref(), user) else {
        return Ok(None);
    };
    let message = input.message.as_deref().map_or(0, str::len) as u64 / 4;
    let last = existing
        .and_then(|i| i.last_turn.as_ref())
        .map_or(1000, |t| t.tokens_sent);
    match accounts.reserve(user, message + last, now_ms()).await {
        Ok(reserved) => Ok(reserved),
        Err(crate::accounts::quota::ReserveError::Store(e)) => Err(e.into()),
        Err(crate::accounts::quota::ReserveError::UsedUp(quota)) => {
            let resets = jiff::Timestamp::from_millisecond(quota.resets_ms)
                .map(|t| t.strftime("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_default();
            Err(TurnError::Quota {
                used: quota.used,
                per_day: quota.per_day,
                resets,
            })
        }
    }
}

/// Admission: admin commands need the token (or an admin's login); one reply at a time per conversation; a
/// browser that is not live yet only within `max_users` (administrators always get in, or
/// they could not raise a limit that was reached). The returned guard keeps the
/// conversation busy.
async fn admit(
    services: &Arc<Services>,
    history: &History,
    session_id: &ConversationId,
    input: &TurnInput,
    is_admin: bool,
) -> Result<BusyGuard, TurnError> {
    let admin_account = input.user.as_ref().is_some_and(|u| u.admin);
    if is_admin
        && !admin_account
        && !services
            .config
            .admin_token_matches(input.admin_token.as_deref())
    {
        return Err(TurnError::NotAllowed);
    }
    // Busy: a reply is being written, unless the store is away (then its clear error: a
    // reply held up by the outage is no reason to turn the user away).
    let busy = || async {
        history
            .store
            .ping()
            .await
            .map_or_else(|e| e.into(), |()| TurnError::Busy)
    };
    let Some(mut claimed) = services.claim(&history.id, session_id) else {
        return Err(busy().await);
    };
    // Another process sharing the store may be writing a reply here too.
    match history.store.lock_reply(session_id).await? {
        Some(shared) => claimed.hold(shared),
        None => return Err(busy().await),
    }
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
    Ok(claimed)
}

/// The conversation's details for this turn: the stored ones, touched now, or new ones
/// owned by the requesting browser.
fn conversation_info(
    existing: Option<ConversationInfo>,
    session_id: &ConversationId,
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
    /// Reads what the domain asks for and lets it decide, reading the whole conversation
    /// when a tail was not enough.
    async fn decide(
        &self,
        ask: &Ask<'_>,
        info: &ConversationInfo,
        is_new: bool,
    ) -> Result<Decision, TurnError> {
        let mut read = turn::to_read(ask, info, is_new, &self.settings);
        loop {
            let (stored, pins) = reading::read(self.history.store.as_ref(), info, read).await?;
            match turn::decide(ask, info, is_new, stored, pins, &self.settings)? {
                Decided::Read(next) => read = next,
                Decided::Write(decision) => return Ok(*decision),
            }
        }
    }

    /// Plans the call, spawns the task that streams the reply and stores it, and meanwhile
    /// makes the turn's message durable: the model call starts while the write is synced,
    /// and the turn is acknowledged (its `meta`, then the reply's events) only once the
    /// write is durable. If the write fails, nothing is acknowledged: the model call is
    /// dropped and nothing of the reply is stored.
    ///
    /// The planning runs at the call; the future returned holds only what the wait for the
    /// write needs (under load, a thousand turns can be waiting for their writes at once).
    fn reply(
        &self,
        decision: Box<Decision>,
        summary: Option<turn::call::StoredSummary>,
        busy: BusyGuard,
    ) -> impl std::future::Future<Output = Result<Turn, TurnError>> + Send + '_ {
        let Decision {
            store: message,
            details_first,
            mut info,
            sent,
            versions,
            ..
        } = *decision;
        let facts = self.call_facts(&info);
        let planned = turn::call::call(&mut info, sent, true, &facts.input(self, summary.as_ref()));
        self.log_decision(&planned.plan);
        let first_sent = planned.meta.history.first_sent_index;
        let then = self.summarize_after(&info, first_sent, planned.plan.next_window_start);
        let request = facts.request(self, planned.plan);
        let (tx, rx) = mpsc::channel(64);
        let (durable_tx, durable_rx) = tokio::sync::oneshot::channel();
        let details = info.clone();
        let budget = facts.budget(planned.meta.history.estimated_tokens);
        let tools = tools::ToolRun::for_turn(self, &details, budget);
        let reply = reply::Reply {
            history: self.history.clone(),
            info,
            tx,
            busy: Some(busy),
            then,
            prices: facts.model.as_ref().and_then(|m| m.prices),
            tokens: facts.tokens,
            durable: durable_rx,
            tools,
            quota: self.quota_use(),
            summary_nano_usd: summary::cost(summary.as_ref()),
            stop: Some(
                self.services
                    .stoppable(&self.history.id, &details.session_id),
            ),
        };
        let ended = self.spawn_reply(reply, request);
        let durable = message.map(|m| (details_first, m));
        let meta = Box::new(MetaEvent {
            versions,
            ..planned.meta
        });
        async move {
            self.make_durable_or_end(&details, durable, durable_tx, ended)
                .await?;
            Ok(Turn { meta, events: rx })
        }
    }

    /// Where the reply's tokens are counted, when an account with a quota is chatting.
    fn quota_use(&self) -> Option<reply::QuotaUse> {
        let reserved = self.reserved.lock().ok()?.take()?;
        Some(reply::QuotaUse { reserved })
    }

    /// Starts the reply task, in the request's span (its request id), also after the
    /// response; the receiver ends when the task does.
    fn spawn_reply(
        &self,
        reply: reply::Reply,
        request: Result<(crate::llm::LlmClient, crate::llm::ModelRequest), reply::ReplyError>,
    ) -> tokio::sync::oneshot::Receiver<()> {
        use tracing::Instrument;
        let span = tracing::Span::current();
        let (ended_tx, ended) = tokio::sync::oneshot::channel::<()>();
        self.services.replies.spawn(move |stop| {
            // A combinator, not an `async` block: the task holds the reply's future once.
            // `ended_tx` is dropped when the reply ends, or with the task.
            use futures::FutureExt;
            reply
                .write(request, stop)
                .map(move |()| drop(ended_tx))
                .instrument(span)
        });
        ended
    }

    /// Makes the turn durable (`durable`: whether the details go first, and the message)
    /// and tells the reply task whether the details were stored with it. When that fails,
    /// the reply task gives up without storing (`durable_tx` is dropped), and the refusal
    /// goes out once it has ended: the conversation is then free for the next message.
    async fn make_durable_or_end(
        &self,
        info: &ConversationInfo,
        durable: Option<(bool, parlor_domain::Message)>,
        durable_tx: tokio::sync::oneshot::Sender<bool>,
        ended: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), TurnError> {
        let details_first = durable.as_ref().is_some_and(|(first, _)| *first);
        if let Some((details_first, message)) = durable {
            // In order: the details (a new conversation's owner is never missing from a
            // stored message), then the message.
            let store = &self.history.store;
            let message = std::slice::from_ref(&message);
            let written = if details_first {
                store.create(info, message).await
            } else {
                store.append(&info.session_id, message).await
            };
            if let Err(e) = written {
                drop(durable_tx);
                let _ = ended.await;
                return Err(e.into());
            }
        }
        // A new conversation's details were just stored as the reply task has them.
        let _ = durable_tx.send(details_first);
        Ok(())
    }

    /// The decision in the log, in AgentDock's words (debug level).
    fn log_decision(&self, plan: &parlor_domain::plan::Plan) {
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
