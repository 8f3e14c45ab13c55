use super::*;
use proptest::prelude::*;

fn text(t: &str) -> Block {
    Block::Text { text: t.into() }
}

fn entry(source: &str, blocks: &[&str], display: bool, save: Save) -> ContextEntry {
    ContextEntry {
        source: source.into(),
        blocks: blocks.iter().map(|t| text(t)).collect(),
        display,
        save,
    }
}

fn turns(n: u32) -> Save {
    Save::Turns(NonZeroU32::new(n).unwrap())
}

fn n(n: u32) -> Retention {
    NonZeroU32::new(n)
}

/// The text blocks of a message's context, in order.
fn block_texts(m: &Message) -> Vec<String> {
    m.context
        .iter()
        .filter_map(|b| match &b.part {
            Part::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// Runs a conversation as the server does: at each turn, prune what is stored, send it and
/// the new message's displayed variant, store the persisted variant and a reply. Returns,
/// per turn, the context block texts the model received, and the final stored history.
fn converse(
    per_turn: &[Vec<ContextEntry>],
    extra_turns: usize,
) -> (Vec<Vec<String>>, Vec<Message>) {
    let mut stored: Vec<Message> = Vec::new();
    let mut seen = Vec::new();
    let empty = Vec::new();
    for t in 0..per_turn.len() + extra_turns {
        let entries = per_turn.get(t).unwrap_or(&empty);
        let pruning = prune(std::mem::take(&mut stored));
        stored = pruning.messages;
        let built = build(&format!("question {t}"), entries, t as i64);
        let sent: Vec<String> = stored
            .iter()
            .chain([&built.display])
            .flat_map(block_texts)
            .collect();
        seen.push(sent);
        stored.push(built.persisted);
        stored.push(Message::assistant(format!("answer {t}"), t as i64));
    }
    (seen, stored)
}

fn turns_seeing(seen: &[Vec<String>], block: &str) -> Vec<usize> {
    (0..seen.len())
        .filter(|&t| seen[t].iter().any(|b| b == block))
        .collect()
}

#[test]
fn display_only_is_sent_once_and_never_stored() {
    let (seen, stored) = converse(&[vec![entry("screen", &["shot"], true, Save::No)]], 3);
    assert_eq!(turns_seeing(&seen, "shot"), [0]);
    assert!(stored.iter().all(|m| m.context.is_empty()));
}

#[test]
fn saved_for_n_turns_is_sent_on_its_turn_and_the_next_n_then_is_gone() {
    for keep in 1..=3u32 {
        let (seen, stored) = converse(&[vec![entry("log", &["tail"], true, turns(keep))]], 5);
        let expected: Vec<usize> = (0..=keep as usize).collect();
        assert_eq!(turns_seeing(&seen, "tail"), expected, "save {keep}");
        assert!(stored.iter().all(|m| m.context.is_empty()), "save {keep}");
        // The user's own text stays.
        assert_eq!(stored[0].text, "question 0");
    }
}

#[test]
fn saved_but_not_displayed_is_sent_only_from_history() {
    let (seen, _) = converse(&[vec![entry("notes", &["n"], false, turns(2))]], 4);
    assert_eq!(turns_seeing(&seen, "n"), [1, 2]);
}

#[test]
fn saved_for_good_stays() {
    let (seen, stored) = converse(&[vec![entry("file", &["f"], true, Save::Always)]], 4);
    assert_eq!(turns_seeing(&seen, "f"), [0, 1, 2, 3, 4]);
    assert_eq!(block_texts(&stored[0]), ["f"]);
}

#[test]
fn mixed_retentions_in_one_source_expire_block_by_block_under_one_header() {
    let entries = vec![
        entry("ide", &["short"], true, turns(1)),
        entry("ide", &["long"], true, turns(3)),
    ];
    let built = build("q", &entries, 0);
    let headers: Vec<_> = built
        .persisted
        .context
        .iter()
        .filter(|b| b.part.kind() == "header")
        .collect();
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0].retention, n(3), "the largest N");
    let (seen, stored) = converse(&[entries], 4);
    assert_eq!(turns_seeing(&seen, "short"), [0, 1]);
    assert_eq!(turns_seeing(&seen, "long"), [0, 1, 2, 3]);
    assert!(
        stored[0].context.is_empty(),
        "header gone with the last block"
    );
}

#[test]
fn two_sources_get_a_header_each_in_order_of_appearance() {
    let built = build(
        "q",
        &[
            entry("b", &["b1"], true, Save::Always),
            entry("a", &["a1"], true, turns(2)),
            entry("b", &["b2"], true, turns(1)),
        ],
        0,
    );
    let parts: Vec<String> = built
        .display
        .context
        .iter()
        .map(|b| b.part.sent_text().unwrap().into_owned())
        .collect();
    assert_eq!(
        parts,
        ["[Context from b]", "b1", "b2", "[Context from a]", "a1"]
    );
    let retentions: Vec<Retention> = built
        .persisted
        .context
        .iter()
        .map(|b| b.retention)
        .collect();
    // b's header is for good because one of b's entries is.
    assert_eq!(retentions, [None, None, n(1), n(2), n(2)]);
}

#[test]
fn a_header_kept_for_good_outlives_its_blocks_only_when_marked_so() {
    let header = |retention| ContextBlock {
        part: Part::Header { source: "s".into() },
        retention,
    };
    let block = |t: &str, retention| ContextBlock {
        part: Part::Text { text: t.into() },
        retention,
    };
    let message = |context| Message {
        context,
        ..Message::user("q", 0)
    };
    let history = vec![
        message(vec![header(None), block("x", n(1))]),
        message(vec![header(n(1)), block("y", n(1))]),
        Message::user("newest", 2),
    ];
    let pruned = prune(history);
    assert_eq!(pruned.messages[0].context, [header(None)]);
    assert!(pruned.messages[1].context.is_empty());
    assert_eq!(pruned.expired.len(), 2);
    assert_eq!(pruned.edits.len(), 2);
}

#[test]
fn empty_blocks_are_dropped_with_their_retention_and_an_empty_source_has_no_header() {
    let built = build(
        "q",
        &[
            entry("a", &["", "kept"], true, turns(1)),
            entry("empty", &["  "], true, Save::Always),
        ],
        0,
    );
    assert_eq!(built.persisted.context.len(), 2);
    assert_eq!(block_texts(&built.persisted), ["kept"]);
    assert!(built.persisted.context.iter().all(|b| b.retention == n(1)));
}

#[test]
fn a_message_left_without_text_or_blocks_is_removed() {
    let only_context = Message {
        context: vec![
            ContextBlock {
                part: Part::Header { source: "s".into() },
                retention: n(1),
            },
            ContextBlock {
                part: Part::Text { text: "x".into() },
                retention: n(1),
            },
        ],
        ..Message::user("", 0)
    };
    let history = vec![
        only_context.clone(),
        Message::assistant("a", 1),
        Message::user("q", 2),
    ];
    let pruned = prune(history);
    assert_eq!(pruned.messages.len(), 2);
    assert_eq!(
        pruned.edits,
        [Edit {
            index: 0,
            old: only_context,
            new: None
        }]
    );
}

#[test]
fn save_reads_booleans_and_whole_numbers_and_refuses_the_rest() {
    let parse = |json: &str| serde_json::from_str::<Save>(json);
    assert_eq!(parse("false").unwrap(), Save::No);
    assert_eq!(parse("0").unwrap(), Save::No);
    assert_eq!(parse("true").unwrap(), Save::Always);
    assert_eq!(parse("2").unwrap(), turns(2));
    assert!(parse("-1").unwrap_err().to_string().contains("negative"));
    assert!(parse("1.5")
        .unwrap_err()
        .to_string()
        .contains("whole number"));
    assert!(parse("\"2\"").is_err());
    assert!(parse("99999999999")
        .unwrap_err()
        .to_string()
        .contains("too many"));
}

#[test]
fn entries_default_to_displayed_and_not_saved_and_refuse_unknown_fields() {
    let e: ContextEntry =
        serde_json::from_str(r#"{"source":"s","blocks":[{"type":"text","text":"t"}]}"#).unwrap();
    assert!(e.display);
    assert_eq!(e.save, Save::No);
    for bad in [
        r#"{"source":"s","blocks":[],"extra":1}"#,
        r#"{"source":"s","blocks":[{"type":"header","source":"x"}]}"#,
        r#"{"source":"s","blocks":[{"type":"text","text":"t","x":1}]}"#,
    ] {
        assert!(serde_json::from_str::<ContextEntry>(bad).is_err(), "{bad}");
    }
}

const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==";

#[test]
fn validation_names_the_entry_and_what_is_wrong() {
    let with = |source: &str, blocks: Vec<Block>| ContextEntry {
        source: source.into(),
        blocks,
        display: true,
        save: Save::No,
    };
    assert_eq!(with("screen", vec![image(PNG)]).validate(0), Ok(()));
    assert_eq!(
        with("", vec![text("t")]).validate(2),
        Err(ContextError::BadSource { entry: 2 })
    );
    assert!(with(&"x".repeat(65), vec![text("t")]).validate(0).is_err());
    assert!(with(&"x".repeat(64), vec![text("t")]).validate(0).is_ok());
    assert!(with("a\nb", vec![text("t")]).validate(0).is_err());
    assert_eq!(
        with("s", vec![]).validate(1),
        Err(ContextError::NoBlocks { entry: 1 })
    );
    for (url, why) in [
        ("https://example.com/a.png", "allowed type"),
        ("data:image/svg+xml;base64,PHN2Zz4=", "allowed type"),
        ("data:image/png;base64,", "base64"),
        ("data:image/png;base64,iVBO*w0K", "base64"),
        (
            "data:image/jpeg;base64,iVBORw0KGgoAAAANSUhEUg==",
            "declares",
        ),
    ] {
        let error = with("s", vec![text("t"), image(url)])
            .validate(0)
            .unwrap_err();
        assert!(error.to_string().contains(why), "{url}: {error}");
        assert!(
            error.to_string().contains("context[0].blocks[1]"),
            "{error}"
        );
    }
}

fn image(url: &str) -> Block {
    Block::Image { url: url.into() }
}

#[test]
fn a_stored_message_round_trips_with_a_retention_on_every_block() {
    let built = build("q", &[entry("s", &["t"], true, turns(2))], 7);
    let json = serde_json::to_string(&built.persisted).unwrap();
    assert_eq!(
        json,
        r#"{"role":"user","text":"q","ts":7,"context":[{"type":"header","source":"s","retention":2},{"type":"text","text":"t","retention":2}]}"#
    );
    assert_eq!(
        serde_json::from_str::<Message>(&json).unwrap(),
        built.persisted
    );
}

#[test]
fn the_report_says_what_was_displayed_stored_held_and_pruned() {
    let history = vec![
        build("q0", &[entry("log", &["old"], true, turns(1))], 0).persisted,
        Message::assistant("a", 1),
        build("q1", &[entry("log", &["recent"], true, turns(3))], 2).persisted,
        Message::assistant("a", 3),
    ];
    // Pruning before turn 3: q1 is index 0, q0 index 1.
    let pruning = prune(history);
    let entries = [entry("screen", &["now"], false, Save::Always)];
    let report = ContextReport::new(&entries, &pruning);
    assert_eq!(report.pruned.len(), 1);
    assert_eq!(report.pruned[0].label, "3 characters");
    assert_eq!(report.held.len(), 1);
    assert_eq!(report.held[0].turns_left, Some(2));
    assert_eq!(report.current.len(), 1);
    assert!(!report.current[0].displayed);
    assert!(report.current[0].kept_for_good);
}

/// A stored conversation: user messages with context blocks of random retention (headers
/// included) between replies.
fn history() -> impl Strategy<Value = Vec<Message>> {
    let block = (0u32..5, any::<bool>(), any::<bool>()).prop_map(|(keep, image, header)| {
        let part = match (header, image) {
            (true, _) => Part::Header { source: "s".into() },
            (false, true) => Part::Image { url: PNG.into() },
            (false, false) => Part::Text {
                text: format!("t{keep}"),
            },
        };
        ContextBlock {
            part,
            retention: NonZeroU32::new(keep),
        }
    });
    let message = (prop::collection::vec(block, 0..5), 0u8..3, any::<bool>()).prop_map(
        |(context, kind, empty_text)| match kind {
            0 => Message::assistant("a", 0),
            _ => Message {
                context,
                ..Message::user(if empty_text { "" } else { "q" }, 0)
            },
        },
    );
    prop::collection::vec(message, 0..12)
}

proptest! {
    #[test]
    fn pruning_keeps_exactly_the_blocks_whose_time_is_not_up(history in history()) {
        let users = history.iter().filter(|m| m.role == Role::User).count();
        let pruning = prune(history.clone());
        // Every edit names a user message, and applying the edits gives the messages.
        let mut applied = history.clone();
        for edit in pruning.edits.iter().rev() {
            prop_assert_eq!(&applied[edit.index], &edit.old);
            prop_assert_eq!(edit.old.role, Role::User);
            match &edit.new {
                Some(m) => applied[edit.index] = m.clone(),
                None => { applied.remove(edit.index); }
            }
        }
        prop_assert_eq!(&applied, &pruning.messages);
        // Non-header blocks: kept iff alive; user text and other roles untouched.
        let mut age = users;
        let mut kept = pruning.messages.iter();
        for old in &history {
            if old.role == Role::User { age -= 1; }
            let expect: Vec<&ContextBlock> = old.context.iter()
                .filter(|b| b.part.kind() != "header" && alive(b.retention, age))
                .collect();
            let forever_header = old.context.iter()
                .any(|b| b.part.kind() == "header" && b.retention.is_none());
            let removed = old.role == Role::User && old.text.is_empty()
                && !old.context.is_empty() && expect.is_empty() && !forever_header;
            if removed {
                prop_assert!(pruning.edits.iter().any(|e| e.old == *old && e.new.is_none()));
                continue;
            }
            let new = kept.next().unwrap();
            prop_assert_eq!(&new.text, &old.text);
            prop_assert_eq!(new.role, old.role);
            if old.role != Role::User {
                prop_assert_eq!(new, old);
                continue;
            }
            let got: Vec<&ContextBlock> =
                new.context.iter().filter(|b| b.part.kind() != "header").collect();
            prop_assert_eq!(got, expect);
        }
        // Pruning twice is pruning once.
        let again = prune(pruning.messages.clone());
        prop_assert!(again.edits.is_empty());
        prop_assert_eq!(again.messages, pruning.messages);
    }

    #[test]
    fn every_stored_block_has_the_retention_its_entry_asked_for(
        saves in prop::collection::vec((0u32..4, any::<bool>(), any::<bool>()), 1..5)
    ) {
        let entries: Vec<ContextEntry> = saves.iter().enumerate().map(|(i, &(keep, always, display))| {
            let save = if always { Save::Always } else { NonZeroU32::new(keep).map_or(Save::No, Save::Turns) };
            entry(&format!("src{}", i % 2), &[&format!("b{i}")], display, save)
        }).collect();
        let built = build("q", &entries, 0);
        prop_assert_eq!(&built.persisted.text, "q");
        for (i, e) in entries.iter().enumerate() {
            let name = format!("b{i}");
            let stored = built.persisted.context.iter().find(|b| b.part == Part::Text { text: name.clone() });
            prop_assert_eq!(stored.map(|b| b.retention), e.save.retention());
            let shown = built.display.context.iter().any(|b| b.part == Part::Text { text: name.clone() });
            prop_assert_eq!(shown, e.display);
        }
    }
}

#[test]
fn chips_name_each_source_its_kinds_and_when_it_expires() {
    let entries = [
        ContextEntry {
            source: "screen".into(),
            blocks: vec![text("t"), image(PNG), text("u")],
            display: true,
            save: turns(1),
        },
        entry("clock", &["12:00"], true, Save::No),
        entry("notes", &["n"], false, Save::Always),
    ];
    let stored = Chip::of_stored(&build("q", &entries, 0).persisted.context);
    let live: Vec<Chip> = entries.iter().map(Chip::of_entry).collect();
    assert_eq!(
        live[0],
        Chip {
            source: "screen".into(),
            kind: "text, image".into(),
            keep: Some(1)
        }
    );
    assert_eq!(
        stored,
        [live[0].clone(), live[2].clone()],
        "what is not saved has no stored chip"
    );
    // Saved for 1: sent on the next turn, expired from the second on.
    assert!(!live[0].expired(1) && live[0].expired(2));
    assert!(
        !live[1].expired(0) && live[1].expired(1),
        "this message only"
    );
    assert!(!live[2].expired(1000));
    assert_eq!(live[0].keep_label(), "next turn");
    assert_eq!(live[2].keep_label(), "always");
}
