use super::call::{call, CallInput};
use super::*;
use crate::chain::{Chain, EstimatedTokens, ModelLimits};
use crate::context::{Block, Save};
use crate::conversation::apply_edits;
use crate::conversation_id::ConversationId;
use crate::history::{HistoryLength, HistoryPolicy};
use crate::message::SendMark;
use proptest::prelude::*;
use std::num::NonZeroU32;

fn settings(policy: HistoryPolicy, length: i64) -> HistorySettings {
    HistorySettings::fixed(policy, HistoryLength::new(length), true)
}

fn info() -> ConversationInfo {
    ConversationInfo::bare(&ConversationId::from_random(7), Some(1))
}

fn entry(text: &str, save: Save) -> ContextEntry {
    ContextEntry {
        source: "screen".into(),
        blocks: vec![Block::Text { text: text.into() }],
        display: true,
        save,
    }
}

fn ask<'a>(text: &'a str, entries: &'a [ContextEntry], edit: Option<&'a str>) -> Ask<'a> {
    Ask::Message {
        text,
        entries,
        edit,
        now_ms: 100,
    }
}

fn whole(messages: &[Message]) -> Tail {
    Tail {
        messages: messages.to_vec(),
        total: messages.len(),
    }
}

fn tail(messages: &[Message], n: usize) -> Tail {
    Tail {
        messages: messages[messages.len().saturating_sub(n)..].to_vec(),
        total: messages.len(),
    }
}

fn write(decided: Result<Decided, Refusal>) -> Decision {
    match decided {
        Ok(Decided::Write(decision)) => *decision,
        other => panic!("expected a decision, got {other:?}"),
    }
}

/// What a store does with a decision: cut, prune, then store the message.
fn apply(stored: &mut Vec<Message>, decision: &Decision) {
    if let Some(cut) = &decision.cut {
        assert_eq!(stored.len(), cut.total);
        assert_eq!(stored.last(), Some(&cut.last));
        stored.truncate(cut.keep);
    }
    if let Some(prune) = &decision.prune {
        apply_edits(stored, prune.offset, &prune.edits);
    }
    stored.extend(decision.store.clone());
}

/// Decides as the server does: reads what is asked, again while more is asked (with a store
/// that finds pinned messages beside a tail).
fn decide_from(
    stored: &[Message],
    ask: &Ask<'_>,
    info: &ConversationInfo,
    is_new: bool,
    settings: &HistorySettings,
) -> Result<(Decision, Vec<Read>), Refusal> {
    let pins: Vec<(usize, Message)> = stored
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_pinned())
        .map(|(at, m)| (at, m.clone()))
        .collect();
    decide_with_pins(stored, Some(pins), ask, info, is_new, settings)
}

fn decide_with_pins(
    stored: &[Message],
    pins: Option<Vec<(usize, Message)>>,
    ask: &Ask<'_>,
    info: &ConversationInfo,
    is_new: bool,
    settings: &HistorySettings,
) -> Result<(Decision, Vec<Read>), Refusal> {
    let mut reads = vec![to_read(ask, info, is_new, settings)];
    loop {
        let read = match reads.last().copied().unwrap_or(Read::Whole) {
            Read::Nothing => Tail::default(),
            Read::Tail(n) => tail(stored, n),
            Read::Whole => whole(stored),
        };
        match decide(ask, info, is_new, read, pins.clone(), settings)? {
            Decided::Read(next) => {
                assert!(reads.len() < 3, "reads ask for more forever: {reads:?}");
                reads.push(next);
            }
            Decided::Write(decision) => return Ok((*decision, reads)),
        }
    }
}

fn conversation(turns: usize) -> Vec<Message> {
    (0..turns)
        .flat_map(|i| {
            [
                Message::user(format!("question {i}"), i as i64 * 2),
                Message::assistant(format!("answer {i}"), i as i64 * 2 + 1),
            ]
        })
        .collect()
}

