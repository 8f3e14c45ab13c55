//! Conversations in files: the embedded default, no server needed.
//!
//! Layout (shared with the MCP History Store, so either tool can read the folder):
//! `<base>/.chat-history/<dialog>/messages.json` holds the messages as a JSON array of
//! `{"role", "text", "ts", "meta"?}`; `summary.json` (a rolling summary) is kept beside it
//! when present; Parlor adds `conversation.json` for the title, agent and owner.
//! `backups/<UTC timestamp>_<6 hex>/` holds copies taken by `clear` and `restore`.
//!
//! `messages.json` is written in the append-friendly layout of [`lines`] (still one JSON
//! array to any reader). An append within `max_turns` writes its batch in place over the
//! closing bracket and syncs the file; a crash part-way leaves a file whose complete batches
//! are recovered on the next read (the torn file is kept aside as
//! `messages.json.interrupted-<ts>`). Every other write (a trim to `max_turns`, an edit, a
//! clear, a restore, the first write of a file in another writer's format) goes to a
//! temporary file that is synced and then renamed over the old one, and the folder is
//! synced. Operations on one dialog are serialized, across processes too (an advisory lock).
//! A `messages.json` that cannot be parsed at all is moved aside (never overwritten) and the
//! conversation starts empty.
//!
//! The store remembers each dialog's `messages.json` as it last walked or wrote it (its
//! `stat` stamp, message count and newest time: [`shape`]). While the stamp on disk is the
//! same, a tail is read from the file's end and an append writes without reading
//! ([`known`]), so a turn on a long conversation reads what a short one does. Any other
//! writer changes the stamp and the next operation walks the file again.

mod backups;
mod branches;
mod creating;
mod details;
mod dialog;
mod index;
mod journal;
mod known;
mod lines;
mod locking;
mod prefetch;
mod redo;
mod shape;

use dialog::{dialog_maker, to_json, Dialog};
use index::Index;

use super::{
    apply_edits, cap, newest_first, BackupInfo, ConversationInfo, ConversationStore, Listed,
    MaxTurns, Tail,
};
use super::{Stats, StoreError};
use crate::store::atomic::{write_atomically, GroupSync};
use async_trait::async_trait;
use parlor_domain::branch::{Branches, Rebranch};
use parlor_domain::context::Edit;
use parlor_domain::{ConversationId, Message};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const MESSAGES: &str = "messages.json";
const SUMMARY: &str = "summary.json";
const INFO: &str = "conversation.json";
/// The versions off the chosen path (see [`branches`]).
const BRANCHES: &str = "branches.json";
const BACKUPS: &str = "backups";
/// Parlor's version of the dialog (see `ConversationStore::version`).
const VERSION: &str = "version";
/// The folder of the dialogs' advisory lock files, inside `.chat-history`.
const LOCKS: &str = ".locks";
/// How many blocking threads file operations may keep busy at once (see `FileStore::io`).
const IO_PERMITS: usize = 64;
/// The blocking threads a new dialog's write keeps busy: its own and two side syncs
/// ([`Dialog::create`]).
const NEW_DIALOG_THREADS: u32 = 3;
/// The files a backup copies, when they exist.
const BACKED_UP: [&str; 4] = [MESSAGES, SUMMARY, INFO, BRANCHES];

pub struct FileStore {
    root: PathBuf,
    max_turns: MaxTurns,
    backup_retention: usize,
    locks: Arc<Mutex<HashMap<ConversationId, Arc<tokio::sync::Mutex<()>>>>>,
    /// Every conversation, with what a browser's list shows of those a browser owns (see
    /// [`Index`]; the whole details are read from disk when asked for), read once at
    /// startup and kept in step with every write, so listing a browser's conversations
    /// never scans the folder and memory stays small per conversation.
    infos: Mutex<Index>,
    /// Bounds the file operations in flight by the blocking threads they hold (one each,
    /// three for a new dialog): thousands of streams would otherwise start hundreds of
    /// threads (memory).
    io: Arc<tokio::sync::Semaphore>,
    /// Syncs the root after new dialogs are renamed into it, one sync for those arriving
    /// together.
    root_sync: Arc<GroupSync>,
    /// When the index last caught up with the folder (see [`FileStore::catch_up`]).
    caught_up: Mutex<Option<std::time::Instant>>,
    /// What is known of each dialog's messages file (see [`shape`]).
    shapes: Arc<shape::Shapes>,
    /// The details last read or written of each conversation (see [`details`]).
    details: Arc<details::Details>,
    /// A turn's reads, made in one step with the details (see [`prefetch`]).
    prefetched: Arc<prefetch::Prefetched>,
    /// New dialogs recorded before their folders are made (see [`journal`]).
    journal: Arc<journal::Journal>,
}

