//! The models users can chat with and switch between, and how their tokens are counted.
//!
//! Models come from `[[models]]` in `parlor.toml`; an agent's own model (or
//! `PARLOR_MODEL`) is always available too, with no `max_context` (so the default window)
//! and no token budget.

use crate::config::file::{ConfigFileError, ModelEntry};
use crate::llm::{LlmClient, MirrorModel, ToolChoice};
use parlor_domain::chain::ModelLimits;
use parlor_domain::meter::{known_window, Prices};
use parlor_domain::mirror::MIRROR_MODEL;
use parlor_domain::Agent;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provider {
    /// The OpenAI-compatible upstream (`OPENAI_BASE_URL`).
    OpenAi,
    /// The built-in offline model.
    Mirror,
    /// A `[[providers]]` entry, by id.
    Named(String),
}

impl Provider {
    pub fn as_str(&self) -> &str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Mirror => "mirror",
            Provider::Named(id) => id,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    pub limits: ModelLimits,
    pub provider: Provider,
    /// The id sent upstream.
    pub upstream: String,
    /// The context window in tokens: declared (`context_tokens`), else known for the
    /// model's family, else unknown.
    pub window: Option<u64>,
    /// What its tokens cost, when the operator declared it.
    pub prices: Option<Prices>,
    /// What the first call of a turn tells it about the tools (`tool_choice`).
    pub tool_choice: ToolChoice,
    /// The last call of a loop a limit ended is made without the tools
    /// (`last_call = "without_tools"`), not with them and `tool_choice: "none"`.
    pub last_call_without_tools: bool,
}

impl ModelSpec {
    /// A model nobody declared (an agent's own): default window, no budget.
    pub fn implicit(name: &str, provider: Provider) -> ModelSpec {
        ModelSpec {
            limits: ModelLimits {
                name: name.to_owned(),
                ..Default::default()
            },
            provider,
            upstream: name.to_owned(),
            window: known_window(name),
            prices: None,
            tool_choice: ToolChoice::Auto,
            last_call_without_tools: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.limits.name
    }
}

/// Validates `[[models]]` (`providers`: the ids of the `[[providers]]` entries).
pub fn specs(
    entries: &[ModelEntry],
    path: &Path,
    providers: &[&str],
) -> Result<Vec<ModelSpec>, ConfigFileError> {
    let mut specs: Vec<ModelSpec> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let spec =
            spec(entry, &specs, providers).map_err(|(field, message)| ConfigFileError::Field {
                path: path.to_owned(),
                entry: format!("models[{index}] (name {:?})", entry.name),
                field,
                message,
            })?;
        specs.push(spec);
    }
    Ok(specs)
}

