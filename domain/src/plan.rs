//! The plan of one model call: what the model receives on a turn, and the report that says
//! why. This is the one place that decides it.
//!
//! A plan is a pure function of values: the system messages added at call time, the end of
//! the stored conversation, the resolved settings, the processor chain, the model's limits,
//! the window ceiling and a token counter. It runs these steps, each reported:
//!
//! 1. **policy**: `lastN` / `all` / `none` select from the conversation
//!    ([`trim_for_model`]); what is sent never starts with a reply whose question was cut
//!    (a storage cap, such as a history's `max_turns`, can leave one at the start);
//! 2. **max_ctx**, only when the chain has no `sliding_window`: the agent's window ceiling
//!    still applies, so removing the window from the chain never lifts it;
//! 3. the configured processors, in order ([`Chain`]).
//!
//! Every message carries its position in the stored conversation through the steps
//! ([`Outgoing`]), so the report's first sent index is read off what is sent.

use crate::chain::{
    effective_ctx, leading_systems, Chain, ChainContext, ChainError, HistoryProcessor, ModelLimits,
    ModelSwitch, Outgoing, SlidingWindow, StepReport, TokenCounter, POLICY_STEP,
};
use crate::context::{ContextReport, Part};
use crate::event::{HistoryReport, MarksReport, SettingsReport};
use crate::exchange;
use crate::history::{trim_for_model, Conversation, HistoryLength, HistoryPolicy};
use crate::message::{Message, Role};
use crate::settings::HistorySettings;

/// The name of the ceiling step (see the module documentation).
pub const CEILING_STEP: &str = "max_ctx";
/// The name of the step of the user's pins and exclusions, reported when the conversation
/// has any (see the module documentation).
pub const MARKS_STEP: &str = "marks";
/// The name of the step that drops the parts of tool exchanges the steps before it split,
/// reported when it removed anything (see [`exchange::whole`]).
pub const EXCHANGES_STEP: &str = "exchanges";

/// Everything one model call depends on.
pub struct PlanInput<'a> {
    /// System messages added at call time, in order: the history's, then the agent's prompt.
    pub system: &'a [String],
    /// The end of the stored conversation (all of it, or a tail long enough for the policy),
    /// the new user message included. Only what is sent is copied from it.
    pub tail: &'a Conversation,
    /// How many messages the stored conversation holds in all; `tail` is its last part.
    pub stored_total: usize,
    pub settings: &'a HistorySettings,
    /// The processors after the policy step.
    pub chain: &'a Chain,
    pub model: &'a ModelLimits,
    /// The agent's window ceiling: `agent_max_ctx`, lowered by the agent's own `maxContext`.
    pub max_ctx: usize,
    pub tokens: &'a dyn TokenCounter,
    /// The turn's context, as [`ContextReport::new`] reported it (`None`: no context).
    pub context: Option<ContextReport>,
    /// The conversation's rolling summary as the `summary` processor sends it.
    pub summary: Option<&'a str>,
    /// The pinned messages stored before `tail`, with their positions in the stored
    /// conversation, oldest first (pins inside `tail` are found there).
    pub older_pins: &'a [(usize, Message)],
    /// Whether the store's cap (a history's `max_turns`) may have dropped messages before
    /// the first one stored: then a reply opening the stored conversation lost its question.
    /// Otherwise such a reply (an agent's greeting, an imported opening) is sent.
    pub capped: bool,
}

/// The messages of one model call and the facts the debug panel shows about them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub messages: Vec<Message>,
    pub report: HistoryReport,
    /// Set when the chain refused the request (the message alone is over the budget); then
    /// nothing is sent.
    pub error: Option<ChainError>,
    /// What was sent, as the next turn compares it ([`crate::cache::prefix_change`]).
    pub prefix: crate::cache::Prefix,
    /// Where the next turn's window starts if it cuts ([`SlidingWindow::next_start`]).
    pub next_window_start: Option<usize>,
}

/// The agent's window ceiling: the server-wide `agent_max_ctx`, which an agent's own
/// `maxContext` may lower but never raise.
pub fn agent_ceiling(agent_max_ctx: usize, agent_max_context: Option<usize>) -> usize {
    agent_max_context.map_or(agent_max_ctx, |own| own.min(agent_max_ctx))
}

