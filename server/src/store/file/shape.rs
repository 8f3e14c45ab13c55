//! What this process knows of each dialog's `messages.json` since it last walked the file or
//! wrote it: the file's stamp (device, inode, size, change times), how many messages it holds
//! and the newest one's time. While the stamp on disk is the same, the file is exactly what
//! was walked (or written) here, so its last messages can be read from its end and a batch
//! appended without reading it at all: a turn on a long conversation costs what it costs on
//! a short one. Any other writer (another process, the MCP store, a rename by a rewrite here)
//! changes the stamp, and the next operation walks the file again.

use parlor_domain::{ConversationId, Message};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

/// At most this many dialogs are known at once; past it, all are forgotten (each is walked
/// again at its next operation).
const MOST: usize = 4096;

/// A file's identity and state, as `stat` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq)]
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
