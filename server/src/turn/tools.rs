//! The tool loop of a turn (spec `tools.md`, "The loop"): while the model asks for tools and
//! the limits allow, the calls run in parallel, their results are appended and the model is
//! called again; at a limit the last call is made without tools. Stop cancels running calls;
//! every call is paired with a result, a cancelled one's saying so.

use crate::store::now_ms;
use crate::tools::{Outcome, Recall, Tools};
use futures::stream::{FuturesUnordered, StreamExt};
use parlor_domain::context::Save;
use parlor_domain::event::tools::preview;
use parlor_domain::event::tools::{CallReport, ToolsReport};
use parlor_domain::event::{LimitEvent, ToolCallEvent, ToolResultEvent};
use parlor_domain::message::{ToolAnswer, ToolCall};
use parlor_domain::tool::{next, stub, LimitReached, Next, Offered};
use parlor_domain::ConversationId;
use parlor_domain::{ChatEvent, Message};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) use super::budget::{Budget, Spent};

/// What a turn's loop may use: the servers, the tools offered, the built-in server's view.
#[derive(Clone)]
pub(crate) struct ToolRun {
    pub tools: Arc<Tools>,
    pub offered: Vec<Offered>,
    /// The agent (its servers are waited for while they start).
    pub agent: Arc<parlor_domain::Agent>,
    pub recall: Arc<dyn Recall>,
    /// The history and conversation (calls wait for approval under them).
    pub history: String,
    pub session: ConversationId,
    /// The servers with `confirm = "first"` approved in this conversation, this turn's
    /// approvals included.
    pub approved: Arc<Mutex<Vec<String>>>,
    /// Every call of the turn within the model's token budget (see [`Budget`]).
    pub budget: Budget,
    /// The conversation's owner: the user its per-user servers serve.
    pub user: Option<String>,
    pub secrets: Arc<crate::store::secrets::Secrets>,
    /// The history's Redis, when it is on one: approvals reach calls waiting on any process.
    pub redis: Option<crate::store::SharedRedis>,
}

/// Where the loop is within a turn.
#[derive(Default)]
pub(super) struct Progress {
    pub round: u32,
    pub made: u32,
    /// Set once a limit ended the loop (the next model call has no tools).
    pub reached: Option<LimitReached>,
    /// Each round's calls, for the debug panel.
    pub rounds: Vec<Vec<CallReport>>,
    pub limit: Option<LimitEvent>,
    /// The tokens of each model call, as sent.
    pub call_tokens: Vec<u64>,
    /// Parlor's own time in each round, in microseconds: from the model's asking to the next
    /// call's request, less the wait for the slowest tool server's answer.
    pub own_us: Vec<u64>,
    /// What the calls that asked for tools used: all of it (the provider's count, else the
    /// estimate of the request), and what the provider reported (what is priced).
    pub spent: Spent,
    pub reported: Spent,
}

/// One round's messages: the call as sent, and each result as sent and as stored.
pub(super) struct Round {
    pub sent: Vec<Message>,
    pub stored: Vec<Message>,
    /// Stop (a closed stream) came during the calls.
    pub stopped: bool,
    /// The longest wait for a server's answer among the round's calls, in microseconds.
    pub waited_us: u64,
}

impl Progress {
    /// Notes Parlor's own time in the round that began at `began` and waited `waited_us`
    /// for its servers (none: no round before this call).
    pub(super) fn own_time(&mut self, round: Option<(std::time::Instant, u64)>) {
        if let Some((began, waited_us)) = round {
            let took = began.elapsed().as_micros() as u64;
            self.own_us.push(took.saturating_sub(waited_us));
        }
    }

    /// Counts a call that asked for tools: what the provider reported, else the estimate
    /// of its request.
    pub(super) fn asked(&mut self, usage: Option<&parlor_domain::Usage>) {
        match usage {
            Some(u) => {
                for spent in [&mut self.spent, &mut self.reported] {
                    spent.prompt += u.prompt_tokens;
                    spent.completion += u.completion_tokens;
                    spent.cached += u.cached_tokens.unwrap_or(0);
                    spent.cache_written += u.cache_write_tokens.unwrap_or(0);
                }
            }
            None => self.spent.prompt += self.call_tokens.last().copied().unwrap_or(0),
        }
    }
}

