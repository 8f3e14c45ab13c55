//! What each model call of a turn is fitted into, and what the calls used.

use std::sync::Arc;

/// What fitting each model call of a turn needs: the model's token budget, the tokens of
/// the tools' definitions and of the planned messages, and the model's counter.
#[derive(Clone)]
pub(crate) struct Budget {
    pub limit: Option<u64>,
    pub tool_tokens: u64,
    pub planned_tokens: u64,
    pub tokens: Arc<dyn parlor_domain::chain::TokenCounter>,
    /// The last call of a loop a limit ended goes without the tools (the model's
    /// `last_call = "without_tools"`), not with them and `tool_choice: "none"`.
    pub last_without_tools: bool,
}

/// Tokens the model calls of a turn used, prompt and completion.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Spent {
    pub prompt: u64,
    pub completion: u64,
    /// Of `prompt`, the tokens read from the provider's cache and written to it.
    pub cached: u64,
    pub cache_written: u64,
}

impl Spent {
    /// The prompt's share of the cache, as prices take it.
    pub fn cache(&self) -> parlor_domain::cache::CacheUse {
        parlor_domain::cache::CacheUse::of(self.prompt, Some(self.cached), Some(self.cache_written))
    }
}
