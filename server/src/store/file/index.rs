//! The in-memory index of a file history: every conversation, with what a browser's list
//! shows of the ones a browser owns; read at startup, kept in step with every write, and
//! caught up with what other processes wrote.

use super::dialog::{read_info, remove_leftovers};
use super::locking::unlocked;
use super::{FileStore, INFO};
use crate::store::atomic::TMP_MARK;
use crate::store::{ConversationInfo, StoreError};
use parlor_domain::ConversationId;
use std::collections::HashMap;
use std::path::Path;

/// How often a browser's list of conversations looks for conversations other processes
/// wrote.
const CATCH_UP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// What the in-memory index keeps of a conversation: the details a browser's list of
/// conversations shows (without the last turn's report) for conversations a browser owns;
/// only that it exists for API clients' conversations, which are never listed.
pub(super) type Indexed = Option<Box<ConversationInfo>>;

pub(super) fn indexed(mut info: ConversationInfo) -> Indexed {
    info.owner.is_some().then(|| {
        info.last_turn = None;
        Box::new(info)
    })
}

/// Reads the index of the folder `root` at startup, cleaning what crashes left behind.
pub(super) fn read(root: &Path) -> Result<HashMap<ConversationId, Indexed>, StoreError> {
    let mut infos = HashMap::new();
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name();
        // A new dialog staged by a write that a crash cut short: it never existed. Only
        // when no other process is writing that dialog now (its lock is free).
        if let Some(staged) = name
            .to_str()
            .and_then(|n| n.strip_prefix('.'))
            .and_then(|n| n.split_once(TMP_MARK))
            .map(|(dialog, _)| dialog)
        {
            if unlocked(root, staged) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
            continue;
        }
        // Folders that are not valid dialog names were not made by Parlor: leave them.
        let Some(id) = name.to_str().and_then(|n| ConversationId::parse(n).ok()) else {
            continue;
        };
        // Another process (`parlor mcp`, a second server) may be writing it right now:
        // its temporary files are not leftovers then.
        if unlocked(root, id.as_str()) {
            remove_leftovers(&entry.path());
        }
        if let Some(info) = read_info(&entry.path().join(INFO), &id) {
            infos.insert(id, indexed(info));
        }
    }
    Ok(infos)
}

impl FileStore {
    /// Adds to the index the conversations other processes wrote since it was last read
    /// (a `parlor store import` or `restore`, another server on the same folder): the
    /// dialogs not indexed yet whose details exist now. At most once every
    /// [`CATCH_UP_EVERY`]; a folder listing and one check per dialog not indexed.
    pub(super) async fn catch_up(&self) {
        {
            let mut last = self.caught_up.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| at.elapsed() < CATCH_UP_EVERY) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        let root = self.root.clone();
        let known: std::collections::HashSet<ConversationId> = self
            .infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        let permit = self.io.acquire().await;
        let found = tokio::task::spawn_blocking(move || {
            let mut found = Vec::new();
            let Ok(entries) = std::fs::read_dir(&root) else {
                return found;
            };
            for entry in entries.filter_map(Result::ok) {
                let Some(id) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| ConversationId::parse(n).ok())
                else {
                    continue;
                };
                if known.contains(&id) {
                    continue;
                }
                let path = entry.path().join(INFO);
                if path.exists() {
                    if let Some(info) = read_info(&path, &id) {
                        found.push(info);
                    }
                }
            }
            found
        })
        .await
        .unwrap_or_default();
        drop(permit);
        for info in found {
            let id = info.session_id.clone();
            self.remember(Some(info), &id);
        }
    }

    pub(super) fn remember(&self, info: Option<ConversationInfo>, id: &ConversationId) {
        let mut infos = self.infos.lock().unwrap_or_else(|e| e.into_inner());
        match info {
            Some(info) => infos.insert(id.clone(), indexed(info)),
            None => infos.remove(id),
        };
    }

    /// A conversation's whole details, read from disk (the index holds only what lists show).
    pub(super) async fn read_info(
        &self,
        id: &ConversationId,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        let known = self
            .infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned();
        let Some(known) = known else {
            // Not in this process's index: another process (`parlor store import` or
            // `restore`, a second server, a folder written by hand) may have written it
            // since; the disk is the truth.
            let path = self.dialog(id).dir.join(INFO);
            let session = id.clone();
            let permit = self.io.acquire().await;
            let read = tokio::task::spawn_blocking(move || {
                path.exists().then(|| read_info(&path, &session))
            })
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
            drop(permit);
            return match read {
                None => Ok(None),
                Some(Some(info)) => {
                    self.remember(Some(info.clone()), id);
                    Ok(Some(info))
                }
                Some(None) => Err(StoreError::Corrupt(format!(
                    "the details of conversation {id} cannot be read (see the log)"
                ))),
            };
        };
        // The whole details (with the last turn's report) are on disk; files are replaced
        // atomically, so they are read without the dialog's lock.
        let path = self.dialog(id).dir.join(INFO);
        let session = id.clone();
        let permit = self.io.acquire().await;
        let read = tokio::task::spawn_blocking(move || read_info(&path, &session))
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        drop(permit);
        match (read, known) {
            (Some(info), _) => Ok(Some(info)),
            (None, Some(known)) => Ok(Some(*known)),
            (None, None) => Err(StoreError::Corrupt(format!(
                "the details of conversation {id} cannot be read (see the log)"
            ))),
        }
    }
}
