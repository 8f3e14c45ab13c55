//! Keeps a conversation's rolling summary current: after a reply, the messages that have
//! fallen out of what is sent and are not yet covered are merged into the summary by a
//! model (the conversation's, or `[history] summary_model`), in the background, one run per
//! conversation at a time (across processes sharing Redis). The summary records what it
//! covers and is written with it in one step, so a crash loses nothing and summarizes
//! nothing twice. A failing run leaves the old summary, logs why, and the debug panel says
//! so; the chat goes on.

use crate::llm::models::Provider;
use crate::llm::{LlmEvent, ModelRequest};
use crate::state::{Services, Summarizers};
use crate::store::histories::History;
use crate::store::{now_ms, ConversationStore, StoreError};
use futures::StreamExt;
use parlor_domain::summary::{
    flat, fold, mirror_summary, parse_model_summary, pending_in, pending_in_whole, read_from,
    Covers, SUMMARIZER_PROMPT,
};
use parlor_domain::{Agent, ConversationId, Message};
use serde_json::Value;
use std::sync::Arc;

/// Where a summary's model tokens are counted (the daily quota of the account chatting).
#[async_trait::async_trait]
pub trait Payer: Send + Sync {
    async fn pay(&self, tokens: u64);
}

/// What a run did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every message left out was already covered.
    UpToDate,
    /// This many messages were newly summarized.
    Updated(usize),
    /// The conversation was cleared, replaced or given another summary while the model
    /// answered (a `!reset`, `history_clear`, `history_set_summary`): what it answered was
    /// not written, and the next run starts from what is stored now.
    Superseded,
}

#[derive(Debug, thiserror::Error)]
pub enum SummarizeError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("the summary is already being updated")]
    Busy,
    #[error("the summarizing model failed: {0}")]
    Model(String),
    #[error("the summarizing model did not answer with a JSON object")]
    NotJson,
}

/// Marks a conversation's summarizer as running in this process until dropped.
struct Running<'a> {
    summarizers: &'a Summarizers,
    key: (String, ConversationId),
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.summarizers
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// Brings the summary up to date with the stored messages before `first_sent` (those the
/// last model call did not receive).
pub async fn bring_up_to_date(
    services: &Services,
    history: &History,
    agent: &Agent,
    (id, chosen_model): (&ConversationId, Option<&str>),
    first_sent: usize,
    payer: Option<&dyn Payer>,
) -> Result<Outcome, SummarizeError> {
    let key = (history.id.clone(), id.clone());
    let spent = Spent::default();
    let called = (id, chosen_model);
    let result = run(services, history, agent, called, first_sent, &spent).await;
    let spent = spent.tokens.into_inner();
    if let (Some(payer), true) = (payer, spent > 0) {
        payer.pay(spent).await;
    }
    match &result {
        Err(SummarizeError::Busy) => {}
        Err(e) => {
            tracing::warn!("[History] summary of {id} not updated: {e}");
            services.summarizers.record(key, Some(e.to_string()));
        }
        Ok(outcome) => {
            if let Outcome::Updated(n) = outcome {
                tracing::debug!("[History] summary of {id} now covers {n} more message(s)");
            }
            services.summarizers.record(key, None);
        }
    }
    result
}

async fn run(
    services: &Services,
    history: &History,
    agent: &Agent,
    (id, chosen_model): (&ConversationId, Option<&str>),
    first_sent: usize,
    spent: &Spent,
) -> Result<Outcome, SummarizeError> {
    let key = (history.id.clone(), id.clone());
    let summarizers = &services.summarizers;
    if !summarizers
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.clone())
    {
        return Err(SummarizeError::Busy);
    }
    let _running = Running { summarizers, key };
    let lock = history
        .store
        .lock_summary(id)
        .await?
        .ok_or(SummarizeError::Busy)?;
    let result = update(
        history.store.as_ref(),
        id,
        first_sent,
        |prev, pending| async move {
            let asked = (chosen_model, prev.as_ref(), pending.as_slice());
            summarize(services, agent, asked, spent).await
        },
        &spent.nano_usd,
    )
    .await;
    lock.release().await;
    result
}

