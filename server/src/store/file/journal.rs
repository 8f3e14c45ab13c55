//! The journal of new dialogs: one durable write before a new conversation is acknowledged.
//!
//! Making a dialog's folder the atomic way (a staged folder with its two files synced, then
//! renamed into place and the root synced) takes two sync rounds, one after the other. A new
//! conversation's first turn would wait for both. Instead, its details and first messages
//! are appended to this process's log (`.chat-history/.journal/<process>-<n>.log`) and the
//! log is synced, one sync for the new conversations arriving together; the turn goes on
//! from there, and the folder is then made as before, while the dialog's locks are still
//! held, so no operation on it (in any process) runs before its folder exists.
//!
//! A crash between the two leaves the record in the log. Every process holds an advisory
//! lock on its own logs while it lives; whoever opens the store, and a running store every
//! second (`catch_up`), replays the logs nobody holds: each record whose folder does not
//! exist is made, then the log is removed. A record is
//! `[length: u32][crc32: u32][id length: u16][id][details length: u32][details][messages]`,
//! little-endian; a torn record at a log's end (a crash mid-write) fails its checksum and
//! ends the replay of that log: it was never acknowledged.

use super::dialog::Dialog;
use super::INFO;
use crate::store::atomic::{sync_dir, write_atomically, GroupSync};
use crate::store::StoreError;
use parlor_domain::{ConversationId, Message};
use std::collections::HashMap;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The journal's folder, inside `.chat-history`.
pub(super) const JOURNAL: &str = ".journal";
/// A log this long is closed and a new one started; a closed log is removed once every
/// folder it recorded is made.
const ROTATE_AT: u64 = 1 << 20;

pub(super) struct Journal {
    dir: PathBuf,
    /// This process's name for its logs.
    process: String,
    logs: Mutex<Logs>,
    /// The dialogs recorded and not yet made, by id: in flight (their folder is being
    /// made under their locks) or failed (tried again by the next operation on them).
    pending: Mutex<HashMap<ConversationId, Pending>>,
    /// Whether any pending dialog failed: the fast path of [`Journal::retry`].
    any_failed: AtomicBool,
}

#[derive(Default)]
struct Logs {
    current: Option<Log>,
    closed: Vec<Log>,
    next: u64,
}

struct Log {
    number: u64,
    path: PathBuf,
    /// Locked (advisory) while this process lives.
    file: File,
    sync: Arc<GroupSync>,
    len: u64,
    /// Records whose folders are not made yet.
    open: usize,
}

struct Pending {
    log: u64,
    failed: Option<(Vec<u8>, Vec<Message>)>,
}

impl Journal {
    pub(super) fn new(root: &Path) -> Journal {
        Journal {
            dir: root.join(JOURNAL),
            process: uuid::Uuid::new_v4().simple().to_string(),
            logs: Mutex::default(),
            pending: Mutex::default(),
            any_failed: AtomicBool::new(false),
        }
    }

