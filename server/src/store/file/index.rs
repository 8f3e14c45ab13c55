//! The in-memory index of a file history: every conversation, with what a browser's list
//! shows of the ones a browser owns; read at startup, kept in step with every write, and
//! caught up with what other processes wrote.

use super::dialog::{read_info, remove_leftovers};
use super::locking::unlocked;
use super::{FileStore, INFO};
use crate::store::atomic::TMP_MARK;
use crate::store::{ConversationInfo, Listed, StoreError};
use parlor_domain::ConversationId;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

/// How often a browser's list of conversations looks for conversations other processes
/// wrote.
const CATCH_UP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// What the in-memory index keeps of a conversation a browser owns: what the browser's
/// list shows, with the owner and the agent shared by all their conversations. Small on
/// purpose (about 200 bytes with its key, against 600 for the whole details): a thousand
/// browsers make tens of thousands of conversations an hour.
#[derive(Debug)]
struct Entry {
    owner: Arc<str>,
    agent_id: Arc<str>,
    title: Box<str>,
    updated_ms: i64,
}

/// A conversation's id as the index holds it: Parlor's own ids (32 lowercase hex digits)
/// in 16 bytes within the table, any other id as its text. A string of its own would take
/// another 48 bytes of heap for each of the tens of thousands of conversations.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Hex([u8; 16]),
    Other(Box<str>),
}

impl Key {
    fn of(id: &str) -> Key {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let bytes = id.as_bytes();
        let mut packed = [0u8; 16];
        if bytes.len() == 32 {
            let all = packed
                .iter_mut()
                .zip(bytes.chunks_exact(2))
                .all(|(out, pair)| match (digit(pair[0]), digit(pair[1])) {
                    (Some(high), Some(low)) => {
                        *out = high << 4 | low;
                        true
                    }
                    _ => false,
                });
            if all {
                return Key::Hex(packed);
            }
        }
        Key::Other(id.into())
    }

    /// The id this key was made from.
    fn id(&self) -> ConversationId {
        let text = match self {
            Key::Hex(packed) => packed
                .iter()
                .fold(String::with_capacity(32), |mut text, b| {
                    let _ = write!(text, "{b:02x}");
                    text
                }),
            Key::Other(text) => text.to_string(),
        };
        ConversationId::parse(&text).expect("made from a conversation id")
    }
}

/// Every conversation of a file history: the ones browsers own with what their lists show,
/// and only that it exists for API clients' conversations, which are never listed.
#[derive(Debug, Default)]
pub(super) struct Index {
    entries: HashMap<Key, Option<Box<Entry>>>,
    /// The owners and agents of the entries, each held once.
    names: HashSet<Arc<str>>,
}

impl Index {
    /// Records a conversation's details (the last ones written or read).
    pub(super) fn insert(&mut self, info: &ConversationInfo) {
        let entry = info.owner.as_ref().map(|owner| {
            Box::new(Entry {
                owner: self.name(owner),
                agent_id: self.name(&info.agent_id),
                title: info.title.as_str().into(),
                updated_ms: info.updated_ms,
            })
        });
        let key = Key::of(info.session_id.as_str());
        if let Some(Some(old)) = self.entries.insert(key, entry) {
            self.release(*old);
        }
    }

    pub(super) fn remove(&mut self, id: &ConversationId) {
        if let Some(Some(old)) = self.entries.remove(&Key::of(id.as_str())) {
            self.release(*old);
        }
    }

    pub(super) fn contains(&self, id: &ConversationId) -> bool {
        self.entries.contains_key(&Key::of(id.as_str()))
    }

    fn keys(&self) -> impl Iterator<Item = &Key> {
        self.entries.keys()
    }

    /// The conversations `owner` owns, as their list shows them (in no order).
    pub(super) fn owned(&self, owner: &str) -> Vec<Listed> {
        let Some(owner) = self.names.get(owner) else {
            return Vec::new();
        };
        self.entries
            .iter()
            .filter_map(|(id, entry)| {
                let entry = entry.as_deref()?;
                Arc::ptr_eq(&entry.owner, owner).then(|| Listed {
                    session_id: id.id(),
                    agent_id: entry.agent_id.to_string(),
                    title: entry.title.to_string(),
                    updated_ms: entry.updated_ms,
                })
            })
            .collect()
    }

    /// The one shared copy of `name`.
    fn name(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        let shared: Arc<str> = name.into();
        self.names.insert(shared.clone());
        shared
    }

    /// Forgets the names only `entry` still used.
    fn release(&mut self, entry: Entry) {
        let Entry {
            owner, agent_id, ..
        } = entry;
        for name in [owner, agent_id] {
            // Held by the set and by `name`: nobody else.
            if Arc::strong_count(&name) == 2 {
                self.names.remove(&name);
            }
        }
    }
}

