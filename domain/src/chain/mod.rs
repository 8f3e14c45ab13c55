//! The history processor chain: after the policy has trimmed a conversation, an ordered list
//! of processors transforms what is sent to the model.
//!
//! The policy step is always first and is not a processor here: it cannot be removed or
//! moved. Processors are pure: they get the messages and the turn's context and return new
//! messages, never changing their input. Built in:
//!
//! - [`SlidingWindow`] keeps the last `effective_ctx` messages, starting on a user message;
//! - [`TokenBudget`] drops the oldest whole turns until the model's token budget is met;
//! - [`RoleAlternation`] makes the messages start with a user message and alternate, merging
//!   neighbours of the same role.

mod processors;

pub use processors::{
    RoleAlternation, SlidingWindow, SummaryStep, TokenBudget, DEFAULT_STEP_DIVISOR,
};

use crate::message::{Message, Role};
use serde::{Deserialize, Serialize};

/// The agent-wide window ceiling when nothing else is configured, and the window of a model
/// without `max_context`.
pub const DEFAULT_MAX_CTX: usize = 200;
/// The name under which the policy step appears in the chain.
pub const POLICY_STEP: &str = "policy";

/// What the chain needs to know about a model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelLimits {
    pub name: String,
    /// The model's preferred window, in messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context: Option<usize>,
    /// Tokens the messages of one request may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// The model takes no images (`vision = false`): each is sent as a short placeholder.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_images: bool,
    /// How far past the window the sliding window cuts when it cuts, in messages, so that
    /// the next turns find the same prefix (see [`processors::step_cut`]); 0: exactly at
    /// the window; `None`: a third of the window ([`processors::DEFAULT_STEP_DIVISOR`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_step: Option<usize>,
    /// The same for the token budget, in tokens (`None`: a third of the budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_step: Option<u64>,
}

/// `min(agent_max_ctx, model.max_context)`, a model without `max_context` counting as
/// [`DEFAULT_MAX_CTX`]; at least 1.
pub fn effective_ctx(agent_max_ctx: usize, model: &ModelLimits) -> usize {
    agent_max_ctx
        .min(model.max_context.unwrap_or(DEFAULT_MAX_CTX))
        .max(1)
}

/// A message on its way to the model, with where it came from, so that what a processor
/// keeps can be traced back to the stored conversation without searching for it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    pub message: Message,
    /// Its position in the stored conversation; `None` for system messages added at call
    /// time (the history's system message, the agent's prompt). A merged message keeps the
    /// position of the first message merged into it.
    pub stored_at: Option<usize>,
}

impl Outgoing {
    pub fn stored(message: Message, index: usize) -> Self {
        Self {
            message,
            stored_at: Some(index),
        }
    }

    pub fn prompt(message: Message) -> Self {
        Self {
            message,
            stored_at: None,
        }
    }

    pub fn role(&self) -> Role {
        self.message.role
    }

    /// A stored message the user pinned: the policy and the window keep it.
    pub fn pinned(&self) -> bool {
        self.stored_at.is_some() && self.message.is_pinned()
    }
}

/// Counts the tokens a message costs in a request (its text and the per-message framing).
pub trait TokenCounter: Send + Sync {
    fn count(&self, message: &Message) -> u64;
    /// `true` when the count comes from the model's own tokenizer.
    fn is_exact(&self) -> bool;
}

/// The documented estimate for models without a known tokenizer: one token per 4 characters
/// of text, plus 4 for the message's framing and [`crate::context::IMAGE_TOKENS`] an image.
#[derive(Clone, Copy, Debug, Default)]
pub struct EstimatedTokens;

impl TokenCounter for EstimatedTokens {
    fn count(&self, message: &Message) -> u64 {
        let chars: usize = message.texts().map(|t| t.chars().count()).sum();
        chars as u64 / 4 + 4 + message.images() as u64 * crate::context::IMAGE_TOKENS
    }
    fn is_exact(&self) -> bool {
        false
    }
}

