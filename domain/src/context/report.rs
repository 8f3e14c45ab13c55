//! What the debug panel and the page say of a turn's context: each block and its
//! retention, the sources that failed, and a message's chips.

use super::*;

/// One block, as the debug panel lists it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockReport {
    pub source: String,
    /// `text` or `image`.
    pub kind: String,
    /// Its size, never its content (the report is kept with the conversation, and what
    /// pruning removed must be gone): `12 characters`, or `image/png, 3 KB`.
    pub label: String,
    /// Sent on this turn.
    pub displayed: bool,
    /// Whether it is stored: `null` when not stored or kept for good (see `kept_for_good`),
    /// else how many more turns it will be sent on (0: not after this one).
    pub turns_left: Option<u32>,
    #[serde(default)]
    pub kept_for_good: bool,
    #[serde(default)]
    pub stored: bool,
}

impl BlockReport {
    pub(super) fn of(
        source: &str,
        block: &ContextBlock,
        displayed: bool,
        turns_left: Option<u32>,
    ) -> Self {
        let label = match &block.part {
            Part::Image { url } => {
                let media = image_type(url).unwrap_or("image");
                let data = url.split_once(',').map_or(0, |(_, d)| d.len());
                format!("{media}, {} KB", (data * 3 / 4).div_ceil(1024))
            }
            part => {
                let chars = part.sent_text().unwrap_or_default().chars().count();
                format!("{chars} character{}", if chars == 1 { "" } else { "s" })
            }
        };
        BlockReport {
            source: source.to_owned(),
            kind: block.part.kind().to_owned(),
            label,
            displayed,
            turns_left,
            kept_for_good: false,
            stored: false,
        }
    }
}

/// What the debug panel shows of a turn's context.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextReport {
    /// This turn's entries, block by block: displayed or not, stored and for how long.
    pub current: Vec<BlockReport>,
    /// Blocks of earlier messages still stored after this turn's pruning.
    pub held: Vec<BlockReport>,
    /// What this turn's pruning removed for good.
    pub pruned: Vec<BlockReport>,
    /// Sources that could not provide their context this turn, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<SourceFailure>,
    /// Set when images were replaced by a placeholder (the model has no image support).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub images_withheld: bool,
}

/// A context source that failed on a turn; the turn went on without it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFailure {
    pub source: String,
    pub error: String,
}

impl ContextReport {
    /// The report of a turn: its `entries`, and the stored `history` before it after
    /// `pruning`.
    pub fn new(entries: &[ContextEntry], pruning: &Pruning) -> Self {
        let mut current = Vec::new();
        for entry in entries {
            for block in &entry.blocks {
                let stored = ContextBlock {
                    part: Part::from(block.clone()),
                    retention: entry.save.retention().flatten(),
                };
                if stored.part.is_empty() {
                    continue;
                }
                let left = match entry.save {
                    Save::Turns(n) => Some(n.get()),
                    _ => None,
                };
                let mut report = BlockReport::of(&entry.source, &stored, entry.display, left);
                report.stored = entry.save != Save::No;
                report.kept_for_good = entry.save == Save::Always;
                current.push(report);
            }
        }
        let mut held = Vec::new();
        let users = pruning
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .count();
        let mut age = users;
        for message in pruning.messages.iter().filter(|m| m.role == Role::User) {
            age -= 1;
            let mut source = "";
            for block in &message.context {
                if let Part::Header { source: s } = &block.part {
                    source = s;
                    continue;
                }
                let mut report =
                    BlockReport::of(source, block, false, turns_left(block.retention, age));
                report.stored = true;
                report.kept_for_good = block.retention.is_none();
                held.push(report);
            }
        }
        ContextReport {
            current,
            held,
            pruned: pruning.expired.clone(),
            failed: Vec::new(),
            images_withheld: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.current.is_empty()
            && self.held.is_empty()
            && self.pruned.is_empty()
            && self.failed.is_empty()
    }
}

/// A message's context as the transcript shows it: one chip per source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chip {
    pub source: String,
    /// What the source added: `text`, `image` or `text, image`.
    pub kind: String,
    /// `None`: kept for good; `Some(0)`: this message only; `Some(n)`: the next `n` turns.
    pub keep: Option<u32>,
}

impl Chip {
    /// The chips of a stored message's context, from its headers.
    pub fn of_stored(context: &[ContextBlock]) -> Vec<Chip> {
        let mut chips: Vec<Chip> = Vec::new();
        for block in context {
            match (&block.part, chips.last_mut()) {
                (Part::Header { source }, _) => chips.push(Chip {
                    source: source.clone(),
                    kind: String::new(),
                    keep: block.retention.map(NonZeroU32::get),
                }),
                (part, Some(chip)) if !chip.kind.contains(part.kind()) => {
                    if !chip.kind.is_empty() {
                        chip.kind.push_str(", ");
                    }
                    chip.kind.push_str(part.kind());
                }
                _ => {}
            }
        }
        chips
    }

    /// The chip of an entry the page sends.
    pub fn of_entry(entry: &ContextEntry) -> Chip {
        let mut kinds: Vec<&str> = Vec::new();
        for block in &entry.blocks {
            let kind = Part::from(block.clone()).kind();
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Chip {
            source: entry.source.clone(),
            kind: kinds.join(", "),
            keep: match entry.save {
                Save::No => Some(0),
                Save::Always => None,
                Save::Turns(n) => Some(n.get()),
            },
        }
    }

    /// Whether the model no longer receives it, `later_turns` user turns after its own.
    pub fn expired(&self, later_turns: usize) -> bool {
        self.keep.is_some_and(|n| later_turns > n as usize)
    }

    /// How long it is kept, in words.
    pub fn keep_label(&self) -> String {
        match self.keep {
            None => "always".into(),
            Some(0) => "this message only".into(),
            Some(1) => "next turn".into(),
            Some(n) => format!("next {n} turns"),
        }
    }
}
