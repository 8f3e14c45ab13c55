//! A tool exchange is never split (spec `tools.md`): over random conversations with tool
//! exchanges, random marks and every policy, window, chain and budget, no request holds a
//! `tool` message without its call or a call without all its results; and retention keeps
//! the pairing of what is stored while it replaces the content of expired results.

use parlor_domain::block::{Part, Retention};
use parlor_domain::chain::{builtins, Chain, EstimatedTokens, ModelLimits};
use parlor_domain::context::prune;
use parlor_domain::exchange::{paired, ranges};
use parlor_domain::history::{Conversation, HistoryLength, HistoryPolicy};
use parlor_domain::message::{Message, SendMark, ToolAnswer, ToolCall};
use parlor_domain::plan::{plan, PlanInput};
use parlor_domain::settings::HistorySettings;
use proptest::prelude::*;
use std::num::NonZeroU32;

/// One turn: the question, then exchanges (each a list of result sizes), then the answer.
#[derive(Clone, Debug)]
struct Turn {
    question: usize,
    exchanges: Vec<Vec<usize>>,
    answer: bool,
}

fn turn() -> impl Strategy<Value = Turn> {
    (
        0usize..80,
        prop::collection::vec(prop::collection::vec(0usize..400, 1..4), 0..3),
        any::<bool>(),
    )
        .prop_map(|(question, exchanges, answer)| Turn {
            question,
            exchanges,
            answer,
        })
}

fn messages(turns: &[Turn], retention: Retention) -> Vec<Message> {
    let mut out = Vec::new();
    let mut ts = 0;
    let mut next_ts = || {
        ts += 1;
        ts
    };
    for (t, turn) in turns.iter().enumerate() {
        out.push(Message::user("q".repeat(turn.question), next_ts()));
        for (e, sizes) in turn.exchanges.iter().enumerate() {
            let mut ask = Message::assistant("", next_ts());
            let ids: Vec<String> = (0..sizes.len()).map(|c| format!("c{t}-{e}-{c}")).collect();
            ask.tool_calls = ids
                .iter()
                .map(|id| ToolCall {
                    id: id.clone(),
                    name: "clock__now".into(),
                    arguments: r#"{"tz":"UTC"}"#.into(),
                })
                .collect();
            out.push(ask);
            let at = next_ts();
            for (id, &size) in ids.iter().zip(sizes) {
                let answer = ToolAnswer {
                    tool_call_id: id.clone(),
                    name: "clock__now".into(),
                    ok: true,
                    ms: 1,
                    bytes: size as u64,
                    removed_after: None,
                };
                let content = vec![Part::Text {
                    text: "r".repeat(size),
                }];
                out.push(Message::tool_result(answer, content, retention, at));
            }
        }
        if turn.answer {
            out.push(Message::assistant("a".repeat(turn.question / 2), next_ts()));
        }
    }
    out
}

fn policy() -> impl Strategy<Value = HistoryPolicy> {
    prop_oneof![
        Just(HistoryPolicy::LastN),
        Just(HistoryPolicy::All),
        Just(HistoryPolicy::None)
    ]
}

fn chain() -> impl Strategy<Value = Chain> {
    let names: Vec<&str> = builtins().iter().map(|p| p.name()).collect();
    prop::sample::subsequence(names, 0..=4)
        .prop_shuffle()
        .prop_map(|names| Chain::from_names(&names).unwrap())
}

fn mark() -> impl Strategy<Value = Option<SendMark>> {
    prop_oneof![
        6 => Just(None),
        1 => Just(Some(SendMark::Always)),
        1 => Just(Some(SendMark::Never)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn no_request_splits_an_exchange(
        turns in prop::collection::vec(turn(), 0..8),
        marks in prop::collection::vec(mark(), 80),
        tail_from in 0usize..40,
        policy in policy(),
        length in -1i64..12,
        preserve in any::<bool>(),
        chain in chain(),
        max_context in prop::option::of(1usize..30),
        budget in prop::option::of(20u64..600),
        max_ctx in 1usize..40,
        capped in any::<bool>(),
    ) {
        let mut stored = messages(&turns, None);
        for (m, mark) in stored.iter_mut().zip(marks) {
            m.send = mark;
        }
        stored.push(Message::user("latest", 10_000));
        let from = tail_from.min(stored.len() - 1);
        let older_pins: Vec<(usize, Message)> = stored[..from]
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_pinned())
            .map(|(i, m)| (i, m.clone()))
            .collect();
        let tail = Conversation::from(stored[from..].to_vec());
        let settings = HistorySettings::fixed(policy, HistoryLength::new(length), preserve);
        let model = ModelLimits {
            name: "m".into(),
            max_context,
            token_budget: budget,
            ..Default::default()
        };
        let planned = plan(PlanInput {
            system: &["prompt".to_owned()],
            tail: &tail,
            stored_total: stored.len(),
            settings: &settings,
            chain: &chain,
            model: &model,
            max_ctx,
            tokens: &EstimatedTokens,
            context: None,
            summary: None,
            older_pins: &older_pins,
            capped,
        });
        prop_assert!(paired(&planned.messages), "{:#?}", planned.messages);
    }

    #[test]
    fn retention_keeps_what_is_stored_paired(
        turns in prop::collection::vec(turn(), 1..8),
        keep in 1u32..4,
    ) {
        let stored = messages(&turns, NonZeroU32::new(keep));
        let pruned = prune(stored.clone());
        prop_assert!(paired(&pruned.messages));
        prop_assert_eq!(ranges(&pruned.messages), ranges(&stored));
        // A result is stubbed exactly when its turn is `keep` or more user turns back.
        let users = stored.iter().filter(|m| m.role == parlor_domain::Role::User).count();
        let mut seen_users = 0;
        for m in &pruned.messages {
            if m.role == parlor_domain::Role::User {
                seen_users += 1;
                continue;
            }
            let Some(answer) = &m.tool else { continue };
            let age = users - seen_users;
            if age as u32 >= keep {
                prop_assert_eq!(answer.removed_after, Some(keep));
                let text = m.texts().collect::<Vec<_>>().concat();
                prop_assert!(text.starts_with("[result of clock__now removed after"), "{}", text);
            } else {
                prop_assert_eq!(answer.removed_after, None);
            }
        }
    }
}
