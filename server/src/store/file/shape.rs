//! What this process knows of each dialog's `messages.json` since it last walked the file or
//! wrote it: the file's stamp (device, inode, size, change times), how many messages it holds
//! and the newest one's time. While the stamp on disk is the same, the file is exactly what
//! was walked (or written) here, so its last messages can be read from its end and a batch
//! appended without reading it at all: a turn on a long conversation costs what it costs on
//! a short one. Any other writer (another process, the MCP store, a rename by a rewrite here)
//! changes the stamp, and the next operation walks the file again.
//!
//! The same is kept on disk beside the file, `messages.idx`, written after every write here
//! (not synced: it is a cache), so what a turn needs (the count, the newest time, the pins,
//! and from them the tail read from the file's end) is found without walking the file after
//! a restart, after another Parlor process wrote it, or once more than 4,096 dialogs were
//! touched. It is used only while the file's stamp is the one it records; otherwise the file
//! is walked, and the index written again.

use parlor_domain::{ConversationId, Message};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

/// At most this many dialogs are known at once; past it, all are forgotten (each is walked
/// again at its next operation).
const MOST: usize = 4096;

/// The index of a dialog's messages file, beside it.
pub(super) const INDEX: &str = "messages.idx";
/// An index larger than this (many or long pinned messages) is not written: the file is
/// walked instead.
const MOST_INDEX_BYTES: usize = 256 * 1024;

/// A file's identity and state, as `stat` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    pub(super) len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub(super) fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A `messages.json` in Parlor's layout, complete, as last seen here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Shape {
    pub(super) stamp: Stamp,
    /// How many messages it holds.
    pub(super) total: usize,
    /// The newest message's time.
    pub(super) last_ts: Option<i64>,
    /// Its pinned messages, with their positions (found by their mark's bytes when walked).
    pub(super) pins: Vec<(usize, Message)>,
}

#[derive(Default)]
pub(super) struct Shapes {
    known: Mutex<HashMap<ConversationId, Shape>>,
}

impl Shapes {
    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, Shape>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn get(&self, id: &ConversationId) -> Option<Shape> {
        self.known().get(id).cloned()
    }

    pub(super) fn put(&self, id: &ConversationId, shape: Shape) {
        let mut known = self.known();
        if known.len() >= MOST && !known.contains_key(id) {
            known.clear();
        }
        known.insert(id.clone(), shape);
    }

    pub(super) fn forget(&self, id: &ConversationId) {
        self.known().remove(id);
    }
}

impl Shape {
    /// Writes the index of the dialog folder `dir` (best effort: a failure only means the
    /// next reader walks the file).
    pub(super) fn save(&self, dir: &std::path::Path) {
        let Ok(bytes) = serde_json::to_vec(self) else {
            return;
        };
        let path = dir.join(INDEX);
        if bytes.len() > MOST_INDEX_BYTES {
            let _ = std::fs::remove_file(path);
            return;
        }
        // Written in place, not renamed: a reader that meets it half-written (or a crash
        // mid-write) finds JSON that does not read, and walks the file instead.
        if let Err(e) = std::fs::write(&path, &bytes) {
            tracing::debug!("could not write {}: {e}", path.display());
        }
    }

    /// The index of the dialog folder `dir`, when there is one that reads.
    pub(super) fn load(dir: &std::path::Path) -> Option<Shape> {
        let bytes = std::fs::read(dir.join(INDEX)).ok()?;
        if bytes.len() > MOST_INDEX_BYTES {
            return None;
        }
        serde_json::from_slice(&bytes).ok()
    }
}
