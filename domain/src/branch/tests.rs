use super::*;
use crate::message::Role;
use proptest::prelude::*;

mod lines;
use lines::{check_exchanges_whole, check_the_next_turn_sends_the_path, grow, reply};

fn msg(role: Role, n: i64) -> Message {
    let mut m = Message::new(role, format!("{role} {n}"), n);
    m.ensure_id();
    m
}

fn ids(messages: &[Message]) -> Vec<String> {
    messages.iter().map(|m| m.text.clone()).collect()
}

/// A path of `n` alternating questions and replies, times 1..=n.
fn linear(n: i64) -> Vec<Message> {
    (1..=n)
        .map(|i| {
            msg(
                if i % 2 == 1 {
                    Role::User
                } else {
                    Role::Assistant
                },
                i,
            )
        })
        .collect()
}

#[test]
fn a_conversation_without_branches_is_one_path_with_no_versions() {
    let path = linear(4);
    let versions = Branches::default().versions(&path, None);
    assert_eq!(versions, vec![None; 4]);
    assert!(Branches::default().problems(&path).is_empty());
}

#[test]
fn a_regeneration_keeps_the_old_reply_as_a_version_beside_the_new_one() {
    let mut path = linear(4);
    let change = branch_off(&path, 3, Branches::default()).unwrap();
    assert!(change.still_fits(&path));
    change.apply(&mut path);
    assert_eq!(ids(&path), ["user 1", "assistant 2", "user 3"]);
    let branches = change.branches;
    assert_eq!(branches.branches[0].parent, Some(path[2].id().into_owned()));
    path.push(msg(Role::Assistant, 9));
    let versions = branches.versions(&path, None);
    let v = versions[3].clone().unwrap();
    assert_eq!((v.n, v.of), (2, 2));
    assert_eq!(v.prev.as_deref(), Some(&*linear(4)[3].id()));
    assert_eq!(v.next, None);
    assert_eq!(versions[..3], [None, None, None]);
}

#[test]
fn choosing_a_version_swaps_it_with_the_path_and_back() {
    let original = linear(6);
    let mut path = original.clone();
    // Edit the second question (message 3): it and what followed become a version.
    let change = branch_off(&path, 2, Branches::default()).unwrap();
    change.apply(&mut path);
    path.extend([msg(Role::User, 10), msg(Role::Assistant, 11)]);
    let mut branches = change.branches;
    let edited = path.clone();

    let back = choose(&path, &branches, &original[2].id())
        .unwrap()
        .unwrap();
    assert!(back.still_fits(&path));
    back.apply(&mut path);
    branches = back.branches;
    assert_eq!(
        path, original,
        "the old question and all its turns come back"
    );
    let v = branches.versions(&path, None)[2].clone().unwrap();
    assert_eq!((v.n, v.of), (1, 2));
    assert_eq!(v.next.as_deref(), Some(&*edited[2].id()));

    let again = choose(&path, &branches, &edited[2].id()).unwrap().unwrap();
    again.apply(&mut path);
    assert_eq!(path, edited);
    assert!(again.branches.problems(&path).is_empty());
    assert_eq!(again.branches.messages(), 4);
    // Choosing a message that is on the path changes nothing.
    assert_eq!(choose(&path, &again.branches, &path[1].id()), Ok(None));
    assert_eq!(
        choose(&path, &again.branches, "nope"),
        Err(BranchError::NoMessage("nope".into()))
    );
}

/// Applies `change` as a store would, checking that it fits and leaves no problem.
fn run(path: &mut Vec<Message>, branches: &mut Branches, change: Rebranch) {
    assert!(change.still_fits(path));
    change.apply(path);
    *branches = change.branches;
    assert!(branches.problems(path).is_empty(), "{branches:?}");
}

