//! A turn's model call: the plan (what the model receives, decided by [`crate::plan`]), the
//! `meta` event that tells the page about it, and the report kept with the conversation.

use super::Sent;
use crate::chain::{Chain, ModelLimits, TokenCounter};
use crate::conversation::ConversationInfo;
use crate::event::{MetaEvent, TurnReport};
use crate::message::{Message, Role};
use crate::meter::{measure, Cost};
use crate::plan::{plan, Plan, PlanInput};
use crate::settings::HistorySettings;
use crate::summary::{for_model, Maintenance, SummaryReport, SUMMARY_LABEL};
use serde_json::Value;

/// The model a conversation calls, as far as the plan and the meter need it.
pub struct Model<'a> {
    /// Its name as Parlor knows it.
    pub name: &'a str,
    pub limits: &'a ModelLimits,
    /// Its context window in tokens, when known.
    pub window: Option<u64>,
    /// Whether the operator declared its prices.
    pub priced: bool,
}

/// The conversation's rolling summary, for an agent whose chain has the `summary` step.
#[derive(Clone, Debug, Default)]
pub struct StoredSummary {
    /// `None` while there is none yet (the maintenance signal is still reported).
    pub summary: Option<Value>,
    pub maintenance: Option<Maintenance>,
    /// Why the summarizer last failed, if it did.
    pub failure: Option<String>,
}

/// Everything besides the conversation that a model call is planned from.
pub struct CallInput<'a> {
    pub agent_id: &'a str,
    /// The provider's label, for the page.
    pub provider: &'a str,
    /// System messages added at call time, in order: the history's, then the agent's prompt.
    pub system: &'a [String],
    pub settings: &'a HistorySettings,
    pub chain: &'a Chain,
    /// `None`: the agent has no model (the call is refused).
    pub model: Option<Model<'a>>,
    pub tokens: &'a dyn TokenCounter,
    /// The agent's window ceiling.
    pub max_ctx: usize,
    pub summary: Option<&'a StoredSummary>,
    /// The store's cap on messages (a history's `max_turns`).
    pub max_turns: Option<usize>,
    /// The tokens the definitions of the tools offered take in the request: the messages'
    /// token budget is what is left of the model's, and the meter counts them as tools.
    pub tool_tokens: u64,
}

/// A planned call and what the page is told about it.
pub struct Call {
    pub plan: Plan,
    pub meta: MetaEvent,
}

/// Plans the call for `sent` and records it in `info` (`last_turn`, for the debug panel).
/// With `names_last`, the `meta` event names the last message of `sent` (the one a turn
/// sends; a command's call names none).
pub fn call(
    info: &mut ConversationInfo,
    sent: Sent,
    names_last: bool,
    input: &CallInput<'_>,
) -> Call {
    let Sent {
        tail,
        total,
        context,
        older_pins,
    } = sent;
    let last = tail.last();
    let message_id = last.filter(|_| names_last).map(|m| m.id().into_owned());
    let message_tokens = last.filter(|_| names_last).map(|m| input.tokens.count(m));
    let summary_text = input
        .summary
        .and_then(|s| s.summary.as_ref())
        .filter(|s| !crate::summary::says_nothing(s))
        .map(for_model);
    let default_limits = ModelLimits::default();
    let limits = input.model.as_ref().map_or(&default_limits, |m| m.limits);
    // The tools' definitions take their part of the budget before any message.
    let limits = ModelLimits {
        token_budget: limits
            .token_budget
            .map(|b| b.saturating_sub(input.tool_tokens)),
        ..limits.clone()
    };
    let mut plan = plan(PlanInput {
        system: input.system,
        tail: &tail.into(),
        stored_total: total,
        settings: input.settings,
        chain: input.chain,
        model: &limits,
        max_ctx: input.max_ctx,
        tokens: input.tokens,
        context,
        summary: summary_text.as_deref(),
        older_pins: &older_pins,
        // Full before this message: `max_turns` may have dropped the question of a reply
        // that now opens the stored conversation.
        capped: input.max_turns.is_some_and(|max| total > max),
    });
    if let Some(summary) = input.summary {
        plan.report.summary = Some(Box::new(summary_report(summary, &plan, input.tokens)));
    }
    let mut meta = meta(info, &plan, input);
    meta.message_id = message_id;
    meta.message_tokens = message_tokens;
    Call { plan, meta }
}

/// The `meta` event of a planned call, and the report kept with the conversation: what was
/// decided, and how full the model's window is with it.
pub fn meta(info: &mut ConversationInfo, plan: &Plan, input: &CallInput<'_>) -> MetaEvent {
    let model = input.model.as_ref();
    let name = model.map(|m| m.name.to_owned()).unwrap_or_default();
    let mut meter = measure(&plan.messages, input.tokens, model.and_then(|m| m.window));
    meter.add_tool_definitions(input.tool_tokens);
    if model.is_some_and(|m| m.priced) {
        // Priced: the conversation's cost so far shows before this call's is known.
        // The summary's own cost (its model calls) is the conversation's too.
        let summary = input.summary.and_then(|s| s.summary.as_ref());
        let kept = summary.map_or(0, |s| crate::summary::Covers::of(s).spent_nano_usd);
        meter.cost = Some(Cost {
            turn_nano_usd: None,
            conversation_nano_usd: info.spent_nano_usd + kept,
        });
    }
    let before = info.last_turn.as_ref().map(|t| &t.prefix);
    let prefix_change = before
        .filter(|b| !b.is_empty())
        .and_then(|b| crate::cache::prefix_change(b, &plan.prefix))
        .map(|change| change.cut_by(&plan.report.chain));
    info.last_turn = Some(Box::new(TurnReport {
        meter: Some(meter.clone()),
        prefix_change,
        prefix: plan.prefix.clone(),
        ..TurnReport::new(plan.report.clone(), name.clone())
    }));
    MetaEvent {
        session_id: info.session_id.to_string(),
        agent_id: input.agent_id.to_owned(),
        model: name,
        provider: input.provider.to_owned(),
        history: plan.report.clone(),
        message_id: None,
        meter: Some(meter),
        message_tokens: None,
        versions: None,
    }
}

/// What the debug panel says of the summary on this call.
fn summary_report(stored: &StoredSummary, plan: &Plan, tokens: &dyn TokenCounter) -> SummaryReport {
    let Some(summary) = &stored.summary else {
        return SummaryReport {
            failure: stored.failure.clone(),
            maintenance: stored.maintenance.clone(),
            ..SummaryReport::default()
        };
    };
    let sent = plan
        .messages
        .iter()
        .find(|m| m.role == Role::System && m.text.starts_with(SUMMARY_LABEL));
    let unsent = Message::system(for_model(summary), 0);
    let count = tokens.count(sent.unwrap_or(&unsent));
    SummaryReport {
        maintenance: stored.maintenance.clone(),
        ..SummaryReport::new(summary, sent.is_some(), count, stored.failure.clone())
    }
}
