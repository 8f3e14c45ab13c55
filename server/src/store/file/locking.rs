//! A dialog's operations one at a time: in this process (a lock per dialog) and across
//! processes (an advisory lock file), on a blocking thread.

use super::journal::Journal;
use super::{Dialog, FileStore, LOCKS};
use crate::store::atomic::GroupSync;
use crate::store::StoreError;
use parlor_domain::ConversationId;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl FileStore {
    /// Runs `op` on the dialog's folder, serialized with every other operation on it, on a
    /// thread where blocking file I/O is fine.
    pub(super) async fn locked<T: Send + 'static>(
        &self,
        id: &ConversationId,
        op: impl FnOnce(&Dialog) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.locked_on(id, 1, op).await
    }

    /// [`Self::locked`] for an operation that keeps `threads` blocking threads busy at once
    /// (a new dialog's side syncs): it holds as many of the `IO_PERMITS`, so the bound is one
    /// on threads.
    pub(super) async fn locked_on<T: Send + 'static>(
        &self,
        id: &ConversationId,
        threads: u32,
        op: impl FnOnce(&Dialog) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.locked_task(id, threads, op).await
    }

    /// [`Self::locked_on`] as a future that borrows nothing from the store.
    fn locked_task<T: Send + 'static>(
        &self,
        id: &ConversationId,
        threads: u32,
        op: impl FnOnce(&Dialog) -> Result<T, StoreError> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static {
        self.in_turn(id, threads, move |held| {
            held.lock()?;
            op(&held.dialog)
        })
    }

    /// Runs `op` serialized in this process with every other operation on the dialog, on a
    /// blocking thread; `op` takes the lock shared with other processes itself
    /// ([`Held::lock`]), so a new dialog can be recorded before it does. The future borrows
    /// nothing from the store, so it can be spawned and run to its end whoever waits for it
    /// (a new dialog's folder is made after its turn has gone on).
    ///
    /// The future ends with `op`'s answer; what only speeds up later reads (the index of
    /// the messages file, [`Dialog::save_index`]) is written after it, still under both
    /// locks, so a turn's durable append is not kept waiting for a cache.
    pub(super) fn in_turn<T: Send + 'static>(
        &self,
        id: &ConversationId,
        threads: u32,
        op: impl FnOnce(&Held) -> Result<T, StoreError> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static {
        self.in_turn_as(id, threads, 0, op)
    }

    /// [`Self::in_turn`] for the read numbered `ticket` (0: any other operation): every
    /// operation, once it holds the dialog's lock here, makes what was read before it stale
    /// (see [`super::prefetch`]).
    pub(super) fn in_turn_as<T: Send + 'static>(
        &self,
        id: &ConversationId,
        threads: u32,
        ticket: u64,
        op: impl FnOnce(&Held) -> Result<T, StoreError> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static {
        let (locks, io) = (self.locks.clone(), self.io.clone());
        let prefetched = self.prefetched.clone();
        let held = Held {
            dialog: self.dialog(id),
            lock_file: lock_path(&self.root, id),
            locked: std::sync::Mutex::new(None),
            id: id.clone(),
            journal: self.journal.clone(),
            root: self.root_sync.clone(),
        };
        let id = id.clone();
        async move {
            let lock = {
                let mut locks = locks.lock().unwrap_or_else(|e| e.into_inner());
                locks.entry(id.clone()).or_default().clone()
            };
            let guard = lock.clone().lock_owned().await;
            prefetched.starts(&id, ticket);
            let permit = io.acquire_many_owned(threads).await;
            let (answer, answered) = tokio::sync::oneshot::channel();
            tokio::task::spawn_blocking(move || {
                let mut release = Release {
                    held: Some(held),
                    guard: Some(guard),
                    permit: Some(permit),
                    map: (locks, id, lock),
                    answer: Some(answer),
                };
                let answered = op(release.held.as_ref().expect("set above"));
                if let Some(answer) = release.answer.take() {
                    let _ = answer.send(answered);
                }
            });
            answered.await.unwrap_or_else(|_| {
                Err(StoreError::Io(std::io::Error::other(
                    "a file operation stopped unexpectedly",
                )))
            })
        }
    }
}

type LockMap =
    std::sync::Mutex<std::collections::HashMap<ConversationId, Arc<tokio::sync::Mutex<()>>>>;

/// What an operation holds, let go in order once it has answered, or when it panicked:
/// the index written (or, after a panic, what is known of the dialog forgotten), the lock
/// shared with other processes, the lock in this process (forgotten from the map when
/// nobody waits for it), the threads' permits; after a panic, the caller hears of it last.
struct Release<T> {
    held: Option<Held>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    permit: Option<Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError>>,
    map: (Arc<LockMap>, ConversationId, Arc<tokio::sync::Mutex<()>>),
    answer: Option<tokio::sync::oneshot::Sender<Result<T, StoreError>>>,
}