/// Everything a processor may consult on a turn.
pub struct ChainContext<'a> {
    pub model: &'a ModelLimits,
    pub effective_ctx: usize,
    pub tokens: &'a dyn TokenCounter,
    /// The conversation's rolling summary, as the `summary` processor sends it.
    pub summary: Option<&'a str>,
}

/// A switch of the session's model, for [`HistoryProcessor::on_model_switch`].
pub struct ModelSwitch<'a> {
    pub from: &'a ModelLimits,
    pub to: &'a ModelLimits,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error(
        "your message is too long for {model}: with the system prompt it needs about {tokens} \
         tokens and the model's budget is {budget}; shorten it or switch model"
    )]
    OverBudget {
        model: String,
        tokens: u64,
        budget: u64,
    },
}

pub trait HistoryProcessor: Send + Sync {
    /// The name used in configuration, reports and logs.
    fn name(&self) -> &'static str;
    /// One line for `parlor history list`.
    fn describe(&self) -> &'static str;
    /// The messages to send instead of `messages` (taken by value, so a processor that
    /// only drops messages copies none).
    fn process(
        &self,
        messages: Vec<Outgoing>,
        ctx: &ChainContext<'_>,
    ) -> Result<Vec<Outgoing>, ChainError>;
    /// Runs when the session switches model, with the new model's context, so the new
    /// window applies at once. By default the same as [`Self::process`].
    fn on_model_switch(
        &self,
        messages: Vec<Outgoing>,
        _switch: &ModelSwitch<'_>,
        ctx: &ChainContext<'_>,
    ) -> Result<Vec<Outgoing>, ChainError> {
        self.process(messages, ctx)
    }
}

/// How many system messages lead: they stay first, untouched by the window and the turn
/// logic.
pub(crate) fn leading_systems(messages: &[Outgoing]) -> usize {
    messages
        .iter()
        .take_while(|m| m.role() == Role::System)
        .count()
}

static SLIDING_WINDOW: SlidingWindow = SlidingWindow;
static SUMMARY: SummaryStep = SummaryStep;
static TOKEN_BUDGET: TokenBudget = TokenBudget;
static ROLE_ALTERNATION: RoleAlternation = RoleAlternation;

/// Every built-in processor, in the order `parlor history list` shows them.
pub fn builtins() -> [&'static dyn HistoryProcessor; 4] {
    [&SLIDING_WINDOW, &SUMMARY, &TOKEN_BUDGET, &ROLE_ALTERNATION]
}

pub fn builtin(name: &str) -> Option<&'static dyn HistoryProcessor> {
    builtins().into_iter().find(|p| p.name() == name)
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainConfigError {
    #[error("unknown history processor {0:?} (available: {available})", available = available())]
    Unknown(String),
    #[error("{0:?} is already in the chain")]
    Duplicate(String),
    #[error("the policy step is always first; it cannot be added, removed or moved")]
    PolicyIsFixed,
    #[error("{0:?} is not in the chain")]
    NotInChain(String),
    #[error("position {position} is out of range: the processors take positions 1 to {last} (0 is the policy step)")]
    BadPosition { position: i64, last: usize },
}

