//! The context meter: how much of the model's window the last call took, part by part, what
//! goes first when it is nearly full, and what the call cost.
//!
//! All amounts are integers (tokens, nano-dollars), so the browser formats them without
//! floating-point code.

use crate::chain::TokenCounter;
use crate::message::{title_of, Message, Role};
use crate::summary::SUMMARY_LABEL;
use serde::{Deserialize, Serialize};

/// The tokens a provider reported for one model call.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Prompt tokens the provider served from its cache, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Prompt tokens the provider wrote to its cache, when it says (Anthropic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

/// The most tokens one call's usage may report, each count held to it: a provider's
/// numbers are read from outside, and sums (and costs) of them must stay sane. The largest
/// context windows are about two million tokens.
pub const MAX_REPORTED_TOKENS: u64 = 10_000_000;

impl Usage {
    /// The same usage, each count held to [`MAX_REPORTED_TOKENS`] and the total their sum.
    pub fn bounded(self) -> Usage {
        let cap = |n: u64| n.min(MAX_REPORTED_TOKENS);
        let (prompt, completion) = (cap(self.prompt_tokens), cap(self.completion_tokens));
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            cached_tokens: self.cached_tokens.map(|n| n.min(prompt)),
            cache_write_tokens: self
                .cache_write_tokens
                .map(|n| n.min(prompt - self.cached_tokens.unwrap_or(0).min(prompt))),
        }
    }
}

/// The share of the window from which the meter warns (percent).
pub const NEAR_LIMIT_PERCENT: u64 = 80;

/// What one model call sent, against the model's window.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meter {
    /// The model's window in tokens (`[[models]] context_tokens`, or known for the model's
    /// family); `None` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// Tokens sent: the provider's count once it reported usage, else Parlor's estimate.
    pub sent: u64,
    /// `sent` is the provider's count.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reported: bool,
    /// Parlor's count of each part of the request.
    pub parts: MeterParts,
    /// `sent` is at least [`NEAR_LIMIT_PERCENT`] of the window.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub near_limit: bool,
    /// The message the window or the token budget will leave out first (near the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drops_next: Option<String>,
    /// The reply's tokens, as the provider reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<u64>,
    /// Prompt tokens the provider served from its cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<u64>,
    /// Prompt tokens the provider wrote to its cache (Anthropic reports them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_written: Option<u64>,
    /// What the call and the conversation cost, when the operator declared the model's
    /// prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// The account's use of its daily token quota, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub today: Option<DailyUse>,
}

/// An account's model tokens today (UTC) against its daily quota.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DailyUse {
    pub used: u64,
    pub per_day: u64,
}

/// Tokens per part of a request (Parlor's count).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterParts {
    /// The system prompt and the history's system message.
    pub system: u64,
    /// The rolling summary, when it was sent.
    pub summary: u64,
    /// Earlier messages (their text).
    pub history: u64,
    /// Context blocks (attached files, providers), in any message sent.
    pub context: u64,
    /// The tools' definitions, and tool calls and their results (exchanges, as sent).
    #[serde(default)]
    pub tools: u64,
    /// The new message's text.
    pub message: u64,
}

impl MeterParts {
    pub fn total(&self) -> u64 {
        self.system + self.summary + self.history + self.context + self.tools + self.message
    }
}

/// Cost in billionths of a US dollar.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// This call (known once the provider reported usage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_nano_usd: Option<u64>,
    /// Every call of the conversation with reported usage, this one included once known.
    pub conversation_nano_usd: u64,
}

/// A model's prices, in US dollars per million tokens (`price_in`, `price_out`, and for
/// prompt tokens read from or written to the provider's cache `price_cached_in` and
/// `price_cache_write`, each the input price when not declared).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    pub cached_input: Option<f64>,
    pub cache_write: Option<f64>,
}

impl Prices {
    /// The cost of a call whose prompt was all fresh, in nano-dollars.
    pub fn nano_usd(&self, prompt: u64, completion: u64) -> u64 {
        self.nano_usd_cached(crate::cache::CacheUse::of(prompt, None, None), completion)
    }

