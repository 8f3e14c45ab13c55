//! The pruning pass of context blocks on a conversation of 1,000 messages with 100
//! retention-tracked blocks, as a turn runs it (`make bench`; results in
//! docs/performance.md): when nothing expires (most turns) and when blocks expire.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use parlor_domain::context::{build, prune, Block, ContextEntry, Save};
use parlor_domain::Message;
use std::num::NonZeroU32;
use std::time::Duration;

/// 1,000 messages (500 turns); the last 100 user messages each carry one saved block under
/// its header, kept for `keep(i)` turns where `i` counts user messages from the newest.
fn conversation(keep: impl Fn(usize) -> u32) -> Vec<Message> {
    let mut messages = Vec::with_capacity(1_000);
    for turn in 0..500usize {
        let age = 499 - turn;
        let text = format!("question {turn}: a sentence of ordinary length for a chat turn");
        let user = if age < 100 {
            let entry = ContextEntry {
                source: "terminal".into(),
                blocks: vec![Block::Text {
                    text: "error[E0382]: borrow of moved value: `x` at src/main.rs:42".into(),
                }],
                display: true,
                save: Save::Turns(NonZeroU32::new(keep(age)).unwrap_or(NonZeroU32::MIN)),
            };
            build(&text, &[entry], turn as i64).persisted
        } else {
            Message::user(text, turn as i64)
        };
        messages.push(user);
        messages.push(Message::assistant(format!("answer {turn}"), turn as i64));
    }
    messages
}

fn bench_prune(c: &mut Criterion) {
    let mut group = c.benchmark_group("prune_1000_messages_100_blocks");
    // Every block has time left: the pass reads and changes nothing.
    let steady = conversation(|_| 200);
    group.bench_function("none_expire", |b| {
        b.iter_batched(|| steady.clone(), prune, BatchSize::LargeInput)
    });
    // Blocks kept for 50 turns: the older half of them expire now.
    let expiring = conversation(|_| 50);
    group.bench_function("half_expire", |b| {
        b.iter_batched(|| expiring.clone(), prune, BatchSize::LargeInput)
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_prune
}
criterion_main!(benches);
