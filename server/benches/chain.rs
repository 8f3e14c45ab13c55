//! The processor chain on a 200-message window, with token counting (`make bench`; results
//! in docs/performance.md). Budget: under 1 ms per turn.
//!
//! "warm": a turn as it happens in a conversation, where every message but the new one was
//! counted on an earlier turn (token counts are cached by text). "cold": every message is
//! new to the counter (the first turn after a restart on a long conversation).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use parlor_domain::chain::{effective_ctx, Chain, ChainContext, ModelLimits, Outgoing};
use parlor_domain::Message;
use parlor_server::llm::models::token_counter;
use std::time::Duration;

fn conversation(turn: usize) -> Vec<Outgoing> {
    let mut messages = vec![Outgoing::prompt(Message::system(
        "You are a helpful assistant. Be precise.",
        0,
    ))];
    for i in 0..200 {
        let text = format!(
            "turn {turn} message {i}: {}",
            "the quick brown fox jumps over the lazy dog while the model thinks ".repeat(3)
        );
        let message = if i % 2 == 0 {
            Message::user(text, i)
        } else {
            Message::assistant(text, i)
        };
        messages.push(Outgoing::stored(message, i as usize));
    }
    messages.push(Outgoing::stored(
        Message::user(format!("turn {turn}: the latest question"), 999),
        200,
    ));
    messages
}

fn bench_chain(c: &mut Criterion) {
    let chain = Chain::from_names(&["sliding_window", "token_budget", "role_alternation"]).unwrap();
    let model = ModelLimits {
        name: "gpt-4o-mini".into(),
        max_context: Some(200),
        token_budget: Some(12_000),
        ..Default::default()
    };
    let tokens = token_counter("gpt-4o-mini");
    let ctx = ChainContext {
        model: &model,
        effective_ctx: effective_ctx(200, &model),
        tokens: tokens.as_ref(),
        summary: None,
    };
    let warm = conversation(0);
    chain.run(warm.clone(), &ctx).unwrap();
    let mut group = c.benchmark_group("chain_200_messages");
    group.bench_function("warm_tiktoken", |b| {
        b.iter_batched(
            || warm.clone(),
            |messages| chain.run(messages, &ctx).unwrap(),
            BatchSize::SmallInput,
        )
    });
    let mut turn = 1;
    group.bench_function("cold_tiktoken", |b| {
        b.iter_batched(
            || {
                turn += 1;
                conversation(turn)
            },
            |messages| chain.run(messages, &ctx).unwrap(),
            BatchSize::SmallInput,
        )
    });
    // A budget a third of the window: the oldest turns are dropped without being counted.
    let tight = ModelLimits {
        token_budget: Some(4_000),
        ..model.clone()
    };
    let tight_ctx = ChainContext {
        model: &tight,
        ..ctx
    };
    group.bench_function("cold_tiktoken_over_budget", |b| {
        b.iter_batched(
            || {
                turn += 1;
                conversation(turn)
            },
            |messages| chain.run(messages, &tight_ctx).unwrap(),
            BatchSize::SmallInput,
        )
    });
    let estimate = parlor_domain::chain::EstimatedTokens;
    let estimated = ChainContext {
        model: &model,
        tokens: &estimate,
        summary: None,
        ..ctx
    };
    group.bench_function("estimated_tokens", |b| {
        b.iter_batched(
            || warm.clone(),
            |messages| chain.run(messages, &estimated).unwrap(),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench_chain
}
criterion_main!(benches);
