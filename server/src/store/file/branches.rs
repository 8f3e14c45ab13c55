//! A dialog's `branches.json`: the versions off its chosen path ([`parlor_domain::branch`]),
//! beside `messages.json` (which stays the chosen path, in the layout other tools read).
//! Written atomically; a change of the path writes it before and after `messages.json`, so a
//! crash between the two leaves every message stored at least once.

use super::dialog::{timestamp, to_json, Dialog};
use super::BRANCHES;
use crate::store::atomic::write_atomically;
use crate::store::{cap, rooted, settled, StoreError};
use parlor_domain::branch::{Branches, Rebranch};
use parlor_domain::Message;
use std::io::ErrorKind;

impl Dialog {
    /// The stored branches (none when the file is missing). A file that does not read is
    /// moved aside, never overwritten, and the dialog has no versions.
    pub(super) fn read_branches(&self) -> Result<Branches, StoreError> {
        let path = self.dir.join(BRANCHES);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Branches::default()),
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice(&bytes) {
            Ok(branches) => Ok(branches),
            Err(e) => {
                let aside = self.dir.join(format!("{BRANCHES}.corrupt-{}", timestamp()));
                std::fs::rename(&path, &aside)?;
                tracing::error!(
                    "{} could not be read ({e}); it was moved to {} and the conversation \
                     shows no other versions",
                    path.display(),
                    aside.display()
                );
                Ok(Branches::default())
            }
        }
    }

    pub(super) fn write_branches(&self, branches: &Branches) -> Result<(), StoreError> {
        if branches.is_empty() {
            return match std::fs::remove_file(self.dir.join(BRANCHES)) {
                Err(e) if e.kind() != ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            };
        }
        write_atomically(&self.dir, BRANCHES, &to_json(branches)?)?;
        Ok(())
    }

    /// See `ConversationStore::rebranch_if`: the branches with the incoming messages still
    /// among them, then the path, then the branches as they end.
    pub(super) fn rebranch(&self, change: &Rebranch) -> Result<bool, StoreError> {
        let mut path = self.read_messages()?;
        if !change.still_fits(&path) {
            return Ok(false);
        }
        if !change.suffix.is_empty() {
            self.write_branches(&change.interim(&path))?;
        }
        change.apply(&mut path);
        self.bump_version()?;
        self.write_messages(&path)?;
        self.write_branches(&settled(&change.branches, &path, self.max_turns))?;
        Ok(true)
    }

    /// The files of the folder set aside because they did not read.
    pub(super) fn set_aside(&self) -> Result<Vec<String>, StoreError> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.contains(".corrupt-") || name.contains(".interrupted-") {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Writes `all` as the path, within `max_turns`: the oldest messages go first, with the
    /// branches that hang off them.
    pub(super) fn write_capped(&self, mut all: Vec<Message>) -> Result<(), StoreError> {
        let trimmed = cap(&mut all, self.max_turns) > 0;
        self.write_messages(&all)?;
        if trimmed {
            self.root_branches(&all)?;
        }
        Ok(())
    }

    /// After the path's oldest messages were trimmed or it was replaced: drops the branches
    /// whose parent went.
    pub(super) fn root_branches(&self, path: &[Message]) -> Result<(), StoreError> {
        if !self.dir.join(BRANCHES).exists() {
            return Ok(());
        }
        match rooted(&self.read_branches()?, path) {
            Some(kept) => self.write_branches(&kept),
            None => Ok(()),
        }
    }
}
