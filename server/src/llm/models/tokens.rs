//! How a model's tokens are counted: its tiktoken encoding for OpenAI-family models,
//! else the documented estimate.

use parlor_domain::chain::TokenCounter;
use parlor_domain::Message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A tokenizer's counts, cached by message text: a turn re-counts only its new messages.
struct Tiktoken {
    bpe: &'static tiktoken_rs::CoreBPE,
    cache: Mutex<HashMap<u64, u32>>,
}

/// Tokens of framing per message in a Chat Completions request.
pub(super) const PER_MESSAGE: u64 = 4;
const CACHE_ENTRIES: usize = 100_000;

impl TokenCounter for Tiktoken {
    fn count(&self, message: &Message) -> u64 {
        let text: u64 = message.texts().map(|t| self.count_text(&t)).sum();
        text + PER_MESSAGE + message.images() as u64 * parlor_domain::context::IMAGE_TOKENS
    }

    fn is_exact(&self) -> bool {
        true
    }
}

impl Tiktoken {
    fn count_text(&self, text: &str) -> u64 {
        use std::hash::BuildHasher;
        static HASHER: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
        let key = HASHER.get_or_init(Default::default).hash_one(text);
        if let Some(&n) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return u64::from(n);
        }
        let n = self.bpe.encode_ordinary(text).len() as u32;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, n);
        u64::from(n)
    }
}

/// The token counter for an upstream model id: its tiktoken encoding for OpenAI-family
/// models (tables built once per process), else the documented estimate.
pub fn token_counter(upstream_model: &str) -> Arc<dyn TokenCounter> {
    use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
    static COUNTERS: OnceLock<Mutex<HashMap<&'static str, Arc<dyn TokenCounter>>>> =
        OnceLock::new();
    type Table = fn() -> &'static tiktoken_rs::CoreBPE;
    let encoding: Option<(&'static str, Table)> = match get_tokenizer(upstream_model) {
        Some(Tokenizer::O200kBase) => Some(("o200k_base", tiktoken_rs::o200k_base_singleton)),
        Some(Tokenizer::Cl100kBase) => Some(("cl100k_base", tiktoken_rs::cl100k_base_singleton)),
        _ => None,
    };
    let Some((name, table)) = encoding else {
        return Arc::new(parlor_domain::chain::EstimatedTokens);
    };
    let mut counters = COUNTERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    counters
        .entry(name)
        .or_insert_with(|| {
            Arc::new(Tiktoken {
                bpe: table(),
                cache: Mutex::default(),
            })
        })
        .clone()
}