impl FileStore {
    /// Opens (creating if needed) the store under `base/.chat-history`.
    /// `backup_retention` is how many backups each dialog keeps (at least one).
    pub fn open(
        base: &Path,
        max_turns: MaxTurns,
        backup_retention: usize,
    ) -> Result<FileStore, StoreError> {
        let root = base.join(".chat-history");
        std::fs::create_dir_all(&root)?;
        // Conversations (and the tool results in them) are for Parlor's OS user only,
        // whatever the files' own modes (the umask's).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
        let root_sync = Arc::new(GroupSync::new(root.clone()));
        let shapes = Arc::<shape::Shapes>::default();
        let journal = journal::Journal::new(&root);
        // New dialogs a crash left in the journal are made before the index is read.
        let dialog_of = dialog_maker(&root, max_turns, backup_retention, &shapes);
        if let Err(e) = journal.recover(&root_sync, &dialog_of, &creating::lock_of(&root)) {
            // Served all the same; running servers replay it again every second.
            tracing::error!("could not replay the journal of new dialogs: {e}");
        }
        let infos = index::read(&root)?;
        Ok(FileStore {
            max_turns,
            backup_retention: backup_retention.max(1),
            locks: Arc::default(),
            infos: Mutex::new(infos),
            io: Arc::new(tokio::sync::Semaphore::new(IO_PERMITS)),
            root_sync,
            caught_up: Mutex::new(Some(std::time::Instant::now())),
            shapes,
            details: Arc::default(),
            prefetched: Arc::default(),
            journal: Arc::new(journal),
            root,
        })
    }

    fn dialog(&self, id: &ConversationId) -> Dialog {
        dialog_maker(
            &self.root,
            self.max_turns,
            self.backup_retention,
            &self.shapes,
        )(id)
    }
}

