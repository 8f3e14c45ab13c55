//! Each conversation's details (`conversation.json`) as last read or written here, with its
//! file's stamp: while `stat` finds the same file, the details are what was read, and a turn
//! does not read and parse them again. Another writer (a rename makes a new inode, and a new
//! size or time) changes the stamp, and the file is read again.

use super::dialog::parse_info;
use super::shape::Stamp;
use crate::store::ConversationInfo;
use parlor_domain::ConversationId;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// At most this many conversations' details are kept; past it, all are forgotten.
const MOST: usize = 4096;

#[derive(Default)]
pub(super) struct Details {
    known: Mutex<HashMap<ConversationId, (Stamp, ConversationInfo)>>,
}

impl Details {
    fn known(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<ConversationId, (Stamp, ConversationInfo)>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The details of `id` in the file at `path`: `None` when there is no file, `Some(None)`
    /// when it does not read (see [`parse_info`]). The file is opened and its stamp taken
    /// from the open file (on NFS, opening revalidates what `stat` reports); it is read only
    /// when that stamp is not the one remembered.
    pub(super) fn read(
        &self,
        path: &Path,
        id: &ConversationId,
    ) -> Option<Option<ConversationInfo>> {
        let opened = std::fs::File::open(path).and_then(|f| f.metadata().map(|m| (f, m)));
        let (mut file, meta) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                self.known().remove(id);
                if e.kind() == std::io::ErrorKind::NotFound {
                    return None;
                }
                tracing::error!("skipping unreadable {}: {e}", path.display());
                return Some(None);
            }
        };
        let stamp = Stamp::of(&meta);
        if let Some((seen, info)) = self.known().get(id) {
            if *seen == stamp {
                return Some(Some(info.clone()));
            }
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        let info = match std::io::Read::read_to_end(&mut file, &mut bytes) {
            Ok(_) => parse_info(&bytes, path, id),
            Err(e) => {
                tracing::error!("skipping unreadable {}: {e}", path.display());
                None
            }
        };
        match &info {
            Some(info) => self.put(id, stamp, info.clone()),
            None => drop(self.known().remove(id)),
        }
        Some(info)
    }

    /// Notes `info`, just written to `path` under the dialog's locks.
    pub(super) fn written(&self, path: &Path, info: &ConversationInfo) {
        match std::fs::metadata(path) {
            Ok(meta) => self.put(&info.session_id, Stamp::of(&meta), info.clone()),
            Err(_) => drop(self.known().remove(&info.session_id)),
        }
    }

    fn put(&self, id: &ConversationId, stamp: Stamp, info: ConversationInfo) {
        let mut known = self.known();
        if known.len() >= MOST && !known.contains_key(id) {
            known.clear();
        }
        known.insert(id.clone(), (stamp, info));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_are_read_again_once_another_writer_replaced_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let id = ConversationId::parse("kept").unwrap();
        let path = dir.path().join("conversation.json");
        let titled = |title: &str| {
            let mut info = ConversationInfo::bare(&id, Some(1));
            info.title = title.into();
            info
        };
        let details = Details::default();
        assert_eq!(details.read(&path, &id), None);
        std::fs::write(&path, serde_json::to_vec(&titled("first")).unwrap()).unwrap();
        details.written(&path, &titled("first"));
        assert_eq!(details.read(&path, &id).unwrap().unwrap().title, "first");
        // Another process replaces it the atomic way (a new file renamed over it).
        let staged = dir.path().join(".staged");
        std::fs::write(&staged, serde_json::to_vec(&titled("second")).unwrap()).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        assert_eq!(details.read(&path, &id).unwrap().unwrap().title, "second");
        // Removed: nothing, and nothing remembered.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(details.read(&path, &id), None);
        assert!(details.known().is_empty());
        // A file that does not read is reported as such, not served from memory.
        std::fs::write(&path, b"{").unwrap();
        assert_eq!(details.read(&path, &id), Some(None));
    }
}
