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
    /// The index's bytes: the checksum (CRC-32, 8 hex digits) of the JSON on the next line,
    /// then the JSON. An index written over an older one and torn by a crash does not pass
    /// its checksum.
    pub(super) fn encode(&self) -> Option<Vec<u8>> {
        let json = serde_json::to_vec(self).ok()?;
        let mut bytes = format!("{:08x}\n", crc32fast::hash(&json)).into_bytes();
        bytes.extend_from_slice(&json);
        Some(bytes)
    }

    /// An index's bytes read back, when they pass their checksum (trailing padding aside).
    pub(super) fn decode(bytes: &[u8]) -> Option<Shape> {
        let (check, json) = bytes.split_at_checked(9)?;
        let json = json.trim_ascii_end();
        let check = u32::from_str_radix(std::str::from_utf8(check.strip_suffix(b"\n")?).ok()?, 16);
        (check.ok()? == crc32fast::hash(json)).then(|| serde_json::from_slice(json).ok())?
    }

    /// Writes the index of the dialog folder `dir` (best effort: a failure only means the
    /// next reader walks the file).
    pub(super) fn save(&self, dir: &std::path::Path) {
        let Some(bytes) = self.encode() else {
            return;
        };
        let path = dir.join(INDEX);
        if bytes.len() > MOST_INDEX_BYTES {
            let _ = std::fs::remove_file(path);
            return;
        }
        // Written in place, not renamed, and not truncated either (ext4 flushes a truncated
        // file when it is closed): a shorter index is padded with spaces. A reader that meets
        // it half-written (or a crash mid-write) finds a checksum that does not match, or a
        // stamp that is not the file's, and walks the file instead.
        if let Err(e) = overwrite(&path, bytes) {
            tracing::debug!("could not write {}: {e}", path.display());
        }
    }

    /// The index of the dialog folder `dir`, when there is one that reads.
    pub(super) fn load(dir: &std::path::Path) -> Option<Shape> {
        let bytes = std::fs::read(dir.join(INDEX)).ok()?;
        if bytes.len() > MOST_INDEX_BYTES {
            return None;
        }
        Shape::decode(&bytes)
    }
}

/// Writes `bytes` over the start of the file at `path` (made when missing): padded with
/// spaces to the file's length when shorter, unless that would more than double it (then the
/// file is cut to `bytes`).
fn overwrite(path: &std::path::Path, mut bytes: Vec<u8>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let len = file.metadata()?.len() as usize;
    if len > bytes.len() {
        if len <= 2 * bytes.len() {
            bytes.resize(len, b' ');
        } else {
            file.set_len(bytes.len() as u64)?;
        }
    }
    file.write_all_at(&bytes, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(total: usize) -> Shape {
        let meta = std::fs::metadata(std::env::temp_dir()).unwrap();
        Shape {
            stamp: Stamp::of(&meta),
            total,
            last_ts: Some(7),
            pins: vec![(3, Message::user("pinned", 3))],
        }
    }

    #[test]
    fn an_index_written_over_a_longer_one_reads_back_and_a_damaged_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let long = shape(1000);
        long.save(dir.path());
        assert_eq!(Shape::load(dir.path()), Some(long.clone()));
        // Shorter: padded, not truncated, and still the new one.
        shape(5).save(dir.path());
        let bytes = std::fs::read(dir.path().join(INDEX)).unwrap();
        assert_eq!(bytes.len(), long.encode().unwrap().len());
        assert_eq!(Shape::load(dir.path()), Some(shape(5)));
        // Less than half as long: cut to size.
        let big = Shape {
            pins: vec![(1, Message::user("x".repeat(500), 1))],
            ..shape(1)
        };
        big.save(dir.path());
        long.save(dir.path());
        let bytes = std::fs::read(dir.path().join(INDEX)).unwrap();
        assert_eq!(bytes.len(), long.encode().unwrap().len());
        assert_eq!(Shape::load(dir.path()), Some(long));
        // A new index torn over an old one (its start written, the rest not) fails its
        // checksum: the file is walked instead of trusting a count that is not the file's.
        let newer = Shape {
            pins: vec![(4, Message::user("pinned later", 4))],
            ..shape(101)
        };
        let mut torn = newer.encode().unwrap();
        let old = shape(100).encode().unwrap();
        let at = torn.len() / 2;
        torn.truncate(at);
        torn.extend_from_slice(&old[at..]);
        assert_eq!(Shape::decode(&torn), None);
        assert_eq!(Shape::decode(b"{\"total\":1}"), None);
        assert_eq!(Shape::decode(b""), None);
    }
}
