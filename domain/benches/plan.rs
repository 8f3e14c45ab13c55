//! The plan of a model call (policy, window, processors) on conversations of 10, 1,000 and
//! 100,000 messages, as a turn gets them loaded (`make bench`; results in
//! docs/performance.md). Budget for `lastN` with N = 20: under 5 µs at any length.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use parlor_domain::chain::{Chain, EstimatedTokens, ModelLimits};
use parlor_domain::history::{Conversation, HistoryLength, HistoryPolicy};
use parlor_domain::plan::{plan, PlanInput};
use parlor_domain::{HistorySettings, Message};
use std::time::Duration;

/// A stored conversation of `len` messages, alternating user and assistant, ending with the
/// new question.
fn stored(len: usize) -> Conversation {
    (0..len)
        .map(|i| {
            let text = format!("message {i}: a sentence of ordinary length for a chat turn");
            if i % 2 == 0 || i + 1 == len {
                Message::user(text, i as i64)
            } else {
                Message::assistant(text, i as i64)
            }
        })
        .collect()
}

fn bench_plan(c: &mut Criterion) {
    let system = vec!["You are a helpful assistant.".to_owned()];
    let chain = Chain::default();
    let model = ModelLimits::default();
    for (name, policy) in [
        ("plan_last_n_20", HistoryPolicy::LastN),
        ("plan_none", HistoryPolicy::None),
        ("plan_all", HistoryPolicy::All),
    ] {
        let settings = HistorySettings::fixed(policy, HistoryLength::new(20), true);
        let mut group = c.benchmark_group(name);
        for len in [10, 1_000, 100_000] {
            let conversation = stored(len);
            group.bench_with_input(
                BenchmarkId::from_parameter(len),
                &conversation,
                |b, tail| {
                    b.iter(|| {
                        plan(PlanInput {
                            system: &system,
                            tail,
                            stored_total: len,
                            settings: &settings,
                            chain: &chain,
                            model: &model,
                            max_ctx: 200,
                            tokens: &EstimatedTokens,
                            context: None,
                            summary: None,
                            older_pins: &[],
                            capped: false,
                        })
                    })
                },
            );
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_plan
}
criterion_main!(benches);
