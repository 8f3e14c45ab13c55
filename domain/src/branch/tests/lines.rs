//! The lines of the versions' proptest: replies with tool exchanges, and what every line
//! must hold (whole exchanges; the next turn sends exactly the path).

use super::super::*;
use super::msg;
use crate::message::{Role, ToolCall};
use proptest::prelude::*;
use std::collections::HashMap;

/// A new message after the path's last, recorded in the tree.
pub(super) fn grow(
    path: &mut Vec<Message>,
    role: Role,
    clock: &mut i64,
    parent_of: &mut HashMap<String, Option<String>>,
) {
    *clock += 1;
    let m = msg(role, *clock);
    let parent = path.last().map(|p| p.id().into_owned());
    parent_of.insert(m.id().into_owned(), parent);
    path.push(m);
}

/// A reply: one message, or (every other one) a tool exchange: the call, its result, then
/// the answer.
pub(super) fn reply(
    path: &mut Vec<Message>,
    clock: &mut i64,
    parent_of: &mut HashMap<String, Option<String>>,
) {
    grow(path, Role::Assistant, clock, parent_of);
    if *clock % 2 == 0 {
        let call = path.last_mut().expect("grown");
        call.tool_calls.push(ToolCall {
            id: format!("call-{}", call.ts),
            name: "clock".into(),
            arguments: "{}".into(),
        });
        let result = exchange_result(call, parent_of);
        path.push(result);
        grow(path, Role::Assistant, clock, parent_of);
    }
}

/// The `tool` message answering the call `call` opens, after it in the tree.
fn exchange_result(call: &Message, parent_of: &mut HashMap<String, Option<String>>) -> Message {
    let answer = crate::message::ToolAnswer {
        tool_call_id: call.tool_calls[0].id.clone(),
        name: "clock".into(),
        ok: true,
        ms: 1,
        bytes: 5,
        removed_after: None,
    };
    let text = crate::block::Part::Text {
        text: "12:00".into(),
    };
    let mut result = Message::tool_result(answer, vec![text], None, call.ts);
    result.ensure_id();
    parent_of.insert(result.id().into_owned(), Some(call.id().into_owned()));
    result
}

/// Whether every call in `line` is followed at once by its result, and every result
/// follows its call: no exchange is split.
fn exchanges_whole(line: &[Message]) -> bool {
    line.iter().enumerate().all(|(i, m)| {
        let call_answered = m.tool_calls.iter().all(|c| {
            line.get(i + 1)
                .is_some_and(|next| next.answers() == Some(c.id.as_str()))
        });
        let result_called = m.answers().is_none_or(|id| {
            i.checked_sub(1)
                .is_some_and(|p| line[p].tool_calls.iter().any(|c| c.id == id))
        });
        call_answered && result_called
    })
}

/// What the next turn sends (policy `all`, no processor, a window wider than the
/// conversation): exactly the chosen path, then the new question, whatever versions exist.
pub(super) fn check_the_next_turn_sends_the_path(path: &[Message]) -> Result<(), TestCaseError> {
    use crate::chain::{Chain, EstimatedTokens, ModelLimits};
    use crate::history::{HistoryLength, HistoryPolicy};
    let mut tail = path.to_vec();
    let mut next = Message::new(Role::User, "next", i64::MAX);
    next.ensure_id();
    tail.push(next);
    let settings =
        crate::settings::HistorySettings::fixed(HistoryPolicy::All, HistoryLength::new(20), true);
    let conversation = tail.clone().into();
    let chain = Chain::from_names::<&str>(&[]).unwrap();
    let plan = crate::plan::plan(crate::plan::PlanInput {
        system: &["prompt".into()],
        tail: &conversation,
        stored_total: tail.len(),
        settings: &settings,
        chain: &chain,
        model: &ModelLimits::default(),
        max_ctx: 10_000,
        tokens: &EstimatedTokens,
        context: None,
        summary: None,
        older_pins: &[],
        capped: false,
    });
    let sent: Vec<String> = plan
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .map(|m| m.id().into_owned())
        .collect();
    let path_ids: Vec<String> = tail.iter().map(|m| m.id().into_owned()).collect();
    prop_assert_eq!(sent, path_ids);
    Ok(())
}

/// No exchange is split on the path, nor on any version's line (the path it would make if
/// chosen), nor does any version start or end inside one.
pub(super) fn check_exchanges_whole(
    path: &[Message],
    branches: &Branches,
) -> Result<(), TestCaseError> {
    prop_assert!(exchanges_whole(path), "the path splits an exchange");
    for b in &branches.branches {
        let (first, last) = (b.messages.first().unwrap(), b.messages.last().unwrap());
        prop_assert!(first.answers().is_none(), "a version starts with a result");
        prop_assert!(last.tool_calls.is_empty(), "a version ends with a call");
        let mut line = path.to_vec();
        if let Some(change) = choose(path, branches, &last.id()).unwrap() {
            change.apply(&mut line);
        }
        prop_assert!(
            exchanges_whole(&line),
            "a version's line splits an exchange"
        );
    }
    Ok(())
}
