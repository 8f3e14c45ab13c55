//! Context blocks and their retention: extra content for one turn (a screenshot, a log, the
//! current time) that the model sees now, and that the history keeps for a chosen number of
//! turns, block by block.
//!
//! A [`ContextEntry`] is what a source (the chat page, an API client, an operator's
//! provider) adds to a turn. [`build`] turns the user's text and the turn's entries into the
//! message sent now (its `display: true` entries) and the message stored (its saved ones,
//! each block carrying its own [`Retention`]). [`prune`] removes, before every model call,
//! the stored blocks whose time is up. Both are pure; the server applies their results.

pub use crate::block::{header_line, Block, ContextBlock, Part, Retention};
use crate::message::{Message, Role};
use serde::{Deserialize, Serialize};
use std::num::NonZeroU32;

/// The longest name a context source may have, in characters.
pub const MAX_SOURCE_CHARS: usize = 64;

/// Tokens counted for an image: what OpenAI models charge for a 1024×1024 image in detail.
/// Parlor does not decode images, so every image counts the same.
pub const IMAGE_TOKENS: u64 = 765;

/// The image types a context block may carry, as `data:` URLs.
pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Whether and for how long a context entry is kept in the history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Save {
    /// Not stored (`false` or `0`).
    #[default]
    No,
    /// Stored for good (`true`).
    Always,
    /// Stored, and sent with history on the next `n` user turns (`n`).
    Turns(NonZeroU32),
}

impl Save {
    /// The retention of a stored block, or `None` when nothing is stored.
    pub fn retention(self) -> Option<Retention> {
        match self {
            Save::No => None,
            Save::Always => Some(None),
            Save::Turns(n) => Some(Some(n)),
        }
    }
}

impl Serialize for Save {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Save::No => s.serialize_bool(false),
            Save::Always => s.serialize_bool(true),
            Save::Turns(n) => s.serialize_u32(n.get()),
        }
    }
}

impl<'de> Deserialize<'de> for Save {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Save;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or a whole number of turns (0 or more)")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Save, E> {
                Ok(if v { Save::Always } else { Save::No })
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Save, E> {
                match u32::try_from(v).ok().map(NonZeroU32::new) {
                    Some(None) => Ok(Save::No),
                    Some(Some(n)) => Ok(Save::Turns(n)),
                    None => Err(E::custom(format_args!(
                        "save: {v} turns is too many; use true to keep it for good"
                    ))),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Save, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format_args!(
                        "save: {v} is negative; use false, true or a number of turns"
                    ))),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Save {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Boolean))
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0)),
            )
            .description(Some(
                "false or 0: not stored; true: stored for good; n: stored for the next n turns",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Save {}

fn yes() -> bool {
    true
}

/// Extra content for one turn from one source.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextEntry {
    /// Who adds it (1 to 64 printable characters), e.g. `screen` or `file:notes.md`.
    pub source: String,
    pub blocks: Vec<Block>,
    /// Sent with this turn's message (default `true`).
    #[serde(default = "yes")]
    pub display: bool,
    /// Kept in the history: `false` (default), `true`, or for the next `n` turns.
    #[serde(default)]
    pub save: Save,
}

/// Why a context entry was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("context[{entry}].source must be 1 to {MAX_SOURCE_CHARS} printable characters")]
    BadSource { entry: usize },
    #[error("context[{entry}].blocks is empty")]
    NoBlocks { entry: usize },
    #[error(
        "context[{entry}].blocks[{block}] is not a valid image: use a data: URL of a PNG, JPEG, \
         GIF or WebP image in base64 ({why})"
    )]
    BadImage {
        entry: usize,
        block: usize,
        why: &'static str,
    },
}

impl ContextEntry {
    /// Checks a source name, its blocks and each image (`index`: its place in the request,
    /// for the message).
    pub fn validate(&self, index: usize) -> Result<(), ContextError> {
        let chars = self.source.chars().count();
        if chars == 0 || chars > MAX_SOURCE_CHARS || self.source.chars().any(char::is_control) {
            return Err(ContextError::BadSource { entry: index });
        }
        if self.blocks.is_empty() {
            return Err(ContextError::NoBlocks { entry: index });
        }
        for (block, b) in self.blocks.iter().enumerate() {
            if let Block::Image { url } = b {
                check_image(url).map_err(|why| ContextError::BadImage {
                    entry: index,
                    block,
                    why,
                })?;
            }
        }
        Ok(())
    }
}

