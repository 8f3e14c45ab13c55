//! The provider's prompt cache over a long conversation (`make bench`; results in
//! docs/performance.md): 200 turns with the sliding window at 40 messages, sent through the
//! native Anthropic adapter to the test upstream, which emulates Anthropic's prompt cache
//! (prefixes ending at a `cache_control` breakpoint are written and read back for five
//! minutes). For each `window_step` (0: the window cuts exactly, one message a turn; a
//! quarter; the default, a third; half), the
//! share of prompt tokens read from the cache and the conversation's cost at Anthropic's
//! Sonnet prices ($3 in, $15 out, $0.30 cached, $3.75 written per million), beside what it
//! would cost without any cache.
//!
//! Then the adapters' own work per call, which is what the Anthropic path adds to the time
//! to first token over the OpenAI one (the same request encoded, and a reply's events
//! read, 2,000 times each; medians in ms): `adapter_added` is the Anthropic median less the
//! OpenAI one. The first call of each is printed too (the cold case: nothing of the adapter
//! run before in the process; the Anthropic one goes first).

use parlor_domain::cache::CacheUse;
use parlor_domain::meter::Prices;
use parlor_domain::{ChatEvent, Message};
use parlor_server::config::agents::AgentCatalog;
use parlor_server::config::Config;
use parlor_server::llm::endpoint::Wire;
use parlor_server::llm::sse::Protocol;
use parlor_server::llm::{ChatCompletions, Messages, ModelRequest};
use parlor_server::turn::{start, TurnInput};
use std::time::Instant;

const TURNS: usize = 200;
const WINDOW: usize = 40;
const SONNET: Prices = Prices {
    input: 3.0,
    output: 15.0,
    cached_input: Some(0.30),
    cache_write: Some(3.75),
};

/// A user's message of about 60 words.
fn question(turn: usize) -> String {
    let words: Vec<String> = (0..60)
        .map(|w| format!("w{}", (turn * 7 + w) % 97))
        .collect();
    format!("Question {turn}: {}", words.join(" "))
}

/// Cached share (percent), cost and cost without a cache (US dollars) of a conversation.
async fn conversation(step: usize) -> (f64, f64, f64) {
    let upstream = fake_llm::FakeLlm::start().await.expect("upstream");
    let dir = tempfile::tempdir().expect("tempdir");
    let agents = dir.path().join("agents/bench");
    std::fs::create_dir_all(&agents).expect("agents");
    std::fs::write(
        agents.join("template.json"),
        r#"{"agentId": "bench", "name": "Bench", "personality": "You answer briefly.",
            "nodes": ["llm.anthropic"], "nodeConfigurations": {"llm.anthropic": {"model": "sonnet"}},
            "chatSettings": {"historyPolicy": "all"}}"#,
    )
    .expect("template");
    let config = dir.path().join("parlor.toml");
    std::fs::write(
        &config,
        format!(
            "[[providers]]\nid = \"claude\"\nkind = \"anthropic\"\nbase_url = \"{}\"\n\n\
             [[models]]\nname = \"sonnet\"\nprovider = \"claude\"\nmax_context = {WINDOW}\n\
             window_step = {step}\n",
            upstream.base_url()
        ),
    )
    .expect("config");
    let vars = [
        ("PARLOR_DATA_DIR", dir.path().join("data")),
        ("PARLOR_CONFIG", config),
        ("PARLOR_AGENTS_DIR", dir.path().join("agents")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.display().to_string()))
    .chain([("PARLOR_RATE_LIMIT_CHAT".to_owned(), "0".to_owned())]);
    let config = Config::from_vars(vars).expect("config");
    let (catalog, _) = AgentCatalog::load_dir(&config.agents_dir).expect("agents");
    let setup = parlor_server::setup(&config, &catalog)
        .await
        .expect("setup");
    let services = parlor_server::services(config, catalog, setup);
    let agent = services.agents.get("bench").expect("agent");
    let (mut session, mut used, mut cost, mut uncached) = (None, CacheUse::default(), 0u64, 0u64);
    for turn in 0..TURNS {
        let input = TurnInput {
            agent: agent.clone(),
            session_id: session.clone(),
            cookie_session: None,
            new_conversation: session.is_none(),
            browser: None,
            message: Some(question(turn)),
            context: Vec::new(),
            url_policy: None,
            url_length: None,
            admin_token: None,
            edit: None,
            user: None,
        };
        let mut running = start(&services, input).await.expect("turn");
        session = parlor_domain::ConversationId::parse(&running.meta.session_id).ok();
        while let Some(event) = running.events.recv().await {
            match event {
                ChatEvent::Error { message } => panic!("turn {turn} failed: {message}"),
                ChatEvent::Done(done) => {
                    let usage = done.usage.expect("usage");
                    let this = CacheUse::of(
                        usage.prompt_tokens,
                        usage.cached_tokens,
                        usage.cache_write_tokens,
                    );
                    used = used.plus(this);
                    cost += SONNET.nano_usd_cached(this, usage.completion_tokens);
                    uncached += SONNET.nano_usd(usage.prompt_tokens, usage.completion_tokens);
                }
                _ => {}
            }
        }
    }
    let share = used.read as f64 * 100.0 / used.prompt().max(1) as f64;
    (share, cost as f64 / 1e9, uncached as f64 / 1e9)
}