#[async_trait]
impl ConversationStore for FileStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let root = self.root.clone();
        let usable = tokio::task::spawn_blocking(move || {
            std::fs::metadata(&root).map(|m| m.is_dir() && !m.permissions().readonly())
        })
        .await;
        match usable {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(StoreError::Io(std::io::Error::other(format!(
                "{} is not a writable folder",
                self.root.display()
            )))),
            Ok(Err(e)) => Err(StoreError::Io(e)),
            Err(e) => Err(StoreError::Io(std::io::Error::other(e.to_string()))),
        }
    }

    fn describe(&self) -> String {
        format!("file ({})", self.root.display())
    }

    fn max_turns(&self) -> MaxTurns {
        self.max_turns
    }

    fn kind(&self) -> &'static str {
        "file"
    }

    async fn load(&self, id: &ConversationId) -> Result<Vec<Message>, StoreError> {
        match self.prefetched.whole(id) {
            Some(messages) => Ok(messages),
            None => self.locked(id, |d| d.read_messages()).await,
        }
    }

    async fn load_tail(&self, id: &ConversationId, count: usize) -> Result<Tail, StoreError> {
        Ok(self.load_tail_sized(id, count).await?.0)
    }

    async fn load_tail_sized(
        &self,
        id: &ConversationId,
        count: usize,
    ) -> Result<(Tail, usize), StoreError> {
        match self.prefetched.tail(id, count) {
            Some(read) => Ok(read),
            None => self.locked(id, move |d| d.read_tail(count)).await,
        }
    }

    async fn load_range(
        &self,
        id: &ConversationId,
        start: usize,
        end: usize,
    ) -> Result<Vec<Message>, StoreError> {
        self.locked(id, move |d| d.read_range(start, end)).await
    }

    async fn load_pinned(
        &self,
        id: &ConversationId,
        _hint: &[usize],
    ) -> Result<Option<Vec<(usize, Message)>>, StoreError> {
        match self.prefetched.pins(id) {
            Some(pins) => Ok(Some(pins)),
            None => self.locked(id, |d| d.read_pins()).await.map(Some),
        }
    }

    async fn append(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError> {
        let messages = messages.to_vec();
        self.locked(id, move |d| d.append_with(|_| messages).map(drop))
            .await
    }

    async fn replace(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError> {
        let mut messages = messages.to_vec();
        cap(&mut messages, self.max_turns);
        self.locked(id, move |d| {
            d.bump_version()?;
            d.write_messages(&messages)?;
            d.root_branches(&messages)
        })
        .await
    }

    async fn version(&self, id: &ConversationId) -> Result<u64, StoreError> {
        self.locked(id, |d| d.version()).await
    }

    async fn put_summary_if(
        &self,
        id: &ConversationId,
        version: u64,
        summary: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        let text = summary.to_string();
        self.locked(id, move |d| {
            if d.version()? != version {
                return Ok(false);
            }
            d.bump_version()?;
            write_atomically(&d.dir, SUMMARY, text.as_bytes())?;
            Ok(true)
        })
        .await
    }

    async fn branches(&self, id: &ConversationId) -> Result<Branches, StoreError> {
        self.locked(id, |d| d.read_branches()).await
    }

    async fn rebranch_if(
        &self,
        id: &ConversationId,
        change: &Rebranch,
    ) -> Result<bool, StoreError> {
        let change = change.clone();
        self.locked(id, move |d| d.rebranch(&change)).await
    }

    async fn unreadable(&self, id: &ConversationId) -> Result<Vec<String>, StoreError> {
        let names = self.locked(id, |d| d.set_aside()).await?;
        let said = |name| format!("{name} was set aside: it did not read (see the server log)");
        Ok(names.into_iter().map(said).collect())
    }

    async fn append_stamped(
        &self,
        id: &ConversationId,
        make: super::StampedMessages,
    ) -> Result<usize, StoreError> {
        let max_turns = self.max_turns;
        self.locked(id, move |d| {
            let (tail, _) = d.read_tail(1)?;
            let batch = make(tail.messages.last().map(|m| m.ts), super::now_ms());
            super::check_room(max_turns, tail.total, batch.len())?;
            d.append_with(|_| batch)
        })
        .await
    }

    async fn prune(
        &self,
        id: &ConversationId,
        offset: usize,
        edits: &[Edit],
    ) -> Result<usize, StoreError> {
        let edits = edits.to_vec();
        self.locked(id, move |d| {
            if let Some(applied) = d.edit_end(offset, &edits)? {
                return Ok(applied);
            }
            let mut all = d.read_messages()?;
            let applied = apply_edits(&mut all, offset, &edits);
            if applied > 0 {
                d.write_messages(&all)?;
            }
            Ok(applied)
        })
        .await
    }

    async fn summary(&self, id: &ConversationId) -> Result<Option<serde_json::Value>, StoreError> {
        self.locked(id, |d| match std::fs::read_to_string(d.dir.join(SUMMARY)) {
            Ok(text) => Ok(parlor_domain::summary::read_summary(&text)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        })
        .await
    }

    async fn put_summary(
        &self,
        id: &ConversationId,
        summary: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let text = summary.to_string();
        self.locked(id, move |d| {
            d.bump_version()?;
            write_atomically(&d.dir, SUMMARY, text.as_bytes())?;
            Ok(())
        })
        .await
    }

    async fn clear(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
        self.locked(id, |d| {
            let (messages, summary) = (d.messages_path(), d.dir.join(SUMMARY));
            let removed = [d.dir.join(BRANCHES), d.dir.join(shape::INDEX)];
            d.back_up_and_remove(&[messages, summary], &removed)
        })
        .await
    }

    async fn delete(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError> {
        let backup = self
            .locked(id, |d| {
                let files = [
                    d.messages_path(),
                    d.dir.join(SUMMARY),
                    d.dir.join(INFO),
                    d.dir.join(BRANCHES),
                    d.dir.join(shape::INDEX),
                ];
                // The folder stays with its backups: `parlor store restore` brings it back.
                d.back_up_and_remove(&files, &[])
            })
            .await?;
        self.remember(None, id);
        Ok(backup)
    }

    async fn list(&self) -> Result<Vec<ConversationId>, StoreError> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || {
            let mut ids = Vec::new();
            for entry in std::fs::read_dir(&root)? {
                let entry = entry?;
                let Some(id) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| ConversationId::parse(n).ok())
                else {
                    continue;
                };
                // Holding messages or only a summary (a dialog written over MCP).
                if entry.path().join(MESSAGES).is_file() || entry.path().join(SUMMARY).is_file() {
                    ids.push(id);
                }
            }
            Ok(ids)
        })
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))?
    }

    async fn stats(&self, id: &ConversationId) -> Result<Stats, StoreError> {
        self.locked(id, |d| {
            let (tail, _) = d.read_tail(1)?;
            let approx_bytes = match std::fs::metadata(d.messages_path()) {
                Ok(meta) => meta.len(),
                Err(e) if e.kind() == ErrorKind::NotFound => 0,
                Err(e) => return Err(e.into()),
            };
            Ok(Stats {
                messages: tail.total,
                approx_bytes,
                last_ts: tail.messages.last().map(|m| m.ts),
                backups: d.backup_ids()?.len(),
            })
        })
        .await
    }

    async fn list_backups(&self, id: &ConversationId) -> Result<Vec<BackupInfo>, StoreError> {
        self.locked(id, |d| d.backups()).await
    }

    async fn restore_backup(&self, id: &ConversationId, backup: &str) -> Result<(), StoreError> {
        let backup = backup.to_owned();
        let session = id.clone();
        let info = self
            .locked(id, move |d| d.restore(&backup, &session))
            .await?;
        if info.is_some() {
            self.remember(info.as_ref(), id);
        }
        Ok(())
    }

    async fn exists(&self, id: &ConversationId) -> Result<bool, StoreError> {
        if self
            .infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(id)
        {
            return Ok(true);
        }
        // The folder holds whatever is left of it (backups outlive a delete); reading an
        // unknown dialog never makes one.
        let dir = dialog::dialog_dir(&self.root, id);
        let permit = self.io.acquire().await;
        let found = tokio::task::spawn_blocking(move || dir.exists())
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        drop(permit);
        Ok(found)
    }

    async fn info(&self, id: &ConversationId) -> Result<Option<ConversationInfo>, StoreError> {
        self.read_info(id).await
    }

    async fn info_for_turn(
        &self,
        id: &ConversationId,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        self.info_and_end(id).await
    }

    fn turn_read_done(&self, id: &ConversationId) {
        self.prefetched.starts(id, 0);
    }

    async fn create(
        &self,
        info: &ConversationInfo,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        self.create_recorded(info, messages).await
    }

    async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError> {
        let bytes = to_json(info)?;
        let (details, written) = (self.details.clone(), info.clone());
        self.locked(&info.session_id, move |d| {
            write_atomically(&d.dir, INFO, &bytes)?;
            details.written(&d.dir.join(INFO), &written);
            Ok(())
        })
        .await?;
        self.remember(Some(info), &info.session_id);
        Ok(())
    }

    async fn list_owned(&self, owner: &str) -> Result<Vec<Listed>, StoreError> {
        self.catch_up().await;
        let owned = self
            .infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .owned(owner);
        Ok(newest_first(owned))
    }
}