impl<T> Drop for Release<T> {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            if std::thread::panicking() {
                held.dialog.forget();
            } else {
                held.dialog.save_index();
            }
        }
        drop(self.guard.take());
        let (locks, id, lock) = &self.map;
        forget_unused(locks, id, lock);
        drop(self.permit.take());
        drop(self.answer.take());
    }
}

/// Forgets the in-process lock of `id` when nobody else holds or waits for it (only the
/// map and the caller do), so the map does not grow with every conversation seen.
fn forget_unused(locks: &LockMap, id: &ConversationId, lock: &Arc<tokio::sync::Mutex<()>>) {
    let mut locks = locks.lock().unwrap_or_else(|e| e.into_inner());
    if locks
        .get(id)
        .is_some_and(|held| Arc::ptr_eq(held, lock) && Arc::strong_count(held) == 2)
    {
        locks.remove(id);
    }
}

/// A dialog's operation, holding its lock in this process.
pub(super) struct Held {
    pub(super) dialog: Dialog,
    lock_file: PathBuf,
    /// The lock shared with other processes, once taken: held until the operation and
    /// what follows it are done.
    locked: std::sync::Mutex<Option<std::fs::File>>,
    pub(super) id: ConversationId,
    pub(super) journal: Arc<Journal>,
    pub(super) root: Arc<GroupSync>,
}

impl Held {
    /// Takes the dialog's lock shared with other processes (`parlor mcp`, another web
    /// server: writes to one dialog are serialized across them), held until the operation
    /// ends (see [`FileStore::in_turn`]); then finishes a rewrite of the messages' end that
    /// a crash interrupted, and makes a recorded new dialog's folder, before anything else
    /// reads or writes them (see `redo` and `journal`).
    pub(super) fn lock(&self) -> Result<(), StoreError> {
        let mut locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
        if locked.is_none() {
            *locked = Some(lock_dialog(&self.lock_file)?);
        }
        drop(locked);
        self.dialog.finish_rewrite()?;
        self.journal.retry(&self.dialog, &self.id, &self.root)?;
        Ok(())
    }
}

/// Where the advisory lock of dialog `id` is.
pub(super) fn lock_path(root: &Path, id: &ConversationId) -> PathBuf {
    root.join(LOCKS).join(format!("{}.lock", id.as_str()))
}

/// Whether no process holds the lock of dialog `name` now (checked by taking it, and
/// letting it go at once).
pub(super) fn unlocked(root: &Path, name: &str) -> bool {
    let path = root.join(LOCKS).join(format!("{name}.lock"));
    match std::fs::OpenOptions::new().write(true).open(&path) {
        Ok(file) => file.try_lock().is_ok(),
        // Never locked since the locks' folder was made: nobody holds it.
        Err(e) => e.kind() == ErrorKind::NotFound,
    }
}

/// Takes the advisory lock of a dialog (`.chat-history/.locks/<dialog>.lock`, outside the
/// dialog's folder so that reading an unknown dialog creates nothing there); released when
/// the returned file is dropped, also when the process dies.
pub(super) fn lock_dialog(path: &Path) -> std::io::Result<std::fs::File> {
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
    };
    let file = match open() {
        // The locks' folder is made on first use (and again if something removed it).
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            open()?
        }
        opened => opened?,
    };
    file.lock()?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ConversationInfo, ConversationStore};
    use parlor_domain::Message;

    #[tokio::test]
    async fn an_operation_that_panics_lets_its_locks_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path(), None, 3).unwrap();
        let id = ConversationId::parse("panicky").unwrap();
        let info = ConversationInfo::bare(&id, Some(1));
        store
            .create(&info, &[Message::user("one", 1)])
            .await
            .unwrap();
        let failed = store
            .locked(&id, |_| -> Result<(), StoreError> {
                panic!("a bug in an operation")
            })
            .await;
        assert!(failed.is_err());
        // Nothing of the lock is kept, and the next operation on the dialog runs at once
        // (here and in another process, whose lock was let go too).
        assert!(store.locks.lock().unwrap().is_empty());
        let other = FileStore::open(dir.path(), None, 3).unwrap();
        other
            .append(&id, &[Message::assistant("two", 2)])
            .await
            .unwrap();
        store
            .append(&id, &[Message::user("three", 3)])
            .await
            .unwrap();
        assert_eq!(store.load(&id).await.unwrap().len(), 3);
    }
}
