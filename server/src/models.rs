//! The models users can chat with and switch between, and how their tokens are counted.
//!
//! Models come from `[[models]]` in `parlor.toml`; an agent's own model (or
//! `PARLOR_MODEL`) is always available too, with no `max_context` (so the default window)
//! and no token budget.

use crate::config_file::{ConfigFileError, ModelEntry};
use parlor_domain::chain::{ModelLimits, TokenCounter};
use parlor_domain::Message;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// The OpenAI-compatible upstream (`OPENAI_BASE_URL`).
    OpenAi,
    /// The built-in offline model.
    Mirror,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Mirror => "mirror",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    pub limits: ModelLimits,
    pub provider: Provider,
    /// The id sent upstream.
    pub upstream: String,
}

impl ModelSpec {
    /// A model nobody declared (an agent's own): default window, no budget.
    pub fn implicit(name: &str, provider: Provider) -> ModelSpec {
        ModelSpec {
            limits: ModelLimits {
                name: name.to_owned(),
                max_context: None,
                token_budget: None,
            },
            provider,
            upstream: name.to_owned(),
        }
    }

    pub fn name(&self) -> &str {
        &self.limits.name
    }
}

/// Validates `[[models]]`.
pub fn specs(entries: &[ModelEntry], path: &Path) -> Result<Vec<ModelSpec>, ConfigFileError> {
    let mut specs: Vec<ModelSpec> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let fail = |field: &'static str, message: String| ConfigFileError::Field {
            path: path.to_owned(),
            entry: format!("models[{index}] (name {:?})", entry.name),
            field,
            message,
        };
        if entry.name.trim().is_empty() || entry.name.chars().any(char::is_whitespace) {
            return Err(fail(
                "name",
                "must be a non-empty word (it is typed after !model)".into(),
            ));
        }
        if specs.iter().any(|s| s.name() == entry.name) {
            return Err(fail("name", "duplicate name".into()));
        }
        let provider = match entry.provider.as_deref() {
            None | Some("openai") => Provider::OpenAi,
            Some("mirror") => Provider::Mirror,
            Some(other) => {
                return Err(fail(
                    "provider",
                    format!("unknown provider {other:?} (allowed: openai, mirror)"),
                ))
            }
        };
        let positive = |field: &'static str, value: Option<i64>| match value {
            None => Ok(None),
            Some(n) if n >= 1 => Ok(Some(n as u64)),
            Some(n) => Err(fail(field, format!("must be at least 1 (got {n})"))),
        };
        specs.push(ModelSpec {
            limits: ModelLimits {
                name: entry.name.clone(),
                max_context: positive("max_context", entry.max_context)?.map(|n| n as usize),
                token_budget: positive("token_budget", entry.token_budget)?,
            },
            provider,
            upstream: entry.model.clone().unwrap_or_else(|| entry.name.clone()),
        });
    }
    Ok(specs)
}

/// A tokenizer's counts, cached by message text: a turn re-counts only its new messages.
struct Tiktoken {
    bpe: &'static tiktoken_rs::CoreBPE,
    cache: Mutex<HashMap<u64, u32>>,
}

/// Tokens of framing per message in a Chat Completions request.
const PER_MESSAGE: u64 = 4;
const CACHE_ENTRIES: usize = 100_000;
/// Below this much uncounted text, a prepared batch is left to be counted one by one: a
/// thread costs more than it saves.
const PARALLEL_BYTES: usize = 8 * 1024;

fn text_key(text: &str) -> u64 {
    use std::hash::BuildHasher;
    static HASHER: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    HASHER.get_or_init(Default::default).hash_one(text)
}

/// How many threads a cold batch is counted on (the machine's cores, at most 4).
fn counting_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get().min(4))
            .unwrap_or(1)
    })
}

impl Tiktoken {
    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u32>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn encode(&self, text: &str) -> u32 {
        self.bpe.encode_ordinary(text).len() as u32
    }

    fn remember(&self, counted: impl IntoIterator<Item = (u64, u32)>) {
        let mut cache = self.cache();
        for (key, n) in counted {
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key, n);
        }
    }
}

impl TokenCounter for Tiktoken {
    fn count(&self, message: &Message) -> u64 {
        let key = text_key(&message.text);
        if let Some(&n) = self.cache().get(&key) {
            return u64::from(n) + PER_MESSAGE;
        }
        let n = self.encode(&message.text);
        self.remember([(key, n)]);
        u64::from(n) + PER_MESSAGE
    }

    fn is_exact(&self) -> bool {
        true
    }