fn available() -> String {
    builtins()
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The processors after the policy step, in order.
#[derive(Clone)]
pub struct Chain {
    steps: Vec<&'static dyn HistoryProcessor>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Default for Chain {
    /// The default chain: the sliding window.
    fn default() -> Self {
        Chain {
            steps: vec![&SLIDING_WINDOW],
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One step of a turn's chain, for the debug panel and the `meta` event.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepReport {
    pub name: String,
    /// Messages this step removed (merged ones count: their text is kept in a neighbour).
    pub removed: usize,
    /// Messages this step added: only the marks step adds, the pinned messages the policy
    /// left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub added: usize,
    /// Messages after this step.
    pub kept: usize,
}

/// What a chain run produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainOutcome {
    pub messages: Vec<Outgoing>,
    pub steps: Vec<StepReport>,
}

impl Chain {
    /// The chain named by `names` (the policy step is implicit and may not be listed).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Chain, ChainConfigError> {
        let mut steps: Vec<&'static dyn HistoryProcessor> = Vec::new();
        for name in names {
            let name = name.as_ref();
            if name == POLICY_STEP {
                return Err(ChainConfigError::PolicyIsFixed);
            }
            let processor =
                builtin(name).ok_or_else(|| ChainConfigError::Unknown(name.to_owned()))?;
            if steps.iter().any(|p| p.name() == name) {
                return Err(ChainConfigError::Duplicate(name.to_owned()));
            }
            steps.push(processor);
        }
        Ok(Chain { steps })
    }

    /// The processors' names, without the policy step.
    pub fn names(&self) -> Vec<&'static str> {
        self.steps.iter().map(|p| p.name()).collect()
    }

    pub fn run(
        &self,
        messages: Vec<Outgoing>,
        ctx: &ChainContext<'_>,
    ) -> Result<ChainOutcome, ChainError> {
        self.run_with(messages, |p, m| p.process(m, ctx))
    }

    /// Runs every processor's `on_model_switch` in chain order, each on the previous one's
    /// output, with the new model's context.
    pub fn run_model_switch(
        &self,
        messages: Vec<Outgoing>,
        switch: &ModelSwitch<'_>,
        ctx: &ChainContext<'_>,
    ) -> Result<ChainOutcome, ChainError> {
        self.run_with(messages, |p, m| p.on_model_switch(m, switch, ctx))
    }

    fn run_with(
        &self,
        mut messages: Vec<Outgoing>,
        step: impl Fn(&dyn HistoryProcessor, Vec<Outgoing>) -> Result<Vec<Outgoing>, ChainError>,
    ) -> Result<ChainOutcome, ChainError> {
        let mut steps = Vec::with_capacity(self.steps.len());
        for processor in &self.steps {
            let before = messages.len();
            messages = step(*processor, messages)?;
            steps.push(StepReport {
                added: 0,
                name: processor.name().to_owned(),
                removed: before.saturating_sub(messages.len()),
                kept: messages.len(),
            });
        }
        Ok(ChainOutcome { messages, steps })
    }
}

/// A change to a configured chain (names after the policy step), as the admin CLI makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainEdit {
    Add(String),
    Remove(String),
    /// Move to a position: 1 is right after the policy step.
    Move(String, i64),
}