#[test]
fn a_new_conversation_reads_nothing_and_stores_its_details_first() {
    let s = settings(HistoryPolicy::LastN, 4);
    let info = info();
    let ask = ask("Hello there", &[], None);
    assert_eq!(to_read(&ask, &info, true, &s), Read::Nothing);
    let decision = write(decide(&ask, &info, true, Tail::default(), None, &s));
    assert!(decision.details_first);
    assert_eq!(decision.cut, None);
    assert_eq!(decision.prune, None);
    assert_eq!(decision.info.title, "Hello there");
    assert_eq!(decision.sent.total, 1);
    assert_eq!(decision.sent.tail.len(), 1);
    let stored = decision.store.expect("the message is stored");
    assert_eq!(stored.text, "Hello there");
    // The message sent and the message stored share one id (the page marks it by that id).
    assert_eq!(stored.id(), decision.sent.tail[0].id());
}

#[test]
fn a_continued_conversation_reads_the_tail_its_policy_needs() {
    let s = settings(HistoryPolicy::LastN, 4);
    let stored = conversation(50);
    let (decision, reads) =
        decide_from(&stored, &ask("next", &[], None), &info(), false, &s).unwrap();
    assert_eq!(reads.len(), 1);
    let Read::Tail(n) = reads[0] else {
        panic!("expected a tail read, got {reads:?}")
    };
    assert!(n < stored.len());
    assert!(!decision.details_first);
    assert_eq!(decision.sent.total, 101);
    // `all` has no tail: it reads everything.
    let all = settings(HistoryPolicy::All, 4);
    assert_eq!(
        to_read(&ask("next", &[], None), &info(), false, &all),
        Read::Whole
    );
}

#[test]
fn pinned_messages_before_the_tail_are_read_beside_it_or_the_turn_reads_everything() {
    let s = settings(HistoryPolicy::LastN, 2);
    let mut stored = conversation(30);
    stored[2].send = Some(SendMark::Always);
    let info = ConversationInfo {
        pinned: 1,
        ..info()
    };
    let next = ask("next", &[], None);
    // The store finds the pin: the tail is enough, and the pin goes with it.
    let (decision, reads) = decide_from(&stored, &next, &info, false, &s).unwrap();
    assert!(matches!(reads[..], [Read::Tail(_)]), "{reads:?}");
    assert_eq!(decision.sent.older_pins, [(2, stored[2].clone())]);
    assert!(!decision.sent.tail.contains(&stored[2]));
    // A store that cannot find pins, or finds another number than the details count
    // (they changed since): everything is read, and the pin is in it.
    for pins in [None, Some(Vec::new())] {
        let (decision, reads) = decide_with_pins(&stored, pins, &next, &info, false, &s).unwrap();
        assert_eq!(reads.last(), Some(&Read::Whole));
        assert!(decision.sent.tail.contains(&stored[2]));
        assert!(decision.sent.older_pins.is_empty());
    }
}

#[test]
fn an_edit_cuts_the_last_user_message_and_what_follows() {
    let s = settings(HistoryPolicy::All, 10);
    let mut stored = conversation(3);
    let last_user = stored[4].id().into_owned();
    let ask = ask("edited", &[], Some(&last_user));
    let (decision, reads) = decide_from(&stored, &ask, &info(), false, &s).unwrap();
    assert_eq!(reads, vec![Read::Whole]);
    let cut = decision.cut.clone().expect("a cut");
    assert_eq!((cut.keep, cut.total), (4, 6));
    apply(&mut stored, &decision);
    let texts: Vec<_> = stored.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(
        texts,
        ["question 0", "answer 0", "question 1", "answer 1", "edited"]
    );
    assert_eq!(decision.sent.total, 5);
}