    /// Counts a large batch of uncached messages on several threads at once (the first turn
    /// on a long conversation after a restart); small batches are left to `count`.
    fn prepare(&self, messages: &[Message]) {
        let todo: Vec<(u64, &str)> = {
            let cache = self.cache();
            messages
                .iter()
                .map(|m| (text_key(&m.text), m.text.as_str()))
                .filter(|(key, _)| !cache.contains_key(key))
                .collect()
        };
        let threads = counting_threads().min(todo.len());
        let bytes: usize = todo.iter().map(|(_, text)| text.len()).sum();
        if threads < 2 || bytes < PARALLEL_BYTES {
            return;
        }
        let encode_all = |part: &[(u64, &str)]| -> Vec<(u64, u32)> {
            part.iter()
                .map(|&(key, text)| (key, self.encode(text)))
                .collect()
        };
        let mut parts = todo.chunks(todo.len().div_ceil(threads));
        let Some(own) = parts.next() else { return };
        let counted = std::thread::scope(|scope| {
            // A part whose thread cannot be started is left to `count`.
            let helpers: Vec<_> = parts
                .filter_map(|part| {
                    std::thread::Builder::new()
                        .name("parlor-tokens".into())
                        .spawn_scoped(scope, move || encode_all(part))
                        .ok()
                })
                .collect();
            let mut counted = encode_all(own);
            for helper in helpers {
                counted.extend(helper.join().unwrap_or_default());
            }
            counted
        });
        self.remember(counted);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_models_are_counted_with_their_tokenizer_others_estimated() {
        let exact = token_counter("gpt-4o-mini");
        assert!(exact.is_exact());
        // "hello world" is two tokens in o200k_base.
        assert_eq!(
            exact.count(&Message::user("hello world", 0)),
            2 + PER_MESSAGE
        );
        assert_eq!(
            exact.count(&Message::user("hello world", 1)),
            2 + PER_MESSAGE,
            "cached"
        );
        assert!(token_counter("gpt-4").is_exact());
        let estimate = token_counter("llama-3-70b");
        assert!(!estimate.is_exact());
        assert_eq!(estimate.count(&Message::user("x".repeat(40), 0)), 14);
    }

    #[test]
    fn prepared_counts_are_the_counts_and_are_cached() {
        let fresh = || Tiktoken {
            bpe: tiktoken_rs::o200k_base_singleton(),
            cache: Mutex::default(),
        };
        let messages: Vec<Message> = (0..300)
            .map(|i| {
                let text = format!(
                    "message {i}: {}",
                    "déjà vu, naïve café; 42 + x = y? ".repeat(i % 7 + 1)
                );
                Message::user(text, i as i64)
            })
            .collect();
        assert!(messages.iter().map(|m| m.text.len()).sum::<usize>() > PARALLEL_BYTES);
        let one_by_one = fresh();
        let expected: Vec<u64> = messages.iter().map(|m| one_by_one.count(m)).collect();
        let prepared = fresh();
        prepared.prepare(&messages);
        if counting_threads() > 1 {
            assert_eq!(prepared.cache().len(), 300, "counted ahead");
        }
        let got: Vec<u64> = messages.iter().map(|m| prepared.count(m)).collect();
        assert_eq!(got, expected);
        // A small batch is left to `count`.
        let small = fresh();
        small.prepare(&messages[..3]);
        assert!(small.cache().is_empty());
    }

    #[test]
    fn model_entries_are_validated_naming_the_field() {
        let entry = |name: &str, provider: Option<&str>, max_context: Option<i64>| ModelEntry {
            name: name.into(),
            provider: provider.map(str::to_owned),
            model: None,
            max_context,
            token_budget: None,
        };
        let path = Path::new("parlor.toml");
        let ok = specs(&[entry("small", None, Some(10))], path).unwrap();
        assert_eq!(ok[0].upstream, "small");
        assert_eq!(ok[0].limits.max_context, Some(10));
        for (entries, expected) in [
            (
                vec![entry("a", Some("claude"), None)],
                "models[0] (name \"a\"): provider: unknown provider",
            ),
            (
                vec![entry("a", None, Some(0))],
                "max_context: must be at least 1 (got 0)",
            ),
            (
                vec![entry("a", None, None), entry("a", None, None)],
                "models[1] (name \"a\"): name: duplicate",
            ),
            (
                vec![entry("two words", None, None)],
                "name: must be a non-empty word",
            ),
        ] {
            let error = specs(&entries, path).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }
}
