//! The built-in history processors after the policy step: the sliding window, the token
//! budget, role alternation and the rolling summary (see [`super::HistoryProcessor`]).

use super::{leading_systems, ChainContext, ChainError, HistoryProcessor, Outgoing};
use crate::message::{Message, Role};
use crate::summary::summary_message;

/// `messages` without the `count` messages after its `systems` leading system messages.
fn drop_after_systems(mut messages: Vec<Outgoing>, systems: usize, count: usize) -> Vec<Outgoing> {
    messages.drain(systems..systems + count);
    messages
}

/// The same, but pinned messages in that range stay.
fn drop_after_systems_but_pins(
    messages: Vec<Outgoing>,
    systems: usize,
    count: usize,
) -> Vec<Outgoing> {
    messages
        .into_iter()
        .enumerate()
        .filter(|(i, m)| !(systems..systems + count).contains(i) || m.pinned())
        .map(|(_, m)| m)
        .collect()
}

/// Index (in `rest`) of the first user message at or after `from`; the last user message
/// when there is none after `from`, so the latest user message is never dropped.
fn user_at_or_after(rest: &[Outgoing], from: usize) -> usize {
    rest[from.min(rest.len())..]
        .iter()
        .position(|m| m.role() == Role::User)
        .map(|i| from + i)
        .or_else(|| rest.iter().rposition(|m| m.role() == Role::User))
        .unwrap_or(rest.len())
}

/// Keeps the last `effective_ctx` messages (system messages aside), moving the cut forward
/// to the next user message so that no request starts with an orphaned reply.
#[derive(Clone, Copy, Debug, Default)]
pub struct SlidingWindow;

impl SlidingWindow {
    /// The window itself: the last `window` messages after the leading system messages,
    /// from a user message on. Pinned messages stay and do not count against the window.
    pub fn keep_last(messages: Vec<Outgoing>, window: usize) -> Vec<Outgoing> {
        Self::keep_last_stepped(messages, window, 0)
    }

    /// The step `model`'s window of `window` messages cuts by: its own, else a third.
    pub fn step_of(model: &super::ModelLimits, window: usize) -> usize {
        model.window_step.unwrap_or(window / DEFAULT_STEP_DIVISOR)
    }

    /// Where the window over `messages` will start at the next turn, when that turn (two
    /// messages longer: this turn's reply and the next question) makes it cut again: the
    /// stored position of the message it will start on. `None` while the cut holds, or when
    /// the next cut would start on a message not stored yet. The rolling summary is brought
    /// up to it ahead, so that the summary sent changes with the cut, not a turn after it.
    pub fn next_start(messages: &[Outgoing], window: usize, step: usize) -> Option<usize> {
        let rest = &messages[leading_systems(messages)..];
        let unpinned: Vec<usize> = (0..rest.len()).filter(|&i| !rest[i].pinned()).collect();
        let now = step_cut(unpinned.len(), window, step);
        let next = step_cut(unpinned.len() + 2, window, step);
        let from = *unpinned.get(next).filter(|_| next > now)?;
        // With no user message at or after `from`, the next question will be the first.
        let start = user_at_or_after(rest, from);
        (start >= from)
            .then(|| rest.get(start)?.stored_at)
            .flatten()
    }

    /// [`SlidingWindow::next_start`] when `chain` has both the window and the summary (the
    /// one that needs it); `None` otherwise.
    pub fn next_start_for_summary(
        chain: &super::Chain,
        messages: &[Outgoing],
        ctx: &ChainContext<'_>,
    ) -> Option<usize> {
        let names = chain.names();
        if !names.contains(&"sliding_window") || !names.contains(&"summary") {
            return None;
        }
        let step = Self::step_of(ctx.model, ctx.effective_ctx);
        Self::next_start(messages, ctx.effective_ctx, step)
    }