/// Plans one model call.
pub fn plan(input: PlanInput<'_>) -> Plan {
    let (model, stored_total, tokens) = (input.model, input.stored_total, input.tokens);
    let offset = stored_total.saturating_sub(input.tail.len());
    let window = effective_ctx(input.max_ctx, model);
    let ctx = ChainContext {
        model,
        effective_ctx: window,
        tokens,
        summary: input.summary,
    };
    let selected = policy_step(
        input.system,
        input.tail,
        offset,
        input.settings,
        input.older_pins,
        input.capped,
    );
    let mut outgoing = selected.messages;
    let images_withheld = model.without_images && withhold_images(&mut outgoing);
    let mut steps = selection_steps(&selected.counts, stored_total, outgoing.len());
    let pinned_before = outgoing.iter().filter(|m| m.pinned()).count();
    if !input.chain.names().contains(&SlidingWindow.name()) {
        outgoing = ceiling(outgoing, input.max_ctx, &mut steps);
    }
    let next_window_start = SlidingWindow::next_start_for_summary(input.chain, &outgoing, &ctx);
    let (sent, error) = run_chain(input.chain, outgoing, &ctx, &mut steps);
    let first_sent_index = first_sent_index(&sent, stored_total);
    let (marked, excluded) = (selected.counts.marked, selected.counts.excluded);
    let marks = marked.then(|| marks_report(&sent, pinned_before, excluded));
    let exchanges = exchange_reports(input.tail, offset, &sent);
    let prefix = crate::cache::Prefix::of(sent.iter().map(|m| (m.stored_at, &m.message)));
    let messages: Vec<Message> = sent.into_iter().map(|m| m.message).collect();
    let estimated_tokens = messages.iter().map(|m| tokens.count(m)).sum();
    let report = HistoryReport {
        settings: SettingsReport::from_settings(input.settings),
        messages_stored: stored_total,
        messages_sent: messages.len(),
        messages_trimmed: first_sent_index,
        first_sent_index,
        estimated_tokens,
        chain: steps,
        effective_ctx: window,
        token_budget: model.token_budget,
        context: context_report(input.context, images_withheld),
        summary: None,
        marks,
        exchanges,
    };
    Plan {
        messages,
        report,
        error,
        prefix,
        next_window_start,
    }
}

/// The chain on what the selection left, each exchange kept whole before and after it.
fn run_chain(
    chain: &Chain,
    outgoing: Vec<Outgoing>,
    ctx: &ChainContext<'_>,
    steps: &mut Vec<StepReport>,
) -> (Vec<Outgoing>, Option<ChainError>) {
    let outgoing = whole_exchanges(outgoing, steps);
    match chain.run(outgoing, ctx) {
        Ok(outcome) => {
            steps.extend(outcome.steps);
            (whole_exchanges(outcome.messages, steps), None)
        }
        Err(e) => (Vec::new(), Some(e)),
    }
}

/// How each tool exchange of the tail went into the request ([`exchange::reports`]).
fn exchange_reports(
    tail: &Conversation,
    offset: usize,
    sent: &[Outgoing],
) -> Vec<exchange::ExchangeReport> {
    let stored = tail.messages();
    if !stored.iter().any(exchange::opens) {
        return Vec::new();
    }
    let sent: Vec<(usize, &Message)> = sent
        .iter()
        .filter_map(|m| Some((m.stored_at?, &m.message)))
        .collect();
    exchange::reports(stored, offset, &sent)
}

/// Keeps tool exchanges whole ([`exchange::whole`]); reported as the `exchanges` step when
/// it removed anything.
fn whole_exchanges(outgoing: Vec<Outgoing>, steps: &mut Vec<StepReport>) -> Vec<Outgoing> {
    let before = outgoing.len();
    let kept = exchange::whole(outgoing, |m| &m.message);
    if kept.len() < before {
        steps.push(StepReport {
            added: 0,
            name: EXCHANGES_STEP.to_owned(),
            removed: before - kept.len(),
            kept: kept.len(),
        });
    }
    kept
}

/// The agent's ceiling when the chain has no sliding window: the last `max_ctx` messages.
fn ceiling(outgoing: Vec<Outgoing>, max_ctx: usize, steps: &mut Vec<StepReport>) -> Vec<Outgoing> {
    let before = outgoing.len();
    let kept = SlidingWindow::keep_last(outgoing, max_ctx.max(1));
    steps.push(StepReport {
        added: 0,
        name: CEILING_STEP.to_owned(),
        removed: before - kept.len(),
        kept: kept.len(),
    });
    kept
}

/// The policy step's report, and the marks step's when the conversation carries marks
/// (`kept`: what the marks left).
fn selection_steps(counts: &Counts, stored_total: usize, kept: usize) -> Vec<StepReport> {
    let mut steps = vec![StepReport {
        added: 0,
        name: POLICY_STEP.to_owned(),
        removed: stored_total - counts.stored_by_policy,
        kept: counts.by_policy,
    }];
    if counts.marked {
        steps.push(StepReport {
            added: counts.joined,
            name: MARKS_STEP.to_owned(),
            removed: counts.removed_by_marks,
            kept,
        });
    }
    steps
}

/// What the marks did to the call: the pinned messages sent and dropped (of `pinned_before`
/// the chain received), and the excluded ones left out.
fn marks_report(sent: &[Outgoing], pinned_before: usize, excluded: usize) -> MarksReport {
    let pinned_sent = sent.iter().filter(|m| m.pinned()).count();
    MarksReport {
        pinned_sent,
        pinned_dropped: pinned_before.saturating_sub(pinned_sent),
        excluded,
    }
}

