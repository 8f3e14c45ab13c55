//! The one way Parlor replaces a file: a temporary file in the same folder, written and
//! synced, renamed over the old one, then the folder synced. Readers and crashes see the old
//! or the new contents, never a mix.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

/// The prefix of the temporary files [`write_atomically`] leaves behind if interrupted
/// (`.<name>.tmp-<random>`), for cleanups.
pub const TMP_MARK: &str = ".tmp-";

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Syncs one folder (or file) for many writers at once (a group commit): a writer that
/// renamed an entry into the folder (or wrote to the file) calls [`GroupSync::sync`], which
/// returns once a sync that *started after the call* has succeeded. Writers arriving while a sync runs wait for
/// the next one, which then covers all of them: under load, one sync instead of one each
/// (the file history's new dialogs all land in its root folder).
pub struct GroupSync {
    dir: PathBuf,
    sync: Box<SyncFn>,
    state: Mutex<Rounds>,
    finished: Condvar,
}

#[derive(Default)]
struct Rounds {
    /// Calls so far; each call's number is its ticket.
    asked: u64,
    /// Every ticket up to this one is covered by a successful sync.
    covered: u64,
    /// A sync is running now.
    running: bool,
}

/// How a [`GroupSync`] makes what it guards durable (given its path).
type SyncFn = dyn Fn(&Path) -> std::io::Result<()> + Send + Sync;

impl GroupSync {
    pub fn new(dir: PathBuf) -> GroupSync {
        GroupSync::with(dir, sync_dir)
    }

    /// Syncs with `sync` instead of syncing the folder `dir` (e.g. a file, through a handle
    /// kept open).
    pub fn with(
        dir: PathBuf,
        sync: impl Fn(&Path) -> std::io::Result<()> + Send + Sync + 'static,
    ) -> GroupSync {
        GroupSync {
            dir,
            sync: Box::new(sync),
            state: Mutex::default(),
            finished: Condvar::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Returns once the folder was synced after this call began (blocking the thread). On an
    /// error, only the caller whose sync failed gets it; the others try again.
    pub fn sync(&self) -> std::io::Result<()> {
        let lock = || self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut rounds = lock();
        rounds.asked += 1;
        let ticket = rounds.asked;
        loop {
            if rounds.covered >= ticket {
                return Ok(());
            }
            if !rounds.running {
                // Everyone who asked so far renamed before this sync starts.
                rounds.running = true;
                let covers = rounds.asked;
                drop(rounds);
                let result = (self.sync)(&self.dir);
                let mut rounds = lock();
                rounds.running = false;
                if result.is_ok() {
                    rounds.covered = rounds.covered.max(covers);
                }
                drop(rounds);
                self.finished.notify_all();
                return result;
            }
            rounds = self
                .finished
                .wait(rounds)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Writes `dir/name` atomically (creating `dir` when missing).
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    write_with_mode(dir, name, bytes, 0o666)
}

/// [`write_atomically`] for secrets (password hashes, login records): only the owner may read
/// the file (0600), in a folder only the owner may enter when this makes it (0700).
pub fn write_privately(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    write_with_mode(dir, name, bytes, 0o600)
}

fn write_with_mode(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{name}{TMP_MARK}{}",
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// One clock for the group-sync test: callers note it before asking, syncs when they
    /// start.
    static CLOCK: AtomicU64 = AtomicU64::new(0);
    static STARTS: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    static FAIL_NEXT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    fn slow_sync(_: &Path) -> std::io::Result<()> {
        STARTS
            .lock()
            .unwrap()
            .push(CLOCK.fetch_add(1, Ordering::SeqCst));
        std::thread::sleep(std::time::Duration::from_millis(5));
        if FAIL_NEXT.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::other("disk full"));
        }
        Ok(())
    }

    #[test]
    fn a_group_sync_covers_each_caller_with_a_sync_begun_after_it_and_shares_them() {
        let group = GroupSync::with(PathBuf::from("unused"), slow_sync);
        let callers = 32;
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..callers)
                .map(|_| {
                    scope.spawn(|| {
                        // The caller's rename happened before this mark.
                        let renamed = CLOCK.fetch_add(1, Ordering::SeqCst);
                        group.sync().unwrap();
                        let starts = STARTS.lock().unwrap();
                        assert!(
                            starts.iter().any(|&start| start > renamed),
                            "returned without a sync begun after its rename"
                        );
                    })
                })
                .collect();
            for handle in handles {
                handle.join().unwrap();
            }
        });
        let syncs = STARTS.lock().unwrap().len();
        assert!(syncs < callers, "{syncs} syncs for {callers} callers");

        // A failed sync is the error of the caller that ran it; the next call syncs again.
        FAIL_NEXT.store(true, Ordering::SeqCst);
        assert!(group.sync().is_err());
        let before = STARTS.lock().unwrap().len();
        group.sync().unwrap();
        assert_eq!(STARTS.lock().unwrap().len(), before + 1);
    }

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        write_atomically(dir.path(), "a.json", b"old").unwrap();
        write_atomically(dir.path(), "a.json", b"new").unwrap();
        assert_eq!(std::fs::read(dir.path().join("a.json")).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.json"]);
        // Into a folder that does not exist yet.
        write_atomically(&dir.path().join("sub"), "b", b"x").unwrap();
        assert!(dir.path().join("sub/b").exists());
    }
}
