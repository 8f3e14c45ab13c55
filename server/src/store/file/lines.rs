//! `messages.json` as Parlor writes it: a JSON array with one message per line.
//!
//! ```text
//! [
//! {"role":"user","text":"a","ts":1},
//! {"role":"assistant","text":"b","ts":2}
//! ,{"role":"user","text":"c","ts":3}
//! ]
//! ```
//!
//! Every line between the brackets holds one message as compact JSON (a JSON string cannot
//! hold a raw line feed, so a message never spans lines). Each write (a whole file, or one
//! append) is a *batch* of lines: every line of a batch but its last ends with `,`, and the
//! first line of a later batch starts with `,`. The file is plain JSON to any other reader.
//!
//! An append overwrites the closing `]\n` in place with its batch and a new `]\n`, then syncs:
//! it changes no byte of an earlier message and needs neither the earlier messages parsed nor
//! the array re-serialized. A crash in the middle leaves the earlier batches whole followed
//! by part of the new one (or, when the disk wrote the new pages before the one holding the
//! old bracket, the old array followed by stray bytes). [`walk`] tells the two apart from a
//! complete file, and keeps exactly the complete batches, so an append is all or nothing, as
//! a rename is. Counting messages and measuring the array's compact size need no parsing
//! either, and reading the last few messages parses only their lines.

use parlor_domain::Message;
use std::ops::Range;

/// A whole file holding `messages`, as one batch.
pub fn encode(messages: &[Message]) -> serde_json::Result<Vec<u8>> {
    let mut out = b"[\n".to_vec();
    for (i, message) in messages.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",\n");
        }
        serde_json::to_writer(&mut out, message)?;
    }
    if !messages.is_empty() {
        out.push(b'\n');
    }
    out.extend_from_slice(b"]\n");
    Ok(out)
}

/// The bytes that append `messages` to a complete file holding `existing` messages: they are
/// written over its last two bytes (`]\n`).
pub fn batch(messages: &[Message], existing: usize) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    if existing > 0 {
        out.push(b',');
    }
    for (i, message) in messages.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",\n");
        }
        serde_json::to_writer(&mut out, message)?;
    }
    out.extend_from_slice(b"\n]\n");
    Ok(out)
}

/// The bytes that replace a complete file's end from the end of message `first - 1` (from
/// just after the opening `[\n` when `first` is 0) so that `rest` follows it: one batch
/// continuing that message's.
pub fn end_from(first: usize, rest: &[Message]) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, message) in rest.iter().enumerate() {
        if first > 0 || i > 0 {
            out.extend_from_slice(b",\n");
        }
        serde_json::to_writer(&mut out, message)?;
    }
    if first > 0 || !rest.is_empty() {
        out.push(b'\n');
    }
    out.extend_from_slice(b"]\n");
    Ok(out)
}

/// What [`walk`] found in a file that starts like this layout.
#[derive(Debug, PartialEq, Eq)]
pub struct Walk {
    /// The byte ranges of the messages of the complete batches, oldest first (without the
    /// commas around them).
    pub messages: Vec<Range<usize>>,
    /// Whether the file is complete: the complete batches, `]\n`, and nothing else.
    pub complete: bool,
}

/// Walks a file in this layout; `None` when it does not start like one (another writer's
/// JSON, such as the MCP History Store's or an older Parlor's pretty-printed array).
pub fn walk(bytes: &[u8]) -> Option<Walk> {
    if !bytes.starts_with(b"[\n") {
        return None;
    }
    let mut messages = Vec::new();
    // Messages of the batch being read, not yet known to be complete.
    let mut open: Vec<Range<usize>> = Vec::new();
    let mut pos = 2;
    // A line without its line feed ends the walk: an interrupted batch.
    while let Some(len) = bytes[pos..].iter().position(|&b| b == b'\n') {
        let line = pos..pos + len;
        let next = line.end + 1;
        let text = &bytes[line.clone()];
        if text == b"]" && open.is_empty() {
            return Some(Walk {
                messages,
                complete: next == bytes.len(),
            });
        }
        // A leading comma starts a later batch; it is required exactly there.
        let starts_batch = open.is_empty() && !messages.is_empty();
        let (lead, rest) = match text.strip_prefix(b",") {
            Some(rest) => (1, rest),
            None => (0, text),
        };
        if (lead == 1) != starts_batch {
            break;
        }
        let (continues, inner) = match rest.strip_suffix(b",") {
            Some(inner) => (true, inner),
            None => (false, rest),
        };
        if !(inner.starts_with(b"{") && inner.ends_with(b"}")) {
            break;
        }
        open.push(line.start + lead..line.start + lead + inner.len());
        if !continues {
            messages.append(&mut open);
        }
        pos = next;
    }
    Some(Walk {
        messages,
        complete: false,
    })
}

/// The size of the array of a complete file as compact JSON: the file without its line feeds
/// (one after `[`, one after each message, one after `]`).
pub fn compact_len(bytes: &[u8], messages: usize) -> usize {
    bytes.len().saturating_sub(messages + 2)
}

