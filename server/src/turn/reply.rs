//! The reply of a turn: relays the model's stream to the browser and stores what arrived,
//! whatever happens to the browser or the upstream on the way. Runs as its own task, so the
//! reply is stored even when the browser disconnects; dropping the upstream stream cancels
//! the upstream request.

mod usage;

use super::tools::{gone, Progress, ToolRun};
use crate::llm::{LlmClient, LlmError, LlmEvent, ModelRequest, ToolChoice};
use crate::state::BusyGuard;
use crate::store::histories::History;
use crate::store::{now_ms, ConversationInfo};
use futures::StreamExt;
use parlor_domain::chain::TokenCounter;
use parlor_domain::markdown::StreamingMarkdown;
use parlor_domain::message::ToolCall;
use parlor_domain::meter::Prices;
use parlor_domain::{ChatEvent, DoneEvent, Message, MessageMeta, Rendered, ReplyStatus, Role};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How a reply ended.
/// Why a reply has no (whole) answer; its text is what the chat shows.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    /// The plan refused the request (the message alone is over the budget).
    #[error(transparent)]
    Refused(#[from] parlor_domain::chain::ChainError),
    #[error(transparent)]
    Model(#[from] LlmError),
    #[error("Parlor is shutting down: the reply was cut short; what arrived is kept.")]
    ShuttingDown,
}

enum Outcome {
    Finished(Box<DoneEvent>),
    /// The model asked for these tool calls (only when it was offered tools), having used
    /// what the provider reports.
    Asked(Vec<ToolCall>, Option<parlor_domain::Usage>),
    Failed(ReplyError),
    /// The browser went away (Stop, closed tab): nobody is listening any more.
    Abandoned,
}

impl Outcome {
    /// The outcome's name in `parlor_turns_total`.
    fn label(&self) -> &'static str {
        match self {
            Outcome::Finished(_) | Outcome::Asked(..) => "done",
            Outcome::Failed(_) => "error",
            Outcome::Abandoned => "stopped",
        }
    }

    fn status(&self) -> Option<ReplyStatus> {
        match self {
            Outcome::Finished(_) | Outcome::Asked(..) => None,
            Outcome::Failed(_) => Some(ReplyStatus::Incomplete),
            Outcome::Abandoned => Some(ReplyStatus::Stopped),
        }
    }
}

/// A reply being written: where it is stored and who listens.
pub(super) struct Reply {
    pub history: Arc<History>,
    pub info: ConversationInfo,
    pub tx: mpsc::Sender<ChatEvent>,
    /// Keeps the conversation busy until the reply is stored.
    pub busy: Option<BusyGuard>,
    /// Runs once the reply is stored (the summarizer, in the background).
    pub then: Option<Box<dyn FnOnce() + Send + Sync>>,
    /// The model's prices, when declared: the call's cost goes into the meter.
    pub prices: Option<Prices>,
    /// The model's token counter (the reply's own count).
    pub tokens: Arc<dyn TokenCounter>,
    /// Fires once the turn's message is durable, with `true` when the conversation's
    /// details were stored with it (a new conversation: they are not written again);
    /// dropped if it could not be stored (then the turn was never acknowledged, and nothing
    /// of the reply is stored).
    pub durable: tokio::sync::oneshot::Receiver<bool>,
    /// The agent's tools, when it has any: the loop may run.
    pub tools: Option<ToolRun>,
    /// The account whose daily quota the reply's tokens count against.
    pub quota: Option<QuotaUse>,
    /// What keeping the conversation's summary has cost (its meter shows it with the rest).
    pub summary_nano_usd: u64,
    /// Where `POST …/stop` finds this reply (removed when it ends).
    pub stop: Option<crate::state::StopGuard>,
}

/// Counts a reply's tokens against its account's daily quota, in place of what was reserved.
pub(super) struct QuotaUse {
    pub reserved: crate::accounts::quota::Reserved,
}