    /// The cost of a call, in nano-dollars: a dollar per million tokens is a thousand
    /// nano-dollars per token, i.e. `tokens × price × 1000`; the prompt's cached and
    /// cache-written tokens at their own prices.
    pub fn nano_usd_cached(&self, prompt: crate::cache::CacheUse, completion: u64) -> u64 {
        let read = self.cached_input.unwrap_or(self.input);
        let write = self.cache_write.unwrap_or(self.input);
        let dollars_per_million = prompt.fresh as f64 * self.input
            + prompt.read as f64 * read
            + prompt.written as f64 * write
            + completion as f64 * self.output;
        (dollars_per_million * 1000.0).round().max(0.0) as u64
    }
}

/// The meter of a request about to be sent: `sent` is the request (system messages first),
/// counted with `tokens`. A user message at the end is the new message; anything else there
/// (the plan of a `!` command) is history.
pub fn measure(sent: &[Message], tokens: &dyn TokenCounter, window: Option<u64>) -> Meter {
    let mut parts = MeterParts::default();
    let last = sent.len().saturating_sub(1);
    for (i, message) in sent.iter().enumerate() {
        let count = tokens.count(message);
        match message.role {
            Role::System if message.text.starts_with(SUMMARY_LABEL) => parts.summary += count,
            Role::System => parts.system += count,
            _ if message.tool.is_some() || !message.tool_calls.is_empty() => parts.tools += count,
            _ => {
                let context = if message.context.is_empty() {
                    0
                } else {
                    let bare = Message {
                        context: Vec::new(),
                        ..message.clone()
                    };
                    count.saturating_sub(tokens.count(&bare))
                };
                parts.context += context;
                if i == last && message.role == Role::User {
                    parts.message += count - context;
                } else {
                    parts.history += count - context;
                }
            }
        }
    }
    let sent_tokens = parts.total();
    let near_limit = window.is_some_and(|w| sent_tokens * 100 >= w * NEAR_LIMIT_PERCENT);
    // The oldest message the window or the budget may leave out: not a system message, not
    // pinned, not the new one.
    let drops_next = near_limit
        .then(|| {
            sent[..last]
                .iter()
                .find(|m| m.role != Role::System && !m.is_pinned())
                .map(|m| title_of(&m.text))
        })
        .flatten();
    Meter {
        window,
        sent: sent_tokens,
        parts,
        near_limit,
        drops_next,
        ..Meter::default()
    }
}

impl Meter {
    /// The provider's usage replaces the estimate; with prices, the call's cost is added to
    /// what the conversation had cost before it (`spent_before`).
    pub fn with_usage(mut self, usage: &Usage, prices: Option<Prices>, spent_before: u64) -> Self {
        let (prompt, completion) = (usage.prompt_tokens, usage.completion_tokens);
        let cached = usage.cached_tokens;
        if prompt > 0 {
            self.sent = prompt;
            self.reported = true;
            self.near_limit = self
                .window
                .is_some_and(|w| prompt * 100 >= w * NEAR_LIMIT_PERCENT);
        }
        self.completion = Some(completion);
        self.cached = cached.filter(|&c| c > 0);
        self.cache_written = usage.cache_write_tokens.filter(|&c| c > 0);
        if let Some(prices) = prices {
            let cache = crate::cache::CacheUse::of(prompt, cached, usage.cache_write_tokens);
            let turn = prices.nano_usd_cached(cache, completion);
            self.cost = Some(Cost {
                turn_nano_usd: Some(turn),
                conversation_nano_usd: spent_before.saturating_add(turn),
            });
        }
        self
    }
}

/// The window of well-known OpenAI models, by the id sent upstream (a provider prefix such
/// as `openai/` is ignored); `None` for others.
pub fn known_window(model: &str) -> Option<u64> {
    let id = model.rsplit('/').next().unwrap_or(model);
    // Longer prefixes first: the first family whose prefix fits decides.
    const FAMILIES: [(&str, u64); 12] = [
        ("gpt-4.1", 1_047_576),
        ("gpt-4.5", 128_000),
        ("gpt-5", 400_000),
        ("gpt-4o", 128_000),
        ("chatgpt-4o", 128_000),
        ("gpt-4-turbo", 128_000),
        ("gpt-4-1106", 128_000),
        ("gpt-4-0125", 128_000),
        ("gpt-4", 8_192),
        ("gpt-3.5-turbo", 16_385),
        ("o1-mini", 128_000),
        ("o", 200_000),
    ];
    FAMILIES.iter().find_map(|(prefix, window)| {
        let rest = id.strip_prefix(prefix)?;
        // `o` is only the o-series (o1, o3, o4-mini), not any model starting with an o.
        let fits = match *prefix {
            "o" => rest.starts_with(|c: char| c.is_ascii_digit()),
            _ => rest.is_empty() || rest.starts_with(['-', '.']),
        };
        fits.then_some(*window)
    })
}