#[cfg(test)]
mod tests {
    use super::super::contract;
    use super::dialog::Stored;
    use super::*;
    use crate::store::atomic::TMP_MARK;

    #[tokio::test]
    async fn locks_of_conversations_nobody_is_writing_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(FileStore::open(dir.path(), None, 2).unwrap());
        let writes = (0..20).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let id = ConversationId::parse(&format!("c{}", i % 4)).unwrap();
                store
                    .append(&id, &[Message::user(format!("m{i}"), i)])
                    .await
            })
        });
        for write in futures::future::join_all(writes).await {
            write.unwrap().unwrap();
        }
        // Each operation answers before it has let go of everything (the index is written
        // after): once every thread's permit is back, all have.
        let all = store.io.acquire_many(IO_PERMITS as u32).await.unwrap();
        assert!(store.locks.lock().unwrap().is_empty());
        drop(all);
        let id = ConversationId::parse("c0").unwrap();
        assert_eq!(store.load(&id).await.unwrap().len(), 5, "every write kept");
    }

    #[tokio::test]
    async fn the_lock_files_folder_is_made_again_when_something_removed_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store
            .append(&id("a"), &[Message::user("one", 1)])
            .await
            .unwrap();
        let locks = dir.path().join(".chat-history").join(LOCKS);
        std::fs::remove_dir_all(&locks).unwrap();
        store
            .append(&id("a"), &[Message::user("two", 2)])
            .await
            .unwrap();
        assert_eq!(store.load(&id("a")).await.unwrap().len(), 2);
        assert!(locks.join("a.lock").is_file());
    }

    fn id(s: &str) -> ConversationId {
        ConversationId::parse(s).unwrap()
    }

    fn open(dir: &Path) -> FileStore {
        FileStore::open(dir, None, 3).unwrap()
    }

    /// Waits until a new dialog's folder is made (`create` returns once it is recorded in
    /// the journal), for tests that read the files themselves.
    async fn settled(store: &FileStore, id: &ConversationId) {
        store.locked(id, |_| Ok(())).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writers_with_their_own_locks_are_serialized_by_the_dialog_lock_file() {
        // Two stores on one folder stand for two processes (a web server and `parlor mcp`):
        // each has its own in-process locks; only the lock file serializes them.
        let dir = tempfile::tempdir().unwrap();
        let stores = [Arc::new(open(dir.path())), Arc::new(open(dir.path()))];
        let mut tasks = Vec::new();
        for i in 0..40 {
            let store = stores[i % 2].clone();
            tasks.push(tokio::spawn(async move {
                let message = Message::user(format!("m{i}"), i as i64);
                store.append(&id("shared"), &[message]).await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let mut texts: Vec<String> = stores[0]
            .load(&id("shared"))
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect();
        texts.sort();
        let mut expected: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
        expected.sort();
        assert_eq!(texts, expected, "every save kept");
        assert!(
            !dir.path().join(".chat-history/shared/.lock").exists(),
            "lock files live outside the dialog's folder"
        );
    }

    fn dialog_files(dir: &Path, dialog: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join(".chat-history").join(dialog))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn passes_the_store_contract() {
        let dir = tempfile::tempdir().unwrap();
        let max = std::num::NonZeroUsize::new(contract::MAX_TURNS);
        contract::run(&FileStore::open(dir.path(), max, 5).unwrap()).await;
    }

    #[tokio::test]
    async fn conversations_survive_a_restart_in_the_shared_layout() {
        let dir = tempfile::tempdir().unwrap();
        let id = id("abc");
        {
            let store = open(dir.path());
            store
                .append(&id, &[Message::user("hello", 7)])
                .await
                .unwrap();
            store
                .put_info(&ConversationInfo {
                    session_id: id.clone(),
                    agent_id: "a".into(),
                    owner: Some("b".into()),
                    title: "hello".into(),
                    created_ms: 7,
                    updated_ms: 7,
                    last_turn: None,
                    model: None,
                    context_turns: 0,
                    pinned: 0,
                    pinned_at: Vec::new(),
                    forked_from: None,
                    spent_nano_usd: 0,
                    approved_tools: Vec::new(),
                })
                .await
                .unwrap();
        }
        let raw =
            std::fs::read_to_string(dir.path().join(".chat-history/abc/messages.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(json[0]["role"], "user");
        assert_eq!(json[0]["text"], "hello");
        assert_eq!(json[0]["ts"], 7);

        let reopened = open(dir.path());
        assert_eq!(reopened.load(&id).await.unwrap()[0].text, "hello");
        assert_eq!(reopened.list_owned("b").await.unwrap().len(), 1);
        assert_eq!(
            dialog_files(dir.path(), "abc"),
            ["conversation.json", "messages.idx", "messages.json"],
            "no temporary files left behind"
        );
    }

    #[tokio::test]
    async fn reads_a_dialog_written_by_the_mcp_history_store() {
        let dir = tempfile::tempdir().unwrap();
        let dialog = dir.path().join(".chat-history/from-mcp");
        std::fs::create_dir_all(&dialog).unwrap();
        std::fs::write(
            dialog.join("messages.json"),
            r#"[{"role":"user","text":"hi","ts":1700000000000},
                {"role":"assistant","text":"hello","ts":1700000000500}]"#,
        )
        .unwrap();
        std::fs::write(dialog.join("summary.json"), r#""Decisions: none yet""#).unwrap();
        let store = open(dir.path());
        let loaded = store.load(&id("from-mcp")).await.unwrap();
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded[1].text, "hello");
        // A double-encoded summary reads as its text; clearing backs it up and removes it.
        assert_eq!(
            store.summary(&id("from-mcp")).await.unwrap(),
            Some(serde_json::json!("Decisions: none yet"))
        );
        let backup = store.clear(&id("from-mcp")).await.unwrap().unwrap();
        assert_eq!(backup.files, ["messages.json", "summary.json"]);
        assert!(!dialog.join("summary.json").exists());
    }

    #[tokio::test]
    async fn a_corrupt_messages_file_is_moved_aside_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let dialog = dir.path().join(".chat-history/broken");
        std::fs::create_dir_all(&dialog).unwrap();
        let garbage = b"[{\"role\":\"user\",\"text\":\"half a messa";
        std::fs::write(dialog.join("messages.json"), garbage).unwrap();
        let store = open(dir.path());
        assert!(store.load(&id("broken")).await.unwrap().is_empty());
        store
            .append(&id("broken"), &[Message::user("fresh start", 1)])
            .await
            .unwrap();
        let files = dialog_files(dir.path(), "broken");
        let aside: Vec<&String> = files
            .iter()
            .filter(|f| f.starts_with("messages.json.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1, "{files:?}");
        assert_eq!(std::fs::read(dialog.join(aside[0])).unwrap(), garbage);
        assert_eq!(
            store.load(&id("broken")).await.unwrap()[0].text,
            "fresh start"
        );
    }

    #[tokio::test]
    async fn a_new_dialog_appears_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let info = ConversationInfo {
            owner: Some("b".into()),
            ..ConversationInfo::bare(&id("fresh"), None)
        };
        store
            .create(&info, &[Message::user("hello", 1)])
            .await
            .unwrap();
        settled(&store, &id("fresh")).await;
        let root = dir.path().join(".chat-history");
        let names = |root: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(root)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            names(&root),
            [".journal", ".locks", "fresh"],
            "nothing staged is left"
        );
        let mut files = names(&root.join("fresh"));
        files.retain(|f| f != BACKUPS);
        assert_eq!(files, [INFO, shape::INDEX, MESSAGES]);

        // A crash while the next one was staged: that dialog never existed; the staged
        // folder is gone when the store opens again, the first dialog is intact.
        let staged = root.join(format!(".next{TMP_MARK}0123"));
        std::fs::create_dir_all(&staged).unwrap();
        std::fs::write(staged.join(MESSAGES), "[\n]\n").unwrap();
        drop(store);
        let store = open(dir.path());
        assert_eq!(names(&root), [".journal", ".locks", "fresh"]);
        assert!(
            names(&root.join(".journal")).is_empty(),
            "{:?}",
            names(&root)
        );
        assert_eq!(store.list().await.unwrap(), [id("fresh")]);
        assert_eq!(store.load(&id("fresh")).await.unwrap()[0].text, "hello");
        assert_eq!(store.list_owned("b").await.unwrap().len(), 1);
    }

    #[test]
    fn a_new_dialog_is_made_whole_also_without_a_runtime() {
        // `parlor` always runs the store in tokio; the staged write still works outside it.
        let dir = tempfile::tempdir().unwrap();
        let dialog = Dialog {
            dir: dir.path().join("plain"),
            max_turns: None,
            backup_retention: 1,
            known: None,
            unsaved: std::sync::Mutex::default(),
        };
        assert!(dialog
            .create(
                &GroupSync::new(dir.path().to_owned()),
                b"{}",
                &[Message::user("hello", 1)]
            )
            .unwrap());
        assert_eq!(std::fs::read(dialog.dir.join(INFO)).unwrap(), b"{}");
        let Ok(Stored::Lines { bytes, lines, .. }) = dialog.stored() else {
            panic!("the messages file is not in Parlor's layout");
        };
        assert_eq!(lines::parse(&bytes, &lines).unwrap()[0].text, "hello");
    }

    #[tokio::test]
    async fn an_api_clients_conversation_is_read_whole_from_disk() {
        // The index keeps only that an unowned conversation exists; its details still come
        // back whole, before and after a restart, and a damaged file is an error, not a
        // conversation that silently vanished or lost its details.
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let info = ConversationInfo {
            title: "from a script".into(),
            model: Some("mirror".into()),
            ..ConversationInfo::bare(&id("api"), None)
        };
        store
            .create(&info, &[Message::user("hi", 1)])
            .await
            .unwrap();
        assert_eq!(store.info(&id("api")).await.unwrap().as_ref(), Some(&info));
        assert!(store.list_owned("b").await.unwrap().is_empty());
        drop(store);
        let store = open(dir.path());
        assert_eq!(store.info(&id("api")).await.unwrap().as_ref(), Some(&info));
        std::fs::write(dir.path().join(".chat-history/api").join(INFO), "{").unwrap();
        let err = store.info(&id("api")).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert_eq!(store.info(&id("other")).await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_append_interrupted_by_a_crash_loses_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let s = id("torn");
        store
            .append(&s, &[Message::user("one", 1), Message::assistant("two", 2)])
            .await
            .unwrap();
        let path = dir.path().join(".chat-history/torn/messages.json");
        // A crash in the middle of appending a batch of two: the first line is whole, the
        // second cut short, the closing bracket never written.
        let mut torn = std::fs::read(&path).unwrap();
        torn.truncate(torn.len() - 2);
        torn.extend_from_slice(
            b",{\"role\":\"user\",\"text\":\"three\",\"ts\":3},\n{\"role\":\"ass",
        );
        std::fs::write(&path, &torn).unwrap();

        let reopened = open(dir.path());
        let texts: Vec<String> = reopened
            .load(&s)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(texts, ["one", "two"], "the unfinished batch is gone whole");
        let aside: Vec<String> = dialog_files(dir.path(), "torn")
            .into_iter()
            .filter(|f| f.starts_with("messages.json.interrupted-"))
            .collect();
        assert_eq!(aside.len(), 1, "the interrupted file is kept aside");
        assert_eq!(
            std::fs::read(dir.path().join(".chat-history/torn").join(&aside[0])).unwrap(),
            torn
        );
        reopened
            .append(&s, &[Message::user("three again", 3)])
            .await
            .unwrap();
        let on_disk: Vec<Message> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(on_disk.len(), 3);
    }

    #[tokio::test]
    async fn appends_write_in_place_and_files_of_other_writers_are_rewritten_once() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let dialog = dir.path().join(".chat-history/older");
        std::fs::create_dir_all(&dialog).unwrap();
        let path = dialog.join("messages.json");
        // As an older Parlor (and other tools) wrote it: pretty-printed.
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&[Message::user("old", 1)]).unwrap(),
        )
        .unwrap();
        let store = open(dir.path());
        let s = id("older");
        store
            .append(&s, &[Message::assistant("a", 2)])
            .await
            .unwrap();
        let first = std::fs::metadata(&path).unwrap().ino();
        let prefix = std::fs::read(&path).unwrap();
        for i in 3..6 {
            store.append(&s, &[Message::user("b", i)]).await.unwrap();
        }
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), first, "same file");
        assert_eq!(bytes[..prefix.len() - 2], prefix[..prefix.len() - 2]);
        let all: Vec<Message> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(all.len(), 5);
        assert_eq!(all, store.load(&s).await.unwrap());
        let (tail, size) = store.load_tail_sized(&s, 2).await.unwrap();
        assert_eq!(tail.total, 5);
        assert_eq!(tail.messages, all[3..]);
        assert_eq!(size, serde_json::to_vec(&all).unwrap().len());
    }

    #[tokio::test]
    async fn clear_backs_up_keeps_the_newest_and_restore_brings_a_backup_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()); // keeps 3 backups
        let s = id("talk");
        let mut made = Vec::new();
        for round in 0..5 {
            store
                .append(&s, &[Message::user(format!("round {round}"), round)])
                .await
                .unwrap();
            made.push(store.clear(&s).await.unwrap().expect("a backup").id);
            assert!(store.load(&s).await.unwrap().is_empty());
        }
        let kept: Vec<String> = store
            .list_backups(&s)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.id)
            .collect();
        assert_eq!(kept, made[2..], "the newest three, oldest first");
        assert_eq!(store.stats(&s).await.unwrap().backups, 3);

        store
            .append(&s, &[Message::user("current", 9)])
            .await
            .unwrap();
        store.restore_backup(&s, &made[3]).await.unwrap();
        assert_eq!(store.load(&s).await.unwrap()[0].text, "round 3");
        // The state before the restore was backed up first (and the oldest pruned).
        let newest = store.list_backups(&s).await.unwrap().pop().unwrap();
        let saved = std::fs::read_to_string(
            dir.path()
                .join(".chat-history/talk/backups")
                .join(&newest.id)
                .join("messages.json"),
        )
        .unwrap();
        assert!(saved.contains("current"));

        for bad in ["../talk", "nope", "", ".", "backups"] {
            assert!(
                matches!(
                    store.restore_backup(&s, bad).await,
                    Err(StoreError::NoSuchBackup(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[tokio::test]
    async fn folders_that_are_not_dialog_names_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".chat-history/.hidden")).unwrap();
        std::fs::create_dir_all(dir.path().join(".chat-history/has space")).unwrap();
        std::fs::write(
            dir.path().join(".chat-history/has space/messages.json"),
            "[]",
        )
        .unwrap();
        let store = open(dir.path());
        assert!(store.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_known_file_is_read_from_its_end_and_another_writers_change_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let (here, there) = (open(dir.path()), open(dir.path()));
        let long = id("long");
        let first: Vec<Message> = (0..300)
            .map(|i| Message::user(format!("m{i}"), i))
            .collect();
        let info = ConversationInfo::bare(&long, None);
        here.create(&info, &first).await.unwrap();
        here.append(&long, &[Message::assistant("r", 300)])
            .await
            .unwrap();
        // What this process wrote is known: the tail comes from the file's end.
        let known = here.shapes.get(&long).expect("known after its own write");
        assert_eq!((known.total, known.last_ts), (301, Some(300)));
        let (tail, size) = here.load_tail_sized(&long, 3).await.unwrap();
        let texts: Vec<_> = tail.messages.iter().map(|m| m.text.as_str()).collect();
        assert_eq!((texts, tail.total), (vec!["m298", "m299", "r"], 301));
        let all = here.load(&long).await.unwrap();
        assert_eq!(size, serde_json::to_vec(&all).unwrap().len());
        // A tail longer than the first chunk read still comes whole.
        let (tail, _) = here.load_tail_sized(&long, 301).await.unwrap();
        assert_eq!(tail.messages, all);

        // Another process appends and then rewrites: seen at once here.
        there
            .append(&long, &[Message::user("theirs", 400)])
            .await
            .unwrap();
        let tail = here.load_tail(&long, 1).await.unwrap();
        assert_eq!(
            (tail.messages[0].text.as_str(), tail.total),
            ("theirs", 302)
        );
        there
            .replace(&long, &[Message::user("only", 500)])
            .await
            .unwrap();
        let tail = here.load_tail(&long, 5).await.unwrap();
        assert_eq!((tail.messages.len(), tail.total), (1, 1));
        // An append here after their rewrite goes after what they wrote, stamped after it.
        let stamped = here
            .append_stamped(
                &long,
                Box::new(|latest, _| vec![Message::user("next", latest.unwrap() + 1)]),
            )
            .await
            .unwrap();
        assert_eq!(stamped, 1);
        let texts: Vec<_> = there
            .load(&long)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.text, m.ts))
            .collect();
        assert_eq!(texts, [("only".to_owned(), 500), ("next".to_owned(), 501)]);

        // A file another tool wrote in place (no rename: the same file) is walked again.
        let path = dir.path().join(".chat-history/long/messages.json");
        let by_hand = [
            Message::user("a", 1),
            Message::user("b", 2),
            Message::user("c", 3),
        ];
        std::fs::write(&path, serde_json::to_vec_pretty(&by_hand).unwrap()).unwrap();
        let tail = here.load_tail(&long, 2).await.unwrap();
        assert_eq!((tail.messages, tail.total), (by_hand[1..].to_vec(), 3));
        here.append(&long, &[Message::user("d", 4)]).await.unwrap();
        assert_eq!(there.load(&long).await.unwrap().len(), 4);
    }

    #[tokio::test]
    async fn a_long_files_end_is_rewritten_in_place_and_a_crash_midway_is_finished() {
        use parlor_domain::context::Edit;
        let dir = tempfile::tempdir().unwrap();
        let (here, there) = (open(dir.path()), open(dir.path()));
        let long = id("long");
        let text = "lorem ipsum dolor sit amet ".repeat(10);
        let first: Vec<Message> = (0..2_000)
            .map(|i| Message::user(format!("{i} {text}"), i))
            .collect();
        here.create(&ConversationInfo::bare(&long, None), &first)
            .await
            .unwrap();
        settled(&here, &long).await;
        let path = dir.path().join(".chat-history/long/messages.json");
        assert!(std::fs::metadata(&path).unwrap().len() > 256 * 1024);
        let inode = || std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        let before = inode();
        // Rewrite message 1998 and remove message 1999, as a pruning pass does (counted from
        // the start of the tail it read, 1990).
        let edits = [
            Edit {
                index: 8,
                old: first[1998].clone(),
                new: Some(Message::user("shorter", 1998)),
            },
            Edit {
                index: 9,
                old: first[1999].clone(),
                new: None,
            },
        ];
        assert_eq!(here.prune(&long, 1990, &edits).await.unwrap(), 2);
        // In place (the same file), no journal left, and every reader sees the change.
        assert_eq!(inode(), before);
        assert!(!dir
            .path()
            .join(".chat-history/long/messages.json.redo")
            .exists());
        let mut expected = first[..1998].to_vec();
        expected.push(Message::user("shorter", 1998));
        assert_eq!(there.load(&long).await.unwrap(), expected);
        let tail = here.load_tail(&long, 1).await.unwrap();
        assert_eq!(
            (tail.messages[0].text.as_str(), tail.total),
            ("shorter", 1999)
        );
        here.append(&long, &[Message::assistant("after", 2000)])
            .await
            .unwrap();
        expected.push(Message::assistant("after", 2000));
        assert_eq!(there.load(&long).await.unwrap(), expected);

        // A crash after the journal was written and while the end was half written: the next
        // operation (here another process's) finishes the rewrite first.
        let walked = lines::walk(&std::fs::read(&path).unwrap())
            .unwrap()
            .messages;
        let at = walked[1997].end as u64;
        let end = lines::end_from(1998, &[Message::user("journaled", 1998)]).unwrap();
        let dialog = dir.path().join(".chat-history/long");
        leave_journal(&dialog, at, &end);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &end[..end.len() / 2], at).unwrap();
        drop(file);
        let mut finished = first[..1998].to_vec();
        finished.push(Message::user("journaled", 1998));
        assert_eq!(there.load(&long).await.unwrap(), finished);
        assert_eq!(here.load_tail(&long, 1).await.unwrap().total, 1999);
        assert!(!dir
            .path()
            .join(".chat-history/long/messages.json.redo")
            .exists());

        // The same crash, then a write that does not read the file first (a replace): the
        // rewrite is finished before it, never applied to the file written after it.
        let walked = lines::walk(&std::fs::read(&path).unwrap())
            .unwrap()
            .messages;
        leave_journal(&dialog, walked[1997].end as u64, &end);
        // (Longer than the old file: the old end would land inside it.)
        let replaced: Vec<Message> = (0..2_500)
            .map(|i| Message::user(format!("replaced {i} {text}"), i))
            .collect();
        there.replace(&long, &replaced).await.unwrap();
        assert_eq!(here.load(&long).await.unwrap(), replaced);
        assert!(!dir
            .path()
            .join(".chat-history/long/messages.json.redo")
            .exists());

        // A short file is rewritten whole (a rename: a new file).
        let short = id("short");
        here.create(&ConversationInfo::bare(&short, None), &first[..3])
            .await
            .unwrap();
        let edit = Edit {
            index: 2,
            old: first[2].clone(),
            new: None,
        };
        assert_eq!(here.prune(&short, 0, &[edit]).await.unwrap(), 1);
        assert_eq!(there.load(&short).await.unwrap(), first[..2].to_vec());
    }

    #[tokio::test]
    async fn an_end_rewritten_in_place_holds_what_a_whole_rewrite_would() {
        use parlor_domain::context::Edit;
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let text = "lorem ipsum dolor sit amet ".repeat(10);
        let mut expected: Vec<Message> = (0..1_500)
            .map(|i| Message::user(format!("{i} {text}"), i))
            .collect();
        let s = id("edited");
        store
            .create(&ConversationInfo::bare(&s, None), &expected)
            .await
            .unwrap();
        // A fixed walk through edit shapes: where the read tail starts, which of its
        // messages change, which go; with a stale edit (its old message differs) among them.
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for round in 0..30 {
            let total = expected.len();
            let offset = total - 1 - next(20) as usize;
            let mut edits = Vec::new();
            for index in 0..total - offset {
                let old = expected[offset + index].clone();
                match next(4) {
                    0 => edits.push(Edit {
                        index,
                        old,
                        new: None,
                    }),
                    1 => edits.push(Edit {
                        index,
                        old,
                        new: Some(Message::user(
                            format!("r{round}"),
                            old_ts(&expected, offset + index),
                        )),
                    }),
                    2 => edits.push(Edit {
                        index,
                        old: Message::user("stale", 0),
                        new: None,
                    }),
                    _ => {}
                }
            }
            let applied = parlor_domain::conversation::apply_edits(&mut expected, offset, &edits);
            assert_eq!(store.prune(&s, offset, &edits).await.unwrap(), applied);
            assert_eq!(store.load(&s).await.unwrap(), expected, "round {round}");
            store
                .append(
                    &s,
                    &[Message::user(format!("more {round}"), 10_000 + round)],
                )
                .await
                .unwrap();
            expected.push(Message::user(format!("more {round}"), 10_000 + round));
        }
        // Another process reads the same.
        assert_eq!(open(dir.path()).load(&s).await.unwrap(), expected);
    }

    /// What a crash after an end rewrite's journal was written leaves: the journal.
    fn leave_journal(dialog: &Path, at: u64, end: &[u8]) {
        let mut journal = at.to_le_bytes().to_vec();
        journal.extend_from_slice(end);
        std::fs::write(dialog.join("messages.json.redo"), journal).unwrap();
    }

    fn old_ts(messages: &[Message], at: usize) -> i64 {
        messages[at].ts
    }

    #[tokio::test]
    async fn after_a_restart_a_turn_reads_the_index_not_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let s = id("indexed");
        {
            let store = open(dir.path());
            store
                .append(&s, &[Message::user("one", 1), Message::assistant("two", 2)])
                .await
                .unwrap();
            store
                .append(&s, &[Message::user("three", 3)])
                .await
                .unwrap();
            // The index is written once the append has answered, under the dialog's locks.
            store.load_tail(&s, 0).await.unwrap();
        }
        let dialog = dir.path().join(".chat-history/indexed");
        let index = dialog.join(shape::INDEX);
        let written = shape::Shape::decode(&std::fs::read(&index).unwrap()).unwrap();
        assert_eq!((written.total, written.last_ts), (3, Some(3)));
        // A new process trusts the index while the file is the one it describes: an index
        // doctored to say 1,000 messages proves the file was not walked.
        let doctored = shape::Shape {
            total: 1000,
            ..written.clone()
        };
        std::fs::write(&index, doctored.encode().unwrap()).unwrap();
        let tail = open(dir.path()).load_tail(&s, 1).await.unwrap();
        assert_eq!(
            (tail.total, tail.messages[0].text.as_str()),
            (1000, "three")
        );
        // Another writer changes the file: the index no longer matches, the file is walked
        // and the index written again.
        std::fs::write(&index, doctored.encode().unwrap()).unwrap();
        let other = r#"[{"role":"user","text":"rewritten","ts":9}]"#;
        std::fs::write(dialog.join(MESSAGES), other).unwrap();
        let store = open(dir.path());
        let tail = store.load_tail(&s, 5).await.unwrap();
        assert_eq!(tail.total, 1);
        store
            .append(&s, &[Message::assistant("after", 10)])
            .await
            .unwrap();
        store.load_tail(&s, 0).await.unwrap(); // the index is written after the append
        let rewritten = shape::Shape::decode(&std::fs::read(&index).unwrap()).unwrap();
        assert_eq!(rewritten.total, 2);
    }
}
