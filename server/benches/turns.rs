//! What a turn costs as its conversation grows (`make bench`; results in
//! docs/performance.md): the same turn on a conversation of 100 and of 100,000 stored
//! messages, on a real `redis-server` and on a file history, and of 1,000,000 on Redis,
//! through Parlor's own turn pipeline (`parlor_server::turn::start`: resolve, admit, read
//! the window, prune, plan, make the message durable) with the offline mirror model
//! answering at once. The agent's chain is `sliding_window`, `summary`, `token_budget`; the
//! conversation has one pinned message near its start and a summary covering what the
//! window leaves out, and every turn brings a context block kept for two turns (so pruning
//! runs), and the summarizer folds in what falls out after each reply. Prints one JSON
//! object per case: the median and p99 time until the turn is acknowledged (its `meta`,
//! the work before the model call) and until its reply is stored. The conversation of
//! 100,000 messages also has 1,000 other versions (edits and regenerations kept beside it).
//!
//! The cold case too, on files: the first turn after a restart (a new process: nothing of
//! the conversation in memory), 20 times on each size, alternating; its median is printed
//! as `cold_first_turn_ms_p50`.

use fake_llm::redis_server::RedisServer;
use parlor_domain::block::Block;
use parlor_domain::branch::{Branch, Branches, Rebranch};
use parlor_domain::context::{ContextEntry, Save};
use parlor_domain::summary::fold;
use parlor_domain::{ChatEvent, ConversationId, Message, SendMark};
use parlor_server::config::agents::AgentCatalog;
use parlor_server::config::Config;
use parlor_server::store::histories::History;
use parlor_server::store::ConversationInfo;
use parlor_server::turn::{start, TurnInput};
use std::num::NonZeroU32;
use std::path::Path;
use std::time::Instant;

/// The window the chain's `sliding_window` keeps (`agent_max_ctx`'s default).
const WINDOW: usize = 200;
/// Where the pinned message is.
const PINNED_AT: usize = 5;
const TURNS: usize = 200;
const WARM_UP: usize = 10;
/// The other versions the conversation of 100,000 messages has.
const VERSIONS: usize = 1000;
/// First turns after a restart measured per size.
const COLD_RUNS: usize = 20;

fn message(i: usize) -> Message {
    let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(7));
    let mut message = if i.is_multiple_of(2) {
        Message::user(text, i as i64)
    } else {
        Message::assistant(text, i as i64)
    };
    if i == PINNED_AT {
        message.send = Some(SendMark::Always);
    }
    message.ensure_id();
    message
}

/// A context block kept for the next two turns.
fn context_block(turn: usize) -> Vec<ContextEntry> {
    vec![ContextEntry {
        source: "screen".into(),
        blocks: vec![Block::Text {
            text: format!("what the screen showed at turn {turn}"),
        }],
        display: true,
        save: Save::Turns(NonZeroU32::new(2).expect("two")),
    }]
}

/// Stores a conversation of `size` messages with its pin and a summary of what the window
/// leaves out (and, at 100,000 messages, [`VERSIONS`] other versions).
async fn fill(history: &History, agent: &str, id: &ConversationId, size: usize) {
    let messages: Vec<Message> = (0..size).map(message).collect();
    for chunk in messages.chunks(10_000) {
        history.store.append(id, chunk).await.expect("fill");
    }
    if size == 100_000 {
        // Each a question and its reply, off a message spread along the path.
        let branches = (0..VERSIONS).map(|v| {
            let parent = messages[(v * 97) % size].id().into_owned();
            let pair = vec![message(size + 2 * v), message(size + 2 * v + 1)];
            Branch::new(Some(parent), pair)
        });
        let versions = Rebranch::keeping(
            &messages,
            Branches {
                branches: branches.collect(),
            },
        );
        let kept = history
            .store
            .rebranch_if(id, &versions)
            .await
            .expect("versions");
        assert!(kept, "the versions are stored");
    }
    let mut info = ConversationInfo {
        agent_id: agent.to_owned(),
        ..ConversationInfo::bare(id, Some(size as i64))
    };
    info.note_pins(&messages[..PINNED_AT + 1]);
    history.store.put_info(&info).await.expect("info");
    let covered = &messages[..size.saturating_sub(WINDOW)];
    if !covered.is_empty() {
        let produced = serde_json::json!({"facts": ["the conversation so far"]});
        let summary = fold(None, produced, covered, (0, 0));
        history
            .store
            .put_summary(id, &summary)
            .await
            .expect("summary");
    }
}