#[test]
fn a_nested_choice_is_remembered_when_its_branch_leaves_and_comes_back() {
    // Path a1 b2 c3 d4; regenerate d4 -> d5; edit c3 -> c6 d7; back to c3: d5 (the last
    // chosen reply to c3), not d4.
    let (mut path, mut branches) = (linear(4), Branches::default());
    let change = branch_off(&path, 3, Branches::default()).unwrap();
    run(&mut path, &mut branches, change);
    path.push(msg(Role::Assistant, 5));
    let c3 = path[2].clone();
    let change = branch_off(&path, 2, branches.clone()).unwrap();
    run(&mut path, &mut branches, change);
    path.extend([msg(Role::User, 6), msg(Role::Assistant, 7)]);
    let change = choose(&path, &branches, &c3.id()).unwrap().unwrap();
    run(&mut path, &mut branches, change);
    assert_eq!(
        ids(&path),
        ["user 1", "assistant 2", "user 3", "assistant 5"]
    );
    // The reply d4 is still reachable from here.
    let v = branches.versions(&path, None)[3].clone().unwrap();
    assert_eq!((v.n, v.of), (2, 2));
    let change = choose(&path, &branches, &v.prev.unwrap()).unwrap().unwrap();
    run(&mut path, &mut branches, change);
    assert_eq!(
        ids(&path),
        ["user 1", "assistant 2", "user 3", "assistant 4"]
    );
    // Choosing a message deep in another version takes the path that leads to it.
    let deep = msg(Role::Assistant, 7).id().into_owned();
    let change = choose(&path, &branches, &deep).unwrap().unwrap();
    run(&mut path, &mut branches, change);
    assert_eq!(
        ids(&path),
        ["user 1", "assistant 2", "user 6", "assistant 7"]
    );
    // Off the path: c3 with its two replies.
    assert_eq!(branches.messages(), 3);
}

#[test]
fn versions_of_the_first_message_hang_off_nothing() {
    let mut path = linear(2);
    let change = branch_off(&path, 0, Branches::default()).unwrap();
    change.apply(&mut path);
    assert!(path.is_empty());
    path.push(msg(Role::User, 5));
    let v = change.branches.versions(&path, None)[0].clone().unwrap();
    assert_eq!((v.n, v.of), (2, 2));
    let back = choose(&path, &change.branches, &v.prev.unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(back.keep, 0);
    back.apply(&mut path);
    assert_eq!(path, linear(2));
}

#[test]
fn the_leftovers_of_an_interrupted_change_are_never_shown_nor_lost() {
    let mut path = linear(4);
    let change = branch_off(&path, 2, Branches::default()).unwrap();
    // A crash after the branches were written, before the path: the branch duplicates the
    // path's end, and is not shown as a version.
    let interim = change.interim(&path);
    assert_eq!(interim.versions(&path, None), vec![None; 4]);
    assert!(interim.tidy(&path).is_empty());
    change.apply(&mut path);
    path.push(msg(Role::User, 7));
    let branches = change.branches.clone();
    let swap = choose(&path, &branches, &linear(4)[2].id())
        .unwrap()
        .unwrap();
    // Crash after the interim branches and the path were written: nothing is shown twice.
    let interim = swap.interim(&path);
    let mut moved = path.clone();
    swap.apply(&mut moved);
    let shown = interim.tidy(&moved);
    assert_eq!(shown, swap.branches);
    // Crash before the path was written: every message is still stored somewhere.
    let stored: HashSet<String> = path
        .iter()
        .chain(interim.branches.iter().flat_map(|b| &b.messages))
        .map(|m| m.text.clone())
        .collect();
    assert_eq!(stored.len(), 5);
}

#[test]
fn a_branch_goes_with_the_message_it_hangs_off() {
    let path = linear(4);
    let off = |parent: Option<&Message>, n| {
        Branch::new(
            parent.map(|p| p.id().into_owned()),
            vec![msg(Role::User, n)],
        )
    };
    let (a10, u20) = (msg(Role::User, 10), msg(Role::User, 20));
    let mut branches = Branches {
        branches: vec![
            off(Some(&path[0]), 10),
            off(Some(&a10), 11),
            off(Some(&path[2]), 20),
            off(None, 30),
            off(Some(&u20), 21),
        ],
    };
    // The path's first two messages trimmed (max_turns): what hangs off them goes too.
    let trimmed = path[2..].to_vec();
    assert_eq!(branches.drop_orphans(&trimmed, true), 3);
    let left: Vec<i64> = branches.branches.iter().map(|b| b.messages[0].ts).collect();
    assert_eq!(left, [20, 21]);
    assert!(branches.problems(&trimmed).is_empty());
}

#[test]
fn cap_drops_the_oldest_branches_whole() {
    let path = linear(2);
    let mut branches = Branches::default();
    for n in [10, 20, 30] {
        branches.branches.push(Branch::new(
            Some(path[1].id().into_owned()),
            vec![msg(Role::User, n), msg(Role::Assistant, n + 1)],
        ));
    }
    branches.cap(&path, 4);
    let firsts: Vec<i64> = branches.branches.iter().map(|b| b.messages[0].ts).collect();
    assert_eq!(firsts, [20, 30]);
}

#[test]
fn problems_name_what_is_damaged() {
    let path = linear(2);
    let a = msg(Role::User, 10);
    let b = msg(Role::User, 11);
    let branches = Branches {
        branches: vec![
            Branch::new(Some(b.id().into_owned()), vec![a.clone()]),
            Branch::new(Some(a.id().into_owned()), vec![b.clone()]),
            Branch::new(None, vec![]),
            Branch::new(None, vec![path[0].clone()]),
        ],
    };
    let problems = branches.problems(&path);
    assert!(problems.iter().any(|p| p.contains("holds no message")));
    assert!(problems.iter().any(|p| p.contains("stored 2 times")));
    assert_eq!(
        problems
            .iter()
            .filter(|p| p.contains("does not lead back"))
            .count(),
        2
    );
    assert_eq!(
        choose(&path, &branches, &a.id()),
        Err(BranchError::Unreachable(a.id().into_owned()))
    );
}

#[derive(Clone, Debug)]
enum Op {
    Turn,
    /// Edit the n-th user message (modulo how many there are).
    Edit(usize),
    Regenerate,
    /// Choose the n-th of all stored messages (modulo).
    Choose(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Turn),
        2 => any::<usize>().prop_map(Op::Edit),
        2 => Just(Op::Regenerate),
        3 => any::<usize>().prop_map(Op::Choose),
    ]
}

