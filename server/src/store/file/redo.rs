//! Rewriting the end of a long `messages.json` in place, safe against a crash. A pruning
//! pass or a mark changes a few messages near the end, and rewriting the whole file would
//! cost what the whole conversation weighs. The new end (from the first changed message on)
//! is first written, whole and synced, to a journal beside the file
//! (`messages.json.redo`: where it goes, then the bytes); then over the file's end, which is
//! synced; then the journal is removed, and that removal synced. A crash before the journal
//! is complete leaves the file as it was (the journal appears only by a rename); a crash
//! after leaves the journal, and the next operation on the dialog, in any process (they all
//! hold the dialog's lock: `locking.rs` finishes it as it takes the lock), finishes the
//! rewrite before it reads or writes anything, so a journal is never applied to a file
//! written after it.

use super::dialog::Dialog;
use super::known::read_end;
use super::lines;
use super::shape::Stamp;
use crate::store::atomic::{sync_dir, write_atomically};
use crate::store::{apply_edits, pinned_in, StoreError};
use parlor_domain::context::Edit;
use parlor_domain::Message;
use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;

/// The journal of a rewrite of the file's end.
const REDO: &str = "messages.json.redo";

/// Files shorter than this are rewritten whole: that takes two syncs, the journal four.
const IN_PLACE_FROM: u64 = 256 * 1024;

impl Dialog {
    /// Finishes the rewrite a crash interrupted, if there is one: whether there was.
    pub(super) fn finish_rewrite(&self) -> Result<bool, StoreError> {
        let path = self.dir.join(REDO);
        let journal = match std::fs::read(&path) {
            Ok(journal) => journal,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        // Always whole (it appears by a rename); anything shorter is not one of ours.
        if let Some((at, bytes)) = journal.split_first_chunk::<8>() {
            self.write_end(u64::from_le_bytes(*at), bytes)?;
            tracing::warn!(
                "{}: finished rewriting its end, which a crash interrupted",
                self.messages_path().display()
            );
        }
        std::fs::remove_file(&path)?;
        sync_dir(&self.dir)?;
        self.forget();
        Ok(true)
    }

    /// Writes `bytes` over the file from `at` to its end, and syncs it: the file's stamp.
    fn write_end(&self, at: u64, bytes: &[u8]) -> Result<Stamp, StoreError> {
        let file = OpenOptions::new().write(true).open(self.messages_path())?;
        file.write_all_at(bytes, at)?;
        file.set_len(at + bytes.len() as u64)?;
        file.sync_data()?;
        Ok(Stamp::of(&file.metadata()?))
    }

    /// Applies `edits` (counted from `offset`) by rewriting only the file's end, when the
    /// file is known, long, and the edits are near its end: how many applied; `None` when
    /// the whole file should be rewritten instead.
    pub(super) fn edit_end(
        &self,
        offset: usize,
        edits: &[Edit],
    ) -> Result<Option<usize>, StoreError> {
        let Some(first) = edits.iter().map(|e| offset + e.index).min() else {
            return Ok(Some(0));
        };
        let Some((file, shape)) = self.known_file(OpenOptions::new().read(true))? else {
            return Ok(None);
        };
        if shape.stamp.len < IN_PLACE_FROM || first >= shape.total {
            return Ok(None);
        }
        // The changed messages and the one before them (where the new end starts).
        let before = usize::from(first > 0);
        let Some((start, bytes, ranges)) =
            read_end(&file, shape.stamp.len, shape.total - first + before)?
        else {
            return Ok(None);
        };
        // Only worth it when the end is a small part of the file.
        if (bytes.len() as u64) > shape.stamp.len / 4 {
            return Ok(None);
        }
        let Ok(mut rest) = lines::parse(&bytes, &ranges) else {
            return Ok(None);
        };
        let previous = (before == 1).then(|| rest.remove(0));
        // Counted from `first` now: each edit's position in `rest`.
        let edits: Vec<Edit> = edits
            .iter()
            .map(|e| Edit {
                index: offset + e.index - first,
                ..e.clone()
            })
            .collect();
        let applied = apply_edits(&mut rest, 0, &edits);
        if applied == 0 {
            return Ok(Some(0));
        }
        let at = match before {
            1 => start + ranges[0].end as u64,
            _ => 2,
        };
        let end = lines::end_from(first, &rest)?;
        let mut journal = at.to_le_bytes().to_vec();
        journal.extend_from_slice(&end);
        write_atomically(&self.dir, REDO, &journal)?;
        let stamp = self.write_end(at, &end)?;
        std::fs::remove_file(self.dir.join(REDO))?;
        sync_dir(&self.dir)?;
        let mut pins: Vec<(usize, Message)> =
            shape.pins.into_iter().filter(|(i, _)| *i < first).collect();
        pins.extend(pinned_in(&rest, first));
        let last_ts = rest.last().or(previous.as_ref()).map(|m| m.ts);
        self.remember(stamp, first + rest.len(), last_ts, pins);
        Ok(Some(applied))
    }
}
