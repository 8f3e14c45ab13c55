//! Store latency by backend and conversation length (`make bench`; results in
//! docs/storage.md).
//!
//! Each store is opened with `max_turns = N` and filled with N messages, so every append
//! measures the steady state at that length (append, then trim back to N). Redis runs as a
//! real `redis-server` on loopback.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fake_llm::redis_server::RedisServer;
use parlor_domain::{ConversationId, Message};
use parlor_server::store::{ConversationStore, FileStore, MemoryStore, RedisOptions, RedisStore};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

const SIZES: [usize; 3] = [10, 1_000, 10_000];
/// The tail a turn reads for `lastN` = 20 (see `parlor_domain::history::tail_hint`).
const LAST_N_20_TAIL: usize = 40;

fn message(i: usize) -> Message {
    // About the size of a typical chat message.
    let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(7));
    if i.is_multiple_of(2) {
        Message::user(text, i as i64)
    } else {
        Message::assistant(text, i as i64)
    }
}

fn stores(
    runtime: &tokio::runtime::Runtime,
    redis: &RedisServer,
    dir: &std::path::Path,
    size: usize,
) -> Vec<(&'static str, Arc<dyn ConversationStore>)> {
    let max = NonZeroUsize::new(size);
    runtime.block_on(async {
        let redis = RedisStore::connect(RedisOptions {
            url: redis.url(),
            key_prefix: "bench:".into(),
            history_id: format!("n{size}"),
            max_turns: max,
            ttl: Some(Duration::from_secs(3600)),
        })
        .await
        .expect("redis");
        let file = FileStore::open(&dir.join(size.to_string()), max, 5).expect("file store");
        vec![
            (
                "memory",
                Arc::new(MemoryStore::new(max)) as Arc<dyn ConversationStore>,
            ),
            ("file", Arc::new(file)),
            ("redis", Arc::new(redis)),
        ]
    })
}

fn bench_stores(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisServer::start().expect("redis-server (scripts/setup.sh test installs it)");
    let dir = tempfile::tempdir().unwrap();
    let id = ConversationId::parse("bench").unwrap();
    let messages: Vec<Message> = (0..SIZES[2]).map(message).collect();

    for size in SIZES {
        for (backend, store) in stores(&runtime, &redis, dir.path(), size) {
            runtime
                .block_on(store.replace(&id, &messages[..size]))
                .unwrap();
            let label = format!("{backend}/{size}");
            c.benchmark_group("append")
                .bench_function(BenchmarkId::from_parameter(&label), |b| {
                    let next = message(size);
                    b.to_async(&runtime).iter(|| async {
                        store
                            .append(&id, std::slice::from_ref(&next))
                            .await
                            .unwrap()
                    })
                });
            c.benchmark_group("load_all").bench_function(
                BenchmarkId::from_parameter(&label),
                |b| {
                    b.to_async(&runtime)
                        .iter(|| async { store.load(&id).await.unwrap() })
                },
            );
            c.benchmark_group("load_window_lastN_20").bench_function(
                BenchmarkId::from_parameter(&label),
                |b| {
                    b.to_async(&runtime)
                        .iter(|| async { store.load_tail(&id, LAST_N_20_TAIL).await.unwrap() })
                },
            );
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_stores
}
criterion_main!(benches);