/// The path is a line of the tree `parent_of` records, every branch follows it too, every
/// message is stored once, and the branches have no problem.
fn check_tree(
    path: &[Message],
    branches: &Branches,
    parent_of: &HashMap<String, Option<String>>,
) -> Result<(), TestCaseError> {
    for (i, m) in path.iter().enumerate() {
        let expected = i.checked_sub(1).map(|p| path[p].id().into_owned());
        prop_assert_eq!(&parent_of[&*m.id()], &expected);
    }
    for b in &branches.branches {
        let mut parent = b.parent.clone();
        for m in &b.messages {
            prop_assert_eq!(&parent_of[&*m.id()], &parent);
            parent = Some(m.id().into_owned());
        }
    }
    let stored = path.len() + branches.messages();
    prop_assert_eq!(stored, parent_of.len(), "nothing lost, nothing twice");
    prop_assert!(branches.problems(path).is_empty());
    Ok(())
}

proptest! {
    /// Random edits, regenerations and switches, with tool exchanges among the replies: the
    /// path is always a whole line of the tree the operations made (each message after its
    /// parent), nothing is ever lost, the chosen message is on the path, the stored
    /// branches have no problem, and no exchange is ever split between the path and a
    /// version (choosing a result or a call in a version brings its whole exchange), and
    /// the next turn sends exactly the chosen path.
    #[test]
    fn every_change_keeps_the_tree_and_chooses_a_path_of_it(ops in prop::collection::vec(op(), 1..40)) {
        let mut path: Vec<Message> = Vec::new();
        let mut branches = Branches::default();
        let mut parent_of: HashMap<String, Option<String>> = HashMap::new();
        let mut clock = 0;
        for op in ops {
            let change = match op {
                Op::Turn => None,
                Op::Edit(n) => {
                    let users: Vec<usize> = (0..path.len()).filter(|&i| path[i].role == Role::User).collect();
                    if users.is_empty() { continue; }
                    branch_off(&path, users[n % users.len()], branches.clone())
                }
                Op::Regenerate => match path.iter().rposition(|m| m.role == Role::User) {
                    Some(last) => branch_off(&path, last + 1, branches.clone()),
                    None => continue,
                },
                Op::Choose(n) => {
                    let all: Vec<Message> = path.iter().chain(branches.branches.iter().flat_map(|b| &b.messages)).cloned().collect();
                    if all.is_empty() { continue; }
                    let target = all[n % all.len()].id().into_owned();
                    let change = choose(&path, &branches, &target).unwrap();
                    if let Some(change) = &change {
                        let mut after = path.clone();
                        change.apply(&mut after);
                        prop_assert!(after.iter().any(|m| m.id() == target));
                    }
                    change
                }
            };
            if let Some(change) = change {
                prop_assert!(change.still_fits(&path));
                change.apply(&mut path);
                branches = change.branches;
            }
            match op {
                Op::Choose(_) => {}
                Op::Regenerate => reply(&mut path, &mut clock, &mut parent_of),
                Op::Turn | Op::Edit(_) => {
                    grow(&mut path, Role::User, &mut clock, &mut parent_of);
                    reply(&mut path, &mut clock, &mut parent_of);
                }
            }
            check_tree(&path, &branches, &parent_of)?;
            check_exchanges_whole(&path, &branches)?;
            check_the_next_turn_sends_the_path(&path)?;
        }
    }
}