impl ToolRun {
    /// Fits the next model call into the budget (stubbing earlier rounds' results, oldest
    /// first) and notes its tokens; `rounds_from`: where this turn's rounds begin in
    /// `request`, `newest_from`: where the newest does.
    pub(super) fn fit(
        &self,
        request: &mut crate::llm::ModelRequest,
        rounds_from: usize,
        newest_from: usize,
        progress: &mut Progress,
    ) {
        let budget = &self.budget;
        let definitions = if request.tools.is_empty() {
            0
        } else {
            budget.tool_tokens
        };
        let before = budget.planned_tokens + definitions;
        let fitted = parlor_domain::tool::rounds::fit(
            &mut request.messages,
            rounds_from,
            newest_from,
            budget.limit,
            before,
            budget.tokens.as_ref(),
        );
        progress.call_tokens.push(fitted.tokens);
    }

    /// The tools of a turn of `agent` in conversation `info` of history `history`, when it
    /// has any (the built-in server recalls the conversations of `info`'s owner).
    pub(super) fn for_turn(
        turn: &super::TurnContext<'_>,
        info: &crate::store::ConversationInfo,
        budget: Budget,
    ) -> Option<ToolRun> {
        let (services, agent) = (turn.services, turn.agent);
        if agent.tools.is_empty() || services.tools.is_empty() {
            return None;
        }
        let recall = crate::conversation::recall::OwnerRecall {
            services: services.clone(),
            owner: info.owner.clone(),
            current: info.session_id.clone(),
        };
        Some(ToolRun {
            tools: services.tools.clone(),
            offered: services.tools.offered(agent, info.owner.as_deref()),
            agent: agent.clone(),
            recall: Arc::new(recall),
            history: turn.history.id.clone(),
            session: info.session_id.clone(),
            approved: Arc::new(Mutex::new(info.approved_tools.clone())),
            budget,
            user: info.owner.clone(),
            secrets: services.tool_secrets.clone(),
            redis: turn.history.redis.clone(),
        })
    }

    /// Starts the user's own servers (per-user ones), saying which cannot run for them;
    /// waits for the agent's servers that are starting (the first turn after a restart, or
    /// the user's first), each at most its start timeout, then offers what they list. A
    /// server still not ready after that is left out; the debug panel says why.
    pub(super) async fn wait_for_servers(
        &mut self,
        tx: &mpsc::Sender<ChatEvent>,
        stop: &CancellationToken,
    ) {
        let user = self.user.as_deref();
        let prepared = self
            .tools
            .prepare(&self.agent, user, self.secrets.as_ref())
            .await;
        for (server, why) in prepared.unavailable {
            tracing::info!("tool server {server:?} is not available to this user: {why}");
            let settings_url = why
                .contains(crate::tools::SECRETS_PAGE)
                .then(|| crate::tools::SECRETS_PAGE.to_owned());
            let event = parlor_domain::event::UnavailableEvent {
                server,
                why,
                settings_url,
            };
            let _ = tx.send(ChatEvent::Unavailable(event)).await;
        }
        let reports = self.tools.reports(&self.agent, user);
        // Its error stays with admins (/readyz, the log): it may name a command or a URL.
        for down in reports.iter().filter(|r| is_down(&r.state)) {
            let why = "it is not answering now, and Parlor is starting it again";
            let _ = tx.send(unavailable(&down.id, why)).await;
        }
        if !reports.iter().any(|r| r.state.ends_with("starting")) {
            self.offered = self.tools.offered(&self.agent, user);
            return;
        }
        let missing = tokio::select! {
            missing = self.tools.started_for(&self.agent, user) => missing,
            _ = gone(tx, stop) => return,
        };
        for (id, status) in missing {
            tracing::warn!("tool server {id:?} is {status}: this turn goes on without its tools");
            let why = match matches!(status, crate::tools::server::Status::Down { .. }) {
                true => "it failed to start, and Parlor is starting it again",
                false => "it is still starting",
            };
            let _ = tx.send(unavailable(&id, why)).await;
        }
        self.offered = self.tools.offered(&self.agent, user);
        let tokens = self.budget.tokens.as_ref();
        self.budget.tool_tokens =
            parlor_domain::tool::rounds::definition_tokens(&self.offered, tokens);
    }

