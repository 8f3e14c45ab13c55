//! The content of a context block and its retention: the plain values a stored message
//! carries (see [`crate::context`] for how blocks are built and pruned).

use serde::{Deserialize, Serialize};
use std::num::NonZeroU32;

/// How long a stored block stays: `None` for good, `Some(n)` for the next `n` user turns
/// after its own. Stored as `null` or `n`.
pub type Retention = Option<NonZeroU32>;

/// One piece of context content, as a client sends it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Block {
    Text {
        text: String,
    },
    /// An image as a `data:` URL (PNG, JPEG, GIF or WebP, base64).
    Image {
        url: String,
    },
}

/// One piece of a stored or sent user message after its text: a source's header, then that
/// source's blocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Part {
    /// Opens a source's blocks; sent as a line naming the source.
    Header {
        source: String,
    },
    Text {
        text: String,
    },
    Image {
        url: String,
    },
}

impl Part {
    /// The text sent for a text-like part (`None` for images).
    pub fn sent_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            Part::Header { source } => Some(header_line(source).into()),
            Part::Text { text } => Some(text.as_str().into()),
            Part::Image { .. } => None,
        }
    }

    /// `text`, `image` or `header`.
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Header { .. } => "header",
            Part::Text { .. } => "text",
            Part::Image { .. } => "image",
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Part::Header { .. } => false,
            Part::Text { text } => text.trim().is_empty(),
            Part::Image { url } => url.is_empty(),
        }
    }
}

impl From<Block> for Part {
    fn from(block: Block) -> Self {
        match block {
            Block::Text { text } => Part::Text { text },
            Block::Image { url } => Part::Image { url },
        }
    }
}

/// The line that introduces a source's blocks in what the model receives.
pub fn header_line(source: &str) -> String {
    format!("[Context from {source}]")
}

/// A part of a user message with its retention: content and retention are one value, so
/// they can never get out of step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextBlock {
    #[serde(flatten)]
    pub part: Part,
    /// `null`: kept for good; `n`: kept for the next `n` user turns after its own. In a
    /// message being sent (not stored) it is `null`.
    pub retention: Retention,
}
