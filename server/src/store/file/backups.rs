//! A dialog's backups: copies of its files taken before `clear` and `restore`, kept up to
//! the retention, and putting one back.

use super::dialog::{read_info, timestamp, Dialog};
use super::{BACKED_UP, BACKUPS, BRANCHES, INFO, MESSAGES};
use crate::store::atomic::{sync_dir, write_atomically};
use crate::store::{BackupInfo, ConversationInfo, StoreError};
use parlor_domain::ConversationId;
use std::io::ErrorKind;
use std::path::PathBuf;

impl Dialog {
    pub(super) fn backups_dir(&self) -> PathBuf {
        self.dir.join(BACKUPS)
    }

    /// Copies the dialog's files into a new backup folder and prunes the oldest beyond the
    /// retention, never the new one nor `spare` (the backup a restore is putting back).
    /// `None` when there is nothing to back up.
    pub(super) fn back_up(&self, spare: Option<&str>) -> Result<Option<BackupInfo>, StoreError> {
        let present: Vec<&str> = BACKED_UP
            .into_iter()
            .filter(|name| self.dir.join(name).is_file())
            .collect();
        if present.is_empty() {
            return Ok(None);
        }
        let id = format!(
            "{}_{:06x}",
            timestamp(),
            uuid::Uuid::new_v4().as_u128() as u32 & 0xff_ffff
        );
        let target = self.backups_dir().join(&id);
        // Copies go to a hidden folder first, so a half-made backup is never listed.
        let staging = self.backups_dir().join(format!(".{id}.tmp"));
        std::fs::create_dir_all(&staging)?;
        for name in &present {
            let bytes = std::fs::read(self.dir.join(name))?;
            write_atomically(&staging, name, &bytes)?;
        }
        std::fs::rename(&staging, &target)?;
        sync_dir(&self.backups_dir())?;
        let mut all = self.backup_ids()?;
        all.retain(|kept| kept != &id && Some(kept.as_str()) != spare);
        // The new backup (and a spared one) count towards the retention but are never pruned.
        let spared = 1 + usize::from(spare.is_some());
        let excess = (all.len() + spared).saturating_sub(self.backup_retention);
        for oldest in all.iter().take(excess) {
            std::fs::remove_dir_all(self.backups_dir().join(oldest))?;
        }
        Ok(Some(BackupInfo {
            id,
            files: present.into_iter().map(str::to_owned).collect(),
            mtime_ms: Some(crate::store::now_ms()),
        }))
    }

    /// Backup folder names, oldest first.
    /// Backs the dialog up, then removes `files` and `also` (those that exist) and forgets what
    /// is known of its messages; `None`, with nothing done, when none of `files` exists.
    pub(super) fn back_up_and_remove(
        &self,
        files: &[PathBuf],
        also: &[PathBuf],
    ) -> Result<Option<BackupInfo>, StoreError> {
        if !files.iter().any(|f| f.exists()) {
            return Ok(None);
        }
        let backup = self.back_up(None)?;
        self.bump_version()?;
        self.forget();
        for file in files.iter().chain(also) {
            match std::fs::remove_file(file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        sync_dir(&self.dir)?;
        Ok(backup)
    }

    pub(super) fn backup_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::new();
        match std::fs::read_dir(self.backups_dir()) {
            Ok(entries) => {
                for entry in entries {
                    let entry = entry?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if !name.starts_with('.') && entry.file_type()?.is_dir() {
                        ids.push(name);
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        ids.sort();
        Ok(ids)
    }

    pub(super) fn backups(&self) -> Result<Vec<BackupInfo>, StoreError> {
        self.backup_ids()?
            .into_iter()
            .map(|id| {
                let mut files: Vec<String> = std::fs::read_dir(self.backups_dir().join(&id))?
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                files.sort();
                let mtime_ms = std::fs::metadata(self.backups_dir().join(&id))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as i64);
                Ok(BackupInfo {
                    id,
                    files,
                    mtime_ms,
                })
            })
            .collect()
    }

    /// Puts backup `backup` back (after backing up what is there now): the details it
    /// brought back.
    pub(super) fn restore(
        &self,
        backup: &str,
        session: &ConversationId,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        // Only names that are listed are accepted: a backup id is never used as a path
        // before it is known to be one of this dialog's backup folders.
        if !self.backup_ids()?.iter().any(|id| id == backup) {
            return Err(StoreError::NoSuchBackup(backup.to_owned()));
        }
        // The backup is read whole before anything changes: the copy of the current
        // state made next must never prune it away before it is put back.
        let source = self.backups_dir().join(backup);
        let mut files = Vec::new();
        for name in BACKED_UP {
            match std::fs::read(source.join(name)) {
                Ok(bytes) => files.push((name, Some(bytes))),
                Err(e) if e.kind() == ErrorKind::NotFound => files.push((name, None)),
                Err(e) => return Err(e.into()),
            }
        }
        if files.iter().all(|(_, bytes)| bytes.is_none()) {
            return Err(StoreError::Corrupt(format!(
                "backup {backup:?} holds none of {}",
                BACKED_UP.join(", ")
            )));
        }
        self.back_up(Some(backup))?;
        self.bump_version()?;
        for (name, bytes) in files {
            match bytes {
                Some(bytes) => write_atomically(&self.dir, name, &bytes)?,
                // The backup was made when there were no messages (or versions): there are
                // none.
                None if name == MESSAGES || name == BRANCHES => {
                    match std::fs::remove_file(self.dir.join(name)) {
                        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e.into()),
                        _ => sync_dir(&self.dir)?,
                    }
                }
                None => {}
            }
        }
        Ok(read_info(&self.dir.join(INFO), session))
    }
}