/// One turn: the times until it is acknowledged and until its reply is stored, ms.
async fn one_turn(
    services: &std::sync::Arc<parlor_server::state::Services>,
    agent: &std::sync::Arc<parlor_domain::Agent>,
    id: &ConversationId,
    turn: usize,
) -> (f64, f64) {
    let input = TurnInput {
        agent: agent.clone(),
        session_id: Some(id.clone()),
        cookie_session: None,
        new_conversation: false,
        browser: None,
        message: Some(format!("question {turn}")),
        context: context_block(turn),
        url_policy: None,
        url_length: None,
        admin_token: None,
        edit: None,
        user: None,
    };
    let begin = Instant::now();
    let mut running = start(services, input).await.expect("turn");
    let meta = begin.elapsed().as_secs_f64() * 1000.0;
    while let Some(event) = running.events.recv().await {
        if matches!(event, ChatEvent::Error { .. }) {
            panic!("turn failed: {event:?}");
        }
    }
    (meta, begin.elapsed().as_secs_f64() * 1000.0)
}

/// The first turn after a restart on each of the conversations `measure` filled: a new
/// process's services each time (nothing of the conversations in memory).
async fn measure_cold(backend: &str, sizes: &[usize], vars: Vec<(String, String)>) {
    let agents_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
    let mut firsts: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
    for run in 0..COLD_RUNS {
        for (at, &size) in sizes.iter().enumerate() {
            let config = Config::from_vars(vars.clone()).expect("config");
            let (agents, _) = AgentCatalog::load_dir(&agents_dir).expect("agents");
            let setup = parlor_server::setup(&config, &agents).await.expect("setup");
            let services = parlor_server::services(config, agents, setup);
            let agent = services.agents.get("concise").expect("the concise agent");
            let id = ConversationId::parse(&format!("grow{size}")).expect("id");
            let (meta, _) = one_turn(&services, &agent, &id, 10_000 + run).await;
            firsts[at].push(meta);
        }
    }
    for (firsts, size) in firsts.iter_mut().zip(sizes) {
        firsts.sort_by(f64::total_cmp);
        println!(
            "{{\"backend\": \"{backend}\", \"stored_messages\": {size}, \"cold_first_turn_ms_p50\": {:.3}, \"cold_first_turn_ms_max\": {:.3}}}",
            percentile(firsts, 0.5),
            percentile(firsts, 1.0),
        );
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

async fn measure(backend: &str, sizes: &[usize], vars: Vec<(String, String)>) {
    let config = Config::from_vars(vars).expect("config");
    let agents_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
    let (agents, _) = AgentCatalog::load_dir(&agents_dir).expect("agents");
    let setup = parlor_server::setup(&config, &agents).await.expect("setup");
    let services = parlor_server::services(config, agents, setup);
    let agent = services.agents.get("concise").expect("the concise agent");
    let history = services.histories.for_agent(&agent).clone();
    for &size in sizes {
        let id = ConversationId::parse(&format!("grow{size}")).expect("id");
        fill(&history, &agent.id, &id, size).await;
        let (mut acknowledged, mut stored) = (Vec::new(), Vec::new());
        for turn in 0..WARM_UP + TURNS {
            let (meta, done) = one_turn(&services, &agent, &id, turn).await;
            if turn >= WARM_UP {
                acknowledged.push(meta);
                stored.push(done);
            }
        }
        acknowledged.sort_by(f64::total_cmp);
        stored.sort_by(f64::total_cmp);
        println!(
            "{{\"backend\": \"{backend}\", \"stored_messages\": {size}, \"acknowledged_ms_p50\": {:.3}, \"acknowledged_ms_p99\": {:.3}, \"stored_ms_p50\": {:.3}, \"stored_ms_p99\": {:.3}}}",
            percentile(&acknowledged, 0.5),
            percentile(&acknowledged, 0.99),
            percentile(&stored, 0.5),
            percentile(&stored, 0.99),
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` run only checks it builds.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let redis = RedisServer::start().expect("redis-server");
    let data = tempfile::tempdir().expect("temp dir");
    let chain = "[history]\nchain = [\"sliding_window\", \"summary\", \"token_budget\"]\n";
    let redis_config = data.path().join("redis.toml");
    std::fs::write(
        &redis_config,
        format!(
            "{chain}\n[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\", key_prefix = \"turns:\" }}\n",
            redis.url()
        ),
    )
    .expect("config");
    let file_config = data.path().join("file.toml");
    std::fs::write(&file_config, chain).expect("config");
    let base = |data_dir: &Path| {
        vec![
            ("PARLOR_DATA_DIR".to_owned(), data_dir.display().to_string()),
            ("PARLOR_MIRROR_DELAY_MS".to_owned(), "0".to_owned()),
            ("PARLOR_RATE_LIMIT_CHAT".to_owned(), "0".to_owned()),
        ]
    };
    runtime.block_on(async {
        let mut redis_vars = base(&data.path().join("redis"));
        redis_vars.push(("PARLOR_CONFIG".into(), redis_config.display().to_string()));
        measure("redis", &[100, 100_000, 1_000_000], redis_vars).await;
        let mut file_vars = base(&data.path().join("file"));
        file_vars.push(("PARLOR_CONFIG".into(), file_config.display().to_string()));
        measure("file", &[100, 100_000], file_vars.clone()).await;
        measure_cold("file", &[100, 100_000], file_vars).await;
    });
}