    /// The debug panel's report of the turn's tools.
    pub(super) fn report(&self, progress: Progress) -> ToolsReport {
        ToolsReport {
            offered: self.offered.iter().map(|t| t.name.clone()).collect(),
            rounds: progress.rounds,
            limit: progress.limit,
            call_tokens: progress.call_tokens,
            own_us: progress.own_us,
        }
    }

    /// Runs the round that asked for `calls` (with the round's `text`): as many as the
    /// limits allow, in parallel; the others, and those Stop cancelled, answered with an
    /// error saying why.
    pub(super) async fn round(
        &self,
        text: String,
        calls: Vec<ToolCall>,
        progress: &mut Progress,
        (tx, user_stop): (&mpsc::Sender<ChatEvent>, &CancellationToken),
    ) -> Round {
        progress.round += 1;
        let limits = self.tools.limits;
        let (to_run, reached) = match next(limits, progress.round, progress.made, calls.len()) {
            Next::Run { calls } => (calls, None),
            Next::Last { calls, reached } => (calls, Some(reached)),
        };
        progress.made += to_run as u32;
        // Parlor's own ids: a model's (`call_1`) repeat across rounds and turns.
        let calls: Vec<ToolCall> = calls.into_iter().map(own_id).collect();
        let mut asked = Message::assistant(text, now_ms());
        asked.tool_calls = calls.clone();
        asked.ensure_id();
        for call in &calls {
            let _ = tx.send(ChatEvent::ToolCall(self.call_event(call))).await;
        }
        let (mut outcomes, stopped) = self.run_all(&calls[..to_run], tx, user_stop).await;
        let waited_us = outcomes.iter().map(|o| o.waited_us).max().unwrap_or(0);
        for _ in to_run..calls.len() {
            outcomes.push(Outcome::error(format!(
                "Not run: this turn reached its limit of {} tool calls.",
                limits.max_calls
            )));
        }
        let mut round = Round {
            sent: vec![asked.clone()],
            stored: vec![asked],
            stopped,
            waited_us,
        };
        let reports = self.answered(&calls, outcomes, &mut round, tx).await;
        progress.rounds.push(reports);
        if let (Some(reached), false) = (reached, stopped) {
            progress.reached = Some(reached);
            let limit = match reached {
                LimitReached::MaxRounds => limits.max_rounds,
                LimitReached::MaxCalls => limits.max_calls,
            };
            let event = LimitEvent { reached, limit };
            progress.limit = Some(event.clone());
            let _ = tx.send(ChatEvent::Limit(event)).await;
        }
        round
    }

    /// Sends each call's result, adds its message (as sent and as stored) to `round`, and
    /// returns the calls' reports.
    async fn answered(
        &self,
        calls: &[ToolCall],
        outcomes: Vec<Outcome>,
        round: &mut Round,
        tx: &mpsc::Sender<ChatEvent>,
    ) -> Vec<CallReport> {
        let mut reports = Vec::with_capacity(calls.len());
        for (call, outcome) in calls.iter().zip(outcomes) {
            reports.push(CallReport {
                id: call.id.clone(),
                tool: call.name.clone(),
                ok: outcome.ok,
                ms: outcome.ms,
                bytes: outcome.bytes,
            });
            let event = ChatEvent::ToolResult(result_event(call, &outcome));
            let _ = tx.send(event).await;
            let save = self
                .server_of(call)
                .map_or(Save::Always, |s| self.tools.save_of(s));
            let (sent, stored) = messages(call, outcome, save);
            round.sent.push(sent);
            round.stored.push(stored);
        }
        reports
    }

    pub(super) fn server_of(&self, call: &ToolCall) -> Option<&str> {
        self.offered
            .iter()
            .find(|t| t.name == call.name)
            .map(|t| t.server.as_str())
    }

    fn call_event(&self, call: &ToolCall) -> ToolCallEvent {
        ToolCallEvent {
            id: call.id.clone(),
            tool: call.name.clone(),
            server: self.server_of(call).unwrap_or_default().to_owned(),
            arguments: call.arguments.clone(),
        }
    }