impl Reply {
    /// Streams the reply (or reports why there is none), then stores it and sends the last event.
    /// When `stop` is cancelled (Parlor is shutting down and the grace period is over),
    /// the reply ends where it is and what arrived is stored, marked incomplete.
    ///
    /// Not an `async fn`: its future (the task's, for the whole stream) holds the reply and
    /// the request once, where an `async fn` keeps its arguments twice.
    #[allow(clippy::manual_async_fn)]
    pub fn write(
        mut self,
        request: Result<(LlmClient, ModelRequest), ReplyError>,
        stop: CancellationToken,
    ) -> impl Future<Output = ()> + Send {
        async move {
            let model = request.as_ref().ok().map(|(_, r)| r.model.clone());
            let started = std::time::Instant::now();
            let mut text = String::new();
            let mut exchanges = Vec::new();
            let mut progress = Progress::default();
            let user_stop = self.ready().await;
            let reply = async {
                match request {
                    Ok((client, request)) => {
                        let turn = Conversing {
                            stop: &user_stop,
                            llm: &client,
                            run: self.tools.as_ref(),
                            tx: &self.tx,
                            started,
                        };
                        tokio::select! {
                            outcome = turn.converse(request, &mut text, &mut exchanges, &mut progress) => outcome,
                            _ = stop.cancelled() => Outcome::Failed(ReplyError::ShuttingDown),
                        }
                    }
                    Err(e) => Outcome::Failed(e),
                }
            };
            // The model call starts at once; the user's message is made durable meanwhile (see
            // `TurnContext::reply`). Once it is, the conversation's title and time are written
            // while the model answers, so that write adds nothing to the first token.
            let durable = std::mem::replace(&mut self.durable, tokio::sync::oneshot::channel().1);
            let details = async {
                let details_stored = durable.await.ok()?;
                if details_stored {
                    return Some(Ok(()));
                }
                Some(self.history.store.put_info(&self.info).await)
            };
            // Pinned here: the two futures live in this task once, not again in `unless_refused`.
            let ended = {
                let (details, reply) = (std::pin::pin!(details), std::pin::pin!(reply));
                unless_refused(details, reply).await
            };
            let Some((saved_info, outcome)) = ended else {
                return;
            };
            let written = Written {
                exchanges,
                text,
                model,
                progress,
            };
            self.complete(saved_info, outcome, written, started).await;
        }
    }

    /// Stop's token (`POST …/stop`), once the agent's starting tool servers are waited for
    /// (Stop ends the wait too).
    async fn ready(&mut self) -> CancellationToken {
        let stop = self.stop.as_ref().map(|s| s.token.clone());
        let stop = stop.unwrap_or_default();
        if let Some(run) = self.tools.as_mut() {
            run.wait_for_servers(&self.tx, &stop).await;
        }
        stop
    }

    /// The reply has ended (`outcome`, with `text` from `model`): stores it, frees the
    /// conversation, sends the last event and starts what runs after (the summarizer).
    async fn complete(
        mut self,
        saved_info: Result<(), crate::store::StoreError>,
        mut outcome: Outcome,
        mut written: Written,
        started: std::time::Instant,
    ) {
        if let Err(e) = saved_info {
            tracing::error!(
                "could not store the details of conversation {}: {e}",
                self.info.session_id
            );
        }
        crate::ops::metrics::reply(started.elapsed().as_secs_f64());
        crate::ops::metrics::turn(outcome.label());
        let reported = written.progress.reported;
        let spent = self.spent(&written, matches!(outcome, Outcome::Abandoned));
        if self.note_tools(&mut written) {
            if let Err(e) = self.history.store.put_info(&self.info).await {
                tracing::error!(
                    "could not store the details of {}: {e}",
                    self.info.session_id
                );
            }
        }
        if let Outcome::Finished(done) = &mut outcome {
            self.record_usage(done, reported).await;
            // As the transcript counts every message: what it costs when sent again.
            let reply = Message::assistant(written.text.as_str(), 0);
            done.message_tokens = Some(self.tokens.count(&reply));
            self.count_use(Some(done), spent).await;
        } else {
            // A turn that did not finish used what its earlier calls used.
            self.count_use(None, spent).await;
        }
        let stored = self.store(written, outcome.status()).await;
        // The conversation is free before the last event goes out, whatever it says: a
        // client that sends its next message on reading it never finds it busy.
        if let Some(busy) = self.busy.take() {
            busy.release().await;
        }
        match stored {
            Ok(reply_id) => {
                self.finish(outcome, reply_id).await;
                if let Some(then) = self.then.take() {
                    then();
                }
            }
            Err(e) => {
                let message = format!("The reply could not be saved: {e}");
                let _ = self.tx.send(ChatEvent::Error { message }).await;
            }
        }
    }