/// Parses the messages at `ranges`.
pub fn parse(bytes: &[u8], ranges: &[Range<usize>]) -> serde_json::Result<Vec<Message>> {
    ranges
        .iter()
        .map(|range| serde_json::from_slice(&bytes[range.clone()]))
        .collect()
}

/// The pinned messages at `ranges`, with their positions: only lines holding a pin's mark
/// (`"send":"always"`, as Parlor writes it) are parsed.
pub fn pinned(bytes: &[u8], ranges: &[Range<usize>]) -> serde_json::Result<Vec<(usize, Message)>> {
    let mark = memchr::memmem::Finder::new(br#""send":"always""#);
    let mut pins = Vec::new();
    for (at, range) in ranges.iter().enumerate() {
        if mark.find(&bytes[range.clone()]).is_some() {
            let message: Message = serde_json::from_slice(&bytes[range.clone()])?;
            if message.is_pinned() {
                pins.push((at, message));
            }
        }
    }
    Ok(pins)
}

/// What [`last_lines`] found at the end of a complete file.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// The byte ranges (in the chunk) of the last messages asked for, oldest first.
    Found(Vec<Range<usize>>),
    /// The chunk holds fewer complete lines: read more of the file.
    Short,
    /// The bytes are not this layout's lines.
    Bad,
}

