//! One dialog's folder: reading and writing its messages, summary and details, its backups,
//! and the leftovers a crash can leave in it. `FileStore` (the parent module) finds the
//! folder, serializes the operations on it and runs them on blocking threads.

use super::lines;
use super::shape::{Shapes, Stamp};
use super::{BACKUPS, INFO, MESSAGES, VERSION};
use crate::store::atomic::{sync_dir, write_atomically, GroupSync, TMP_MARK};
use crate::store::{pinned_in, ConversationInfo, MaxTurns, StoreError, Tail};
use parlor_domain::{ConversationId, Message};
use std::io::ErrorKind;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A dialog's `messages.json`, read.
pub(super) enum Stored {
    Missing,
    /// In Parlor's layout: the bytes and where each message is (see [`lines`]), and the
    /// file's stamp when it was read.
    Lines {
        bytes: Vec<u8>,
        lines: Vec<std::ops::Range<usize>>,
        stamp: Stamp,
    },
    /// JSON another tool (or an older Parlor) wrote, parsed; rewritten in the layout on the
    /// next write.
    Other(Vec<Message>),
}

pub(super) struct Dialog {
    pub(super) dir: PathBuf,
    pub(super) max_turns: MaxTurns,
    pub(super) backup_retention: usize,
    /// Its id and where the store keeps what it knows of the messages file (see
    /// [`super::shape`]); none where nothing is kept.
    pub(super) known: Option<(ConversationId, Arc<Shapes>)>,
    /// What the index beside the messages file is to say once the operation has answered
    /// (see [`Dialog::save_index`]).
    pub(super) unsaved: std::sync::Mutex<Option<super::shape::Shape>>,
}

impl Dialog {
    pub(super) fn messages_path(&self) -> PathBuf {
        self.dir.join(MESSAGES)
    }