    /// The window with a step: the cut moves only in steps of `step` messages
    /// ([`step_cut`]), so it holds while the conversation grows.
    pub fn keep_last_stepped(messages: Vec<Outgoing>, window: usize, step: usize) -> Vec<Outgoing> {
        let systems = leading_systems(&messages);
        let rest = &messages[systems..];
        let unpinned: Vec<usize> = (0..rest.len()).filter(|&i| !rest[i].pinned()).collect();
        let start = match step_cut(unpinned.len(), window, step) {
            0 => 0,
            cut => user_at_or_after(rest, unpinned[cut]),
        };
        drop_after_systems_but_pins(messages, systems, start)
    }
}

/// A model without its own step (nor `[history]`'s) cuts a third of its window (or budget)
/// at a time: measured in `make bench` (docs/performance.md), a third keeps more than 80 %
/// of the prompt tokens cached while keeping at least two thirds of the window; a quarter
/// fell short of 80 %, and half keeps more cached and loses more context.
pub const DEFAULT_STEP_DIVISOR: usize = 3;

/// Where a window of `window` over `count` messages cuts, with a `step`: not at
/// `count - window` (which moves with every message, so that no two requests share a
/// prefix past the system prompt) but at the next multiple of `step` at or above it, which
/// stays put until the window is exceeded again. What is kept then is between
/// `window - step + 1` and `window` messages. A step of 0 (or 1) cuts exactly; a step is
/// held below the window.
pub fn step_cut(count: usize, window: usize, step: usize) -> usize {
    let over = count.saturating_sub(window);
    let step = step.min(window.saturating_sub(1)).max(1);
    over.div_ceil(step) * step
}

impl HistoryProcessor for SlidingWindow {
    fn name(&self) -> &'static str {
        "sliding_window"
    }
    fn describe(&self) -> &'static str {
        "keeps the last effective_ctx = min(agent max_ctx, model max_context) messages, starting on a user message"
    }
    fn process(
        &self,
        messages: Vec<Outgoing>,
        ctx: &ChainContext<'_>,
    ) -> Result<Vec<Outgoing>, ChainError> {
        let step = Self::step_of(ctx.model, ctx.effective_ctx);
        Ok(Self::keep_last_stepped(messages, ctx.effective_ctx, step))
    }
}

/// Drops the oldest whole turns (a user message and what follows it) until the messages fit
/// the model's token budget. The latest turn is never dropped; if it alone does not fit, the
/// turn fails with [`ChainError::OverBudget`]. A model without a budget is not limited.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokenBudget;

impl HistoryProcessor for TokenBudget {
    fn name(&self) -> &'static str {
        "token_budget"
    }
    fn describe(&self) -> &'static str {
        "drops the oldest whole turns until the request fits the model's token budget"
    }
    fn process(
        &self,
        messages: Vec<Outgoing>,
        ctx: &ChainContext<'_>,
    ) -> Result<Vec<Outgoing>, ChainError> {
        let Some(budget) = ctx.model.token_budget else {
            return Ok(messages);
        };
        let messages = stub_results_to_fit(messages, budget, ctx);
        let systems = leading_systems(&messages);
        let (prompt, rest) = messages.split_at(systems);
        let cost = |part: &[Outgoing]| {
            part.iter()
                .map(|m| ctx.tokens.count(&m.message))
                .sum::<u64>()
        };
        let last_turn = rest
            .iter()
            .rposition(|m| m.role() == Role::User)
            .unwrap_or(rest.len());
        let mut used = summary_to_come(prompt, ctx) + cost(prompt) + cost(&rest[last_turn..]);
        if used > budget {
            return Err(ChainError::OverBudget {
                model: ctx.model.name.clone(),
                tokens: used,
                budget,
            });
        }
        // Keep whole turns from the newest back while they fit: the longest suffix that fits
        // (what dropping the oldest turns first leaves); older turns are never counted.
        let mut start = last_turn;
        while start > 0 {
            let begin = rest[..start]
                .iter()
                .rposition(|m| m.role() == Role::User)
                .unwrap_or(0);
            let turn = cost(&rest[begin..start]);
            if used + turn > budget {
                break;
            }
            used += turn;
            start = begin;
        }
        let step = ctx
            .model
            .budget_step
            .unwrap_or(budget / DEFAULT_STEP_DIVISOR as u64);
        let start = budget_step_cut(rest, (start, last_turn), step, &cost);
        Ok(drop_after_systems(messages, systems, start))
    }
}