/// Applies `edit` to `chain`, refusing anything that would not make a valid chain.
pub fn edit_chain(chain: &[String], edit: &ChainEdit) -> Result<Vec<String>, ChainConfigError> {
    let mut names = chain.to_vec();
    match edit {
        ChainEdit::Add(name) | ChainEdit::Remove(name) | ChainEdit::Move(name, _)
            if name == POLICY_STEP =>
        {
            return Err(ChainConfigError::PolicyIsFixed)
        }
        ChainEdit::Add(name) => {
            builtin(name).ok_or_else(|| ChainConfigError::Unknown(name.clone()))?;
            if names.contains(name) {
                return Err(ChainConfigError::Duplicate(name.clone()));
            }
            names.push(name.clone());
        }
        ChainEdit::Remove(name) => {
            let at = names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| ChainConfigError::NotInChain(name.clone()))?;
            names.remove(at);
        }
        ChainEdit::Move(name, position) => {
            let at = names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| ChainConfigError::NotInChain(name.clone()))?;
            let last = names.len();
            if *position < 1 || *position > last as i64 {
                return Err(ChainConfigError::BadPosition {
                    position: *position,
                    last,
                });
            }
            let moved = names.remove(at);
            names.insert(*position as usize - 1, moved);
        }
    }
    Chain::from_names(&names)?;
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::message::from_roles;

    /// Stored messages at their positions; system messages as added at call time.
    pub(crate) fn outgoing(messages: Vec<Message>) -> Vec<Outgoing> {
        messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| match m.role {
                Role::System => Outgoing::prompt(m),
                _ => Outgoing::stored(m, i),
            })
            .collect()
    }

    fn msgs(roles: &str) -> Vec<Outgoing> {
        outgoing(from_roles(roles))
    }

    fn texts(messages: &[Outgoing]) -> Vec<&str> {
        messages.iter().map(|m| m.message.text.as_str()).collect()
    }

    /// A model that cuts exactly at its window and budget (steps: `processors::step_tests`).
    fn model(max_context: Option<usize>, token_budget: Option<u64>) -> ModelLimits {
        ModelLimits {
            name: "m".into(),
            max_context,
            token_budget,
            window_step: Some(0),
            budget_step: Some(0),
            ..Default::default()
        }
    }

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

    fn ctx(model: &ModelLimits, window: usize) -> ChainContext<'_> {
        ChainContext {
            model,
            effective_ctx: window,
            tokens: &OnePerMessage,
            summary: None,
        }
    }

    #[test]
    fn effective_ctx_is_the_smaller_of_agent_and_model() {
        assert_eq!(effective_ctx(200, &model(Some(50), None)), 50);
        assert_eq!(effective_ctx(30, &model(Some(50), None)), 30);
        assert_eq!(
            effective_ctx(500, &model(None, None)),
            200,
            "no max_context counts as 200"
        );
        assert_eq!(effective_ctx(0, &model(None, None)), 1);
    }

    #[test]
    fn sliding_window_keeps_the_last_messages_and_starts_on_a_user_message() {
        let m = model(None, None);
        let input = msgs("suaauau");
        let out = SlidingWindow.process(input.clone(), &ctx(&m, 4)).unwrap();
        // The last 4 are [3, 4, 5, 6]: 3 is an assistant reply, so the cut moves forward to
        // the user message at 4.
        assert_eq!(texts(&out), ["0", "4", "5", "6"]);
        let out = SlidingWindow.process(input.clone(), &ctx(&m, 10)).unwrap();
        assert_eq!(
            out, input,
            "a window larger than the conversation keeps everything"
        );
        // Only replies after the cut: the window starts at the latest user message.
        let out = SlidingWindow.process(msgs("uaaaa"), &ctx(&m, 2)).unwrap();
        assert_eq!(texts(&out), ["0", "1", "2", "3", "4"]);
    }

    #[test]
    fn token_budget_drops_whole_old_turns_and_never_the_latest_user_message() {
        let m = model(None, Some(5));
        let out = TokenBudget.process(msgs("suauaua"), &ctx(&m, 200)).unwrap();
        // 7 tokens > 5: drop the first turn (u a), leaving s + 4 = 5.
        assert_eq!(texts(&out), ["0", "3", "4", "5", "6"]);
        let out = TokenBudget.process(msgs("auau"), &ctx(&m, 200)).unwrap();
        assert_eq!(texts(&out), ["0", "1", "2", "3"], "fits: unchanged");
        let tight = model(None, Some(2));
        let out = TokenBudget
            .process(msgs("auatau"), &ctx(&tight, 200))
            .unwrap();
        assert_eq!(texts(&out), ["5"]);
        let too_small = model(None, Some(1));
        assert_eq!(
            TokenBudget.process(msgs("su"), &ctx(&too_small, 200)),
            Err(ChainError::OverBudget {
                model: "m".into(),
                tokens: 2,
                budget: 1
            })
        );
        let unlimited = model(None, None);
        assert_eq!(
            TokenBudget
                .process(msgs("uauau"), &ctx(&unlimited, 200))
                .unwrap()
                .len(),
            5
        );
    }

    #[test]
    fn role_alternation_merges_neighbours_and_starts_with_the_user() {
        let m = model(None, None);
        let out = RoleAlternation
            .process(msgs("sauuataau"), &ctx(&m, 200))
            .unwrap();
        let shape: Vec<(Role, &str)> = out
            .iter()
            .map(|m| (m.role(), m.message.text.as_str()))
            .collect();
        assert_eq!(
            shape,
            [
                (Role::System, "0"),
                (Role::User, "2\n\n3"),
                (Role::Assistant, "4\n\n5\n\n6\n\n7"),
                (Role::User, "8"),
            ]
        );
    }

    #[test]
    fn role_alternation_moves_later_system_messages_to_the_front_in_order() {
        let m = model(None, None);
        let out = RoleAlternation
            .process(msgs("suasau"), &ctx(&m, 200))
            .unwrap();
        assert_eq!(texts(&out), ["0", "3", "1", "2\n\n4", "5"]);
        let out = RoleAlternation
            .process(msgs("usasau"), &ctx(&m, 200))
            .unwrap();
        assert_eq!(texts(&out), ["1", "3", "0", "2\n\n4", "5"]);
    }

    #[test]
    fn the_chain_reports_each_step_and_model_switches_chain_in_order() {
        let chain = Chain::from_names(&["sliding_window", "token_budget"]).unwrap();
        let m = model(Some(4), Some(3));
        let outcome = chain.run(msgs("suauaua"), &ctx(&m, 4)).unwrap();
        assert_eq!(texts(&outcome.messages), ["0", "5", "6"]);
        assert_eq!(
            outcome.steps,
            [
                StepReport {
                    added: 0,
                    name: "sliding_window".into(),
                    removed: 2,
                    kept: 5
                },
                StepReport {
                    added: 0,
                    name: "token_budget".into(),
                    removed: 2,
                    kept: 3
                },
            ]
        );
        let (from, to) = (model(Some(200), None), model(Some(2), None));
        let switched = chain
            .run_model_switch(
                msgs("uauaua"),
                &ModelSwitch {
                    from: &from,
                    to: &to,
                },
                &ctx(&to, effective_ctx(200, &to)),
            )
            .unwrap();
        assert_eq!(texts(&switched.messages), ["4", "5"]);
    }

    #[test]
    fn chain_configuration_keeps_the_policy_first_and_names_valid() {
        assert_eq!(
            Chain::from_names(&["policy"]).unwrap_err(),
            ChainConfigError::PolicyIsFixed
        );
        assert!(matches!(
            Chain::from_names(&["summarize"]),
            Err(ChainConfigError::Unknown(_))
        ));
        assert!(matches!(
            Chain::from_names(&["token_budget", "token_budget"]),
            Err(ChainConfigError::Duplicate(_))
        ));
        let chain = vec!["sliding_window".to_owned()];
        let added = edit_chain(&chain, &ChainEdit::Add("token_budget".into())).unwrap();
        assert_eq!(added, ["sliding_window", "token_budget"]);
        let moved = edit_chain(&added, &ChainEdit::Move("token_budget".into(), 1)).unwrap();
        assert_eq!(moved, ["token_budget", "sliding_window"]);
        let removed = edit_chain(&moved, &ChainEdit::Remove("sliding_window".into())).unwrap();
        assert_eq!(removed, ["token_budget"]);
        for (edit, error) in [
            (ChainEdit::Move("token_budget".into(), 0), "position 0 is out of range"),
            (ChainEdit::Move("token_budget".into(), -1), "position -1 is out of range"),
            (ChainEdit::Move("token_budget".into(), 3), "positions 1 to 2"),
            (ChainEdit::Move("role_alternation".into(), 1), "not in the chain"),
            (ChainEdit::Remove("policy".into()), "always first"),
            (ChainEdit::Add("sliding_window".into()), "already in the chain"),
            (ChainEdit::Add("nope".into()), "unknown history processor \"nope\" (available: sliding_window, summary, token_budget, role_alternation)"),
        ] {
            let message = edit_chain(&added, &edit).unwrap_err().to_string();
            assert!(message.contains(error), "{edit:?}: {message}");
        }
    }

    fn conversation() -> impl Strategy<Value = Vec<Outgoing>> {
        let role = prop_oneof![
            3 => Just(Role::User),
            3 => Just(Role::Assistant),
            1 => Just(Role::Tool),
        ];
        (0usize..3, prop::collection::vec((role, 0usize..40), 0..40)).prop_map(|(systems, body)| {
            let mut out: Vec<Message> = (0..systems)
                .map(|i| Message::system(format!("sys{i}"), 0))
                .collect();
            out.extend(
                body.into_iter()
                    .enumerate()
                    .map(|(i, (role, len))| Message::new(role, "x".repeat(len), i as i64 + 1)),
            );
            // Before a model call the latest message is the user's.
            out.push(Message::user("latest question", 1000));
            outgoing(out)
        })
    }

    proptest! {
        #[test]
        fn processors_always_keep_the_latest_user_message(
            input in conversation(),
            window in 1usize..30,
            budget in 20u64..400,
        ) {
            let m = model(Some(window), Some(budget));
            let c = ChainContext { model: &m, effective_ctx: window, tokens: &EstimatedTokens, summary: None };
            for processor in builtins() {
                let out = processor.process(input.clone(), &c);
                let out = match out {
                    Ok(out) => out,
                    // Only the budget may refuse, and only when the last turn alone is over.
                    Err(ChainError::OverBudget { tokens, .. }) => {
                        prop_assert_eq!(processor.name(), "token_budget");
                        prop_assert!(tokens > budget);
                        continue;
                    }
                };
                let last = out.last().expect("never empty");
                prop_assert_eq!(last.role(), Role::User);
                prop_assert!(last.message.text.ends_with("latest question"), "{}", processor.name());
                // A processor that cut the conversation starts it on a user message.
                if out.len() < input.len() || processor.name() == "role_alternation" {
                    let first = out.iter().find(|m| m.role() != Role::System);
                    prop_assert_eq!(first.map(|m| m.role()), Some(Role::User),
                        "{} starts on a user message", processor.name());
                }
            }
        }

        #[test]
        fn token_budget_keeps_the_longest_run_of_newest_turns_that_fits(
            input in conversation(), budget in 20u64..400,
        ) {
            // Reference: drop the oldest turn while over budget.
            let m = model(None, Some(budget));
            let c = ChainContext { model: &m, effective_ctx: 200, tokens: &EstimatedTokens, summary: None };
            let systems = input.iter().take_while(|m| m.role() == Role::System).count();
            let total = |from: usize| -> u64 {
                input[..systems].iter().chain(&input[from..]).map(|m| EstimatedTokens.count(&m.message)).sum()
            };
            let last_user = input.iter().rposition(|m| m.role() == Role::User).unwrap();
            let mut start = systems;
            while total(start) > budget && start < last_user {
                start = input[start + 1..].iter().position(|m| m.role() == Role::User)
                    .map_or(last_user, |i| start + 1 + i).min(last_user);
            }
            match TokenBudget.process(input.clone(), &c) {
                Ok(out) => {
                    prop_assert!(total(start) <= budget);
                    prop_assert_eq!(out.len(), systems + input.len() - start);
                }
                Err(_) => prop_assert!(total(start) > budget),
            }
        }

        #[test]
        fn role_alternation_output_alternates(input in conversation()) {
            let m = model(None, None);
            let out = RoleAlternation.process(input.clone(), &ctx(&m, 200)).unwrap();
            let body: Vec<Role> = out.iter().map(|m| m.role()).filter(|r| *r != Role::System).collect();
            prop_assert_eq!(body.first(), Some(&Role::User));
            for pair in body.windows(2) {
                prop_assert_ne!(pair[0], pair[1]);
            }
            // Nothing from the first user message on is lost: the texts are all there.
            let first_user = input.iter().position(|m| m.role() == Role::User).unwrap();
            let kept: usize = input[first_user..].iter().filter(|m| m.role() != Role::System).map(|m| m.message.text.len()).sum();
            let out_len: usize = out.iter().filter(|m| m.role() != Role::System).map(|m| m.message.text.len()).sum();
            prop_assert!(out_len >= kept);
        }

        #[test]
        fn sliding_window_never_exceeds_the_window_unless_keeping_the_latest_turn(
            input in conversation(), window in 1usize..30,
        ) {
            let m = model(None, None);
            let out = SlidingWindow.process(input.clone(), &ctx(&m, window)).unwrap();
            let body = out.iter().filter(|m| m.role() != Role::System).count();
            let latest_turn = input.len() - input.iter().rposition(|m| m.role() == Role::User).unwrap();
            prop_assert!(body <= window.max(latest_turn));
        }
    }
}