    /// Notes in the conversation's details what this turn's tool exchanges change: servers
    /// approved for the conversation, and how far back a later turn reads to find results
    /// whose retention ends. `true` when something changed.
    /// The turn's tools also go into the debug panel's report of the last turn.
    fn note_tools(&mut self, written: &mut Written) -> bool {
        let Some(run) = &self.tools else {
            return false;
        };
        let info = &mut self.info;
        let approved = run.approved.lock().map(|a| a.clone()).unwrap_or_default();
        let turns = parlor_domain::conversation::longest_retention(&written.exchanges);
        info.approved_tools = approved;
        info.context_turns = info.context_turns.max(turns);
        if let Some(turn) = info.last_turn.as_mut() {
            turn.tools = Some(run.report(std::mem::take(&mut written.progress)));
        }
        true
    }

    /// Stores the turn's tool exchanges and the reply (when it has text); returns the
    /// reply's id. A reply that did not complete marks its last assistant message.
    async fn store(
        &self,
        written: Written,
        status: Option<ReplyStatus>,
    ) -> Result<Option<String>, crate::store::StoreError> {
        let id = &self.info.session_id;
        let Written {
            mut exchanges,
            text,
            model,
            ..
        } = written;
        let meta = MessageMeta {
            status,
            model,
            ..Default::default()
        };
        let mut reply_id = None;
        if !text.is_empty() {
            let mut reply = Message::assistant(text, now_ms());
            reply.ensure_id();
            reply_id.clone_from(&reply.id);
            exchanges.push(reply);
        }
        let Some(last) = exchanges
            .iter_mut()
            .rev()
            .find(|m| m.role == Role::Assistant)
        else {
            return Ok(None);
        };
        last.meta = Some(meta);
        let store = &self.history.store;
        if let Err(e) = store.append(id, &exchanges).await {
            tracing::error!("could not store the reply in {id}: {e}");
            return Err(e);
        }
        Ok(reply_id)
    }

    /// The last event: `done` (with the stored reply's id) or `error` (nothing when nobody
    /// listens).
    async fn finish(&self, outcome: Outcome, reply_id: Option<String>) {
        match outcome {
            Outcome::Finished(mut done) => {
                done.message_id = reply_id;
                let _ = self.tx.send(ChatEvent::Done(done)).await;
            }
            Outcome::Failed(error) => {
                tracing::warn!("model call for {} failed: {error}", self.info.session_id);
                let message = error.to_string();
                let _ = self.tx.send(ChatEvent::Error { message }).await;
            }
            // The loop answers a model's calls; none is left by the time the reply ends.
            Outcome::Asked(..) | Outcome::Abandoned => {}
        }
    }
}

/// Runs the details' write and the reply together. `None` when the turn was refused (its
/// message could not be stored): the model call is dropped at once, freeing the
/// conversation for the next message, and nothing of it is kept.
async fn unless_refused<T, O>(
    mut details: Pin<&mut impl Future<Output = Option<T>>>,
    mut reply: Pin<&mut impl Future<Output = O>>,
) -> Option<(T, O)> {
    tokio::select! {
        saved = &mut details => match saved {
            Some(saved) => Some((saved, reply.await)),
            None => None,
        },
        outcome = &mut reply => details.await.map(|saved| (saved, outcome)),
    }
}