/// Reads the index of the folder `root` at startup, cleaning what crashes left behind.
pub(super) fn read(root: &Path) -> Result<Index, StoreError> {
    let mut infos = Index::default();
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
            infos.insert(&info);
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
        let known: HashSet<Key> = self
            .infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        // New dialogs of a process that died before making their folders, first.
        self.replay_journals().await;
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
                if known.contains(&Key::of(id.as_str())) {
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
            self.remember(Some(&info), &id);
        }
    }

    pub(super) fn remember(&self, info: Option<&ConversationInfo>, id: &ConversationId) {
        let mut infos = self.infos.lock().unwrap_or_else(|e| e.into_inner());
        match info {
            Some(info) => infos.insert(info),
            None => infos.remove(id),
        }
    }

    /// A conversation's whole details, read from disk (the index holds only what lists
    /// show). Files are replaced atomically, so they are read without the dialog's lock.
    pub(super) async fn read_info(
        &self,
        id: &ConversationId,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        if self.journal.is_pending(id) {
            // Recorded, its folder being made under its locks: read once that is done.
            self.locked(id, |_| Ok(())).await?;
        }
        let path = super::dialog::dialog_dir(&self.root, id).join(INFO);
        let (session, details) = (id.clone(), self.details.clone());
        let permit = self.io.acquire().await;
        let read = tokio::task::spawn_blocking(move || details.read(&path, &session))
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        drop(permit);
        self.details_found(id, read)
    }

    /// What reading the details of `id` found (see [`super::details::Details::read`]), as
    /// `info` answers it; the index of conversations follows other processes' changes.
    pub(super) fn details_found(
        &self,
        id: &ConversationId,
        read: Option<Option<ConversationInfo>>,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        let known = || {
            self.infos
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(id)
        };
        match read {
            // Deleted by another process (`parlor mcp`) since this one indexed it.
            None => {
                if known() {
                    self.remember(None, id);
                }
                Ok(None)
            }
            Some(Some(info)) => {
                // Written by another process (`parlor store import` or `restore`, a second
                // server, a folder written by hand) since the index was read.
                if !known() {
                    self.remember(Some(&info), id);
                }
                Ok(Some(info))
            }
            Some(None) => Err(StoreError::Corrupt(format!(
                "the details of conversation {id} cannot be read (see the log)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, owner: Option<&str>, title: &str, updated_ms: i64) -> ConversationInfo {
        let mut info = ConversationInfo::bare(&ConversationId::parse(id).unwrap(), Some(1));
        info.agent_id = "general".into();
        info.owner = owner.map(str::to_owned);
        info.title = title.into();
        info.updated_ms = updated_ms;
        info
    }

    fn titles(index: &Index, owner: &str) -> Vec<String> {
        let mut owned: Vec<_> = index.owned(owner).into_iter().map(|l| l.title).collect();
        owned.sort();
        owned
    }

    #[test]
    fn lists_what_a_browser_owns_and_never_an_api_conversation() {
        let mut index = Index::default();
        index.insert(&info("a1", Some("alice"), "first", 1));
        index.insert(&info("a2", Some("alice"), "second", 2));
        index.insert(&info("b1", Some("bob"), "bob's", 3));
        index.insert(&info("api", None, "from a client", 4));
        assert_eq!(titles(&index, "alice"), ["first", "second"]);
        assert_eq!(titles(&index, "bob"), ["bob's"]);
        assert!(index.owned("nobody").is_empty());
        assert!(index.contains(&ConversationId::parse("api").unwrap()));
        let listed = index.owned("bob").remove(0);
        assert_eq!(
            (
                listed.session_id.as_str(),
                listed.agent_id.as_str(),
                listed.updated_ms
            ),
            ("b1", "general", 3)
        );
    }

    #[test]
    fn parlors_own_ids_are_packed_and_every_id_comes_back_as_it_was() {
        let ours = "173fd4d9814e4a058b1a5d5001d4e22e";
        assert!(matches!(Key::of(ours), Key::Hex(_)));
        for other in [
            "173FD4D9814E4A058B1A5D5001D4E22E",
            "173fd4d9814e4a058b1a5d5001d4e22",
            "173fd4d9814e4a058b1a5d5001d4e22e0",
            "173fd4d9814e4a058b1a5d5001d4e22g",
            "my-session.1",
        ] {
            assert!(matches!(Key::of(other), Key::Other(_)), "{other}");
        }
        let mut index = Index::default();
        for id in [ours, "173FD4D9814E4A058B1A5D5001D4E22E", "my-session.1"] {
            index.insert(&info(id, Some("alice"), id, 1));
        }
        let mut listed: Vec<_> = index
            .owned("alice")
            .into_iter()
            .map(|l| (l.session_id.as_str().to_owned(), l.title))
            .collect();
        listed.sort();
        assert_eq!(
            listed,
            [
                (
                    "173FD4D9814E4A058B1A5D5001D4E22E".into(),
                    "173FD4D9814E4A058B1A5D5001D4E22E".into()
                ),
                (ours.into(), ours.into()),
                ("my-session.1".into(), "my-session.1".into()),
            ]
        );
        assert!(index.contains(&ConversationId::parse(ours).unwrap()));
        index.remove(&ConversationId::parse(ours).unwrap());
        assert!(!index.contains(&ConversationId::parse(ours).unwrap()));
        assert!(index.contains(&ConversationId::parse("my-session.1").unwrap()));
    }

    #[test]
    fn a_change_of_details_replaces_the_entry_and_names_are_kept_once() {
        let mut index = Index::default();
        index.insert(&info("a1", Some("alice"), "first", 1));
        index.insert(&info("a2", Some("alice"), "second", 2));
        // Owner and agent, each once, whatever the number of conversations.
        assert_eq!(index.names.len(), 2);
        index.insert(&info("a1", Some("alice"), "renamed", 5));
        assert_eq!(titles(&index, "alice"), ["renamed", "second"]);
        // Moved to an account: listed there, no longer for the browser.
        index.insert(&info("a1", Some("account"), "renamed", 6));
        assert_eq!(titles(&index, "alice"), ["second"]);
        assert_eq!(titles(&index, "account"), ["renamed"]);
        index.insert(&info("a2", Some("account"), "second", 7));
        assert!(index.owned("alice").is_empty());
        assert_eq!(titles(&index, "account"), ["renamed", "second"]);
        assert_eq!(index.names.len(), 2, "the browser's name is forgotten");
        index.remove(&ConversationId::parse("a1").unwrap());
        index.remove(&ConversationId::parse("a2").unwrap());
        assert!(index.names.is_empty());
        assert!(!index.contains(&ConversationId::parse("a1").unwrap()));
    }
}