/// A `data:` URL's media type, when it is one of [`IMAGE_TYPES`] in base64.
pub fn image_type(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("data:")?;
    let (media, _) = rest.split_once(";base64,")?;
    IMAGE_TYPES.contains(&media).then_some(media)
}

/// Checks that `url` is a base64 `data:` URL of an allowed image type whose bytes start as
/// that type's files do.
fn check_image(url: &str) -> Result<(), &'static str> {
    let media = image_type(url).ok_or("not a base64 data: URL of an allowed type")?;
    let (_, data) = url.split_once(";base64,").unwrap_or_default();
    let valid = |c: u8| c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
    let body = data.trim_end_matches('=');
    if data.is_empty() || data.len() % 4 != 0 || !body.bytes().all(valid) {
        return Err("the data is not valid base64");
    }
    let head = decode_head(&data[..data.len().min(16)]);
    let signature_ok = match media {
        "image/png" => head.starts_with(b"\x89PNG"),
        "image/jpeg" => head.starts_with(b"\xff\xd8\xff"),
        "image/gif" => head.starts_with(b"GIF8"),
        _ => head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WEBP"),
    };
    if signature_ok {
        Ok(())
    } else {
        Err("its bytes are not of the type it declares")
    }
}

/// Decodes the first characters of base64 text (whole groups of four).
fn decode_head(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::new();
    for group in text.as_bytes().chunks_exact(4) {
        let digits: Vec<u8> = group.iter().map_while(|&c| value(c)).collect();
        let bits = digits
            .iter()
            .fold(0u32, |acc, &d| (acc << 6) | u32::from(d))
            << (6 * (4 - digits.len() as u32));
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..digits.len()]);
    }
    out
}

/// The two variants of a user message with context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Built {
    /// What is sent on this turn: the text, then the displayed entries.
    pub display: Message,
    /// What is stored: the text, then the saved entries, each block with its retention.
    pub persisted: Message,
}

/// Builds the message sent now and the message stored from the user's text and the turn's
/// context entries. Each source's blocks go under one header (in the order the sources
/// first appear); a header is kept for good if any of its source's saved entries is, else
/// as long as its longest-kept block. Empty blocks are dropped with their retention.
pub fn build(text: &str, entries: &[ContextEntry], ts: i64) -> Built {
    let display = grouped(entries.iter().filter(|e| e.display).map(|e| (e, None)));
    let persisted = grouped(
        entries
            .iter()
            .filter_map(|e| e.save.retention().map(|r| (e, r))),
    );
    let message = |context| Message {
        context,
        ..Message::user(text, ts)
    };
    Built {
        display: message(display),
        persisted: message(persisted),
    }
}

/// The blocks of `entries` (each with the retention its blocks get), grouped by source under
/// one header each.
fn grouped<'a>(entries: impl Iterator<Item = (&'a ContextEntry, Retention)>) -> Vec<ContextBlock> {
    let mut sources: Vec<(&str, Vec<ContextBlock>)> = Vec::new();
    for (entry, retention) in entries {
        let blocks = entry
            .blocks
            .iter()
            .map(|b| Part::from(b.clone()))
            .filter(|p| !p.is_empty())
            .map(|part| ContextBlock { part, retention });
        match sources.iter_mut().find(|(s, _)| *s == entry.source) {
            Some((_, list)) => list.extend(blocks),
            None => sources.push((&entry.source, blocks.collect())),
        }
    }
    let mut out = Vec::new();
    for (source, blocks) in sources.into_iter().filter(|(_, b)| !b.is_empty()) {
        let retention = if blocks.iter().any(|b| b.retention.is_none()) {
            None
        } else {
            blocks.iter().filter_map(|b| b.retention).max()
        };
        out.push(ContextBlock {
            part: Part::Header {
                source: source.to_owned(),
            },
            retention,
        });
        out.extend(blocks);
    }
    out
}

/// A change to one stored message: at `index` (in the slice given to [`prune`]), the
/// message `old` becomes `new`, or is removed when `new` is `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub index: usize,
    pub old: Message,
    pub new: Option<Message>,
}