/// The last `count` messages of a complete file in this layout, from `chunk`: its last bytes
/// (`from_start` when the chunk is the whole file). Only lines are found, nothing is parsed.
pub fn last_lines(chunk: &[u8], from_start: bool, count: usize) -> End {
    let Some(body) = chunk.strip_suffix(b"]\n") else {
        return End::Bad;
    };
    let mut found = Vec::with_capacity(count);
    // `end` is where the line before it ends (its line feed).
    let mut end = body.len();
    while found.len() < count {
        if end == 0 || body[end - 1] != b'\n' {
            return End::Bad;
        }
        let line_end = end - 1;
        let start = match body[..line_end].iter().rposition(|&b| b == b'\n') {
            Some(at) => at + 1,
            // The chunk's first line: whole only when the chunk starts the file, and then it
            // is the opening bracket, not a message.
            None if from_start => return End::Bad,
            None => return End::Short,
        };
        let line = &body[start..line_end];
        let lead = usize::from(line.starts_with(b","));
        let trail = usize::from(line.len() > lead && line.ends_with(b","));
        let inner = start + lead..line_end - trail;
        let text = &body[inner.clone()];
        if !(text.starts_with(b"{") && text.ends_with(b"}")) {
            return End::Bad;
        }
        found.push(inner);
        end = start;
    }
    found.reverse();
    End::Found(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file of a dialog without messages.
    const EMPTY: &[u8] = b"[\n]\n";

    fn messages(texts: &[&str]) -> Vec<Message> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| Message::user(*t, i as i64))
            .collect()
    }

    fn texts(bytes: &[u8]) -> Vec<String> {
        let walk = walk(bytes).expect("this layout");
        parse(bytes, &walk.messages)
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect()
    }

    /// Appends as the store does: the batch over the last two bytes.
    fn appended(file: &[u8], batch_bytes: &[u8]) -> Vec<u8> {
        let mut out = file[..file.len() - 2].to_vec();
        out.extend_from_slice(batch_bytes);
        out
    }

    #[test]
    fn files_and_appends_are_plain_json_arrays() {
        let mut file = encode(&[]).unwrap();
        assert_eq!(file, EMPTY);
        for (round, batch_texts) in [vec!["a"], vec!["b", "c"], vec!["d\ne \"q\""]]
            .into_iter()
            .enumerate()
        {
            let existing = walk(&file).unwrap().messages.len();
            file = appended(&file, &batch(&messages(&batch_texts), existing).unwrap());
            let parsed: Vec<Message> = serde_json::from_slice(&file).unwrap();
            let walked = walk(&file).unwrap();
            assert!(
                walked.complete,
                "round {round}: {}",
                String::from_utf8_lossy(&file)
            );
            assert_eq!(parse(&file, &walked.messages).unwrap(), parsed);
            assert_eq!(
                compact_len(&file, parsed.len()),
                serde_json::to_vec(&parsed).unwrap().len()
            );
        }
        assert_eq!(texts(&file), ["a", "b", "c", "d\ne \"q\""]);
        let whole = encode(&messages(&["x", "y"])).unwrap();
        assert_eq!(texts(&whole), ["x", "y"]);
        assert!(walk(&whole).unwrap().complete);
        assert_eq!(compact_len(EMPTY, 0), 2);
    }

    #[test]
    fn an_interrupted_append_keeps_exactly_the_complete_batches() {
        let before = appended(
            &encode(&messages(&["one", "two"])).unwrap(),
            &batch(&messages(&["three"]), 2).unwrap(),
        );
        let batch_bytes = batch(&messages(&["four", "five", "six"]), 3).unwrap();
        let after = appended(&before, &batch_bytes);
        // Cut anywhere inside the write: the old messages, or all of the new batch's too
        // once every one of its lines is there (only the closing bracket missing).
        let all_there = batch_bytes.len() - 2;
        for cut in 0..batch_bytes.len() {
            let torn = &after[..before.len() - 2 + cut];
            let walked = walk(torn).unwrap();
            assert!(!walked.complete, "cut at {cut}");
            let kept: Vec<String> = parse(torn, &walked.messages)
                .unwrap()
                .into_iter()
                .map(|m| m.text)
                .collect();
            let expected: &[&str] = if cut >= all_there {
                &["one", "two", "three", "four", "five", "six"]
            } else {
                &["one", "two", "three"]
            };
            assert_eq!(kept, expected, "cut at {cut}");
        }
        assert_eq!(
            texts(&after),
            ["one", "two", "three", "four", "five", "six"]
        );
        // The new pages written but not the old bracket's: the old array and stray bytes.
        let mut stray = before.clone();
        stray.extend_from_slice(&after[before.len()..]);
        let walked = walk(&stray).unwrap();
        assert!(!walked.complete);
        assert_eq!(walked.messages.len(), 3);
        // The same with zeros where the disk had not written yet.
        let mut zeros = before.clone();
        zeros.extend_from_slice(&[0; 300]);
        assert_eq!(walk(&zeros).unwrap().messages.len(), 3);
    }

    #[test]
    fn other_writers_json_is_not_this_layout() {
        let pretty = serde_json::to_vec_pretty(&messages(&["a", "b"])).unwrap();
        assert!(!walk(&pretty).unwrap().complete);
        assert_eq!(walk(br#"[{"role":"user","text":"a","ts":1}]"#), None);
        assert_eq!(walk(b"[]"), None);
        // Commas where a batch does not put them.
        assert!(!walk(b"[\n,{\"a\":1}\n]\n").unwrap().complete);
        assert!(!walk(b"[\n{\"a\":1}\n{\"a\":2}\n]\n").unwrap().complete);
        assert!(!walk(b"[\n{\"a\":1},\n,{\"a\":2}\n]\n").unwrap().complete);
        assert!(!walk(b"[\n{\"a\":1},\n]\n").unwrap().complete);
    }

    #[test]
    fn the_last_lines_are_found_from_the_end_and_nothing_else_is_taken_for_one() {
        let mut file = encode(&messages(&["a", "b"])).unwrap();
        file = appended(&file, &batch(&messages(&["c", "d"]), 2).unwrap());
        file = appended(&file, &batch(&messages(&["e"]), 4).unwrap());
        let walked = walk(&file).unwrap().messages;
        // Whole file: the last n lines are the walk's last n, for every n.
        for n in 0..=5 {
            assert_eq!(
                last_lines(&file, true, n),
                End::Found(walked[5 - n..].to_vec()),
                "{n}"
            );
        }
        // One more than the file holds reaches the opening bracket: not a message.
        assert_eq!(last_lines(&file, true, 6), End::Bad);
        // A chunk of the end: as many as it holds whole, then more is needed.
        let cut = walked[2].start - 1;
        let chunk = &file[cut..];
        let shifted: Vec<_> = walked[3..]
            .iter()
            .map(|r| r.start - cut..r.end - cut)
            .collect();
        assert_eq!(last_lines(chunk, false, 2), End::Found(shifted));
        assert_eq!(last_lines(chunk, false, 3), End::Short);
        // Not this layout's end: no closing bracket, or stray bytes before it.
        assert_eq!(last_lines(&file[..file.len() - 1], true, 1), End::Bad);
        let mut stray = file.clone();
        let at = stray.len() - 2;
        stray.splice(at..at, b"\0\0\n".iter().copied());
        assert_eq!(last_lines(&stray, true, 1), End::Bad);
    }

    #[test]
    fn a_files_end_rewritten_from_any_message_keeps_the_layout() {
        let mut file = encode(&messages(&["a", "b"])).unwrap();
        file = appended(&file, &batch(&messages(&["c", "d"]), 2).unwrap());
        file = appended(&file, &batch(&messages(&["e"]), 4).unwrap());
        let walked = walk(&file).unwrap().messages;
        let all = parse(&file, &walked).unwrap();
        for first in 0..=5 {
            for rest in [vec![], messages(&["x"]), messages(&["x", "y\nz"])] {
                let at = match first {
                    0 => 2,
                    _ => walked[first - 1].end,
                };
                let mut changed = file[..at].to_vec();
                changed.extend(end_from(first, &rest).unwrap());
                let again = walk(&changed).unwrap();
                assert!(again.complete, "{}", String::from_utf8_lossy(&changed));
                let mut expected = all[..first].to_vec();
                expected.extend(rest.iter().cloned());
                assert_eq!(parse(&changed, &again.messages).unwrap(), expected);
                let plain: Vec<Message> = serde_json::from_slice(&changed).unwrap();
                assert_eq!(plain, expected);
            }
        }
    }
}