/// Where the sent part of the conversation starts. Every step removes from the front (or
/// merges into the earliest message), so it is the earliest stored position sent; pinned
/// messages from before it are sent on their own and do not move it.
fn first_sent_index(sent: &[Outgoing], stored_total: usize) -> usize {
    sent.iter()
        .filter(|m| m.role() != Role::System && !m.pinned())
        .filter_map(|m| m.stored_at)
        .min()
        .unwrap_or(stored_total)
}

/// The turn's context report, saying too when images were withheld from the model.
fn context_report(
    context: Option<ContextReport>,
    images_withheld: bool,
) -> Option<Box<ContextReport>> {
    match (context, images_withheld) {
        (Some(report), _) if !report.is_empty() || images_withheld => {
            Some(Box::new(ContextReport {
                images_withheld,
                ..report
            }))
        }
        (_, true) => Some(Box::new(ContextReport {
            images_withheld,
            ..Default::default()
        })),
        _ => None,
    }
}

/// What the policy step selected.
struct Selected {
    messages: Vec<Outgoing>,
    counts: Counts,
}

/// What the policy and the marks did, for the report.
#[derive(Default)]
struct Counts {
    /// What the policy alone kept (call-time system messages included).
    by_policy: usize,
    /// Stored messages the policy alone kept.
    stored_by_policy: usize,
    /// Excluded messages the policy kept and the marks left out.
    excluded: usize,
    /// What the marks step removed: the excluded messages and the replies they left
    /// without their question.
    removed_by_marks: usize,
    /// Pinned messages the policy had left out, added by the marks step.
    joined: usize,
    /// Whether the conversation's messages at hand carry marks (then the marks step is
    /// reported).
    marked: bool,
}

/// The policy step: the call-time system messages and the stored tail (whose first message
/// is at `offset` in the stored conversation), selected by the policy, without the replies
/// that would open the request before its first user message. The call-time system
/// messages come first, as if they opened the conversation; only the selected messages are
/// copied, so the cost follows what is sent, not what is stored.
///
/// Then the user's marks (see [`with_marks`]).
fn policy_step(
    system: &[String],
    tail: &Conversation,
    offset: usize,
    settings: &HistorySettings,
    older_pins: &[(usize, Message)],
    capped: bool,
) -> Selected {
    // Where an unbroken run of stored messages would start for a reply opening it to be
    // sent: nothing before it was removed (by the cap, the policy or a mark).
    let opening = (!capped).then_some(0);
    let policy = settings.policy.value;
    let trimmed = trim_for_model(
        tail,
        policy,
        settings.length.value,
        settings.preserve_system,
    );
    let keep_prompts = settings.preserve_system || policy == HistoryPolicy::All;
    let prompts = system
        .iter()
        .filter(|_| keep_prompts)
        .map(|text| Outgoing::prompt(Message::system(text.clone(), 0)));
    let selected = trimmed
        .indices
        .iter()
        .zip(&trimmed.messages)
        .map(|(&i, &m)| Outgoing::stored(m.clone(), offset + i));
    let by_policy = without_orphaned_replies(prompts.chain(selected), 0, opening);
    let counts = Counts {
        by_policy: by_policy.len(),
        stored_by_policy: by_policy.iter().filter(|m| m.stored_at.is_some()).count(),
        marked: older_pins
            .iter()
            .any(|(at, m)| *at < offset && m.is_pinned())
            || tail.messages().iter().any(|m| m.send.is_some()),
        ..Counts::default()
    };
    if !counts.marked {
        return Selected {
            messages: by_policy,
            counts,
        };
    }
    with_marks(
        by_policy,
        counts,
        tail.messages(),
        offset,
        older_pins,
        opening,
    )
}

/// The user's marks on what the policy selected (`by_policy`): pinned messages the policy
/// left out (from `older_pins` and the tail, `messages` from `offset`) join right after the
/// system messages, in their stored order; excluded ones leave.
fn with_marks(
    by_policy: Vec<Outgoing>,
    mut counts: Counts,
    messages: &[Message],
    offset: usize,
    older_pins: &[(usize, Message)],
    opening: Option<usize>,
) -> Selected {
    let run_start = by_policy
        .iter()
        .filter(|m| m.role() != Role::System)
        .filter_map(|m| m.stored_at)
        .min()
        .unwrap_or(offset + messages.len());
    let older = older_pins
        .iter()
        .filter(|(at, m)| *at < offset && m.is_pinned() && m.role != Role::System)
        .map(|(at, m)| Outgoing::stored(m.clone(), *at));
    let left_out_pins = (0..messages.len())
        .filter(|&i| offset + i < run_start)
        .filter(|&i| messages[i].is_pinned() && messages[i].role != Role::System)
        .map(|i| Outgoing::stored(messages[i].clone(), offset + i));
    let joined: Vec<Outgoing> = older.chain(left_out_pins).collect();
    let mut rest = by_policy;
    let body = rest.split_off(leading_systems(&rest));
    let mut excluded = 0;
    let marked_out = rest
        .into_iter()
        .chain(joined.iter().cloned())
        .chain(body)
        .filter(|m| {
            let out = m.stored_at.is_some() && m.message.is_excluded();
            excluded += usize::from(out);
            !out
        });
    let messages = without_orphaned_replies(marked_out, run_start, opening);
    counts.removed_by_marks = (counts.by_policy + joined.len()).saturating_sub(messages.len());
    counts.joined = joined.len();
    counts.excluded = excluded;
    Selected { messages, counts }
}