    /// Makes a new dialog durably: records it and syncs the log, then calls `acknowledged`,
    /// then `make` (which takes the dialog's lock file and makes its folder: see the
    /// module's notes). The caller holds the dialog's lock in this process.
    pub(super) fn create(
        &self,
        id: &ConversationId,
        (info, messages): (&[u8], &[Message]),
        acknowledged: impl FnOnce(),
        make: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let log = self.append(&record(id, info, &super::lines::encode(messages)?))?;
        self.pending_mut()
            .insert(id.clone(), Pending { log, failed: None });
        acknowledged();
        match make() {
            Ok(()) => {
                self.pending_mut().remove(id);
                self.done(log);
                Ok(())
            }
            Err(e) => {
                // Kept: the next operation on the dialog makes it before anything else.
                tracing::error!("could not make the folder of new dialog {id} yet: {e}");
                let failed = Some((info.to_vec(), messages.to_vec()));
                self.pending_mut()
                    .insert(id.clone(), Pending { log, failed });
                self.any_failed.store(true, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Whether a dialog is recorded and its folder not made yet (reads without its lock
    /// take it then).
    pub(super) fn is_pending(&self, id: &ConversationId) -> bool {
        self.pending_mut().contains_key(id)
    }

    /// Makes the folder of a recorded dialog whose making failed, before any other
    /// operation on it (the caller holds its locks).
    pub(super) fn retry(
        &self,
        dialog: &Dialog,
        id: &ConversationId,
        root: &GroupSync,
    ) -> Result<(), StoreError> {
        if !self.any_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let Some((log, (info, messages))) = self.pending_mut().get_mut(id).and_then(|p| {
            let failed = p.failed.take()?;
            Some((p.log, failed))
        }) else {
            return Ok(());
        };
        match make_dialog(dialog, root, &info, &messages) {
            Ok(()) => {
                let mut pending = self.pending_mut();
                pending.remove(id);
                let any = pending.values().any(|p| p.failed.is_some());
                self.any_failed.store(any, Ordering::Release);
                drop(pending);
                self.done(log);
                Ok(())
            }
            Err(e) => {
                if let Some(p) = self.pending_mut().get_mut(id) {
                    p.failed = Some((info, messages));
                }
                Err(e)
            }
        }
    }

    fn pending_mut(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn logs(&self) -> std::sync::MutexGuard<'_, Logs> {
        self.logs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a record and returns once it is synced (grouped with the records appended
    /// meanwhile): the number of the log holding it.
    fn append(&self, record: &[u8]) -> Result<u64, StoreError> {
        let (number, sync) = {
            let mut logs = self.logs();
            let log = self.writable(&mut logs)?;
            if let Err(e) = log.file.write_all_at(record, log.len) {
                // Nothing half-written stays before the records that follow.
                let _ = log.file.set_len(log.len);
                return Err(e.into());
            }
            log.len += record.len() as u64;
            log.open += 1;
            (log.number, log.sync.clone())
        };
        if let Err(e) = sync.sync() {
            self.done(number);
            return Err(e.into());
        }
        Ok(number)
    }

    /// The log to append to: the current one, or a new one when there is none or it is
    /// long enough to close.
    fn writable<'a>(&self, logs: &'a mut Logs) -> std::io::Result<&'a mut Log> {
        if logs.current.as_ref().is_none_or(|log| log.len >= ROTATE_AT) {
            std::fs::create_dir_all(&self.dir)?;
            let number = logs.next;
            let name = format!("{}-{number}", self.process);
            let (made, path) = (self.dir.join(&name), self.dir.join(name + ".log"));
            let file = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&made)?;
            // Locked before it is named as a log, so no other process takes it for the log
            // of a dead one; the name is durable before any record in it counts as written.
            let named = file
                .try_lock()
                .map_err(std::io::Error::other)
                .and_then(|()| preallocate(&file))
                .and_then(|()| std::fs::rename(&made, &path));
            if let Err(e) = named {
                // Not left behind (a full disk, say): the next try makes the same name anew.
                let _ = std::fs::remove_file(&made);
                return Err(e);
            }
            sync_dir(&self.dir)?;
            // Synced through a handle of its own: no open and close around each sync.
            let handle = file.try_clone()?;
            let log = Log {
                number,
                sync: Arc::new(GroupSync::with(path.clone(), move |_| handle.sync_data())),
                path,
                file,
                len: 0,
                open: 0,
            };
            logs.next += 1;
            match logs.current.replace(log) {
                Some(old) if old.open > 0 => logs.closed.push(old),
                Some(old) => remove_log(&old.path),
                None => {}
            }
        }
        Ok(logs.current.as_mut().expect("made above"))
    }

    /// One record of log `number` has its folder made (or was never acknowledged).
    fn done(&self, number: u64) {
        let mut logs = self.logs();
        if let Some(log) = logs.current.as_mut().filter(|l| l.number == number) {
            log.open = log.open.saturating_sub(1);
            return;
        }
        if let Some(at) = logs.closed.iter().position(|l| l.number == number) {
            logs.closed[at].open = logs.closed[at].open.saturating_sub(1);
            if logs.closed[at].open == 0 {
                let log = logs.closed.swap_remove(at);
                remove_log(&log.path);
            }
        }
    }

    /// Replays the logs no living process holds (see the module's notes): the ids of the
    /// dialogs made.
    pub(super) fn recover(
        &self,
        root: &GroupSync,
        dialog_of: &dyn Fn(&ConversationId) -> Dialog,
        lock_of: &dyn Fn(&ConversationId) -> std::io::Result<File>,
    ) -> Result<Vec<ConversationId>, StoreError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut made = Vec::new();
        for entry in entries {
            let path = entry?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if name.starts_with(&self.process) {
                continue;
            }
            let Ok(file) = File::options().read(true).write(true).open(&path) else {
                continue;
            };
            // Held by a living process (which makes its folders itself).
            if file.try_lock().is_err() {
                continue;
            }
            if !name.ends_with(".log") {
                // A log made and never named (so never written): a crash came between.
                let _ = std::fs::remove_file(&path);
                continue;
            }
            // The others are still made when one fails; the log stays for the next replay.
            let failed = records(&std::fs::read(&path)?)
                .iter()
                .filter(|record| !replay(record, root, dialog_of, lock_of, &mut made))
                .count();
            if failed > 0 {
                continue;
            }
            match std::fs::remove_file(&path) {
                // Replayed by another process as well.
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                removed => removed?,
            }
            sync_dir(&self.dir)?;
        }
        Ok(made)
    }
}

/// Makes a recorded dialog's folder when it does not exist (adding its id to `made`):
/// whether that went well.
fn replay(
    (id, info, messages): &Record,
    root: &GroupSync,
    dialog_of: &dyn Fn(&ConversationId) -> Dialog,
    lock_of: &dyn Fn(&ConversationId) -> std::io::Result<File>,
    made: &mut Vec<ConversationId>,
) -> bool {
    let dialog = dialog_of(id);
    let replayed = lock_of(id).map_err(StoreError::from).and_then(|_held| {
        let made = !dialog.dir.exists() && dialog.create(root, info, messages)?;
        // Its index too, while the lock is held (see `FileStore::in_turn`).
        dialog.save_index();
        Ok(made)
    });
    match replayed {
        Ok(true) => {
            tracing::warn!("made new dialog {id} from the journal after a crash");
            made.push(id.clone());
            true
        }
        Ok(false) => true,
        Err(e) => {
            tracing::error!("could not make new dialog {id} from the journal: {e}");
            false
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        let logs = self.logs.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = logs.current.take().filter(|log| log.open == 0) {
            remove_log(&log.path);
        }
    }
}

/// Makes a new dialog's folder with its details and first messages (see
/// [`Dialog::create`]); when the folder exists (messages written by another tool, or by
/// another process since this one recorded the dialog), writes the details and appends the
/// messages to it instead. The caller holds the dialog's locks.
pub(super) fn make_dialog(
    dialog: &Dialog,
    root: &GroupSync,
    info: &[u8],
    messages: &[Message],
) -> Result<(), StoreError> {
    if dialog.create(root, info, messages)? {
        return Ok(());
    }
    write_atomically(&dialog.dir, INFO, info)?;
    dialog.append_with(|_| messages.to_vec()).map(drop)
}

/// Writes a new log's first [`ROTATE_AT`] bytes as zeros, durably: an append into them
/// changes no size and no block map, so its sync writes the record's data alone (on this
/// project's disks about 0.20 ms against 0.33 ms for an append that grows the file, and
/// 0.30 ms against 0.73 ms at the p90: docs/performance.md). A record past them grows the
/// file as before. The zeros read as the end of the records (see [`records`]).
fn preallocate(file: &File) -> std::io::Result<()> {
    const CHUNK: usize = 64 * 1024;
    let zeros = vec![0u8; CHUNK];
    let mut at = 0;
    while at < ROTATE_AT {
        file.write_all_at(&zeros, at)?;
        at += CHUNK as u64;
    }
    file.sync_data()
}

/// Removes a log whose every folder is made. Not synced: if the removal is lost in a crash,
/// the replay finds every folder made and makes nothing.
fn remove_log(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        tracing::warn!("could not remove journal {}: {e}", path.display());
    }
}

fn record(id: &ConversationId, info: &[u8], messages: &[u8]) -> Vec<u8> {
    let id = id.as_str().as_bytes();
    let mut body = Vec::with_capacity(6 + id.len() + info.len() + messages.len());
    body.extend_from_slice(&(id.len() as u16).to_le_bytes());
    body.extend_from_slice(id);
    body.extend_from_slice(&(info.len() as u32).to_le_bytes());
    body.extend_from_slice(info);
    body.extend_from_slice(messages);
    let mut record = Vec::with_capacity(8 + body.len());
    record.extend_from_slice(&(body.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    record.extend_from_slice(&body);
    record
}

type Record = (ConversationId, Vec<u8>, Vec<Message>);

/// The whole records of a log, up to the first torn or unreadable one, or the zeros it was
/// made with (a record's length is never 0).
fn records(mut bytes: &[u8]) -> Vec<Record> {
    let mut all = Vec::new();
    while let Some(((len, crc), rest)) = split_u32(bytes)
        .and_then(|(len, rest)| split_u32(rest).map(|(crc, rest)| ((len, crc), rest)))
    {
        if len == 0 {
            break;
        }
        let Some((body, rest)) = rest.split_at_checked(len as usize) else {
            break;
        };
        let Some(record) = (crc32fast::hash(body) == crc)
            .then(|| parse(body))
            .flatten()
        else {
            break;
        };
        all.push(record);
        bytes = rest;
    }
    all
}

fn parse(body: &[u8]) -> Option<Record> {
    let (id_len, rest) = body.split_first_chunk::<2>()?;
    let (id, rest) = rest.split_at_checked(u16::from_le_bytes(*id_len) as usize)?;
    let id = ConversationId::parse(std::str::from_utf8(id).ok()?).ok()?;
    let (info_len, rest) = split_u32(rest)?;
    let (info, messages) = rest.split_at_checked(info_len as usize)?;
    let messages = serde_json::from_slice(messages).ok()?;
    Some((id, info.to_vec(), messages))
}

fn split_u32(bytes: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<4>()?;
    Some((u32::from_le_bytes(*head), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ConversationId {
        ConversationId::parse(s).unwrap()
    }

    #[test]
    fn records_are_read_back_up_to_the_first_torn_one() {
        let messages = [Message::user("hello", 1), Message::assistant("hi", 2)];
        let encoded = super::super::lines::encode(&messages).unwrap();
        let mut log = record(&id("first"), b"{\"a\":1}", &encoded);
        log.extend(record(&id("second"), b"{}", &encoded));
        let whole = records(&log);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].0, id("first"));
        assert_eq!(whole[0].1, b"{\"a\":1}");
        assert_eq!(
            whole[1]
                .2
                .iter()
                .map(|m| m.text.as_str())
                .collect::<Vec<_>>(),
            ["hello", "hi"]
        );
        // A crash mid-write: the second record cut short, or its bytes changed.
        assert_eq!(records(&log[..log.len() - 3]).len(), 1);
        let mut flipped = log.clone();
        let last = flipped.len() - 10;
        flipped[last] ^= 1;
        assert_eq!(records(&flipped).len(), 1);
        // The rest of a log made with zeros: the records, then the end.
        let mut preallocated = log.clone();
        preallocated.resize(log.len() + 4096, 0);
        assert_eq!(records(&preallocated).len(), 2);
        assert!(records(&[0; 64]).is_empty());
        assert!(records(&[]).is_empty());
        assert!(records(&[1, 2, 3]).is_empty());
    }

    fn log_of(records: &[(&str, &[u8], &[Message])]) -> Vec<u8> {
        let mut log = Vec::new();
        for (name, info, messages) in records {
            let encoded = super::super::lines::encode(messages).unwrap();
            log.extend(record(&id(name), info, &encoded));
        }
        log
    }

    #[tokio::test]
    async fn new_dialogs_a_crash_left_in_the_journal_are_made_when_the_store_opens() {
        use crate::store::{ConversationInfo, ConversationStore};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(".chat-history");
        let journal = root.join(JOURNAL);
        std::fs::create_dir_all(&journal).unwrap();
        let info = ConversationInfo {
            owner: Some("b".into()),
            ..ConversationInfo::bare(&id("crashed"), None)
        };
        let info = super::super::to_json(&info).unwrap();
        // One dialog whose folder was never made, one whose folder exists (made, and
        // written since), and a torn record after them.
        let mut log = log_of(&[
            ("crashed", &info, &[Message::user("hello", 1)]),
            ("kept", b"{}", &[Message::user("old", 1)]),
            ("stuck", b"{}", &[Message::user("wait", 1)]),
        ]);
        // One whose lock cannot be taken yet (a folder holds its name).
        let stuck_lock = root.join(".locks/stuck.lock");
        std::fs::create_dir_all(&stuck_lock).unwrap();
        log.extend(&log_of(&[("torn", b"{}", &[Message::user("x", 1)])])[..20]);
        std::fs::write(journal.join("dead-0.log"), &log).unwrap();
        std::fs::create_dir_all(root.join("kept")).unwrap();
        let newer = serde_json::to_vec(&[Message::user("newer", 2)]).unwrap();
        std::fs::write(root.join("kept/messages.json"), &newer).unwrap();
        // A living process's log: it makes its own folders.
        std::fs::write(
            journal.join("alive-0.log"),
            log_of(&[("later", b"{}", &[])]),
        )
        .unwrap();
        let held = File::options()
            .write(true)
            .open(journal.join("alive-0.log"))
            .unwrap();
        held.lock().unwrap();

        let store = super::super::FileStore::open(dir.path(), None, 3).unwrap();
        let texts = |m: Vec<Message>| m.into_iter().map(|m| m.text).collect::<Vec<_>>();
        assert_eq!(texts(store.load(&id("crashed")).await.unwrap()), ["hello"]);
        assert_eq!(store.list_owned("b").await.unwrap().len(), 1);
        assert_eq!(texts(store.load(&id("kept")).await.unwrap()), ["newer"]);
        assert!(!root.join("torn").exists());
        // The others are made; the log stays for the one that could not be.
        assert!(!root.join("stuck").exists());
        assert!(journal.join("dead-0.log").exists());
        assert!(!root.join("later").exists());
        assert!(journal.join("alive-0.log").exists());

        // That process dies and the lock is free: a running store replays both logs on its
        // next catch-up.
        drop(held);
        std::fs::remove_dir(&stuck_lock).unwrap();
        *store.caught_up.lock().unwrap() = None;
        store.catch_up().await;
        assert!(root.join("later").is_dir());
        assert!(store.exists(&id("later")).await.unwrap());
        assert_eq!(texts(store.load(&id("stuck")).await.unwrap()), ["wait"]);
        assert_eq!(texts(store.load(&id("crashed")).await.unwrap()), ["hello"]);
        assert!(!journal.join("alive-0.log").exists());
        assert!(!journal.join("dead-0.log").exists());
    }

    #[test]
    fn a_folder_that_could_not_be_made_is_made_by_the_next_operation_on_it() {
        let dir = tempfile::tempdir().unwrap();
        // The root is a file for now: making a folder in it fails.
        let root = dir.path().join("root");
        std::fs::write(&root, "").unwrap();
        let journal = Journal::new(&dir.path().join("store"));
        let dialog = Dialog {
            dir: root.join("late"),
            max_turns: None,
            backup_retention: 1,
            known: None,
            unsaved: std::sync::Mutex::default(),
        };
        let group = GroupSync::new(root.clone());
        let mut acknowledged = false;
        let messages = [Message::user("hello", 1)];
        let made = journal.create(
            &id("late"),
            (b"{}", &messages),
            || acknowledged = true,
            || make_dialog(&dialog, &group, b"{}", &messages),
        );
        assert!(made.is_err());
        assert!(
            acknowledged,
            "recorded and synced before the folder is made"
        );
        assert!(journal.is_pending(&id("late")));
        // Still failing: the operation fails too, nothing is lost.
        assert!(journal.retry(&dialog, &id("late"), &group).is_err());
        std::fs::remove_file(&root).unwrap();
        std::fs::create_dir(&root).unwrap();
        journal.retry(&dialog, &id("late"), &group).unwrap();
        assert!(!journal.is_pending(&id("late")));
        assert_eq!(
            std::fs::read(dialog.dir.join(super::super::INFO)).unwrap(),
            b"{}"
        );
        // Every record is done: the log goes with the journal.
        let logs = dir.path().join("store").join(JOURNAL);
        assert_eq!(std::fs::read_dir(&logs).unwrap().count(), 1);
        drop(journal);
        assert_eq!(std::fs::read_dir(&logs).unwrap().count(), 0);
    }

    #[test]
    fn a_folder_another_process_made_first_gets_the_details_and_the_messages_after_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let dialog = Dialog {
            dir: dir.path().join("chosen"),
            max_turns: None,
            backup_retention: 1,
            known: None,
            unsaved: std::sync::Mutex::default(),
        };
        // `parlor mcp` wrote the dialog between the record and the folder.
        std::fs::create_dir_all(&dialog.dir).unwrap();
        let theirs = serde_json::to_vec(&[Message::user("from mcp", 1)]).unwrap();
        std::fs::write(dialog.dir.join(super::super::MESSAGES), theirs).unwrap();
        let group = GroupSync::new(dir.path().to_owned());
        make_dialog(&dialog, &group, b"{}", &[Message::user("from the web", 2)]).unwrap();
        assert_eq!(
            std::fs::read(dialog.dir.join(super::super::INFO)).unwrap(),
            b"{}"
        );
        let Ok(super::super::dialog::Stored::Lines { bytes, lines, .. }) = dialog.stored() else {
            panic!("not rewritten in Parlor's layout");
        };
        let texts: Vec<String> = super::super::lines::parse(&bytes, &lines)
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(texts, ["from mcp", "from the web"]);
    }
}