#[test]
fn any_user_message_can_be_edited_and_what_followed_it_becomes_a_version() {
    let s = settings(HistoryPolicy::All, 10);
    let stored = conversation(3);
    let first = stored[0].id().into_owned();
    let reply = stored[5].id().into_owned();
    assert_eq!(
        decide_from(&stored, &ask("x", &[], Some(&reply)), &info(), false, &s).unwrap_err(),
        Refusal::NotUserMessage
    );
    let (decision, _) =
        decide_from(&stored, &ask("x", &[], Some(&first)), &info(), false, &s).unwrap();
    let cut = decision.cut.expect("a cut");
    assert_eq!((cut.keep, cut.parent), (0, None));
    assert_eq!(
        cut.moved.len(),
        6,
        "the whole old conversation stays as a version"
    );
    assert_eq!(decision.sent.tail.len(), 1);
    assert_eq!(
        decide_from(&stored, &ask("x", &[], Some("nope")), &info(), false, &s).unwrap_err(),
        Refusal::NoMessage("nope".into())
    );
    // A new conversation has no message to edit.
    assert_eq!(
        decide_from(&[], &ask("x", &[], Some(&first)), &info(), true, &s).unwrap_err(),
        Refusal::NoMessage(first.clone())
    );
}

#[test]
fn a_regeneration_drops_the_reply_and_sends_the_last_question_again() {
    let s = settings(HistoryPolicy::All, 10);
    let mut stored = conversation(2);
    let (decision, _) = decide_from(&stored, &Ask::Regenerate, &info(), false, &s).unwrap();
    assert_eq!(decision.store, None);
    assert_eq!(decision.sent.tail.last().unwrap().text, "question 1");
    assert_eq!(decision.sent.total, 3);
    apply(&mut stored, &decision);
    assert_eq!(stored.len(), 3);
    // Nothing follows the question (a failed reply): nothing to cut.
    let (decision, _) = decide_from(&stored, &Ask::Regenerate, &info(), false, &s).unwrap();
    assert_eq!(decision.cut, None);
    // Nothing to reply to.
    let only_reply = vec![Message::assistant("hello", 1)];
    assert_eq!(
        decide_from(&only_reply, &Ask::Regenerate, &info(), false, &s).unwrap_err(),
        Refusal::NothingToRegenerate
    );
    assert_eq!(
        decide_from(&[], &Ask::Regenerate, &info(), true, &s).unwrap_err(),
        Refusal::NothingToRegenerate
    );
}

#[test]
fn a_longer_retention_is_stored_with_the_details_before_the_message() {
    let s = settings(HistoryPolicy::LastN, 4);
    let stored = conversation(3);
    let two = NonZeroU32::new(2).unwrap();
    let entries = [entry("screen text", Save::Turns(two))];
    let (decision, _) =
        decide_from(&stored, &ask("look", &entries, None), &info(), false, &s).unwrap();
    assert!(decision.details_first);
    assert_eq!(decision.info.context_turns, 2);
    // The same retention again writes only the message.
    let info = ConversationInfo {
        context_turns: 2,
        ..info()
    };
    let (decision, _) =
        decide_from(&stored, &ask("again", &entries, None), &info, false, &s).unwrap();
    assert!(!decision.details_first);
}

#[test]
fn an_expired_block_is_pruned_where_it_is_stored() {
    let s = settings(HistoryPolicy::LastN, 2);
    let one = NonZeroU32::new(1).unwrap();
    let mut stored = conversation(20);
    let mut info = info();
    let entries = [entry("screen text", Save::Turns(one))];
    for (i, entries) in [&entries[..], &[], &[]].into_iter().enumerate() {
        let text = format!("turn {i}");
        let (decision, _) =
            decide_from(&stored, &ask(&text, entries, None), &info, false, &s).unwrap();
        apply(&mut stored, &decision);
        stored.push(Message::assistant("ok", 0));
        info = decision.info;
    }
    assert!(stored.iter().all(|m| m.context.is_empty()), "{stored:#?}");
    assert_eq!(stored.len(), 46);
}

