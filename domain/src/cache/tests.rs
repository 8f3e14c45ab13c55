use super::*;
use crate::block::Part;
use crate::context::ContextBlock;

fn system(text: &str) -> Message {
    Message::new(Role::System, text, 0)
}

#[test]
fn breakpoints_close_the_previous_request_and_the_newest_message() {
    let turn = vec![
        system("be brief"),
        Message::user("one", 1),
        Message::assistant("a", 2),
        Message::user("two", 3),
    ];
    // The previous call ended at "one"; this one ends at "two".
    assert_eq!(message_breakpoints(&turn), vec![1, 3]);
    // A first turn: only the newest message (the system prompt is the adapter's).
    assert_eq!(message_breakpoints(&turn[..2]), vec![1]);
    // A tool round: the previous call ended at the user's message, this one at the result.
    let mut asked = Message::assistant("", 4);
    asked.tool_calls.push(crate::message::ToolCall {
        id: "c".into(),
        name: "clock__now".into(),
        arguments: "{}".into(),
    });
    let mut round = turn.clone();
    round.push(asked);
    round.push(Message::new(Role::Tool, "12:00", 5));
    assert_eq!(message_breakpoints(&round), vec![3, 5]);
    assert!(message_breakpoints(&[]).is_empty());
    // Never more than the messages' share of the four.
    assert!(message_breakpoints(&round).len() <= MAX_BREAKPOINTS - 2);
}

#[test]
fn cache_use_splits_the_prompt_and_never_overcounts() {
    let used = CacheUse::of(1000, Some(800), Some(150));
    assert_eq!((used.read, used.written, used.fresh), (800, 150, 50));
    assert_eq!(used.read_percent(), 80);
    // A provider reporting more than the prompt is held to it.
    let odd = CacheUse::of(100, Some(90), Some(50));
    assert_eq!((odd.read, odd.written, odd.fresh), (90, 10, 0));
    assert_eq!(CacheUse::of(0, None, None).read_percent(), 0);
}

fn prefix(messages: &[(Option<usize>, Message)]) -> Prefix {
    Prefix::of(messages.iter().map(|(at, m)| (*at, m)))
}

type Sent = Vec<(Option<usize>, Message)>;

fn history() -> Sent {
    (0..6)
        .map(|i| (Some(i), Message::user(format!("m{i}"), i as i64)))
        .collect()
}

/// The system prompt, then `rest`.
fn with_prompt(rest: &[(Option<usize>, Message)], prompt: &str) -> Prefix {
    let mut all = vec![(None, system(prompt))];
    all.extend(rest.iter().cloned());
    prefix(&all)
}

#[test]
fn a_prefix_change_names_its_first_cause() {
    let history = history();
    let before = with_prompt(&history[..4], "be brief");
    // The next turn adds to the end: the prefix holds.
    assert_eq!(
        prefix_change(&before, &with_prompt(&history, "be brief")),
        None
    );
    // The window dropped the two oldest.
    assert_eq!(
        prefix_change(&before, &with_prompt(&history[2..], "be brief")),
        Some(PrefixChange::Cut {
            dropped: 2,
            by: None
        })
    );
    assert_eq!(
        prefix_change(&before, &with_prompt(&history, "be kind")),
        Some(PrefixChange::System)
    );
    // A summary appears among the system messages.
    let mut summarized = vec![
        (None, system("be brief")),
        (None, crate::summary::summary_message("earlier: m0")),
    ];
    summarized.extend(history[1..].iter().cloned());
    assert_eq!(
        prefix_change(&before, &prefix(&summarized)),
        Some(PrefixChange::Summary)
    );
}

#[test]
fn edits_expiry_and_marks_are_told_apart() {
    let history = history();
    let before = with_prompt(&history[..4], "be brief");
    // An edit of a message sent last turn, and a block that expired.
    let mut edited = history.clone();
    edited[2].1.text = "changed".into();
    assert_eq!(
        prefix_change(&before, &with_prompt(&edited, "be brief")),
        Some(PrefixChange::Edited)
    );
    let mut blocked = history.clone();
    blocked[1].1.context.push(ContextBlock {
        part: Part::Text {
            text: "page".into(),
        },
        retention: None,
    });
    let before_blocks = with_prompt(&blocked[..4], "be brief");
    assert_eq!(
        prefix_change(&before_blocks, &with_prompt(&history, "be brief")),
        Some(PrefixChange::Expired)
    );
    // A message left out in the middle ("Don't send").
    let mut excluded = history.clone();
    excluded.remove(2);
    assert_eq!(
        prefix_change(&before, &with_prompt(&excluded, "be brief")),
        Some(PrefixChange::Marks)
    );
}

#[test]
fn a_cut_names_the_step_that_made_it() {
    use crate::chain::StepReport;
    let step = |name: &str, removed| StepReport {
        name: name.into(),
        removed,
        added: 0,
        kept: 4,
    };
    let cut = PrefixChange::Cut {
        dropped: 1,
        by: None,
    };
    // lastN left the oldest out and the window had nothing to cut: the policy's doing.
    let policy = cut.clone().cut_by(&[
        step("policy", 3),
        step("sliding_window", 0),
        step("role_alternation", 1),
    ]);
    assert_eq!(
        policy.describe(),
        "the history policy left out 1 older message(s)"
    );
    // The policy sent everything, the window cut: the window's.
    let window = cut
        .clone()
        .cut_by(&[step("policy", 0), step("sliding_window", 6)]);
    assert_eq!(window.describe(), "the window cut 1 older message(s)");
    // Both cut: the budget, last, decided where the sent part starts.
    let budget = cut.clone().cut_by(&[
        step("policy", 2),
        step("sliding_window", 4),
        step("token_budget", 2),
    ]);
    assert_eq!(budget.describe(), "the token budget cut 1 older message(s)");
    // Nothing in this call's chain cut (the marks did): said without a cause.
    assert_eq!(
        cut.clone().cut_by(&[step("policy", 0)]).describe(),
        "1 older message(s) were left out"
    );
    // Other changes are left as they are, and a cut stored before `by` existed still reads.
    assert_eq!(
        PrefixChange::System.cut_by(&[step("policy", 3)]),
        PrefixChange::System
    );
    let stored: PrefixChange = serde_json::from_str(r#"{"reason":"cut","dropped":2}"#).unwrap();
    assert_eq!(stored.describe(), "2 older message(s) were left out");
}