/// A summary the chain sends after the budget takes room too: counted by the budget
/// wherever `summary` sits in the chain (once it is among the system messages `prompt`, it
/// is counted with them).
fn summary_to_come(prompt: &[Outgoing], ctx: &ChainContext<'_>) -> u64 {
    let sent = prompt
        .iter()
        .any(|m| m.message.text.starts_with(crate::summary::SUMMARY_LABEL));
    match (ctx.summary, sent) {
        (Some(summary), false) => ctx.tokens.count(&crate::summary::summary_message(summary)),
        _ => 0,
    }
}

/// With a budget step: the first turn boundary at or after `start` (the least cut that
/// fits) that opens a new `step` of tokens counted from the first message, so the cut
/// moves in steps of about `step` tokens and holds in between. Never past `last_turn`;
/// a step of 0 keeps `start`.
fn budget_step_cut(
    rest: &[Outgoing],
    (start, last_turn): (usize, usize),
    step: u64,
    cost: &dyn Fn(&[Outgoing]) -> u64,
) -> usize {
    if start == 0 || step == 0 {
        return start;
    }
    let mut before = 0u64;
    let mut bucket_of_previous = None;
    for (i, message) in rest.iter().enumerate().take(last_turn + 1) {
        let bucket = before.div_ceil(step);
        let boundary = message.role() == Role::User;
        if boundary && i >= start && bucket_of_previous != Some(bucket) {
            return i;
        }
        if boundary {
            bucket_of_previous = Some(bucket);
        }
        before += cost(std::slice::from_ref(message));
    }
    last_turn
}

/// The budget prefers stubs to cuts: while `messages` cost more than `budget`, the oldest
/// tool result before the latest user message is replaced, in this request only, by a stub
/// saying so ([`crate::exchange::budget_stub`]); results already stubbed stay as they are.
fn stub_results_to_fit(
    mut messages: Vec<Outgoing>,
    budget: u64,
    ctx: &ChainContext<'_>,
) -> Vec<Outgoing> {
    let mut used: u64 = messages.iter().map(|m| ctx.tokens.count(&m.message)).sum();
    let last_user = messages
        .iter()
        .rposition(|m| m.role() == Role::User)
        .unwrap_or(messages.len());
    for m in &mut messages[..last_user] {
        if used <= budget {
            break;
        }
        let Some(answer) = m.message.tool.as_ref() else {
            continue;
        };
        if answer.removed_after.is_some() || m.message.is_pinned() {
            continue;
        }
        let stub = crate::exchange::budget_stub(&answer.name, answer.bytes);
        let before = ctx.tokens.count(&m.message);
        crate::exchange::replace_content(&mut m.message, stub);
        used = (used + ctx.tokens.count(&m.message)).saturating_sub(before);
    }
    messages
}

/// For providers that require strict alternation: the result (after the system messages)
/// starts with a user message and alternates; neighbours of the same role are merged (their
/// texts joined by a blank line), never dropped. Replies before the first user message
/// cannot be placed and are left out. Tool messages count as the assistant's.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoleAlternation;