/// What a model without image support receives in place of an image.
pub const IMAGE_PLACEHOLDER: &str = "[an image was attached here; this model cannot see images]";

/// Replaces the images of `messages` with [`IMAGE_PLACEHOLDER`]; `true` if there were any.
fn withhold_images(messages: &mut [Outgoing]) -> bool {
    let mut any = false;
    for block in messages
        .iter_mut()
        .flat_map(|m| m.message.context.iter_mut())
    {
        if matches!(block.part, Part::Image { .. }) {
            block.part = Part::Text {
                text: IMAGE_PLACEHOLDER.to_owned(),
            };
            any = true;
        }
    }
    any
}

/// Leaves out the replies (assistant and tool messages) that come before the first user
/// message when their question was removed: it is not in the request. A reply is orphaned
/// only when a message before it was removed: with `opening` (`Some(0)` when no cap
/// removed messages before the stored conversation), replies in an unbroken run of stored
/// messages from that position (an agent's greeting opening the conversation) are sent.
/// System messages stay where they are. Messages stored before `run_start` were joined for
/// their pin alone: a pinned question among them does not open the sent part (a reply
/// whose own question was left out stays out even after one), while one the policy
/// selected does.
fn without_orphaned_replies(
    messages: impl Iterator<Item = Outgoing>,
    run_start: usize,
    opening: Option<usize>,
) -> Vec<Outgoing> {
    let messages: Vec<Outgoing> = messages.collect();
    let present: std::collections::BTreeSet<usize> =
        messages.iter().filter_map(|m| m.stored_at).collect();
    // Every stored message from `opening` up to `at` is in the request.
    let unbroken_to =
        |at: usize| opening.is_some_and(|from| (from..at).all(|q| present.contains(&q)));
    let mut seen_user = false;
    messages
        .into_iter()
        .filter(|m| {
            let joined = m.pinned() && m.stored_at.is_some_and(|at| at < run_start);
            seen_user |= m.role() == Role::User && !joined;
            let opens = !seen_user && m.stored_at.is_some_and(unbroken_to);
            seen_user || opens || m.role() == Role::System || m.pinned()
        })
        .collect()
}

/// What `parlor history trim` prints: the messages `policy` sends from `messages` (any roles,
/// system messages anywhere), with no system prompt of Parlor's and no processors.
pub fn trim(
    messages: Vec<Message>,
    policy: HistoryPolicy,
    length: HistoryLength,
    preserve_system: bool,
) -> Vec<Message> {
    let settings = HistorySettings::fixed(policy, length, preserve_system);
    policy_step(&[], &Conversation::from(messages), 0, &settings, &[], false)
        .messages
        .into_iter()
        .map(|m| m.message)
        .collect()
}