/// What one pruning pass decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruning {
    /// The messages after pruning.
    pub messages: Vec<Message>,
    /// The changes to store, in increasing index order.
    pub edits: Vec<Edit>,
    /// The blocks whose time was up.
    pub expired: Vec<BlockReport>,
}

/// Removes the blocks whose time is up from `history`, the stored messages before the one
/// being sent (a suffix of the conversation, newest last). User messages are counted newest
/// first from 0; in the one at index `i` a block kept for `n` turns stays while `n > i`. A
/// header goes with the last block of its source unless it is kept for good; a message left
/// with no text and no block goes too. The user's text and other roles are never touched.
pub fn prune(history: Vec<Message>) -> Pruning {
    let mut out = Pruning::default();
    let mut age = history
        .iter()
        .filter(|m| m.role == Role::User)
        .count()
        .wrapping_sub(1);
    // The age of the turn being read: its tool results are as old as its user message.
    let mut turn_age = None;
    for (index, message) in history.into_iter().enumerate() {
        if message.role != Role::User {
            match turn_age.and_then(|age| expired_result(&message, age)) {
                Some((new, report)) => {
                    out.expired.push(report);
                    out.messages.push(new.clone());
                    out.edits.push(Edit {
                        index,
                        old: message,
                        new: Some(new),
                    });
                }
                None => out.messages.push(message),
            }
            continue;
        }
        let i = age;
        turn_age = Some(i);
        age = age.wrapping_sub(1);
        if message.context.is_empty() {
            out.messages.push(message);
            continue;
        }
        let (kept, expired) = split_blocks(&message.context, i);
        if kept == message.context {
            out.messages.push(message);
            continue;
        }
        out.expired.extend(expired);
        let new = Message {
            context: kept,
            ..message.clone()
        };
        let removed = new.text.is_empty() && new.context.is_empty();
        out.edits.push(Edit {
            index,
            old: message,
            new: (!removed).then(|| new.clone()),
        });
        if !removed {
            out.messages.push(new);
        }
    }
    out
}

/// A tool result `age` user turns back whose retention is over: the message with its content
/// replaced by the stub that keeps its pairing ([`crate::tool::stub`]), and the report.
fn expired_result(message: &Message, age: usize) -> Option<(Message, BlockReport)> {
    let answer = message
        .tool
        .as_ref()
        .filter(|t| t.removed_after.is_none())?;
    let retention = message.context.first()?.retention;
    if alive(retention, age) {
        return None;
    }
    let turns = retention.map_or(0, |n| n.get());
    let mut new = message.clone();
    let tool = new.tool.as_mut()?;
    tool.removed_after = Some(turns);
    let stub = crate::tool::stub(&answer.name, Some(turns).filter(|&n| n > 0), answer.bytes);
    crate::exchange::replace_content(&mut new, stub);
    let report = BlockReport::of(&answer.name, &message.context[0], false, Some(0));
    Some((new, report))
}

/// Whether a block kept for `retention` stays in a message `age` user messages back.
fn alive(retention: Retention, age: usize) -> bool {
    retention.is_none_or(|n| n.get() as usize > age)
}

/// Splits a message's blocks into those kept and reports of those expired.
fn split_blocks(blocks: &[ContextBlock], age: usize) -> (Vec<ContextBlock>, Vec<BlockReport>) {
    let mut kept = Vec::new();
    let mut expired = Vec::new();
    let mut source = "";
    // The header of the source being read, until one of its blocks is kept.
    let mut pending: Option<&ContextBlock> = None;
    for block in blocks {
        if let Part::Header { source: s } = &block.part {
            source = s;
            if block.retention.is_none() {
                kept.push(block.clone());
                pending = None;
            } else {
                pending = Some(block);
            }
            continue;
        }
        if alive(block.retention, age) {
            kept.extend(pending.take().cloned());
            kept.push(block.clone());
        } else {
            expired.push(BlockReport::of(source, block, false, Some(0)));
        }
    }
    (kept, expired)
}

/// How many more turns a stored block will be sent on, after the turn that has it `age`
/// user messages back (`None`: for good).
pub fn turns_left(retention: Retention, age: usize) -> Option<u32> {
    retention.map(|n| (n.get() as usize).saturating_sub(age + 1) as u32)
}

mod report;
#[cfg(test)]
mod tests;

pub use report::{BlockReport, Chip, ContextReport, SourceFailure};