/// Nano-dollars as people read them, without floating point (cut, not rounded): cents from
/// a dollar up (`$2.50`), else at least four decimals and three significant digits
/// (`$0.0500`, `$0.00123`, `$0.000195`).
pub fn format_usd(nano_usd: u64) -> String {
    let dollars = nano_usd / 1_000_000_000;
    let fraction = nano_usd % 1_000_000_000;
    let mut digits = format!("{fraction:09}");
    let keep = match digits.find(|c| c != '0') {
        _ if dollars > 0 => 2,
        Some(first) => (first + 3).clamp(4, 9),
        None => 4,
    };
    digits.truncate(keep);
    format!("${dollars}.{digits}")
}

pub use crate::numbers::group_digits;

/// `part` in thousandths of `whole`, at most 1000 (the meter's bar is drawn in thousandths:
/// SVG attributes, since the page's Content-Security-Policy allows no inline styles).
pub fn per_mille(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 0;
    }
    (u128::from(part) * 1000 / u128::from(whole)).min(1000) as u64
}

/// The parts of a request in the order they are sent: the CSS name and the label of each.
pub const PARTS: [(&str, &str); 6] = [
    ("system", "System prompt"),
    ("summary", "Summary"),
    ("history", "History"),
    ("context", "Context blocks"),
    ("tools", "Tools: definitions, calls and results"),
    ("message", "New message"),
];

impl MeterParts {
    /// The parts' counts in the order of [`PARTS`].
    pub fn counts(&self) -> [u64; 6] {
        [
            self.system,
            self.summary,
            self.history,
            self.context,
            self.tools,
            self.message,
        ]
    }
}

impl Meter {
    /// Counts the tools' definitions the request carries (in the tools' part).
    pub fn add_tool_definitions(&mut self, tokens: u64) {
        self.parts.tools += tokens;
        self.sent += tokens;
        if let Some(window) = self.window {
            self.near_limit = self.sent * 100 >= window * NEAR_LIMIT_PERCENT;
        }
    }

    /// The meter's face, as HTML: the bar (an SVG in thousandths of the window: the page's
    /// Content-Security-Policy allows no inline styles) and `1,234 / 128,000 tokens`, or the
    /// tokens and "limit unknown" without a window. The page renders it on the server and
    /// again in the browser after each turn, so the browser's bundle carries no view of it.
    pub fn face_html(&self) -> String {
        let sent = group_digits(self.sent);
        let Some(window) = self.window else {
            return format!("<span class=\"meter-headline\">{sent} tokens · limit unknown</span>");
        };
        // The parts are Parlor's count, scaled to the provider's total when it reported one.
        let scale = self.parts.total().max(1);
        let mut bar = String::from(
            "<svg class=\"meter-bar\" viewBox=\"0 0 1000 10\" preserveAspectRatio=\"none\" aria-hidden=\"true\">",
        );
        let mut x = 0;
        for ((name, _), count) in PARTS.iter().zip(self.parts.counts()) {
            let scaled = u128::from(count) * u128::from(self.sent) / u128::from(scale);
            let width = per_mille(scaled as u64, window).min(1000 - x);
            bar.push_str(&format!(
                "<rect class=\"seg seg-{name}\" x=\"{x}\" width=\"{width}\" height=\"10\"></rect>"
            ));
            x += width;
        }
        bar.push_str("</svg>");
        format!(
            "{bar}<span class=\"meter-headline\">{sent} / {} tokens</span>",
            group_digits(window)
        )
    }