/// What a reply has written: the turn's tool exchanges (as stored), and the reply's text
/// and model.
struct Written {
    exchanges: Vec<Message>,
    text: String,
    model: Option<String>,
    progress: Progress,
}

/// One turn's conversation with the model: its calls, and the tool rounds between them.
struct Conversing<'a> {
    /// Stop (`POST …/stop`), besides the browser going away.
    stop: &'a CancellationToken,
    llm: &'a LlmClient,
    run: Option<&'a ToolRun>,
    tx: &'a mpsc::Sender<ChatEvent>,
    started: std::time::Instant,
}

impl Conversing<'_> {
    /// Calls the model; while it asks for tools (and the limits allow), runs the round and
    /// calls it again with the results. `text` is the last call's text; `exchanges` gets
    /// each round's messages as stored.
    async fn converse(
        &self,
        mut request: ModelRequest,
        text: &mut String,
        exchanges: &mut Vec<Message>,
        progress: &mut Progress,
    ) -> Outcome {
        if let Some(run) = self.run {
            request.tools.clone_from(&run.offered);
        }
        // Every call within the budget: this turn's rounds are appended after the plan's.
        let rounds_from = request.messages.len();
        let mut newest_from = rounds_from;
        // When the last round began, and how long it waited for its servers.
        let mut round_began: Option<(std::time::Instant, u64)> = None;
        loop {
            if let Some(run) = self.run {
                run.fit(&mut request, rounds_from, newest_from, progress);
            }
            progress.own_time(round_began.take());
            // Each model call's text is its own message (the page shows it so): its own
            // Markdown.
            let mut markdown = StreamingMarkdown::new();
            let round_start = text.len();
            let asked = relay(
                self.llm,
                request.clone(),
                (self.tx, self.stop),
                text,
                &mut markdown,
                self.started,
            );
            let (calls, run) = match (asked.await, self.run) {
                (Outcome::Asked(calls, usage), Some(run)) => {
                    progress.asked(usage.as_ref());
                    (calls, run)
                }
                (outcome, _) => return outcome,
            };
            let began = std::time::Instant::now();
            let said = text.split_off(round_start);
            let round = run.round(said, calls, progress, (self.tx, self.stop)).await;
            round_began = Some((began, round.waited_us));
            exchanges.extend(round.stored);
            newest_from = request.messages.len();
            request.messages.extend(round.sent);
            if round.stopped {
                return Outcome::Abandoned;
            }
            // The model's `tool_choice` is for the first call; later ones are its own.
            request.tool_choice = None;
            if progress.reached.is_some() {
                if run.budget.last_without_tools {
                    request.tools.clear();
                } else {
                    request.tool_choice = Some(ToolChoice::None);
                }
            }
        }
    }
}

/// Relays the model's stream as `delta` events (with the Markdown blocks each completes),
/// collecting the text in `text`.
async fn relay(
    llm: &LlmClient,
    request: ModelRequest,
    (tx, stop): (&mpsc::Sender<ChatEvent>, &CancellationToken),
    text: &mut String,
    markdown: &mut StreamingMarkdown,
    started: std::time::Instant,
) -> Outcome {
    let offered = !request.tools.is_empty() && request.tool_choice != Some(ToolChoice::None);
    let failed = |e: LlmError| {
        crate::ops::metrics::upstream_error(e.kind());
        Outcome::Failed(e.into())
    };
    let mut stream = tokio::select! {
        stream = llm.stream(request) => match stream {
            Ok(stream) => stream,
            Err(e) => return failed(e),
        },
        _ = gone(tx, stop) => return Outcome::Abandoned,
    };
    loop {
        let item = tokio::select! {
            biased;
            _ = gone(tx, stop) => return Outcome::Abandoned,
            item = stream.next() => item,
        };
        let piece = match item {
            Some(Ok(LlmEvent::Delta(piece))) => piece,
            Some(Ok(LlmEvent::Finished {
                reason,
                usage,
                tool_calls,
            })) => {
                let asked = offered.then_some(tool_calls).filter(|c| !c.is_empty());
                return ended(reason, usage, asked, markdown);
            }
            Some(Err(e)) => return failed(e),
            None => return failed(LlmError::Dropped),
        };
        if text.is_empty() {
            crate::ops::metrics::first_token(started.elapsed().as_secs_f64());
        }
        if text.len() + piece.len() > crate::llm::MAX_REPLY_BYTES {
            return failed(LlmError::TooLong);
        }
        text.push_str(&piece);
        let rendered = markdown.push(&piece).map(|html| Rendered {
            html,
            upto: markdown.rendered_len(),
        });
        let delta = ChatEvent::Delta {
            text: piece,
            rendered,
        };
        if tx.send(delta).await.is_err() {
            return Outcome::Abandoned;
        }
    }
}