    /// The stored messages file, read and checked. A file that is neither this layout nor
    /// JSON an older Parlor or another tool wrote is never overwritten: when an interrupted
    /// append left it (see [`lines`]), the complete messages are kept and the whole file is
    /// moved aside first; otherwise it is moved aside and the conversation starts empty.
    pub(super) fn stored(&self) -> Result<Stored, StoreError> {
        let path = self.messages_path();
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Stored::Missing),
            Err(e) => return Err(e.into()),
        };
        let stamp = Stamp::of(&file.metadata()?);
        let mut bytes = Vec::with_capacity(stamp.len as usize);
        file.read_to_end(&mut bytes)?;
        let walked = lines::walk(&bytes);
        if let Some(walk) = walked.as_ref().filter(|w| w.complete) {
            let lines = walk.messages.clone();
            return Ok(Stored::Lines {
                bytes,
                lines,
                stamp,
            });
        }
        let parse_error = match serde_json::from_slice(&bytes) {
            Ok(messages) => return Ok(Stored::Other(messages)),
            Err(e) => e,
        };
        let kept = walked.and_then(|w| lines::parse(&bytes, &w.messages).ok());
        let suffix = if kept.is_some() {
            "interrupted"
        } else {
            "corrupt"
        };
        let aside = self
            .dir
            .join(format!("{MESSAGES}.{suffix}-{}", timestamp()));
        std::fs::rename(&path, &aside)?;
        match kept {
            Some(messages) => {
                self.write_messages(&messages)?;
                tracing::warn!(
                    "{} was left by an interrupted write; its {} complete messages are kept and \
                     the whole file was moved to {}",
                    path.display(),
                    messages.len(),
                    aside.display()
                );
                Ok(Stored::Other(messages))
            }
            None => {
                tracing::error!(
                    "{} could not be read ({parse_error}); it was moved to {} and the \
                     conversation starts empty",
                    path.display(),
                    aside.display()
                );
                Ok(Stored::Missing)
            }
        }
    }

    /// The stored messages (see [`Dialog::stored`]).
    pub(super) fn read_messages(&self) -> Result<Vec<Message>, StoreError> {
        match self.stored()? {
            Stored::Missing => Ok(Vec::new()),
            Stored::Lines {
                bytes,
                lines,
                stamp,
            } => {
                let messages = lines::parse(&bytes, &lines)?;
                let pins = pinned_in(&messages, 0);
                self.remember(stamp, messages.len(), messages.last().map(|m| m.ts), pins);
                Ok(messages)
            }
            Stored::Other(messages) => Ok(messages),
        }
    }

    /// The last `count` messages, the total and the compact size of all of them, parsing
    /// only the last `count` in this layout.
    pub(super) fn read_tail(&self, count: usize) -> Result<(Tail, usize), StoreError> {
        if let Some(known) = self.tail_known(count)? {
            return Ok(known);
        }
        match self.stored()? {
            Stored::Missing => Ok((
                Tail {
                    messages: Vec::new(),
                    total: 0,
                },
                2,
            )),
            Stored::Lines {
                bytes,
                lines,
                stamp,
            } => {
                let total = lines.len();
                let messages = lines::parse(&bytes, &lines[total.saturating_sub(count)..])?;
                let size = lines::compact_len(&bytes, total);
                let last_ts = match messages.last() {
                    Some(last) => Some(last.ts),
                    None => last_ts(&bytes, &lines)?,
                };
                self.remember(stamp, total, last_ts, lines::pinned(&bytes, &lines)?);
                Ok((Tail { messages, total }, size))
            }
            Stored::Other(mut messages) => {
                let size = serde_json::to_vec(&messages)?.len();
                let total = messages.len();
                messages.drain(..total.saturating_sub(count));
                Ok((Tail { messages, total }, size))
            }
        }
    }

    /// Appends `batch` (made from the latest stored timestamp): in place when the file is in
    /// this layout and nothing needs trimming, else by rewriting the whole file.
    pub(super) fn append_with(
        &self,
        make: impl FnOnce(Option<i64>) -> Vec<Message>,
    ) -> Result<usize, StoreError> {
        use std::os::unix::fs::FileExt;
        let make = match self.append_known(make)? {
            Ok(count) => return Ok(count),
            Err(make) => make,
        };
        let (all, count) = match self.stored()? {
            Stored::Lines { bytes, lines, .. } => {
                let latest = last_ts(&bytes, &lines)?;
                let batch = make(latest);
                let count = batch.len();
                let fits = self
                    .max_turns
                    .is_none_or(|max| lines.len() + count <= max.get());
                if fits {
                    if count > 0 {
                        let file = std::fs::OpenOptions::new()
                            .write(true)
                            .open(self.messages_path())?;
                        let at = bytes.len() as u64 - 2;
                        file.write_all_at(&lines::batch(&batch, lines.len())?, at)?;
                        file.sync_data()?;
                        let last = batch.last().map(|m| m.ts);
                        let mut pins = lines::pinned(&bytes, &lines)?;
                        pins.extend(pinned_in(&batch, lines.len()));
                        let stamp = Stamp::of(&file.metadata()?);
                        self.remember(stamp, lines.len() + count, last, pins);
                    }
                    return Ok(count);
                }
                let mut all = lines::parse(&bytes, &lines)?;
                all.extend(batch);
                (all, count)
            }
            Stored::Other(mut all) => {
                let batch = make(all.last().map(|m| m.ts));
                let count = batch.len();
                all.extend(batch);
                (all, count)
            }
            Stored::Missing => {
                let batch = make(None);
                let count = batch.len();
                (batch, count)
            }
        };
        self.write_capped(all)?;
        Ok(count)
    }

    /// Makes the dialog's folder with its details and first messages in one atomic step:
    /// both files are written (and synced, side by side) into a hidden folder that is then
    /// renamed into place, so a crash leaves either the whole new dialog or none of it.
    /// `false` (nothing changed) when the folder exists already.
    pub(super) fn create(
        &self,
        root: &GroupSync,
        info: &[u8],
        messages: &[Message],
    ) -> Result<bool, StoreError> {
        if self.dir.exists() {
            return Ok(false);
        }
        let name = self.dir.file_name().unwrap_or_default().to_string_lossy();
        let staged = root.dir().join(format!(
            ".{name}{}{}",
            TMP_MARK,
            uuid::Uuid::new_v4().simple()
        ));
        let messages_list = messages;
        let messages = lines::encode(messages)?;
        let result = (|| {
            std::fs::create_dir_all(&staged)?;
            let create = |file: &str| std::fs::File::create(staged.join(file));
            let (info_file, messages_file) = (create(INFO)?, create(MESSAGES)?);
            // Both files and the folder's entries for them are synced at once (they share
            // the file system's commit), all before the folder is renamed into place.
            let info = info.to_vec();
            let info = Side::start(move || write_synced(info_file, &info));
            let folder = staged.clone();
            let entries = Side::start(move || sync_dir(&folder));
            let here = write_synced(messages_file, &messages);
            let (info, entries) = (info.wait(), entries.wait());
            here.and(info).and(entries)?;
            std::fs::rename(&staged, &self.dir)?;
            self.remember_written(messages_list);
            root.sync()
        })();
        match result {
            Ok(()) => Ok(true),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staged);
                // Another process made the folder meanwhile: the caller writes into it.
                if self.dir.is_dir() {
                    Ok(false)
                } else {
                    Err(e.into())
                }
            }
        }
    }

    /// The dialog's version (see `ConversationStore::version`): the number in its `version`
    /// file, 0 when there is none.
    pub(super) fn version(&self) -> Result<u64, StoreError> {
        match std::fs::read_to_string(self.dir.join(VERSION)) {
            Ok(text) => text.trim().parse().map_err(|_| {
                StoreError::Corrupt(format!(
                    "{} does not hold a number",
                    self.dir.join(VERSION).display()
                ))
            }),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Moves the version on, before the write it stands for: a crash between the two leaves
    /// a version that moved for nothing (a summarizer run is discarded), never a change that
    /// a compare-and-set would miss.
    pub(super) fn bump_version(&self) -> Result<(), StoreError> {
        let next = self.version().unwrap_or_default() + 1;
        write_atomically(&self.dir, VERSION, next.to_string().as_bytes())?;
        Ok(())
    }

    pub(super) fn write_messages(&self, messages: &[Message]) -> Result<(), StoreError> {
        write_atomically(&self.dir, MESSAGES, &lines::encode(messages)?)?;
        self.remember_written(messages);
        Ok(())
    }
}

fn write_synced(mut file: std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Blocking work run beside the current thread's: on one of tokio's blocking threads, which
/// are kept for reuse, when there is a runtime (starting and joining a thread costs about
/// 50 µs here, a tenth of a new dialog's whole write), on a new thread otherwise. Only file
/// operations holding the store's `IO_PERMITS` (one for each of their threads) wait this
/// way, far fewer than tokio's blocking threads, so the work waited for always finds a thread.
enum Side {
    Pooled(tokio::task::JoinHandle<std::io::Result<()>>),
    Spawned(std::thread::JoinHandle<std::io::Result<()>>),
}

impl Side {
    fn start(job: impl FnOnce() -> std::io::Result<()> + Send + 'static) -> Side {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Side::Pooled(runtime.spawn_blocking(job)),
            Err(_) => Side::Spawned(std::thread::spawn(job)),
        }
    }

    /// Waits for the work to end (blocking this thread, which must not be one of the
    /// runtime's workers).
    fn wait(self) -> std::io::Result<()> {
        let failed = || std::io::Error::other("a write stopped unexpectedly");
        match self {
            Side::Pooled(handle) => {
                futures::executor::block_on(handle).unwrap_or_else(|_| Err(failed()))
            }
            Side::Spawned(handle) => handle.join().unwrap_or_else(|_| Err(failed())),
        }
    }
}

/// Removes the temporary files and half-made backups a crash may have left in a dialog.
pub(super) fn remove_leftovers(dialog: &Path) {
    let is_leftover = |name: &str| name.starts_with('.') && name.contains(".tmp");
    for dir in [dialog.to_owned(), dialog.join(BACKUPS)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            if !is_leftover(&entry.file_name().to_string_lossy()) {
                continue;
            }
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            match removed {
                Ok(()) => tracing::info!("removed {} left by an interrupted write", path.display()),
                Err(e) => tracing::warn!("could not remove {}: {e}", path.display()),
            }
        }
    }
}