/// What a switch of model does to the window at once: each processor's model-switch step,
/// in chain order, on what the policy keeps of the stored conversation. Returns (messages
/// that fall out, messages kept).
pub fn model_switch(
    stored: Vec<Message>,
    settings: &HistorySettings,
    chain: &Chain,
    switch: &ModelSwitch<'_>,
    max_ctx: usize,
    tokens: &dyn TokenCounter,
) -> (usize, usize) {
    let settings = HistorySettings {
        preserve_system: false,
        ..settings.clone()
    };
    let kept = policy_step(&[], &Conversation::from(stored), 0, &settings, &[], false).messages;
    let before = kept.len();
    let ctx = ChainContext {
        model: switch.to,
        effective_ctx: effective_ctx(max_ctx, switch.to),
        tokens,
        summary: None,
    };
    let after = match chain.run_model_switch(kept, switch, &ctx) {
        Ok(outcome) => outcome.messages.len(),
        Err(_) => 0,
    };
    (before.saturating_sub(after), after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{builtins, EstimatedTokens};
    use crate::message::from_roles;
    use proptest::prelude::*;

    /// One token per message, to make budgets easy to reason about.
    struct OnePerMessage;
    impl TokenCounter for OnePerMessage {
        fn count(&self, _: &Message) -> u64 {
            1
        }
        fn is_exact(&self) -> bool {
            true
        }
    }

    fn settings(policy: HistoryPolicy, length: i64) -> HistorySettings {
        HistorySettings::fixed(policy, HistoryLength::new(length), true)
    }

    fn limits(max_context: Option<usize>, token_budget: Option<u64>) -> ModelLimits {
        ModelLimits {
            name: "m".into(),
            max_context,
            token_budget,
            ..Default::default()
        }
    }

    #[derive(Debug)]
    struct Case {
        system: Vec<String>,
        tail: Conversation,
        total: usize,
        settings: HistorySettings,
        chain: Chain,
        model: ModelLimits,
        max_ctx: usize,
        capped: bool,
    }

    impl Case {
        fn new(roles: &str) -> Case {
            let tail = from_roles(roles);
            Case {
                system: vec!["prompt".into()],
                total: tail.len(),
                tail: tail.into(),
                settings: settings(HistoryPolicy::All, 20),
                chain: Chain::default(),
                model: limits(None, None),
                max_ctx: 200,
                capped: false,
            }
        }

        fn run(&self) -> Plan {
            plan(self.input())
        }

        fn input(&self) -> PlanInput<'_> {
            PlanInput {
                system: &self.system,
                tail: &self.tail,
                stored_total: self.total,
                settings: &self.settings,
                chain: &self.chain,
                model: &self.model,
                max_ctx: self.max_ctx,
                tokens: &OnePerMessage,
                context: None,
                summary: None,
                older_pins: &[],
                capped: self.capped,
            }
        }
    }

    #[test]
    fn a_model_without_image_support_gets_a_placeholder_and_the_report_says_so() {
        use crate::context::{build, Block, ContextEntry, Save};
        let entry = ContextEntry {
            source: "screen".into(),
            blocks: vec![Block::Image {
                url: "data:image/png;base64,iVBORw0KGgo=".into(),
            }],
            display: true,
            save: Save::No,
        };
        let mut case = Case::new("");
        case.tail = vec![build("look", &[entry], 0).display].into();
        case.total = 1;
        let parts = |plan: &Plan| -> Vec<String> {
            plan.messages[1]
                .context
                .iter()
                .map(|b| b.part.kind().to_owned())
                .collect()
        };
        let with_images = case.run();
        assert_eq!(parts(&with_images), ["header", "image"]);
        assert_eq!(with_images.report.context, None);
        case.model.without_images = true;
        let without = case.run();
        assert_eq!(parts(&without), ["header", "text"]);
        assert_eq!(
            without.messages[1].context[1].part.sent_text().unwrap(),
            IMAGE_PLACEHOLDER
        );
        assert!(without.report.context.unwrap().images_withheld);
    }

    fn texts(messages: &[Message]) -> Vec<&str> {
        messages.iter().map(|m| m.text.as_str()).collect()
    }

    fn step_names(plan: &Plan) -> Vec<&str> {
        plan.report.chain.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn the_prompt_comes_first_then_what_the_policy_and_chain_keep() {
        let mut case = Case::new("uauaua");
        case.settings = settings(HistoryPolicy::LastN, 2);
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "2", "3", "4", "5"]);
        assert_eq!(plan.report.first_sent_index, 2);
        assert_eq!(plan.report.messages_trimmed, 2);
        assert_eq!(plan.report.messages_stored, 6);
        assert_eq!(plan.report.messages_sent, 5);
        assert_eq!(plan.report.estimated_tokens, 5);
        assert_eq!(step_names(&plan), ["policy", "sliding_window"]);
        assert_eq!(plan.report.chain[0].removed, 2);
        assert_eq!(plan.report.chain[0].kept, 5);
        assert!(plan.error.is_none());
    }

    /// A case whose messages at `pinned` are pinned and at `excluded` excluded.
    fn marked(roles: &str, pinned: &[usize], excluded: &[usize]) -> Case {
        let mut messages = from_roles(roles);
        for &i in pinned {
            messages[i].send = Some(crate::message::SendMark::Always);
        }
        for &i in excluded {
            messages[i].send = Some(crate::message::SendMark::Never);
        }
        let mut case = Case::new(roles);
        case.tail = messages.into();
        case
    }

    #[test]
    fn pinned_messages_outlive_the_policy_and_the_window_and_excluded_ones_are_never_sent() {
        // Ten messages; lastN 2 keeps 6..9. Message 1 (a reply) is pinned, 7 excluded.
        let mut case = marked("uauauauaua", &[1], &[7]);
        case.settings = settings(HistoryPolicy::LastN, 2);
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "1", "6", "8", "9"]);
        assert_eq!(step_names(&plan), ["policy", "marks", "sliding_window"]);
        let marks = &plan.report.chain[1];
        assert_eq!((marks.added, marks.removed, marks.kept), (1, 1, 5));
        assert_eq!(
            plan.report.marks,
            Some(MarksReport {
                pinned_sent: 1,
                pinned_dropped: 0,
                excluded: 1
            })
        );
        // The pinned message is sent on its own: the sent part still starts at 6.
        assert_eq!(plan.report.first_sent_index, 6);

        // The window keeps it too, and it does not take a place in the window.
        case.settings = settings(HistoryPolicy::All, 20);
        case.max_ctx = 4;
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "1", "6", "8", "9"]);

        // An exclusion the policy would not have sent anyway is not counted.
        let mut case = marked("uauaua", &[], &[0]);
        case.settings = settings(HistoryPolicy::LastN, 1);
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "4", "5"]);
        assert_eq!(plan.report.marks.unwrap().excluded, 0);
    }

    #[test]
    fn excluding_a_question_leaves_its_reply_out_when_the_reply_would_lead() {
        let mut case = marked("uauaua", &[], &[2]);
        case.settings = settings(HistoryPolicy::LastN, 2);
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "4", "5"]);
        let marks = &plan.report.chain[1];
        assert_eq!(
            (marks.added, marks.removed),
            (0, 2),
            "the question and its reply"
        );
        assert_eq!(plan.report.marks.unwrap().excluded, 1);
    }

    #[test]
    fn a_pinned_question_the_policy_selected_keeps_its_reply() {
        // `all` sends everything: pinning the first question must not drop its reply.
        let mut case = marked("uauaua", &[0], &[]);
        case.settings = settings(HistoryPolicy::All, 2);
        let plan = case.run();
        assert_eq!(
            texts(&plan.messages),
            ["prompt", "0", "1", "2", "3", "4", "5"]
        );
        // lastN 1 keeps 4..5; the pinned question 0 joins, its reply 1 stays out.
        case.settings = settings(HistoryPolicy::LastN, 1);
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "0", "4", "5"]);
    }

    #[test]
    fn pins_before_the_loaded_tail_join_in_their_stored_order() {
        // 20 stored messages; the last 4 were loaded; 3 and 11 are pinned further back.
        let mut case = Case::new("uaua");
        case.total = 20;
        case.settings = settings(HistoryPolicy::LastN, 1);
        let mut pins = vec![Message::user("p3", 3), Message::assistant("p11", 11)];
        for pin in &mut pins {
            pin.send = Some(crate::message::SendMark::Always);
        }
        let older = [(3, pins[0].clone()), (11, pins[1].clone())];
        let plan = plan(PlanInput {
            older_pins: &older,
            ..case.input()
        });
        assert_eq!(texts(&plan.messages), ["prompt", "p3", "p11", "2", "3"]);
        assert_eq!(plan.report.first_sent_index, 18);
        assert_eq!(plan.report.marks.unwrap().pinned_sent, 2);
    }

    #[test]
    fn only_the_token_budget_drops_a_pinned_message_and_the_report_says_so() {
        let mut case = marked("uauaua", &[0], &[]);
        case.settings = settings(HistoryPolicy::LastN, 1);
        case.chain = Chain::from_names(&["sliding_window", "token_budget"]).unwrap();
        // OnePerMessage: the prompt and the last turn take 3, the pinned message a fourth.
        case.model = limits(None, Some(3));
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "4", "5"]);
        assert_eq!(
            plan.report.marks,
            Some(MarksReport {
                pinned_sent: 0,
                pinned_dropped: 1,
                excluded: 0
            })
        );
        case.model = limits(None, Some(4));
        assert_eq!(texts(&case.run().messages), ["prompt", "0", "4", "5"]);
    }

    #[test]
    fn a_tail_is_indexed_in_the_whole_conversation() {
        // 10 stored messages, of which the last 4 were read.
        let mut case = Case::new("uaua");
        case.total = 10;
        case.settings = settings(HistoryPolicy::LastN, 1);
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "2", "3"]);
        assert_eq!(plan.report.first_sent_index, 8);
        assert_eq!(plan.report.chain[0].removed, 8);
    }

    #[test]
    fn the_token_budget_counts_the_summary_wherever_it_sits_in_the_chain() {
        let summary = r#"{"facts":["a long summary"]}"#;
        for names in [["summary", "token_budget"], ["token_budget", "summary"]] {
            let mut case = Case::new("uauauauaua");
            case.chain = Chain::from_names(&names).unwrap();
            // The ceiling leaves out the first four (so the summary is sent); OnePerMessage:
            // the prompt, the summary and three turns would take 8, two turns 6.
            case.max_ctx = 6;
            case.model = limits(None, Some(7));
            case.settings = settings(HistoryPolicy::All, 20);
            let plan = plan(PlanInput {
                summary: Some(summary),
                ..case.input()
            });
            assert!(plan.error.is_none(), "{names:?}");
            let texts = texts(&plan.messages);
            assert_eq!(plan.messages.len(), 6, "{names:?}: {texts:?}");
            assert!(
                plan.messages[1].text.contains("a long summary"),
                "{names:?}: {texts:?}"
            );
            assert_eq!(&texts[2..], ["6", "7", "8", "9"], "{names:?}");
        }
    }

    #[test]
    fn a_reply_opening_the_conversation_is_sent_when_nothing_before_it_was_cut() {
        // An agent's greeting: nothing was removed before it, so it is no orphan.
        for (policy, length) in [(HistoryPolicy::LastN, 1), (HistoryPolicy::All, 1)] {
            let mut case = Case::new("aua");
            case.settings = settings(policy, length);
            assert_eq!(
                texts(&case.run().messages),
                ["prompt", "0", "1", "2"],
                "{policy}"
            );
        }
        assert_eq!(
            texts(&trim(
                from_roles("aua"),
                HistoryPolicy::LastN,
                HistoryLength::new(1),
                true
            )),
            ["0", "1", "2"],
            "parlor history trim keeps it too"
        );
        // The policy cut before a reply: that one is orphaned.
        let mut case = Case::new("auaau");
        case.settings = settings(HistoryPolicy::LastN, 1);
        assert_eq!(texts(&case.run().messages), ["prompt", "4"]);
        // An excluded question orphans its reply even at the start.
        let mut case = marked("uaua", &[], &[0]);
        case.settings = settings(HistoryPolicy::All, 5);
        assert_eq!(texts(&case.run().messages), ["prompt", "2", "3"]);
    }

    #[test]
    fn a_request_never_starts_with_an_orphaned_reply() {
        // A history's max_turns cut the stored conversation after a question.
        for policy in [HistoryPolicy::All, HistoryPolicy::LastN] {
            let mut case = Case::new("auau");
            case.capped = true;
            case.settings = settings(policy, 5);
            let plan = case.run();
            assert_eq!(texts(&plan.messages), ["prompt", "1", "2", "3"], "{policy}");
            assert_eq!(plan.report.first_sent_index, 1);
            assert_eq!(
                plan.report.chain[0].removed, 1,
                "the policy step reports it"
            );
        }
        // Role alternation merges a tool reply into the assistant's, never leads with it.
        let mut case = Case::new("tau");
        case.chain = Chain::from_names(&["role_alternation"]).unwrap();
        assert_eq!(texts(&case.run().messages), ["prompt", "2"]);
    }

    #[test]
    fn the_ceiling_holds_without_the_sliding_window() {
        let mut case = Case::new("uauauauaua");
        case.chain = Chain::from_names(&["token_budget"]).unwrap();
        case.max_ctx = 4;
        let plan = case.run();
        assert_eq!(texts(&plan.messages), ["prompt", "6", "7", "8", "9"]);
        assert_eq!(step_names(&plan), ["policy", "max_ctx", "token_budget"]);
        assert_eq!(plan.report.chain[1].removed, 6);
        // With the window in the chain there is no separate ceiling step.
        case.chain = Chain::default();
        let plan = case.run();
        assert_eq!(step_names(&plan), ["policy", "sliding_window"]);
        assert_eq!(texts(&plan.messages), ["prompt", "6", "7", "8", "9"]);
    }

    #[test]
    fn an_agent_may_lower_the_ceiling_but_never_raise_it() {
        assert_eq!(agent_ceiling(200, Some(500)), 200);
        assert_eq!(agent_ceiling(200, Some(10)), 10);
        assert_eq!(agent_ceiling(30, None), 30);
    }

    #[test]
    fn over_budget_sends_nothing_and_says_why() {
        let mut case = Case::new("ua");
        case.tail.push(Message::user("x".repeat(400), 9));
        case.total = 3;
        case.chain = Chain::from_names(&["token_budget"]).unwrap();
        case.model = limits(None, Some(1));
        let plan = case.run();
        assert!(plan.messages.is_empty());
        assert!(matches!(plan.error, Some(ChainError::OverBudget { .. })));
        assert_eq!(plan.report.messages_sent, 0);
        assert_eq!(plan.report.first_sent_index, 3);
    }

    #[test]
    fn trim_moves_system_messages_first_or_drops_them() {
        let input = from_roles("uasua");
        let out = trim(
            input.clone(),
            HistoryPolicy::LastN,
            HistoryLength::new(1),
            true,
        );
        assert_eq!(texts(&out), ["2", "3", "4"]);
        let out = trim(
            input.clone(),
            HistoryPolicy::None,
            HistoryLength::new(1),
            false,
        );
        assert_eq!(texts(&out), ["3", "4"]);
        let out = trim(input, HistoryPolicy::All, HistoryLength::new(1), true);
        assert_eq!(texts(&out), ["0", "1", "2", "3", "4"]);
    }

    #[test]
    fn a_model_switch_applies_the_new_window_at_once() {
        let stored = from_roles("uauaua");
        let (from, to) = (limits(Some(200), None), limits(Some(2), None));
        let switch = ModelSwitch {
            from: &from,
            to: &to,
        };
        let all = settings(HistoryPolicy::All, 20);
        let (removed, kept) = model_switch(
            stored,
            &all,
            &Chain::default(),
            &switch,
            200,
            &OnePerMessage,
        );
        assert_eq!((removed, kept), (4, 2));
    }

    fn role() -> impl Strategy<Value = Role> {
        prop_oneof![
            3 => Just(Role::User),
            3 => Just(Role::Assistant),
            1 => Just(Role::Tool),
            1 => Just(Role::System),
        ]
    }

    fn policy() -> impl Strategy<Value = HistoryPolicy> {
        prop_oneof![
            Just(HistoryPolicy::LastN),
            Just(HistoryPolicy::All),
            Just(HistoryPolicy::None)
        ]
    }

    fn chain() -> impl Strategy<Value = Chain> {
        let names: Vec<&str> = builtins().iter().map(|p| p.name()).collect();
        prop::sample::subsequence(names, 0..=3)
            .prop_shuffle()
            .prop_map(|names| Chain::from_names(&names).unwrap())
    }

    prop_compose! {
        fn case()(
            body in prop::collection::vec((role(), 0usize..60), 0..40),
            skipped in 0usize..50,
            policy in policy(),
            length in -2i64..12,
            preserve in any::<bool>(),
            chain in chain(),
            max_context in prop::option::of(1usize..30),
            budget in prop::option::of(10u64..300),
            max_ctx in 1usize..40,
            prompts in 0usize..3,
            capped in any::<bool>(),
        ) -> Case {
            let mut tail: Vec<Message> = body
                .into_iter()
                .enumerate()
                .map(|(i, (role, len))| Message::new(role, format!("{i}:{}", "x".repeat(len)), i as i64))
                .collect();
            tail.push(Message::user("latest", 999));
            Case {
                system: (0..prompts).map(|i| format!("prompt {i}")).collect(),
                total: tail.len() + skipped,
                tail: tail.into(),
                settings: HistorySettings::fixed(policy, HistoryLength::new(length), preserve),
                chain,
                model: limits(max_context, budget),
                max_ctx,
                capped,
            }
        }
    }

    fn run_estimated(case: &Case) -> Plan {
        plan(PlanInput {
            system: &case.system,
            tail: &case.tail,
            stored_total: case.total,
            settings: &case.settings,
            chain: &case.chain,
            model: &case.model,
            max_ctx: case.max_ctx,
            tokens: &EstimatedTokens,
            context: None,
            summary: None,
            older_pins: &[],
            capped: case.capped,
        })
    }

    proptest! {
        #[test]
        fn what_is_sent_is_what_the_chain_returned(case in case()) {
            let plan = run_estimated(&case);
            if plan.error.is_some() {
                prop_assert!(plan.messages.is_empty());
                return Ok(());
            }
            // Re-run the steps by hand: the policy's selection, the ceiling, the chain.
            let offset = case.total - case.tail.len();
            let mut selected = policy_step(&case.system, &case.tail, offset, &case.settings, &[], case.capped).messages;
            let ctx = ChainContext {
                model: &case.model,
                effective_ctx: effective_ctx(case.max_ctx, &case.model),
                tokens: &EstimatedTokens,
                summary: None,
            };
            if !case.chain.names().contains(&"sliding_window") {
                selected = SlidingWindow::keep_last(selected, case.max_ctx);
            }
            let chained = case.chain.run(selected, &ctx).unwrap();
            let expected: Vec<Message> = chained.messages.into_iter().map(|m| m.message).collect();
            prop_assert_eq!(&plan.messages, &expected);
            prop_assert_eq!(plan.report.messages_sent, plan.messages.len());
            let tokens: u64 = plan.messages.iter().map(|m| EstimatedTokens.count(m)).sum();
            prop_assert_eq!(plan.report.estimated_tokens, tokens);
        }

        #[test]
        fn the_report_starts_with_the_policy_and_accounts_for_every_message(case in case()) {
            let plan = run_estimated(&case);
            let steps = &plan.report.chain;
            prop_assert_eq!(steps[0].name.as_str(), POLICY_STEP);
            prop_assert!(plan.report.first_sent_index <= case.total);
            if plan.error.is_some() {
                return Ok(());
            }
            // Stored messages the policy dropped plus the call-time prompts it kept make up
            // its count; each later step starts from the one before.
            let kept_prompts = if case.settings.preserve_system || case.settings.policy.value == HistoryPolicy::All {
                case.system.len()
            } else {
                0
            };
            prop_assert_eq!(steps[0].kept + steps[0].removed, case.total + kept_prompts);
            for pair in steps.windows(2) {
                prop_assert_eq!(pair[1].kept + pair[1].removed, pair[0].kept + pair[1].added);
            }
            prop_assert_eq!(steps.last().unwrap().kept, plan.messages.len());
        }

        #[test]
        fn the_latest_question_is_sent_and_never_an_orphaned_reply_first(case in case()) {
            let plan = run_estimated(&case);
            if plan.error.is_some() {
                return Ok(());
            }
            let body: Vec<&Message> = plan.messages.iter().filter(|m| m.role != Role::System).collect();
            // Replies before the first question are sent only when they open the stored
            // conversation and nothing before them was removed (by the cap or a step).
            let sent: Vec<&str> = plan.messages.iter().map(|m| m.text.as_str()).collect();
            let stored = case.tail.messages();
            for reply in body.iter().take_while(|m| m.role != Role::User) {
                let at = stored.iter().position(|m| m.text == reply.text).unwrap();
                prop_assert!(!case.capped && case.total == stored.len(), "{}", reply.text);
                prop_assert!(stored[..at].iter().all(|m| sent.contains(&m.text.as_str())), "{}", reply.text);
            }
            prop_assert!(body.iter().any(|m| m.role == Role::User));
            prop_assert!(body.iter().any(|m| m.text.ends_with("latest")));
        }

        #[test]
        fn the_ceiling_is_never_exceeded_beyond_the_latest_turn(case in case()) {
            let plan = run_estimated(&case);
            let body = plan.messages.iter().filter(|m| m.role != Role::System).count();
            let last_user = case.tail.messages().iter().rposition(|m| m.role == Role::User).unwrap();
            let latest_turn = case.tail.len() - last_user;
            prop_assert!(body <= case.max_ctx.max(latest_turn));
        }
    }
}