impl HistoryProcessor for RoleAlternation {
    fn name(&self) -> &'static str {
        "role_alternation"
    }
    fn describe(&self) -> &'static str {
        "starts with a user message and alternates user/assistant, merging same-role neighbours"
    }
    fn process(
        &self,
        messages: Vec<Outgoing>,
        _ctx: &ChainContext<'_>,
    ) -> Result<Vec<Outgoing>, ChainError> {
        let systems = leading_systems(&messages);
        let first_user = messages[systems..]
            .iter()
            .position(|m| m.role() == Role::User)
            .map_or(messages.len(), |i| systems + i);
        let mut out = Vec::with_capacity(messages.len());
        let mut items = messages.into_iter();
        out.extend(items.by_ref().take(systems));
        // Where system messages found later go: after the leading ones, in their order.
        let mut head = systems;
        for item in items.skip(first_user - systems) {
            // A system message in the middle (rare: only when stored by another tool) joins
            // the others at the front, where providers expect it.
            if item.role() == Role::System {
                out.insert(head, item);
                head += 1;
                continue;
            }
            // A tool exchange's messages keep their roles and are never merged: a call and
            // its results go to the model as they are.
            let in_exchange = |m: &Message| !m.tool_calls.is_empty() || m.tool.is_some();
            let role = match item.role() {
                Role::User => Role::User,
                Role::Tool if item.message.tool.is_some() => Role::Tool,
                _ => Role::Assistant,
            };
            let has_body = out.len() > head;
            match out.last_mut() {
                Some(previous)
                    if has_body
                        && previous.role() == role
                        && !in_exchange(&previous.message)
                        && !in_exchange(&item.message) =>
                {
                    merge_into(&mut previous.message, item.message);
                }
                _ => out.push(Outgoing {
                    message: Message {
                        role,
                        ..item.message
                    },
                    stored_at: item.stored_at,
                }),
            }
        }
        Ok(out)
    }
}

/// Appends `next` to `previous` (two messages of one role in a row), keeping the order the
/// model reads: `previous`'s text and context, then `next`'s.
fn merge_into(previous: &mut Message, next: Message) {
    let text = format!("\n\n{}", next.text);
    if previous.context.is_empty() {
        previous.text.push_str(&text);
    } else {
        previous.context.push(crate::context::ContextBlock {
            part: crate::context::Part::Text { text },
            retention: None,
        });
    }
    previous.context.extend(next.context);
}

/// The `summary` processor: when the steps before it left earlier stored messages out, the
/// conversation's rolling summary goes in as one system message right after the system
/// prompt, so the model does not simply forget them. Steps after it (the token budget)
/// count it.
pub struct SummaryStep;

impl HistoryProcessor for SummaryStep {
    fn name(&self) -> &'static str {
        "summary"
    }
    fn describe(&self) -> &'static str {
        "sends the rolling summary of the messages left out, as one system message after the system prompt"
    }
    fn process(
        &self,
        mut messages: Vec<Outgoing>,
        ctx: &ChainContext<'_>,
    ) -> Result<Vec<Outgoing>, ChainError> {
        let Some(summary) = ctx.summary else {
            return Ok(messages);
        };
        let left_out = messages
            .iter()
            .filter_map(|m| m.stored_at)
            .min()
            .is_some_and(|first| first > 0);
        if left_out {
            let at = leading_systems(&messages);
            messages.insert(at, Outgoing::prompt(summary_message(summary)));
        }
        Ok(messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{EstimatedTokens, ModelLimits};
    use crate::summary::SUMMARY_LABEL;

    #[test]
    fn the_summary_processor_speaks_only_for_what_was_left_out() {
        let model = ModelLimits::default();
        let ctx = |summary| ChainContext {
            model: &model,
            effective_ctx: 10,
            tokens: &EstimatedTokens,
            summary,
        };
        let outgoing = |first: usize| {
            vec![
                Outgoing::prompt(Message::system("prompt", 0)),
                Outgoing::stored(Message::user("q", 1), first),
                Outgoing::stored(Message::assistant("a", 2), first + 1),
            ]
        };
        let step = SummaryStep;
        let sent = step
            .process(outgoing(4), &ctx(Some("{\"facts\":[\"x\"]}")))
            .unwrap();
        assert_eq!(sent.len(), 4);
        assert_eq!(sent[1].role(), Role::System);
        assert!(sent[1].message.text.starts_with(SUMMARY_LABEL));
        assert!(sent[1].message.text.ends_with("{\"facts\":[\"x\"]}"));
        assert_eq!(sent[1].stored_at, None, "not a stored message");
        // Nothing left out, or no summary: unchanged.
        assert_eq!(
            step.process(outgoing(0), &ctx(Some("{}"))).unwrap().len(),
            3
        );
        assert_eq!(step.process(outgoing(4), &ctx(None)).unwrap().len(), 3);
    }
}

#[cfg(test)]
mod step_tests;