    /// The numbers behind the bar, as HTML: whose count it is, each part, the reply's and
    /// the cached tokens, and the costs.
    pub fn details_html(&self) -> String {
        let source = if self.reported {
            "reported by the provider"
        } else {
            "estimated by Parlor"
        };
        let mut html = format!("<p class=\"meter-source\">{source}</p><dl>");
        for ((name, label), count) in PARTS.iter().zip(self.parts.counts()) {
            html.push_str(&format!(
                "<dt><span class=\"key key-{name}\"></span>{label}</dt><dd data-part=\"{name}\">{}</dd>",
                group_digits(count)
            ));
        }
        let mut row = |label: &str, class: &str, value: String| {
            html.push_str(&format!(
                "<dt>{label}</dt><dd class=\"{class}\">{value}</dd>"
            ));
        };
        if let Some(completion) = self.completion {
            let tokens = format!("{} tokens", group_digits(completion));
            row("Reply", "meter-completion", tokens);
        }
        if let Some(cached) = self.cached {
            let tokens = format!("{} prompt tokens", group_digits(cached));
            row("Cached", "meter-cached", tokens);
        }
        if let Some(cost) = self.cost {
            let turn = cost
                .turn_nano_usd
                .map(format_usd)
                .unwrap_or_else(|| "not reported".into());
            row("Cost, this turn", "meter-cost-turn", turn);
            let spent = format_usd(cost.conversation_nano_usd);
            row("Cost, conversation", "meter-cost-conversation", spent);
        }
        if let Some(today) = self.today {
            let used = format!(
                "{} of {} tokens",
                group_digits(today.used),
                group_digits(today.per_day)
            );
            row("Today (UTC), your quota", "meter-today", used);
        }
        html.push_str("</dl>");
        html
    }