/// One run's read, ask and write: reads the conversation's version, messages and summary;
/// asks `ask` (the model) what the messages before `first_sent` not yet covered add to the
/// summary; writes the folded result only if the version did not move meanwhile (a
/// compare-and-set: no lock is held while the model answers, and a reset or another tool's
/// summary written in between is never overwritten).
pub(crate) async fn update<F, Fut>(
    store: &dyn ConversationStore,
    id: &ConversationId,
    first_sent: usize,
    ask: F,
    cost: &std::sync::atomic::AtomicU64,
) -> Result<Outcome, SummarizeError>
where
    F: FnOnce(Option<Value>, Vec<Message>) -> Fut,
    Fut: std::future::Future<Output = Result<Value, SummarizeError>>,
{
    let version = store.version(id).await?;
    let prev = store.summary(id).await?;
    let covers = prev.as_ref().map(Covers::of).unwrap_or_default();
    // Only what the summary does not cover yet is read, unless that part cannot tell.
    let from = read_from(&covers, first_sent);
    let read = store.load_range(id, from, first_sent).await?;
    let pending = match pending_in(&covers, &read, from, first_sent) {
        Some(pending) => pending,
        None => pending_in_whole(&covers, &store.load(id).await?, first_sent),
    };
    if pending.is_empty() {
        return Ok(Outcome::UpToDate);
    }
    let produced = ask(prev.clone(), pending.clone()).await?;
    let cost = cost.load(std::sync::atomic::Ordering::Relaxed);
    let next = fold(prev, produced, &pending, (now_ms(), cost));
    if store.put_summary_if(id, version, &next).await? {
        Ok(Outcome::Updated(pending.len()))
    } else {
        tracing::info!(
            "[History] {id} changed while its summary was being written; the next run starts \
             from what is stored now"
        );
        Ok(Outcome::Superseded)
    }
}

/// What a run's model calls used: tokens (for the daily quota) and their price (for the
/// conversation's cost, kept with the summary).
#[derive(Default)]
struct Spent {
    tokens: std::sync::atomic::AtomicU64,
    nano_usd: std::sync::atomic::AtomicU64,
}

impl Spent {
    /// Adds a call's prompt and completion tokens, priced at `prices` when known.
    fn add(&self, (prompt, completion): (u64, u64), prices: Option<parlor_domain::meter::Prices>) {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        self.tokens.fetch_add(prompt + completion, relaxed);
        let nano_usd = prices.map_or(0, |p| p.nano_usd(prompt, completion));
        self.nano_usd.fetch_add(nano_usd, relaxed);
    }
}

/// Asks the summarizing model what `pending` adds to the summary (`prev`); adds what it
/// used to `spent` (the provider's count, else Parlor's of the request and the answer),
/// also when its answer is not a summary: the model was paid for.
async fn summarize(
    services: &Services,
    agent: &Agent,
    (chosen_model, prev, pending): (Option<&str>, Option<&Value>, &[Message]),
    spent: &Spent,
) -> Result<Value, SummarizeError> {
    let models = &services.models;
    let model = match &services.summary_model {
        Some(name) => Some(models.named(name)),
        None => models.for_conversation(agent, chosen_model),
    }
    .ok_or_else(|| SummarizeError::Model("no model to summarize with".into()))?;
    let client = models.client_for(&model);
    if model.provider == Provider::Mirror || matches!(client, crate::llm::LlmClient::Mirror(_)) {
        return Ok(mirror_summary(pending));
    }
    let current = prev
        .map(parlor_domain::summary::for_model)
        .unwrap_or_else(|| "{}".into());
    let request = ModelRequest {
        model: model.upstream.clone(),
        messages: vec![
            Message::system(SUMMARIZER_PROMPT, 0),
            Message::user(
                format!(
                    "Current summary:\n{current}\n\nMessages to add:\n{}",
                    flat(None, None, pending)
                ),
                0,
            ),
        ],
        temperature: Some(0.0),
        max_tokens: None,
        tools: Vec::new(),
        tool_choice: None,
    };
    let counter = crate::llm::models::token_counter(&model.upstream);
    let asked: u64 = request.messages.iter().map(|m| counter.count(m)).sum();
    let mut stream = client
        .stream(request)
        .await
        .map_err(|e| SummarizeError::Model(e.to_string()))?;
    let mut text = String::new();
    let mut usage = None;
    while let Some(event) = stream.next().await {
        match event.map_err(|e| SummarizeError::Model(e.to_string()))? {
            LlmEvent::Delta(piece) => text.push_str(&piece),
            LlmEvent::Finished { usage: u, .. } => {
                usage = u;
                break;
            }
        }
    }
    let reply = counter.count(&Message::assistant(text.as_str(), 0));
    spent.add(
        usage.map_or((asked, reply), |u| (u.prompt_tokens, u.completion_tokens)),
        model.prices,
    );
    parse_model_summary(&text).ok_or(SummarizeError::NotJson)
}

/// Starts a background run after a reply (never delaying it); shutdown waits for it.
pub fn spawn_after_reply(
    services: &Arc<Services>,
    (history, agent): (&Arc<History>, &Arc<Agent>),
    id: ConversationId,
    chosen_model: Option<String>,
    first_sent: usize,
    payer: Option<Arc<dyn Payer>>,
) {
    let (services, history, agent) = (services.clone(), history.clone(), agent.clone());
    let tracker = services.replies.clone();
    tracker.spawn(move |_stop| async move {
        let _ = bring_up_to_date(
            &services,
            &history,
            &agent,
            (&id, chosen_model.as_deref()),
            first_sent,
            payer.as_deref(),
        )
        .await;
    });
}