/// Why a model entry is refused: the field, and what it must be.
type Refusal = (&'static str, String);

/// One `[[models]]` entry, checked (`declared`: the entries before it).
fn spec(
    entry: &ModelEntry,
    declared: &[ModelSpec],
    providers: &[&str],
) -> Result<ModelSpec, Refusal> {
    if entry.name.trim().is_empty() || entry.name.chars().any(char::is_whitespace) {
        let rule = "must be a non-empty word (it is typed after !model)";
        return Err(("name", rule.into()));
    }
    if declared.iter().any(|s| s.name() == entry.name) {
        return Err(("name", "duplicate name".into()));
    }
    let provider = match entry.provider.as_deref() {
        None | Some("openai") => Provider::OpenAi,
        Some("mirror") => Provider::Mirror,
        Some(id) if providers.contains(&id) => Provider::Named(id.to_owned()),
        Some(other) => {
            let known = ["openai", "mirror"].iter().chain(providers).copied();
            let known: Vec<&str> = known.collect();
            let rule = format!(
                "unknown provider {other:?} (declared: {})",
                known.join(", ")
            );
            return Err(("provider", rule));
        }
    };
    let positive = |field: &'static str, value: Option<i64>| match value {
        Some(n) if n < 1 => Err((field, format!("must be at least 1 (got {n})"))),
        other => Ok(other.map(|n| n as u64)),
    };
    let at_least_0 = |field: &'static str, value: Option<i64>| match value {
        Some(n) if n < 0 => Err((field, format!("must be 0 (cut exactly) or more (got {n})"))),
        other => Ok(other.map(|n| n as u64)),
    };
    let upstream = entry.model.clone().unwrap_or_else(|| entry.name.clone());
    let window = positive("context_tokens", entry.context_tokens)?;
    Ok(ModelSpec {
        window: window.or_else(|| known_window(&upstream)),
        prices: prices(entry)?,
        limits: ModelLimits {
            name: entry.name.clone(),
            max_context: positive("max_context", entry.max_context)?.map(|n| n as usize),
            token_budget: positive("token_budget", entry.token_budget)?,
            without_images: entry.vision == Some(false),
            window_step: at_least_0("window_step", entry.window_step)?.map(|n| n as usize),
            budget_step: at_least_0("budget_step", entry.budget_step)?,
        },
        provider,
        upstream,
        tool_choice: tool_choice(entry.tool_choice.as_deref())?,
        last_call_without_tools: match entry.last_call.as_deref() {
            None | Some("none") => false,
            Some("without_tools") => true,
            Some(other) => {
                let rule = format!("must be \"none\" or \"without_tools\" (got {other:?})");
                return Err(("last_call", rule));
            }
        },
    })
}