#[test]
fn a_summary_goes_with_the_messages_it_describes_and_comes_back_with_them() {
    use serde_json::json;
    let path = linear(6);
    let summary = json!({"facts": ["from the first version"], "covers": {"messages": 4, "untilTs": 4, "updatedMs": 9}});
    // An edit at message 5 keeps what the summary covers: it stays.
    let mut late = branch_off(&path, 4, Branches::default()).unwrap();
    assert_eq!(late.move_summary(Some(&summary)), SummaryMove::Keep);
    // An edit of message 3 takes covered messages off the path: the summary goes with them.
    let mut early = branch_off(&path, 2, Branches::default()).unwrap();
    let SummaryMove::Put(now) = early.move_summary(Some(&summary)) else {
        panic!("the summary must leave the path");
    };
    assert!(crate::summary::says_nothing(&now));
    let mut edited = path.clone();
    early.apply(&mut edited);
    edited.push(msg(Role::User, 20));
    // Back to the first version: its summary comes back.
    let mut back = choose(&edited, &early.branches, &path[2].id())
        .unwrap()
        .unwrap();
    assert_eq!(
        back.move_summary(Some(&now)),
        SummaryMove::Put(summary.clone())
    );
    assert!(back.branches.branches.iter().all(|b| b.summary.is_none()));
}

#[test]
fn versions_off_a_removed_message_hang_off_the_one_before_it() {
    // q1 a2 q3 a4 q5 a6: a version of the reply to q3 (off q3), one off q5.
    let path = linear(6);
    let mut branches = Branches::default();
    branches.branches.push(Branch::new(
        Some(path[2].id().into_owned()),
        vec![msg(Role::Assistant, 20)],
    ));
    branches.branches.push(Branch::new(
        Some(path[4].id().into_owned()),
        vec![msg(Role::Assistant, 21)],
    ));
    // Nothing hangs off a2: nothing to do.
    assert_eq!(branches.reparented(&path, &[1]), None);
    // q3 and a4 go: the version off q3 hangs off a2; the one off q5 stays.
    let moved = branches.reparented(&path, &[2, 3]).unwrap();
    assert_eq!(moved.branches[0].parent, Some(path[1].id().into_owned()));
    assert_eq!(moved.branches[1].parent, Some(path[4].id().into_owned()));
    let mut after = path.clone();
    after.drain(2..4);
    assert!(
        moved.problems(&after).is_empty(),
        "{:?}",
        moved.problems(&after)
    );
    // The first messages go: the version hangs off the start.
    let first = Branches {
        branches: vec![Branch::new(
            Some(path[0].id().into_owned()),
            vec![msg(Role::Assistant, 22)],
        )],
    };
    assert_eq!(
        first.reparented(&path, &[0]).unwrap().branches[0].parent,
        None
    );
}