/// A 40-message request with a system prompt, and a reply's events in both protocols.
fn adapter_work() -> (Timing, Timing) {
    let mut messages = vec![Message::system("You answer briefly.", 0)];
    for turn in 0..20 {
        messages.push(Message::user(question(turn), 0));
        messages.push(Message::assistant(format!("Echo: {}", question(turn)), 0));
    }
    messages.push(Message::user(question(20), 0));
    let request = ModelRequest {
        model: "m".into(),
        messages,
        temperature: None,
        max_tokens: None,
        tools: Vec::new(),
        tool_choice: None,
    };
    let event = |data: serde_json::Value| eventsource_stream::Event {
        data: data.to_string(),
        ..Default::default()
    };
    let words: Vec<String> = (0..30).map(|w| format!("word{w} ")).collect();
    let openai: Vec<_> = words
        .iter()
        .map(|w| event(serde_json::json!({"choices": [{"index": 0, "delta": {"content": w}}]})))
        .chain([event(
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 30, "total_tokens": 930}}),
        )])
        .collect();
    let anthropic: Vec<_> = [event(serde_json::json!({"type": "message_start", "message": {"usage": {"input_tokens": 900}}}))]
        .into_iter()
        .chain(words.iter().map(|w| {
            event(serde_json::json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": w}}))
        }))
        .chain([
            event(serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}})),
            event(serde_json::json!({"type": "message_stop"})),
        ])
        .collect();
    // The Anthropic adapter's first call comes first: its cold case is not warmed by the
    // OpenAI one (which shares the JSON and stream code).
    let anthropic = median(|| {
        std::hint::black_box(Messages::body(&request));
        let mut reader = Messages::reader(None);
        anthropic.iter().for_each(|e| drop(reader.read(e)));
    });
    let openai = median(|| {
        std::hint::black_box(ChatCompletions::body(&request));
        let mut reader = ChatCompletions::reader(None);
        openai.iter().for_each(|e| drop(reader.read(e)));
    });
    (openai, anthropic)
}

/// A run's first call (the cold case) and the median of 2,000 after 200 warm-up calls, ms.
struct Timing {
    first: f64,
    median: f64,
}

fn median(mut f: impl FnMut()) -> Timing {
    let mut times: Vec<f64> = (0..2200)
        .map(|_| {
            let begin = Instant::now();
            f();
            begin.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    let first = times[0];
    let mut warm = times.split_off(200);
    warm.sort_by(f64::total_cmp);
    Timing {
        first,
        median: warm[warm.len() / 2],
    }
}

#[tokio::main]
async fn main() {
    println!(
        "prompt cache over {TURNS} turns, sliding window {WINDOW} messages, Anthropic adapter:"
    );
    // Exact cuts, a quarter, the default (a third) and half of the window.
    let default_step = WINDOW / parlor_domain::chain::DEFAULT_STEP_DIVISOR;
    for step in [0, WINDOW / 4, default_step, WINDOW / 2] {
        let (share, cost, uncached) = conversation(step).await;
        println!(
            "cache window_step={step}: cached_share={share:.1}% cost_usd={cost:.4} cost_without_cache_usd={uncached:.4}"
        );
        println!(
            "{}",
            serde_json::json!({"bench": "cache", "window_step": step,
                "default_step": step == default_step,
                "cached_share_pct": (share * 10.0).round() / 10.0,
                "cost_usd": cost, "cost_without_cache_usd": uncached})
        );
    }
    let (openai, anthropic) = adapter_work();
    println!(
        "adapter openai_ms={:.4} anthropic_ms={:.4} adapter_added_ms={:.4}",
        openai.median,
        anthropic.median,
        anthropic.median - openai.median
    );
    println!(
        "adapter cold (first call of the process) openai_ms={:.4} anthropic_ms={:.4}",
        openai.first, anthropic.first
    );
    println!(
        "{}",
        serde_json::json!({"bench": "adapter",
            "added_ms": anthropic.median - openai.median,
            "anthropic_first_ms": anthropic.first})
    );
}