#[test]
fn the_call_names_the_message_sent_and_records_the_turn() {
    let s = settings(HistoryPolicy::LastN, 2);
    let stored = conversation(5);
    let mut info = info();
    let (decision, _) = decide_from(&stored, &ask("next", &[], None), &info, false, &s).unwrap();
    let message_id = decision.sent.tail.last().unwrap().id().into_owned();
    let limits = ModelLimits::default();
    let input = CallInput {
        agent_id: "helper",
        provider: "openai",
        system: &["Be brief.".to_owned()],
        settings: &s,
        chain: &Chain::default(),
        model: Some(call::Model {
            name: "small",
            limits: &limits,
            window: Some(1000),
            priced: false,
        }),
        tokens: &EstimatedTokens,
        max_ctx: 100_000,
        summary: None,
        max_turns: None,
        tool_tokens: 0,
    };
    let planned = call(&mut info, decision.sent.clone(), true, &input);
    assert_eq!(
        planned.meta.message_id.as_deref(),
        Some(message_id.as_str())
    );
    assert_eq!(planned.meta.model, "small");
    assert_eq!(planned.meta.agent_id, "helper");
    // The system prompt, then lastN 2 (the last stored exchange) and the new question.
    let texts: Vec<_> = planned
        .plan
        .messages
        .iter()
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(texts, ["Be brief.", "question 4", "answer 4", "next"]);
    let recorded = info.last_turn.clone().expect("the turn is recorded");
    assert_eq!(recorded.model, "small");
    assert_eq!(recorded.history, planned.meta.history);
    // A command's call names no message.
    let planned = call(&mut info, decision.sent, false, &input);
    assert_eq!(planned.meta.message_id, None);
}

/// One stored turn of a random conversation: a question (maybe with a block kept for some
/// turns, maybe pinned) and its answer.
#[derive(Clone, Debug)]
struct RandomTurn {
    kept_for: Option<u32>,
    pinned: bool,
}

fn random_turns() -> impl Strategy<Value = Vec<RandomTurn>> {
    prop::collection::vec(
        (
            prop::option::weighted(0.3, 1u32..6),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(kept_for, pinned)| RandomTurn { kept_for, pinned }),
        0..40,
    )
}

/// Builds a conversation turn by turn through `decide`, as the server would.
fn converse(turns: &[RandomTurn], s: &HistorySettings) -> (Vec<Message>, ConversationInfo) {
    let mut stored = Vec::new();
    let mut info = info();
    for (i, turn) in turns.iter().enumerate() {
        let entries: Vec<_> = turn
            .kept_for
            .and_then(NonZeroU32::new)
            .map(|n| entry(&format!("block {i}"), Save::Turns(n)))
            .into_iter()
            .collect();
        let text = format!("question {i}");
        let ask = ask(&text, &entries, None);
        let (decision, _) = decide_from(&stored, &ask, &info, i == 0, s).unwrap();
        apply(&mut stored, &decision);
        info = decision.info;
        if turn.pinned {
            stored.last_mut().unwrap().send = Some(SendMark::Always);
            info.pinned += 1;
        }
        stored.push(Message::assistant(format!("answer {i}"), i as i64));
    }
    (stored, info)
}

fn policies() -> impl Strategy<Value = HistorySettings> {
    (
        prop::sample::select(vec![
            HistoryPolicy::LastN,
            HistoryPolicy::All,
            HistoryPolicy::None,
        ]),
        -1i64..12,
    )
        .prop_map(|(policy, length)| settings(policy, length))
}