    /// Near the limit: what the window or the token budget leaves out first. Plain text
    /// (it quotes the conversation): show it as text, never as HTML.
    pub fn warning(&self) -> Option<String> {
        self.near_limit.then(|| match &self.drops_next {
            Some(title) => format!("Near the limit: “{title}” is the next to be left out."),
            None => "Near the limit: older messages will be left out.".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::EstimatedTokens;
    use crate::context::{ContextBlock, Part};

    fn sent() -> Vec<Message> {
        let mut question = Message::user("what does the file say?", 3);
        question.context = vec![
            ContextBlock {
                part: Part::Header {
                    source: "notes.md".into(),
                },
                retention: None,
            },
            ContextBlock {
                part: Part::Text {
                    text: "x".repeat(400),
                },
                retention: None,
            },
        ];
        vec![
            Message::system("You are brief.", 0),
            Message::system(format!("{SUMMARY_LABEL} they met"), 0),
            Message::user("hello there", 1),
            Message::assistant("hi", 2),
            question,
        ]
    }

    #[test]
    fn every_part_is_counted_once() {
        let messages = sent();
        let meter = measure(&messages, &EstimatedTokens, Some(128_000));
        let count = |m: &Message| EstimatedTokens.count(m);
        let bare = Message::user("what does the file say?", 3);
        assert_eq!(meter.parts.system, count(&messages[0]));
        assert_eq!(meter.parts.summary, count(&messages[1]));
        assert_eq!(
            meter.parts.history,
            count(&messages[2]) + count(&messages[3])
        );
        assert_eq!(meter.parts.message, count(&bare));
        assert_eq!(meter.parts.context, count(&messages[4]) - count(&bare));
        assert!(meter.parts.context >= 100);
        assert_eq!(meter.sent, messages.iter().map(count).sum::<u64>());
        assert!(!meter.near_limit);
        assert_eq!(meter.drops_next, None);
    }

    #[test]
    fn near_the_limit_it_names_the_oldest_message_that_may_go() {
        let mut messages = sent();
        messages[2].send = Some(crate::message::SendMark::Always);
        let total = measure(&messages, &EstimatedTokens, None).sent;
        let meter = measure(&messages, &EstimatedTokens, Some(total + total / 10));
        assert!(meter.near_limit);
        assert_eq!(
            meter.drops_next.as_deref(),
            Some("hi"),
            "pinned messages stay"
        );
        assert!(!measure(&messages, &EstimatedTokens, Some(total * 2)).near_limit);
        assert!(
            !measure(&messages, &EstimatedTokens, None).near_limit,
            "no window, no warning"
        );
    }

    #[test]
    fn usage_replaces_the_estimate_and_prices_the_call() {
        let meter = measure(&sent(), &EstimatedTokens, Some(1_000));
        let prices = Prices {
            input: 0.15,
            output: 0.60,
            ..Prices::default()
        };
        let usage = Usage {
            prompt_tokens: 900,
            completion_tokens: 100,
            total_tokens: 1_000,
            cached_tokens: Some(512),
            cache_write_tokens: None,
        };
        let used = meter.with_usage(&usage, Some(prices), 5_000);
        assert_eq!(
            (used.sent, used.reported, used.near_limit),
            (900, true, true)
        );
        assert_eq!((used.completion, used.cached), (Some(100), Some(512)));
        // 900 × 0.15 + 100 × 0.60 = 195 micro-dollars.
        assert_eq!(
            used.cost,
            Some(Cost {
                turn_nano_usd: Some(195_000),
                conversation_nano_usd: 200_000
            })
        );
        let small = Usage {
            prompt_tokens: 10,
            completion_tokens: 2,
            total_tokens: 12,
            cached_tokens: Some(0),
            cache_write_tokens: None,
        };
        let unpriced = measure(&sent(), &EstimatedTokens, None).with_usage(&small, None, 0);
        assert_eq!((unpriced.cost, unpriced.cached), (None, None));
    }

    #[test]
    fn cached_and_cache_written_tokens_are_priced_at_their_own_prices() {
        // Anthropic's Sonnet prices: $3 in, $15 out, $0.30 read from the cache, $3.75 written.
        let prices = Prices {
            input: 3.0,
            output: 15.0,
            cached_input: Some(0.30),
            cache_write: Some(3.75),
        };
        let usage = Usage {
            prompt_tokens: 10_000,
            completion_tokens: 100,
            total_tokens: 10_100,
            cached_tokens: Some(8_000),
            cache_write_tokens: Some(1_500),
        };
        let meter = measure(&sent(), &EstimatedTokens, None).with_usage(&usage, Some(prices), 0);
        // 500 × 3 + 8000 × 0.30 + 1500 × 3.75 + 100 × 15 = 11,025 micro-dollars.
        let cost = meter.cost.unwrap().turn_nano_usd;
        assert_eq!(cost, Some(11_025_000));
        assert_eq!(
            (meter.cached, meter.cache_written),
            (Some(8_000), Some(1_500))
        );
        // Without cache prices, every prompt token is an input token.
        let plain = Prices {
            cached_input: None,
            cache_write: None,
            ..prices
        };
        assert_eq!(
            plain.nano_usd_cached(
                crate::cache::CacheUse::of(10_000, Some(8_000), Some(1_500)),
                100
            ),
            31_500_000
        );
    }

    #[test]
    fn known_openai_families_have_windows() {
        for (model, window) in [
            ("gpt-4o-mini", Some(128_000)),
            ("openai/gpt-4o", Some(128_000)),
            ("gpt-4.1-nano", Some(1_047_576)),
            ("gpt-4", Some(8_192)),
            ("gpt-4-0613", Some(8_192)),
            ("gpt-4-turbo-preview", Some(128_000)),
            ("gpt-3.5-turbo", Some(16_385)),
            ("o3-mini", Some(200_000)),
            ("o1-mini", Some(128_000)),
            ("gpt-5-mini", Some(400_000)),
            ("gpt-5.1", Some(400_000)),
            ("gpt-4.5-preview", Some(128_000)),
            ("llama3", None),
            ("omni-local", None),
            ("mirror", None),
        ] {
            assert_eq!(known_window(model), window, "{model}");
        }
    }

    #[test]
    fn counts_and_shares_are_formatted_for_people() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1_000), "1,000");
        assert_eq!(group_digits(128_000), "128,000");
        assert_eq!(group_digits(1_047_576), "1,047,576");
        assert_eq!(per_mille(1, 8), 125);
        assert_eq!(per_mille(3, 0), 0);
        assert_eq!(per_mille(9, 4), 1000, "never wider than the bar");
        assert_eq!(per_mille(u64::MAX, u64::MAX), 1000);
    }

