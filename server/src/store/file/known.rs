//! A dialog's messages file read from its end and appended to without reading it, while it
//! is what this process last saw of it (see [`super::shape`]).

use super::dialog::Dialog;
use super::lines::{self, End};
use super::shape::{Shape, Stamp};
use crate::store::{pinned_in, StoreError, Tail};
use parlor_domain::Message;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;

/// How much of a file's end a tail read reads first (more when that holds too few lines).
const CHUNK: u64 = 16 * 1024;

/// Whatever path an operation took, the index it changed is written when it is done.
impl Drop for Dialog {
    fn drop(&mut self) {
        self.save_index();
    }
}

impl Dialog {
    /// Notes what the messages file is now: `stamp` as read or written here.
    pub(super) fn remember(
        &self,
        stamp: Stamp,
        total: usize,
        last_ts: Option<i64>,
        pins: Vec<(usize, Message)>,
    ) {
        if let Some((id, shapes)) = &self.known {
            let shape = Shape {
                stamp,
                total,
                last_ts,
                pins,
            };
            shapes.put(id, shape.clone());
            *self.unsaved.lock().unwrap_or_else(|e| e.into_inner()) = Some(shape);
        }
    }

    /// Writes the index of the messages file as last remembered here, if it changed (after
    /// an operation has answered: it is a cache, see [`super::shape`]).
    pub(super) fn save_index(&self) {
        let unsaved = self
            .unsaved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(shape) = unsaved {
            shape.save(&self.dir);
        }
    }

    /// Notes the file just written whole with `messages` (or forgets it when it cannot be
    /// stat'ed: the next operation walks it).
    pub(super) fn remember_written(&self, messages: &[Message]) {
        match std::fs::metadata(self.messages_path()) {
            Ok(meta) => self.remember(
                Stamp::of(&meta),
                messages.len(),
                messages.last().map(|m| m.ts),
                pinned_in(messages, 0),
            ),
            Err(_) => self.forget(),
        }
    }

    pub(super) fn forget(&self) {
        *self.unsaved.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Some((id, shapes)) = &self.known {
            shapes.forget(id);
        }
    }

    /// The messages file, opened as `options` say, with what is known of it, while it is
    /// what was last seen here.
    pub(super) fn known_file(
        &self,
        options: &OpenOptions,
    ) -> Result<Option<(File, Shape)>, StoreError> {
        let Some((id, shapes)) = &self.known else {
            return Ok(None);
        };
        // What this process remembers, else the index on disk.
        let (shape, from_disk) = match shapes.get(id) {
            Some(shape) => (shape, false),
            None => match Shape::load(&self.dir) {
                Some(shape) => (shape, true),
                None => return Ok(None),
            },
        };
        let file = match options.open(self.messages_path()) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let same = Stamp::of(&file.metadata()?) == shape.stamp;
        if same && from_disk {
            shapes.put(id, shape.clone());
        }
        Ok(same.then_some((file, shape)))
    }

    /// [`Dialog::read_tail`] from the file's end, while it is what was last seen here.
    pub(super) fn tail_known(&self, count: usize) -> Result<Option<(Tail, usize)>, StoreError> {
        let Some((file, shape)) = self.known_file(OpenOptions::new().read(true))? else {
            return Ok(None);
        };
        let len = shape.stamp.len;
        let count = count.min(shape.total);
        let size = (len as usize).saturating_sub(shape.total + 2);
        if count == 0 {
            let tail = Tail {
                messages: Vec::new(),
                total: shape.total,
            };
            return Ok(Some((tail, size)));
        }
        let read = read_end(&file, len, count)?;
        if let Some(Ok(messages)) = read.map(|(_, bytes, ranges)| lines::parse(&bytes, &ranges)) {
            let tail = Tail {
                messages,
                total: shape.total,
            };
            return Ok(Some((tail, size)));
        }
        // Not what was walked after all: walk it again.
        self.forget();
        Ok(None)
    }

    /// [`Dialog::append_with`] without reading the file, while it is what was last seen here
    /// and the batch fits in `max_turns`; else `make` back (or the count, when the batch did
    /// not fit and was appended by rewriting the file).
    #[allow(clippy::type_complexity)]
    pub(super) fn append_known<F>(&self, make: F) -> Result<Result<usize, F>, StoreError>
    where
        F: FnOnce(Option<i64>) -> Vec<Message>,
    {
        let Some((file, shape)) = self.known_file(OpenOptions::new().write(true))? else {
            return Ok(Err(make));
        };
        let batch = make(shape.last_ts);
        let count = batch.len();
        let total = shape.total + count;
        if self.max_turns.is_some_and(|max| total > max.get()) {
            let mut all = self.read_messages()?;
            all.extend(batch);
            self.write_capped(all)?;
            return Ok(Ok(count));
        }
        if count > 0 {
            let at = shape.stamp.len - 2;
            file.write_all_at(&lines::batch(&batch, shape.total)?, at)?;
            file.sync_data()?;
            let last = batch.last().map(|m| m.ts);
            let mut pins = shape.pins;
            pins.extend(pinned_in(&batch, shape.total));
            self.remember(Stamp::of(&file.metadata()?), total, last, pins);
        }
        Ok(Ok(count))
    }

    /// The messages at positions `start..end` (clamped to what is stored), read from the
    /// file's end: a range near the end (a summary's uncovered part, a page of the latest
    /// messages) costs what it holds.
    pub(super) fn read_range(&self, start: usize, end: usize) -> Result<Vec<Message>, StoreError> {
        let (Tail { total, .. }, _) = self.read_tail(0)?;
        let end = end.min(total);
        if start >= end {
            return Ok(Vec::new());
        }
        let (tail, _) = self.read_tail(total - start)?;
        let mut messages = tail.messages;
        messages.truncate(end - start);
        Ok(messages)
    }

    /// The pinned messages with their positions: from what is known of the file, after
    /// walking it when it is not known.
    pub(super) fn read_pins(&self) -> Result<Vec<(usize, Message)>, StoreError> {
        if let Some((_, shape)) = self.known_file(OpenOptions::new().read(true))? {
            return Ok(shape.pins);
        }
        match self.stored()? {
            super::dialog::Stored::Missing => Ok(Vec::new()),
            super::dialog::Stored::Lines {
                bytes,
                lines,
                stamp,
            } => {
                let pins = lines::pinned(&bytes, &lines)?;
                let last_ts = super::dialog::last_ts(&bytes, &lines)?;
                self.remember(stamp, lines.len(), last_ts, pins.clone());
                Ok(pins)
            }
            super::dialog::Stored::Other(messages) => Ok(pinned_in(&messages, 0)),
        }
    }
}

/// The end of a file, read: where the bytes read start, the bytes, and the ranges of the
/// last messages' lines in them.
pub(super) type FileEnd = (u64, Vec<u8>, Vec<std::ops::Range<usize>>);

/// The last `count` messages' lines of a complete file of `len` bytes in Parlor's layout;
/// `None` when the end is not this layout's.
pub(super) fn read_end(file: &File, len: u64, count: usize) -> std::io::Result<Option<FileEnd>> {
    let mut chunk = CHUNK.max(count as u64 * 256);
    loop {
        let start = len.saturating_sub(chunk);
        let mut bytes = vec![0; (len - start) as usize];
        file.read_exact_at(&mut bytes, start)?;
        match lines::last_lines(&bytes, start == 0, count) {
            End::Found(ranges) => return Ok(Some((start, bytes, ranges))),
            End::Short if start > 0 => chunk = chunk.saturating_mul(4),
            End::Short | End::Bad => return Ok(None),
        }
    }
}