proptest! {
    /// Reading a tail never changes a turn: the model receives the same messages, and the
    /// store ends the same, as when the whole conversation was read.
    #[test]
    fn a_tail_read_decides_as_the_whole_conversation_would(
        turns in random_turns(),
        s in policies(),
        kept_for in prop::option::of(1u32..4),
    ) {
        let (stored, info) = converse(&turns, &s);
        let is_new = stored.is_empty();
        let entries: Vec<_> = kept_for
            .and_then(NonZeroU32::new)
            .map(|n| entry("now", Save::Turns(n)))
            .into_iter()
            .collect();
        let ask = ask("the last question", &entries, None);
        let (from_tail, _) = decide_from(&stored, &ask, &info, is_new, &s).unwrap();
        let from_whole = write(decide(&ask, &info, is_new, whole(&stored), None, &s));
        let limits = ModelLimits::default();
        let input = CallInput {
            agent_id: "a",
            provider: "p",
            system: &[],
            settings: &s,
            chain: &Chain::default(),
            model: Some(call::Model { name: "m", limits: &limits, window: None, priced: false }),
            tokens: &EstimatedTokens,
            max_ctx: 1_000_000,
            summary: None,
            max_turns: None,
            tool_tokens: 0,
        };
        let (mut a, mut b) = (info.clone(), info.clone());
        let tail_plan = call(&mut a, from_tail.sent.clone(), true, &input).plan;
        let whole_plan = call(&mut b, from_whole.sent.clone(), true, &input).plan;
        prop_assert_eq!(&tail_plan.messages, &whole_plan.messages);
        prop_assert_eq!(tail_plan.report.messages_stored, whole_plan.report.messages_stored);
        prop_assert_eq!(tail_plan.report.first_sent_index, whole_plan.report.first_sent_index);
        let (mut x, mut y) = (stored.clone(), stored.clone());
        apply(&mut x, &from_tail);
        apply(&mut y, &from_whole);
        prop_assert_eq!(&x, &y);
        prop_assert_eq!(from_tail.sent.total, x.len());
        prop_assert_eq!(from_tail.info.context_turns, from_whole.info.context_turns);
    }

    /// A regeneration or an edit never loses a message it did not mean to cut: what stays
    /// is the stored conversation's start, up to the last question (kept or replaced).
    #[test]
    fn regenerating_and_editing_keep_everything_before_the_last_question(
        turns in random_turns(),
        extra_replies in 0usize..3,
        edit in any::<bool>(),
    ) {
        let s = settings(HistoryPolicy::All, 10);
        let (mut stored, info) = converse(&turns, &s);
        for i in 0..extra_replies {
            stored.push(Message::assistant(format!("more {i}"), 0));
        }
        let last_user = stored.iter().rposition(|m| m.role == Role::User);
        let id = last_user.map(|i| stored[i].id().into_owned()).unwrap_or_default();
        let ask = if edit { ask("edited", &[], Some(&id)) } else { Ask::Regenerate };
        match (decide_from(&stored, &ask, &info, false, &s), last_user) {
            (Ok((decision, _)), Some(at)) => {
                let before: Vec<_> = stored[..at].iter().map(|m| m.id().into_owned()).collect();
                let mut after = stored.clone();
                apply(&mut after, &decision);
                let last = after.last().unwrap();
                prop_assert_eq!(last.role, Role::User);
                prop_assert_eq!(&last.text, if edit { "edited" } else { &stored[at].text });
                // Pruning may rewrite or drop earlier blocks' messages, never a question.
                let kept: Vec<_> = after[..after.len() - 1].iter().map(|m| m.id().into_owned()).collect();
                prop_assert!(kept.iter().all(|id| before.contains(id) || id.is_empty()));
                let questions = |ms: &[Message]| ms.iter().filter(|m| m.role == Role::User).count();
                prop_assert_eq!(questions(&after[..after.len() - 1]), questions(&stored[..at]));
                prop_assert_eq!(decision.sent.total, after.len());
            }
            (Err(refusal), None) => {
                let expected = if edit { Refusal::NoMessage(id) } else { Refusal::NothingToRegenerate };
                prop_assert_eq!(refusal, expected);
            }
            (result, last_user) => prop_assert!(false, "{result:?} with last user {last_user:?}"),
        }
    }
}