    #[test]
    fn the_details_show_todays_use_of_the_quota() {
        let meter = Meter {
            today: Some(DailyUse {
                used: 12_345,
                per_day: 50_000,
            }),
            ..Meter::default()
        };
        let details = meter.details_html();
        assert!(
            details.contains(r#"<dd class="meter-today">12,345 of 50,000 tokens</dd>"#),
            "{details}"
        );
        assert!(!Meter::default().details_html().contains("meter-today"));
    }

    #[test]
    fn the_face_draws_each_part_in_thousandths_of_the_window() {
        let meter = Meter {
            window: Some(1_000),
            sent: 500,
            parts: MeterParts {
                system: 100,
                summary: 0,
                history: 300,
                context: 0,
                tools: 0,
                message: 100,
            },
            ..Meter::default()
        };
        let face = meter.face_html();
        assert!(
            face.contains(r#"class="seg seg-system" x="0" width="100""#),
            "{face}"
        );
        assert!(
            face.contains(r#"class="seg seg-history" x="100" width="300""#),
            "{face}"
        );
        assert!(
            face.contains(r#"class="seg seg-message" x="400" width="100""#),
            "{face}"
        );
        assert!(face.ends_with(r#"<span class="meter-headline">500 / 1,000 tokens</span>"#));
        // The provider counted more than Parlor: the parts are scaled to its total, and the
        // bar never runs past the window.
        let reported = Meter {
            sent: 2_000,
            reported: true,
            ..meter.clone()
        };
        let face = reported.face_html();
        assert!(face.contains(r#"seg-system" x="0" width="400""#), "{face}");
        assert!(
            face.contains(r#"seg-history" x="400" width="600""#),
            "{face}"
        );
        assert!(
            face.contains(r#"seg-message" x="1000" width="0""#),
            "{face}"
        );
        let unknown = Meter {
            window: None,
            ..meter
        };
        assert_eq!(
            unknown.face_html(),
            r#"<span class="meter-headline">500 tokens · limit unknown</span>"#
        );
    }

    #[test]
    fn the_details_list_each_part_and_what_the_provider_said() {
        let usage = Usage {
            prompt_tokens: 900,
            completion_tokens: 100,
            total_tokens: 1_000,
            cached_tokens: Some(512),
            cache_write_tokens: None,
        };
        let prices = Prices {
            input: 0.15,
            output: 0.60,
            ..Prices::default()
        };
        let meter = measure(&sent(), &EstimatedTokens, Some(1_000));
        let estimate = meter.details_html();
        assert!(estimate.starts_with(r#"<p class="meter-source">estimated by Parlor</p>"#));
        assert!(!estimate.contains("meter-cost"), "no prices, no cost");
        let details = meter.with_usage(&usage, Some(prices), 0).details_html();
        assert!(details.contains("reported by the provider"));
        for (name, label) in PARTS {
            assert!(details.contains(&format!("{label}</dt><dd data-part=\"{name}\">")));
        }
        assert!(details.contains(r#"<dd class="meter-completion">100 tokens</dd>"#));
        assert!(details.contains(r#"<dd class="meter-cached">512 prompt tokens</dd>"#));
        assert!(details.contains(r#"<dd class="meter-cost-turn">$0.000195</dd>"#));
        assert!(details.contains(r#"<dd class="meter-cost-conversation">$0.000195</dd>"#));
    }

    #[test]
    fn the_warning_names_the_next_message_as_text() {
        let mut meter = Meter {
            near_limit: true,
            drops_next: Some("<b>hi</b>".into()),
            ..Meter::default()
        };
        assert_eq!(
            meter.warning().as_deref(),
            Some("Near the limit: “<b>hi</b>” is the next to be left out.")
        );
        meter.near_limit = false;
        assert_eq!(meter.warning(), None);
    }

    #[test]
    fn dollars_are_formatted_without_floats() {
        assert_eq!(format_usd(195_000), "$0.000195");
        assert_eq!(format_usd(1_234_567), "$0.00123");
        assert_eq!(format_usd(12_345_678), "$0.0123");
        assert_eq!(format_usd(1), "$0.000000001");
        assert_eq!(format_usd(0), "$0.0000");
        assert_eq!(format_usd(2_500_000_000), "$2.50");
        assert_eq!(format_usd(50_000_000), "$0.0500");
    }
}