pub(super) fn read_info(path: &Path, id: &ConversationId) -> Option<ConversationInfo> {
    parse_info(&std::fs::read(path).ok()?, path, id)
}

/// The details of `id` in `bytes`, read from `path` (logged and `None` when they do not
/// read or name another conversation).
pub(super) fn parse_info(
    bytes: &[u8],
    path: &Path,
    id: &ConversationId,
) -> Option<ConversationInfo> {
    match serde_json::from_slice::<ConversationInfo>(bytes) {
        Ok(info) if &info.session_id == id => Some(info),
        Ok(_) => {
            tracing::error!("skipping {}: it names another conversation", path.display());
            None
        }
        Err(e) => {
            tracing::error!("skipping unreadable {}: {e}", path.display());
            None
        }
    }
}

/// UTC time to the millisecond, as a name that sorts in time order:
/// `2026-11-22T10-15-00-123Z`.
pub(super) fn timestamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}-{:03}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.millisecond()
    )
}

pub(super) fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec_pretty(value).map_err(StoreError::from)
}

/// The newest message's time in a file of this layout.
pub(super) fn last_ts(
    bytes: &[u8],
    lines: &[std::ops::Range<usize>],
) -> Result<Option<i64>, StoreError> {
    Ok(match lines.last() {
        Some(last) => Some(lines::parse(bytes, std::slice::from_ref(last))?[0].ts),
        None => None,
    })
}
/// Finds a dialog's folder, without borrowing the store (for blocking threads).
pub(super) fn dialog_maker(
    root: &Path,
    max_turns: MaxTurns,
    backup_retention: usize,
    shapes: &Arc<Shapes>,
) -> impl Fn(&ConversationId) -> Dialog + Send + 'static {
    let (root, shapes) = (root.to_path_buf(), shapes.clone());
    move |id| Dialog {
        dir: dialog_dir(&root, id),
        max_turns,
        backup_retention: backup_retention.max(1),
        known: Some((id.clone(), shapes.clone())),
        unsaved: std::sync::Mutex::default(),
    }
}

/// A dialog's folder. Session ids are 1–128 characters of `[A-Za-z0-9._-]` without a leading
/// dot, so the id is always one path component inside the store: `..`, `/`, `\` and control
/// characters cannot occur. The check below keeps that true whatever `ConversationId` allows.
pub(super) fn dialog_dir(root: &Path, id: &ConversationId) -> PathBuf {
    let name = id.as_str();
    assert!(
        !name.starts_with('.')
            && !name.contains(['/', '\\'])
            && !name.chars().any(char::is_control),
        "ConversationId guarantees a safe folder name"
    );
    root.join(name)
}