    /// Runs `calls` in parallel; the outcomes in the calls' order, and whether Stop came.
    async fn run_all(
        &self,
        calls: &[ToolCall],
        tx: &mpsc::Sender<ChatEvent>,
        user_stop: &CancellationToken,
    ) -> (Vec<Outcome>, bool) {
        let stop = CancellationToken::new();
        let running: FuturesUnordered<_> = calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                let stop = &stop;
                async move { (i, self.one(call, stop, tx).await) }
            })
            .collect();
        let all = running.collect::<Vec<_>>();
        tokio::pin!(all);
        let (mut done, stopped) = tokio::select! {
            done = &mut all => (done, false),
            _ = gone(tx, user_stop) => {
                stop.cancel();
                (all.await, true)
            }
        };
        done.sort_by_key(|(i, _)| *i);
        (done.into_iter().map(|(_, o)| o).collect(), stopped)
    }
}

impl ToolRun {
    /// One call: approved first when its server asks for that, then run.
    async fn one(
        &self,
        call: &ToolCall,
        stop: &CancellationToken,
        tx: &mpsc::Sender<ChatEvent>,
    ) -> Outcome {
        if let Err(refused) = self.approval(call, stop, tx).await {
            return refused;
        }
        self.tools
            .call(
                call,
                (&self.offered, self.user.as_deref()),
                stop,
                self.recall.as_ref(),
            )
            .await
    }
}

/// The listener went away, or the user pressed Stop (`POST …/stop`).
pub(super) async fn gone(tx: &mpsc::Sender<ChatEvent>, stop: &CancellationToken) {
    tokio::select! {
        _ = tx.closed() => {}
        _ = stop.cancelled() => {}
    }
}

/// `call` under an id of Parlor's own, unique in its conversation.
fn own_id(mut call: ToolCall) -> ToolCall {
    let random = uuid::Uuid::new_v4().simple().to_string();
    call.id = format!("call_{}", &random[..24]);
    call
}

/// The `tool_result` event of a call.
fn result_event(call: &ToolCall, outcome: &Outcome) -> ToolResultEvent {
    let text = outcome.text();
    ToolResultEvent {
        id: call.id.clone(),
        ok: outcome.ok,
        bytes: outcome.bytes,
        ms: outcome.ms,
        preview: if outcome.ok {
            preview(&text)
        } else {
            String::new()
        },
        error: (!outcome.ok).then(|| preview(&text)),
    }
}

/// A result's `tool` message as sent on this turn, and as stored: kept as the server's
/// `save` says (for good, for the next n turns, or as a stub at once).
fn messages(call: &ToolCall, outcome: Outcome, save: Save) -> (Message, Message) {
    let answer = ToolAnswer {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        ok: outcome.ok,
        ms: outcome.ms,
        bytes: outcome.bytes,
        removed_after: None,
    };
    let ts = now_ms();
    let mut sent = Message::tool_result(answer.clone(), outcome.content.clone(), None, ts);
    sent.ensure_id();
    let mut stored = match save {
        Save::Always => sent.clone(),
        Save::Turns(n) => Message::tool_result(answer, outcome.content, Some(n), ts),
        Save::No => {
            let mut kept = Message::tool_result(answer, Vec::new(), None, ts);
            let text = stub(&call.name, None, outcome.bytes);
            parlor_domain::exchange::replace_content(&mut kept, text);
            if let Some(tool) = kept.tool.as_mut() {
                tool.removed_after = Some(0);
            }
            kept
        }
    };
    stored.id = sent.id.clone();
    (sent, stored)
}

/// Whether a server's state (as [`crate::tools::Tools::reports`] words it) is down.
fn is_down(state: &str) -> bool {
    state
        .strip_prefix("per user: ")
        .unwrap_or(state)
        .starts_with("down")
}

/// The stream's word that `server`'s tools are not offered on this turn, and why.
fn unavailable(server: &str, why: &str) -> ChatEvent {
    ChatEvent::Unavailable(parlor_domain::event::UnavailableEvent {
        server: server.to_owned(),
        why: why.to_owned(),
        settings_url: None,
    })
}
