//! Search over a browser's conversations (`make bench`; results in docs/performance.md):
//! 1,000 conversations of 100 messages each, on a file history and on a real
//! `redis-server`, searched the way `GET /api/conversations/search` does
//! (`parlor_server::conversation::search_owned`). Prints one JSON object per case with the
//! median and the 99th percentile of 100 searches.

use fake_llm::redis_server::RedisServer;
use parlor_domain::{ConversationId, Message};
use parlor_server::conversation::search_owned;
use parlor_server::store::histories::Histories;
use parlor_server::store::{
    owner_key, ConversationInfo, ConversationStore, FileStore, RedisOptions, RedisStore,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONVERSATIONS: usize = 1_000;
const MESSAGES: usize = 100;
const RUNS: usize = 100;
const WARM_UP: usize = 5;

/// Message `m` of conversation `c`: about 200 characters, like a chat message. Every
/// hundredth conversation says "aurora" once, in its 90th message.
fn message(c: usize, m: usize) -> Message {
    let rare = if c.is_multiple_of(100) && m == 90 {
        " aurora"
    } else {
        ""
    };
    let text = format!(
        "conversation {c} message {m}: {}{rare}",
        "lorem ipsum dolor sit amet consectetur ".repeat(4)
    );
    if m.is_multiple_of(2) {
        Message::user(text, m as i64)
    } else {
        Message::assistant(text, m as i64)
    }
}

async fn fill(store: &dyn ConversationStore, owner: &str) {
    for c in 0..CONVERSATIONS {
        let id = ConversationId::parse(&format!("bench{c:05}")).expect("session id");
        let mut messages: Vec<Message> = (0..MESSAGES).map(|m| message(c, m)).collect();
        for message in &mut messages {
            message.ensure_id();
        }
        store.append(&id, &messages).await.expect("append");
        let info = ConversationInfo {
            agent_id: "general".into(),
            owner: Some(owner.to_owned()),
            title: format!("Topic {} chat {c}", c % 37),
            ..ConversationInfo::bare(&id, Some(c as i64))
        };
        store.put_info(&info).await.expect("info");
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

async fn measure(backend: &str, histories: &Histories, owner: &str) {
    // What each query makes the search do.
    let cases = [
        ("no match: reads all 1,000 conversations", "zebra"),
        ("rare word: reads all, 10 hits", "aurora"),
        (
            "every title matches: stops at 50, reads no messages",
            "topic",
        ),
        (
            "27 titles match: reads the other conversations",
            "topic 3 chat",
        ),
        ("everywhere: stops at the first 50 conversations", "lorem"),
    ];
    for (case, query) in cases {
        let mut times = Vec::with_capacity(RUNS);
        let mut hits = 0;
        for run in 0..WARM_UP + RUNS {
            let start = Instant::now();
            let found = search_owned(histories, owner, query).await.expect("search");
            let elapsed = start.elapsed();
            if run >= WARM_UP {
                times.push(elapsed);
            }
            hits = found.len();
        }
        times.sort();
        println!(
            "{{\"backend\": \"{backend}\", \"case\": \"{case}\", \"query\": \"{query}\", \"hits\": {hits}, \"p50_ms\": {:.2}, \"p99_ms\": {:.2}}}",
            percentile(&times, 0.50),
            percentile(&times, 0.99),
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` run only checks it builds.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let owner = owner_key("bench-browser");
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start().expect("redis-server");
    runtime.block_on(async {
        let file: Arc<dyn ConversationStore> =
            Arc::new(FileStore::open(dir.path(), None, 5).expect("file store"));
        let redis: Arc<dyn ConversationStore> = Arc::new(
            RedisStore::connect(RedisOptions {
                url: redis.url(),
                key_prefix: "search:".into(),
                history_id: "default".into(),
                max_turns: None,
                ttl: None,
            })
            .await
            .expect("redis"),
        );
        for (backend, store) in [("file", file), ("redis", redis)] {
            eprintln!("filling the {backend} history: {CONVERSATIONS} conversations of {MESSAGES} messages");
            fill(store.as_ref(), &owner).await;
            measure(backend, &Histories::single(store), &owner).await;
        }
    });
}