/// `tool_choice`: `auto` (default), `required`, or one tool's model name (`clock__now`).
fn tool_choice(value: Option<&str>) -> Result<ToolChoice, Refusal> {
    let is_name = |name: &str| {
        (1..=parlor_domain::tool::MAX_TOOL_NAME).contains(&name.len())
            && name.contains("__")
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    match value {
        None | Some("auto") => Ok(ToolChoice::Auto),
        Some("required") => Ok(ToolChoice::Required),
        Some(name) if is_name(name) => Ok(ToolChoice::Tool(name.to_owned())),
        Some(other) => Err((
            "tool_choice",
            format!("must be \"auto\", \"required\" or a tool as the model sees it, like clock__get_current_time (got {other:?})"),
        )),
    }
}

/// A model's prices in US dollars per million tokens: `price_in` and `price_out` both or
/// neither, the cache's prices only with them, each 0 or more.
fn prices(entry: &ModelEntry) -> Result<Option<Prices>, Refusal> {
    let cache = [
        ("price_cached_in", entry.price_cached_in),
        ("price_cache_write", entry.price_cache_write),
    ];
    let (input, output) = match (entry.price_in, entry.price_out) {
        (None, None) => {
            return match cache.iter().find(|(_, p)| p.is_some()) {
                Some((field, _)) => Err((*field, "is needed with price_in and price_out".into())),
                None => Ok(None),
            }
        }
        (Some(input), Some(output)) => (input, output),
        (Some(_), None) => {
            return Err((
                "price_out",
                "is needed with price_in (both or neither)".into(),
            ))
        }
        (None, Some(_)) => {
            return Err((
                "price_in",
                "is needed with price_out (both or neither)".into(),
            ))
        }
    };
    let given = [("price_in", Some(input)), ("price_out", Some(output))];
    for (field, price) in given.into_iter().chain(cache) {
        let Some(price) = price else { continue };
        if !price.is_finite() || price < 0.0 {
            let rule = "must be a price in US dollars per million tokens, 0 or more";
            return Err((field, format!("{rule} (got {price})")));
        }
    }
    Ok(Some(Prices {
        input,
        output,
        cached_input: entry.price_cached_in,
        cache_write: entry.price_cache_write,
    }))
}

/// Every model a conversation can use, and the client that reaches each: the one place
/// that answers "which model does this conversation talk to, and through what".
pub struct Models {
    /// Declared models (`[[models]]`).
    declared: Vec<ModelSpec>,
    /// The configured upstream (or the mirror, offline).
    llm: LlmClient,
    /// The clients of the `[[providers]]` entries, by id.
    providers: HashMap<String, LlmClient>,
    /// `PARLOR_MODEL`: overrides every agent's own model.
    model_override: Option<String>,
    mirror_delay: Duration,
    /// `[history]`'s steps, for models that set none.
    steps: (Option<usize>, Option<u64>),
    /// The first `[[providers]]` entry of kind `anthropic`: where an agent whose template
    /// names `llm.anthropic` sends its own model.
    anthropic: Option<String>,
}

impl Models {
    pub fn new(
        declared: Vec<ModelSpec>,
        (llm, providers): (LlmClient, HashMap<String, LlmClient>),
        model_override: Option<String>,
        mirror_delay: Duration,
    ) -> Self {
        Models {
            declared,
            llm,
            providers,
            model_override,
            mirror_delay,
            anthropic: None,
            steps: (None, None),
        }
    }

    /// `[history]`'s `window_step` and `budget_step`, for models that set none.
    pub fn with_default_steps(mut self, steps: (Option<usize>, Option<u64>)) -> Self {
        self.steps = steps;
        self
    }

    /// Agents whose template names `llm.anthropic` send their own model to `provider`.
    pub fn with_anthropic_default(mut self, provider: Option<String>) -> Self {
        self.anthropic = provider;
        self
    }

    /// The agent's own model: `mirror` offline, else `PARLOR_MODEL` or the template's.
    pub fn agent_default(&self, agent: &Agent) -> Option<String> {
        let own = || {
            self.model_override
                .clone()
                .or_else(|| agent.llm.as_ref().and_then(|l| l.model.clone()))
        };
        if self.anthropic_for(agent).is_some() {
            return own();
        }
        if matches!(self.llm, LlmClient::Mirror(_)) {
            // Without OPENAI_BASE_URL only a model on a `[[providers]]` entry is reachable.
            let on_provider = |name: &String| {
                let model = self.declared.iter().find(|m| m.name() == name);
                model.is_some_and(|m| matches!(&m.provider, Provider::Named(id) if self.providers.contains_key(id)))
            };
            return own().filter(on_provider).or(Some(MIRROR_MODEL.to_owned()));
        }
        own()
    }

    /// The provider an `llm.anthropic` agent's own model goes to, when one is declared.
    fn anthropic_for(&self, agent: &Agent) -> Option<&String> {
        let node = agent.llm.as_ref().map(|l| l.provider.as_str());
        self.anthropic
            .as_ref()
            .filter(|_| node == Some("anthropic"))
    }

    /// The model a conversation talks to: the one chosen with `!model`, else the agent's.
    pub fn for_conversation(&self, agent: &Agent, chosen: Option<&str>) -> Option<ModelSpec> {
        let own = self.agent_default(agent);
        let name = chosen.map(str::to_owned).or_else(|| own.clone())?;
        let mut model = self.named(&name);
        let undeclared = !self.declared.iter().any(|m| m.name() == name);
        if let (true, true, Some(id)) = (
            undeclared,
            own.as_deref() == Some(&name),
            self.anthropic_for(agent),
        ) {
            model.provider = Provider::Named(id.clone());
        }
        Some(model)
    }

    /// The declared model of that name, or an undeclared OpenAI-compatible one.
    pub fn named(&self, name: &str) -> ModelSpec {
        let mut spec = self
            .declared
            .iter()
            .find(|m| m.name() == name)
            .cloned()
            .unwrap_or_else(|| ModelSpec::implicit(name, Provider::OpenAi));
        let limits = &mut spec.limits;
        limits.window_step = limits.window_step.or(self.steps.0);
        limits.budget_step = limits.budget_step.or(self.steps.1);
        spec
    }

    /// The models `!model` offers: the agent's own first, then the declared ones.
    pub fn available(&self, agent: &Agent) -> Vec<String> {
        let mut names: Vec<String> = self.declared.iter().map(|m| m.name().to_owned()).collect();
        if let Some(own) = self.agent_default(agent) {
            if !names.contains(&own) {
                names.insert(0, own);
            }
        }
        names
    }

    /// Builds the token counters of every model these agents can use (their own and the
    /// declared ones): an OpenAI tokenizer's tables take about 250 ms to build, which the
    /// first turn would otherwise wait for. Blocking; run once at startup, beside serving.
    pub fn warm_tokenizers(&self, agents: &[Arc<Agent>]) {
        let own = agents.iter().filter_map(|agent| self.agent_default(agent));
        let declared = self.declared.iter().map(|m| m.name().to_owned());
        for name in own.chain(declared) {
            token_counter(&self.named(&name).upstream);
        }
    }

    /// The client that answers `model`: offline (no upstream configured) every model is
    /// answered by the mirror.
    pub fn client_for(&self, model: &ModelSpec) -> LlmClient {
        match (&self.llm, &model.provider) {
            (LlmClient::OpenAi(client), Provider::OpenAi) => LlmClient::OpenAi(client.clone()),
            (_, Provider::Named(id)) if self.providers.contains_key(id) => {
                self.providers[id].clone()
            }
            _ => LlmClient::Mirror(MirrorModel {
                delay: self.mirror_delay,
            }),
        }
    }

    /// How each provider has answered (`openai`: the environment's, when configured), for
    /// an admin's `/readyz`.
    pub fn health(&self) -> std::collections::BTreeMap<String, String> {
        let implicit = self.llm.health().map(|h| ("openai".to_owned(), h));
        let named = self
            .providers
            .iter()
            .filter_map(|(id, client)| client.health().map(|h| (id.clone(), h)));
        implicit.into_iter().chain(named).collect()
    }

    /// The provider shown beside a model's name (a `[[providers]]` entry by its id).
    pub fn provider_label(&self, model: Option<&ModelSpec>) -> String {
        match model {
            Some(ModelSpec {
                provider: Provider::Named(id),
                ..
            }) if self.providers.contains_key(id) => id.clone(),
            Some(model) => self.client_for(model).provider().to_owned(),
            None => self.llm.provider().to_owned(),
        }
    }

    /// [`Models::describe`] of each of [`Models::available`], in order.
    pub fn details(&self, agent: &Agent) -> Vec<String> {
        let names = self.available(agent);
        names
            .iter()
            .map(|name| self.describe(agent, name))
            .collect()
    }

    /// What the model picker says of a model: its provider, context window and prices
    /// (`claude · 200,000 tokens · $3 in / $15 out per M`).
    pub fn describe(&self, agent: &Agent, name: &str) -> String {
        let own = self.agent_default(agent).as_deref() == Some(name);
        let spec = match own {
            true => self.for_conversation(agent, None),
            false => Some(self.named(name)),
        };
        let Some(spec) = spec else {
            return String::new();
        };
        let mut parts = vec![self.provider_label(Some(&spec))];
        if let Some(window) = spec.window {
            parts.push(format!(
                "{} tokens",
                parlor_domain::numbers::group_digits(window)
            ));
        }
        if let Some(p) = spec.prices {
            parts.push(format!("${} in / ${} out per M", p.input, p.output));
        }
        parts.join(" · ")
    }

    /// A conversation's model as the pages and the debug panel show it: its name (empty
    /// when none is configured) and provider.
    pub fn label(&self, agent: &Agent, chosen: Option<&str>) -> (String, String) {
        let model = self.for_conversation(agent, chosen);
        (
            model
                .as_ref()
                .map(|m| m.name().to_owned())
                .unwrap_or_default(),
            self.provider_label(model.as_ref()),
        )
    }
}

mod tokens;
pub use tokens::token_counter;
#[cfg(test)]
use tokens::PER_MESSAGE;

#[cfg(test)]
mod tests;