/// How a model call that finished ended: it asked for tools (`asked`, only when it was
/// offered any), or its reply is done.
fn ended(
    reason: String,
    usage: Option<parlor_domain::Usage>,
    asked: Option<Vec<ToolCall>>,
    markdown: &mut StreamingMarkdown,
) -> Outcome {
    if let Some(calls) = asked {
        return Outcome::Asked(calls, usage);
    }
    let markdown = std::mem::replace(markdown, StreamingMarkdown::new());
    Outcome::Finished(Box::new(DoneEvent {
        finish_reason: reason,
        usage,
        html: Some(markdown.finish()),
        message_id: None,
        meter: None,
        message_tokens: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::MirrorModel;
    use crate::store::{ConversationStore, MemoryStore};
    use parlor_domain::chain::EstimatedTokens;
    use parlor_domain::ConversationId;
    use std::time::Duration;

    /// A reply to "hello" by the mirror, with a listener, whose durable signal is `durable`.
    async fn reply_with(
        durable: tokio::sync::oneshot::Receiver<bool>,
    ) -> Arc<dyn ConversationStore> {
        let store: Arc<dyn ConversationStore> = Arc::new(MemoryStore::new(None));
        let id = ConversationId::parse("gate").unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let reply = Reply {
            history: Arc::new(History {
                id: "default".into(),
                store: store.clone(),
                system_message: None,
                redis: None,
            }),
            info: ConversationInfo::bare(&id, Some(1)),
            tx,
            busy: None,
            then: None,
            prices: None,
            tokens: Arc::new(EstimatedTokens),
            durable,
            tools: None,
            quota: None,
            summary_nano_usd: 0,
            stop: None,
        };
        let request = ModelRequest {
            model: "mirror".into(),
            messages: vec![Message::user("hello", 1)],
            temperature: None,
            max_tokens: None,
            tools: Vec::new(),
            tool_choice: None,
        };
        let client = LlmClient::Mirror(MirrorModel {
            delay: Duration::ZERO,
        });
        // Someone listens all along: only the signal decides whether the reply is kept.
        let listener = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        reply
            .write(Ok((client, request)), CancellationToken::new())
            .await;
        listener.await.unwrap();
        store
    }

    #[tokio::test]
    async fn a_reply_is_stored_only_once_its_question_is_durable() {
        let id = ConversationId::parse("gate").unwrap();
        let (durable, signal) = tokio::sync::oneshot::channel();
        durable.send(false).unwrap();
        let store = reply_with(signal).await;
        assert_eq!(store.load(&id).await.unwrap().len(), 1, "the reply");
        assert!(store.info(&id).await.unwrap().is_some());

        // The question could not be stored (the signal is dropped): nothing of the turn is
        // written, not its reply, not its details.
        let (durable, signal) = tokio::sync::oneshot::channel::<bool>();
        drop(durable);
        let store = reply_with(signal).await;
        assert!(store.load(&id).await.unwrap().is_empty());
        assert!(store.info(&id).await.unwrap().is_none());
    }
}
