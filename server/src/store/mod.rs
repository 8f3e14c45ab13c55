//! Where conversations are kept: one trait, one file per backend.
//!
//! A store holds the conversations of one named history (see [`crate::store::histories`]). Every
//! backend keeps, per conversation, its messages (oldest first) and a [`ConversationInfo`];
//! `max_turns` (a message count) is enforced by the backend on every write.

pub mod atomic;
pub mod histories;
pub mod secrets;

mod file;
mod measured;
mod memory;
mod redis;

pub use self::redis::approvals as shared_approvals;
pub use self::redis::{retrying as redis_retrying, RedisOptions, RedisStore, SharedRedis};
pub use file::FileStore;
pub use measured::Measured;
pub use memory::MemoryStore;
pub use parlor_domain::conversation::{
    apply_edits, AccessDenied, ConversationInfo, ForkOrigin, Tail,
};

use async_trait::async_trait;
use parlor_domain::branch::{Branches, Rebranch};
use parlor_domain::context::Edit;
use parlor_domain::{ConversationId, Message};
use serde::Serialize;
use serde_json::Value;
use std::num::NonZeroUsize;

type Release = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
type Ended = Box<dyn FnOnce() + Send>;

/// A held reply lock: [`ReplyLock::release`] frees it before the reply's last event goes
/// out (so the browser's next message finds it free); dropped without that, it is freed in
/// the background. Either way the holder's part ends at once: what this process must know
/// (that the lock is no longer its reply's) is done synchronously, before the next request
/// can look.
#[derive(Default)]
pub struct ReplyLock {
    /// In a mutex only so that the lock can be shared between threads (`Sync`).
    parts: std::sync::Mutex<(Option<Ended>, Option<Release>)>,
}

impl ReplyLock {
    pub fn new(release: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Self::ending(|| {}, release)
    }

    /// A lock whose holder's part ends with `ended` (run at once when it is released or
    /// dropped), then is freed by `release`.
    pub fn ending(
        ended: impl FnOnce() + Send + 'static,
        release: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Self {
        Self {
            parts: std::sync::Mutex::new((Some(Box::new(ended)), Some(Box::pin(release)))),
        }
    }

    /// Ends the holder's part and gives the release to run.
    fn take(&mut self) -> Option<Release> {
        let parts = self.parts.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(ended) = parts.0.take() {
            ended();
        }
        parts.1.take()
    }

    pub async fn release(mut self) {
        if let Some(release) = self.take() {
            release.await;
        }
    }
}

impl Drop for ReplyLock {
    fn drop(&mut self) {
        if let Some(release) = self.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(release);
            }
        }
    }
}

/// The numbers an operator looks at for one conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub messages: usize,
    /// Size of the stored messages as the backend keeps them.
    pub approx_bytes: u64,
    pub last_ts: Option<i64>,
    pub backups: usize,
}

/// A conversation as a browser's list of conversations shows it: what a store lists of the
/// conversations a browser owns ([`ConversationStore::list_owned`]), and what a search names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub session_id: ConversationId,
    pub agent_id: String,
    /// Empty for a conversation that so far only had commands.
    pub title: String,
    pub updated_ms: i64,
}

impl From<&ConversationInfo> for Listed {
    fn from(info: &ConversationInfo) -> Self {
        Listed {
            session_id: info.session_id.clone(),
            agent_id: info.agent_id.clone(),
            title: info.title.clone(),
            updated_ms: info.updated_ms,
        }
    }
}

/// A copy of a conversation taken before it was cleared or restored over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackupInfo {
    /// The backup's folder name: `<UTC timestamp>_<6 hex>`; sorts oldest first.
    pub id: String,
    pub files: Vec<String>,
    /// When the backup was made (epoch milliseconds), where the backend knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtime_ms: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("history store I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Stored data that breaks a rule of the store (no underlying error to keep).
    #[error("history store data is not valid: {0}")]
    Corrupt(String),
    /// Stored data that does not read (or a value that does not write) as JSON.
    #[error("history store data is not valid ({at}): {source}")]
    Json {
        at: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("Redis: {0}")]
    Redis(#[from] ::redis::RedisError),
    #[error("no backup {0:?} for this conversation")]
    NoSuchBackup(String),
    #[error("the {0} backend keeps no backups")]
    NoBackups(&'static str),
    #[error(
        "this history keeps at most {max} messages per conversation (max_turns); the save \
         would make {would} and drop the oldest, so nothing was saved: clear or compact the \
         conversation first, or raise max_turns"
    )]
    Full { max: usize, would: usize },
}

impl From<serde_json::Error> for StoreError {
    fn from(source: serde_json::Error) -> Self {
        StoreError::Json {
            at: "a stored value".into(),
            source,
        }
    }
}

/// Builds the messages of a save from the latest stored timestamp and the time now.
pub type StampedMessages = Box<dyn FnOnce(Option<i64>, i64) -> Vec<Message> + Send>;

/// How many messages a history keeps per conversation (`max_turns`; `None` keeps all).
pub type MaxTurns = Option<NonZeroUsize>;

/// Refuses a save of `adding` messages to a conversation of `stored` that `max_turns`
/// would trim (see [`ConversationStore::append_stamped`]).
pub(crate) fn check_room(
    max_turns: MaxTurns,
    stored: usize,
    adding: usize,
) -> Result<(), StoreError> {
    match max_turns {
        Some(max) if stored + adding > max.get() => Err(StoreError::Full {
            max: max.get(),
            would: stored + adding,
        }),
        _ => Ok(()),
    }
}

/// Keeps the last `max_turns` messages; returns how many went.
pub(crate) fn cap(messages: &mut Vec<Message>, max_turns: MaxTurns) -> usize {
    let Some(max) = max_turns else {
        return 0;
    };
    let excess = messages.len().saturating_sub(max.get());
    // Results whose call is dropped go with it: no exchange is left split.
    let cut = parlor_domain::exchange::cut_after(messages, excess);
    messages.drain(..cut);
    cut
}

#[async_trait]
pub trait ConversationStore: Send + Sync + 'static {
    /// The backend's name and where it keeps data, for startup logs and the CLI.
    fn describe(&self) -> String;
    /// The conversation's messages, oldest first (empty when it does not exist).
    async fn load(&self, id: &ConversationId) -> Result<Vec<Message>, StoreError>;
    /// The last `count` messages and the total; backends that can read a tail cheaply do.
    async fn load_tail(&self, id: &ConversationId, count: usize) -> Result<Tail, StoreError> {
        let mut messages = self.load(id).await?;
        let total = messages.len();
        messages.drain(..total.saturating_sub(count));
        Ok(Tail { messages, total })
    }
    /// [`ConversationStore::load_tail`] and the size of all the messages as a compact JSON
    /// array (the MCP tools' maintenance signal); the file store measures without parsing.
    async fn load_tail_sized(
        &self,
        id: &ConversationId,
        count: usize,
    ) -> Result<(Tail, usize), StoreError> {
        let mut messages = self.load(id).await?;
        let size = serde_json::to_vec(&messages)?.len();
        let total = messages.len();
        messages.drain(..total.saturating_sub(count));
        Ok((Tail { messages, total }, size))
    }
    /// The pinned messages with their positions, oldest first, when the store can find them
    /// without reading the whole conversation (`None`: it cannot; the turn reads it whole).
    /// `hint` is where the details last saw them; a store that uses it checks what it finds.
    async fn load_pinned(
        &self,
        _id: &ConversationId,
        _hint: &[usize],
    ) -> Result<Option<Vec<(usize, Message)>>, StoreError> {
        Ok(None)
    }
    /// The messages at positions `start..end`, oldest first (clamped to what is stored): a
    /// page of an older part of the conversation; backends that can read a range cheaply do.
    async fn load_range(
        &self,
        id: &ConversationId,
        start: usize,
        end: usize,
    ) -> Result<Vec<Message>, StoreError> {
        let mut messages = self.load(id).await?;
        messages.truncate(end);
        messages.drain(..start.min(messages.len()));
        Ok(messages)
    }
    /// Stores a new conversation's details and first messages together (a new turn's one
    /// durable write before its model call); backends that can do it in one atomic step do.
    async fn create(
        &self,
        info: &ConversationInfo,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        self.put_info(info).await?;
        self.append(&info.session_id, messages).await
    }
    /// Adds messages at the end (then keeps the last `max_turns`).
    async fn append(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError>;
    /// Replaces all messages.
    async fn replace(&self, id: &ConversationId, messages: &[Message]) -> Result<(), StoreError>;
    /// Appends the messages `make` builds from the conversation's latest timestamp (`None`
    /// when empty) and the time now, in one step with reading that timestamp (the MCP
    /// tools' saves: timestamps that never go back nor repeat). Returns how many. Never
    /// drops a message: a save that would take the conversation past `max_turns` stores
    /// nothing and is [`StoreError::Full`].
    async fn append_stamped(
        &self,
        id: &ConversationId,
        make: StampedMessages,
    ) -> Result<usize, StoreError> {
        let tail = self.load_tail(id, 1).await?;
        let messages = make(tail.messages.last().map(|m| m.ts), now_ms());
        check_room(self.max_turns(), tail.total, messages.len())?;
        self.append(id, &messages).await?;
        Ok(messages.len())
    }
    /// How many messages the store keeps per conversation (`None`: all).
    fn max_turns(&self) -> MaxTurns {
        None
    }
    /// Applies a pruning pass ([`parlor_domain::context::prune`]) atomically: each edit's
    /// message, at `offset + edit.index`, is rewritten or removed, unless it is no longer
    /// the message the pass read (another writer changed it; the next pass sees it again).
    /// Returns how many edits were applied. What is pruned is gone: nothing keeps a copy.
    async fn prune(
        &self,
        id: &ConversationId,
        offset: usize,
        edits: &[Edit],
    ) -> Result<usize, StoreError>;
    /// Rewrites messages in place (each edit's `new` replaces the message at `edit.index`),
    /// each only if it is still the message `edit.old` (same role, time and text). Returns
    /// how many were rewritten. For stores that rewrite whole, this is [`Self::prune`].
    async fn rewrite(&self, id: &ConversationId, edits: &[Edit]) -> Result<usize, StoreError> {
        self.prune(id, 0, edits).await
    }
    /// The conversation's version: a number that every write replacing or removing what a
    /// slow step read changes (`replace`, `put_summary`, `put_summary_if`, `clear`,
    /// `delete`, `restore_backup`); appends, trims to `max_turns`, prunes and rewrites in
    /// place do not. Read before a step that waits (the summarizer's model call) and given
    /// back to [`Self::put_summary_if`], it makes that step a compare-and-set that holds no
    /// lock while it waits, across processes too.
    async fn version(&self, id: &ConversationId) -> Result<u64, StoreError>;
    /// Replaces the rolling summary only if the conversation is still at `version` (see
    /// [`Self::version`]); returns whether it did.
    async fn put_summary_if(
        &self,
        id: &ConversationId,
        version: u64,
        summary: &Value,
    ) -> Result<bool, StoreError>;
    /// The versions off the conversation's chosen path ([`parlor_domain::branch`]), as
    /// stored (a reader takes [`Branches::tidy`] of them).
    async fn branches(&self, id: &ConversationId) -> Result<Branches, StoreError>;
    /// Changes the chosen path as `change` says (an edit or a regeneration keeps what it
    /// cut as a version; choosing a version swaps it with the path), only if the path still
    /// holds what the change was computed from; returns whether it did. The branches stored
    /// are [`settled`]. A crash part-way loses no message (see [`parlor_domain::branch`]).
    /// Messages kept on the path are not rewritten, so a mark or prune made meanwhile stays.
    async fn rebranch_if(&self, id: &ConversationId, change: &Rebranch)
        -> Result<bool, StoreError>;
    /// What of the conversation did not read and is left out, a sentence each, for
    /// `parlor store check`: a file history moves such a file aside rather than overwrite it;
    /// Redis skips such an item of the versions' list.
    async fn unreadable(&self, _id: &ConversationId) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
    /// The conversation's rolling summary ([`parlor_domain::summary`]); `None` when there
    /// is none, or it cannot be read.
    async fn summary(&self, id: &ConversationId) -> Result<Option<Value>, StoreError>;
    /// Replaces the rolling summary.
    async fn put_summary(&self, id: &ConversationId, summary: &Value) -> Result<(), StoreError>;
    /// Removes all messages and the summary, first backing them up where the backend keeps
    /// backups. The conversation's details stay.
    async fn clear(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError>;
    /// Removes the conversation: its messages, summary and details (backed up first where
    /// the backend keeps backups).
    async fn delete(&self, id: &ConversationId) -> Result<Option<BackupInfo>, StoreError>;
    /// The conversations with stored messages or a summary, in no particular order.
    async fn list(&self) -> Result<Vec<ConversationId>, StoreError>;
    async fn stats(&self, id: &ConversationId) -> Result<Stats, StoreError>;
    /// The conversation's backups, oldest first.
    async fn list_backups(&self, _id: &ConversationId) -> Result<Vec<BackupInfo>, StoreError> {
        Ok(Vec::new())
    }
    /// Puts a backup back, first backing up the current state.
    async fn restore_backup(&self, _id: &ConversationId, _backup: &str) -> Result<(), StoreError> {
        Err(StoreError::NoBackups(self.kind()))
    }
    fn kind(&self) -> &'static str;
    /// Whether the store can be reached now (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Takes the "a reply is being written" lock of a conversation for every process that
    /// shares this store; `Ok(None)` when another process holds it. Stores only one process
    /// uses need nothing beyond the process's own lock (see `Services::claim`).
    async fn lock_reply(&self, _id: &ConversationId) -> Result<Option<ReplyLock>, StoreError> {
        Ok(Some(ReplyLock::default()))
    }
    /// Takes the summarizer's lock of a conversation for every process that shares this
    /// store (`Ok(None)`: another process is summarizing it).
    async fn lock_summary(&self, _id: &ConversationId) -> Result<Option<ReplyLock>, StoreError> {
        Ok(Some(ReplyLock::default()))
    }
    async fn info(&self, id: &ConversationId) -> Result<Option<ConversationInfo>, StoreError>;
    /// [`ConversationStore::info`] for a turn that will read the conversation's end next: a
    /// store may read that end in the same step, for the turn's reads that follow.
    async fn info_for_turn(
        &self,
        id: &ConversationId,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        self.info(id).await
    }
    /// The turn that asked [`ConversationStore::info_for_turn`] for `id` reads no more (it
    /// has read, or it was refused): what was read ahead for it can go.
    fn turn_read_done(&self, _id: &ConversationId) {}
    /// Whether anything is stored under `id`: messages, a summary, details or backups (a
    /// name a client proposes for a new conversation must name nothing).
    async fn exists(&self, id: &ConversationId) -> Result<bool, StoreError>;
    async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError>;
    /// The conversations a browser session started (by [`owner_key`]), newest first, as
    /// its list shows them (their whole details are [`ConversationStore::info`]).
    async fn list_owned(&self, owner: &str) -> Result<Vec<Listed>, StoreError>;
}

/// The branches a store keeps beside `path`: without the leftovers of an interrupted
/// change, without branches whose parent is gone, and within `max_turns` messages (the
/// oldest branches go first, whole).
pub(crate) fn settled(branches: &Branches, path: &[Message], max_turns: MaxTurns) -> Branches {
    let mut settled = branches.tidy(path);
    settled.drop_orphans(path, false);
    if let Some(max) = max_turns {
        settled.cap(path, max.get());
    }
    settled
}

/// After a write that trimmed the path's oldest messages (`max_turns`) or replaced it: the
/// branches that hung off what went, dropped (`None`: nothing changes).
pub(crate) fn rooted(branches: &Branches, path: &[Message]) -> Option<Branches> {
    let mut kept = branches.clone();
    (kept.drop_orphans(path, true) > 0).then_some(kept)
}

/// What a store records as a conversation's owner: a SHA-256 of the browser's session cookie,
/// so the stored data (and Redis keys) never hold a value that would let someone act as
/// that browser.
pub fn owner_key(browser_session: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(browser_session.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

fn newest_first(mut list: Vec<Listed>) -> Vec<Listed> {
    list.sort_by_key(|listed| std::cmp::Reverse(listed.updated_ms));
    list
}

/// The pinned messages among `messages` (stored from position `first`), with their positions.
pub(crate) fn pinned_in(messages: &[Message], first: usize) -> Vec<(usize, Message)> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_pinned())
        .map(|(at, m)| (first + at, m.clone()))
        .collect()
}

#[cfg(test)]
pub(crate) mod contract {
    //! The behaviour every backend must share. Each backend's tests run it on a store
    //! opened with `max_turns = 4`.
    use super::*;

    mod branches;

    fn id(s: &str) -> ConversationId {
        ConversationId::parse(s).unwrap()
    }

    fn info(session: &str, owner: Option<&str>, updated_ms: i64) -> ConversationInfo {
        ConversationInfo {
            session_id: id(session),
            agent_id: "a".into(),
            owner: owner.map(str::to_owned),
            title: session.into(),
            created_ms: 1,
            updated_ms,
            last_turn: None,
            model: None,
            context_turns: 0,
            pinned: 0,
            pinned_at: Vec::new(),
            forked_from: None,
            spent_nano_usd: 0,
            approved_tools: Vec::new(),
        }
    }

    #[test]
    fn a_conversation_is_visible_to_its_browser_and_through_its_agent_only() {
        let owned = ConversationInfo {
            agent_id: "general".into(),
            ..info("s", Some("me"), 1)
        };
        let viewer = |owner: Option<&str>, unowned: bool| parlor_domain::conversation::Viewer {
            owner: owner.map(str::to_owned),
            unowned,
        };
        assert_eq!(
            owned.visible_to(&viewer(Some("me"), false), "general"),
            Ok(())
        );
        assert_eq!(
            owned.visible_to(&viewer(Some("you"), true), "general"),
            Err(AccessDenied::NotFound)
        );
        assert_eq!(
            owned.visible_to(&viewer(None, true), "general"),
            Err(AccessDenied::NotFound)
        );
        // Another agent's conversation is refused even to its owner.
        assert_eq!(
            owned.visible_to(&viewer(Some("me"), false), "concise"),
            Err(AccessDenied::OtherAgent("general".into()))
        );
        // Started by an API client: reachable by its id alone, while accounts are off
        // (`unowned`); with accounts on, by admins only.
        let api = ConversationInfo {
            agent_id: "general".into(),
            ..info("s", None, 1)
        };
        assert_eq!(api.visible_to(&viewer(None, true), "general"), Ok(()));
        assert_eq!(
            api.visible_to(&viewer(Some("anyone"), true), "general"),
            Ok(())
        );
        assert_eq!(
            api.visible_to(&viewer(Some("an account"), false), "general"),
            Err(AccessDenied::NotFound)
        );
    }

    async fn texts(store: &dyn ConversationStore, s: &ConversationId) -> Vec<String> {
        store
            .load(s)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect()
    }

    pub const MAX_TURNS: usize = 4;

    /// Pruning edits: rewritten and removed messages, and an edit whose message another
    /// writer changed in between is skipped.
    async fn prune(store: &dyn ConversationStore) {
        use parlor_domain::context::{build, Block, ContextEntry, Save};
        let s = id("pruned");
        let entry = ContextEntry {
            source: "log".into(),
            blocks: vec![Block::Text { text: "L".into() }],
            display: true,
            save: Save::Turns(std::num::NonZeroU32::MIN),
        };
        let with_context = |text: &str, ts| build(text, std::slice::from_ref(&entry), ts).persisted;
        let stored = vec![
            with_context("a", 1),
            with_context("", 2),
            with_context("c", 3),
            Message::user("d", 4),
        ];
        store.replace(&s, &stored).await.unwrap();
        let edits = [
            Edit {
                index: 0,
                old: stored[0].clone(),
                new: Some(Message::user("a", 1)),
            },
            Edit {
                index: 1,
                old: stored[1].clone(),
                new: None,
            },
            // Read before another writer changed it: skipped.
            Edit {
                index: 2,
                old: with_context("c (as read earlier)", 3),
                new: Some(Message::user("c", 3)),
            },
        ];
        assert_eq!(store.prune(&s, 0, &edits).await.unwrap(), 2);
        let after = store.load(&s).await.unwrap();
        assert_eq!(
            after,
            [Message::user("a", 1), stored[2].clone(), stored[3].clone()]
        );
        // Applying the same pass again changes nothing.
        assert_eq!(store.prune(&s, 0, &edits).await.unwrap(), 0);
        assert_eq!(store.load(&s).await.unwrap(), after);
    }

    pub async fn run(store: &dyn ConversationStore) {
        let s = id("s1");
        assert!(store.load(&s).await.unwrap().is_empty());
        assert_eq!(store.load_tail(&s, 3).await.unwrap(), Tail::default());
        assert_eq!(store.stats(&s).await.unwrap().messages, 0);
        store.append(&s, &[Message::user("one", 1)]).await.unwrap();
        store
            .append(
                &s,
                &[Message::assistant("two", 2), Message::user("three", 3)],
            )
            .await
            .unwrap();
        assert_eq!(texts(store, &s).await, ["one", "two", "three"]);
        let meta = Message {
            meta: Some(parlor_domain::MessageMeta {
                status: Some(parlor_domain::ReplyStatus::Incomplete),
                model: Some("m".into()),
                ..Default::default()
            }),
            ..Message::assistant("four", 4)
        };
        store.append(&s, std::slice::from_ref(&meta)).await.unwrap();
        assert_eq!(
            store.load(&s).await.unwrap()[3],
            meta,
            "messages round-trip"
        );

        // The tail and the total.
        let tail = store.load_tail(&s, 2).await.unwrap();
        assert_eq!(tail.total, 4);
        assert_eq!(
            tail.messages
                .iter()
                .map(|m| &m.text[..])
                .collect::<Vec<_>>(),
            ["three", "four"]
        );
        assert!(store.load_tail(&s, 10).await.unwrap().is_whole());

        // A range (an older page): clamped to what is stored, empty when it is empty.
        let range = |start, end| {
            let s = &s;
            async move {
                let page = store.load_range(s, start, end).await.unwrap();
                page.into_iter().map(|m| m.text).collect::<Vec<_>>()
            }
        };
        assert_eq!(range(1, 3).await, ["two", "three"]);
        assert_eq!(range(0, 1).await, ["one"]);
        assert_eq!(range(2, 99).await, ["three", "four"]);
        assert!(range(3, 3).await.is_empty());
        assert!(range(7, 9).await.is_empty());

        // max_turns counts messages: the oldest go first.
        store
            .append(
                &s,
                &[Message::user("five", 5), Message::assistant("six", 6)],
            )
            .await
            .unwrap();
        assert_eq!(texts(store, &s).await, ["three", "four", "five", "six"]);
        let stats = store.stats(&s).await.unwrap();
        assert_eq!(stats.messages, MAX_TURNS);
        assert_eq!(stats.last_ts, Some(6));
        assert!(stats.approx_bytes > 0);

        store
            .replace(&s, &[Message::user("only", 7)])
            .await
            .unwrap();
        assert_eq!(texts(store, &s).await, ["only"]);
        assert!(
            store.load(&id("other")).await.unwrap().is_empty(),
            "sessions are separate"
        );
        store
            .append(&id("s2"), &[Message::user("x", 1)])
            .await
            .unwrap();
        let mut listed = store.list().await.unwrap();
        listed.sort();
        assert_eq!(listed, [id("s1"), id("s2")]);

        // Details and owners.
        assert!(store.info(&s).await.unwrap().is_none());
        store.put_info(&info("s1", Some("b1"), 10)).await.unwrap();
        store.put_info(&info("s2", Some("b1"), 30)).await.unwrap();
        store.put_info(&info("s3", Some("b2"), 20)).await.unwrap();
        store.put_info(&info("s4", None, 40)).await.unwrap();
        let mine: Vec<String> = store
            .list_owned("b1")
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.session_id.to_string())
            .collect();
        assert_eq!(mine, ["s2", "s1"], "own conversations only, newest first");
        let mut updated = info("s1", Some("b1"), 50);
        updated.title = "renamed".into();
        store.put_info(&updated).await.unwrap();
        assert_eq!(store.info(&s).await.unwrap().unwrap().title, "renamed");
        assert_eq!(store.list_owned("b1").await.unwrap()[0].session_id, s);

        // A new conversation made in one step: its details, its owner's list, its messages;
        // over an existing one (messages from another tool) it keeps what was there.
        store
            .create(&info("s5", Some("b1"), 60), &[Message::user("first", 6)])
            .await
            .unwrap();
        assert_eq!(texts(store, &id("s5")).await, ["first"]);
        assert_eq!(store.info(&id("s5")).await.unwrap().unwrap().updated_ms, 60);
        assert_eq!(
            store.list_owned("b1").await.unwrap()[0].session_id,
            id("s5")
        );
        store
            .append(&id("s6"), &[Message::user("older", 1)])
            .await
            .unwrap();
        store
            .create(&info("s6", Some("b2"), 70), &[Message::user("newer", 7)])
            .await
            .unwrap();
        assert_eq!(texts(store, &id("s6")).await, ["older", "newer"]);
        assert_eq!(
            store
                .info(&id("s6"))
                .await
                .unwrap()
                .unwrap()
                .owner
                .as_deref(),
            Some("b2")
        );
        store.delete(&id("s5")).await.unwrap();
        store.delete(&id("s6")).await.unwrap();

        // Clearing empties the messages and keeps the details.
        store.clear(&s).await.unwrap();
        assert!(store.load(&s).await.unwrap().is_empty());
        assert_eq!(store.info(&s).await.unwrap().unwrap().title, "renamed");
        assert_eq!(texts(store, &id("s2")).await, ["x"], "others untouched");

        // Deleting removes messages, summary and details: gone from every list.
        store
            .put_summary(&id("s2"), &serde_json::json!({"facts": ["f"]}))
            .await
            .unwrap();
        store.delete(&id("s2")).await.unwrap();
        assert!(store.load(&id("s2")).await.unwrap().is_empty());
        assert_eq!(store.summary(&id("s2")).await.unwrap(), None);
        assert!(store.info(&id("s2")).await.unwrap().is_none());
        let mine: Vec<ConversationId> = store
            .list_owned("b1")
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.session_id)
            .collect();
        assert_eq!(mine, std::slice::from_ref(&s));
        assert!(!store.list().await.unwrap().contains(&id("s2")));
        store.delete(&id("s2")).await.unwrap();

        prune(store).await;
        summary(store).await;
        conditional(store).await;
        summary_races(store).await;
        pins(store).await;
    }

    /// Pinned messages found beside a tail: with where the details saw them, every backend
    /// finds them; what a store returns is always exactly the pinned messages.
    async fn pins(store: &dyn ConversationStore) {
        use parlor_domain::SendMark;
        let s = id("pins");
        let mut pinned = Message::user("u2", 3);
        pinned.send = Some(SendMark::Always);
        let stored = [
            Message::user("u0", 1),
            Message::assistant("a1", 2),
            pinned.clone(),
            Message::assistant("a3", 4),
        ];
        store.append(&s, &stored).await.unwrap();
        let found = store.load_pinned(&s, &[2]).await.unwrap();
        assert_eq!(found, Some(vec![(2, pinned.clone())]));
        // Where the details say is not where it is: a store finds the real ones, or none.
        let stale = store.load_pinned(&s, &[1]).await.unwrap();
        assert!(
            stale
                .as_ref()
                .is_none_or(|p| p[..] == [(2, pinned.clone())]),
            "{stale:?}"
        );
        // Unpinned: nothing pinned is found where it was.
        let mut unpinned = pinned.clone();
        unpinned.send = None;
        let edit = Edit {
            index: 2,
            old: pinned.clone(),
            new: Some(unpinned),
        };
        assert_eq!(store.rewrite(&s, &[edit]).await.unwrap(), 1);
        let after = store.load_pinned(&s, &[2]).await.unwrap();
        assert!(after.as_ref().is_none_or(Vec::is_empty), "{after:?}");
        store.delete(&s).await.unwrap();
    }

    /// The version and the writes conditional on it (see `ConversationStore::version`).
    async fn conditional(store: &dyn ConversationStore) {
        use serde_json::json;
        let s = id("versioned");
        let v = store.version(&s).await.unwrap();
        store
            .append(&s, &[Message::user("q", 1), Message::assistant("a", 2)])
            .await
            .unwrap();
        assert_eq!(
            store.version(&s).await.unwrap(),
            v,
            "appends do not move it"
        );
        assert!(store
            .put_summary_if(&s, v, &json!({"facts": ["one"]}))
            .await
            .unwrap());
        let v = store.version(&s).await.unwrap();
        assert!(
            !store
                .put_summary_if(&s, v - 1, &json!({"facts": ["stale"]}))
                .await
                .unwrap(),
            "a stale version writes nothing"
        );
        assert_eq!(
            store.summary(&s).await.unwrap(),
            Some(json!({"facts": ["one"]}))
        );
        // Every write that replaces or removes what was read moves it.
        let mut last = v;
        for step in 0..4 {
            match step {
                0 => store.put_summary(&s, &json!({"x": 1})).await.map(drop),
                1 => store.clear(&s).await.map(drop),
                2 => store.replace(&s, &[Message::user("r", 3)]).await,
                _ => store.delete(&s).await.map(drop),
            }
            .unwrap();
            let now = store.version(&s).await.unwrap();
            assert_ne!(now, last, "write {step} moved the version");
            last = now;
        }

        branches::run(store).await;
    }

    /// The summarizer held at a barrier while its model answers, and each other writer of
    /// the conversation acting then: a reset, a summary written by another tool (replace
    /// and merge), a message appended. Only the append lets the run write.
    async fn summary_races(store: &dyn ConversationStore) {
        use crate::conversation::summarizer::{update, Outcome};
        use serde_json::json;
        let other_tools = json!({"decisions": ["from another tool"]});
        for case in ["reset", "replace", "merge", "append"] {
            let s = id(&format!("race-{case}"));
            store
                .append(
                    &s,
                    &[
                        Message::user("old q", 1),
                        Message::assistant("old a", 2),
                        Message::user("new q", 3),
                    ],
                )
                .await
                .unwrap();
            let (asked, mut asked_rx) = tokio::sync::mpsc::channel(1);
            let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
            let cost = std::sync::atomic::AtomicU64::new(0);
            let run = update(
                store,
                &s,
                2,
                |_prev, pending| async move {
                    asked.send(pending.len()).await.unwrap();
                    go_rx.await.unwrap();
                    Ok(json!({"facts": ["what the model said"]}))
                },
                &cost,
            );
            let other = async {
                assert_eq!(asked_rx.recv().await, Some(2), "the model was asked");
                match case {
                    "reset" => store.clear(&s).await.map(drop),
                    "replace" => store.put_summary(&s, &other_tools).await,
                    "merge" => {
                        let v = store.version(&s).await.unwrap();
                        assert!(store.put_summary_if(&s, v, &other_tools).await.unwrap());
                        Ok(())
                    }
                    _ => store.append(&s, &[Message::assistant("new a", 4)]).await,
                }
                .unwrap();
                go.send(()).unwrap();
            };
            let (outcome, ()) = tokio::join!(run, other);
            let summary = store.summary(&s).await.unwrap();
            match case {
                "reset" => {
                    assert_eq!(outcome.unwrap(), Outcome::Superseded);
                    assert_eq!(summary, None, "the reset stays a reset");
                    assert!(store.load(&s).await.unwrap().is_empty());
                }
                "replace" | "merge" => {
                    assert_eq!(outcome.unwrap(), Outcome::Superseded, "{case}");
                    assert_eq!(summary.as_ref(), Some(&other_tools), "{case}: kept");
                }
                _ => {
                    assert_eq!(outcome.unwrap(), Outcome::Updated(2));
                    let facts = &summary.unwrap()["facts"];
                    assert_eq!(facts, &json!(["what the model said"]));
                    assert_eq!(store.load(&s).await.unwrap().len(), 4);
                }
            }
            store.delete(&s).await.unwrap();
        }
    }

    /// The rolling summary: absent, stored, replaced, and cleared with the messages.
    async fn summary(store: &dyn ConversationStore) {
        let only = id("summary-only");
        store
            .put_summary(&only, &serde_json::json!({"facts": ["f"]}))
            .await
            .unwrap();
        assert!(
            store.list().await.unwrap().contains(&only),
            "a conversation holding only a summary is listed"
        );
        store.delete(&only).await.unwrap();
        let s = id("summarized");
        assert_eq!(store.summary(&s).await.unwrap(), None);
        store.append(&s, &[Message::user("q", 1)]).await.unwrap();
        let first = serde_json::json!({"version": 1, "facts": ["a"]});
        store.put_summary(&s, &first).await.unwrap();
        assert_eq!(store.summary(&s).await.unwrap(), Some(first));
        let second = serde_json::json!({"facts": ["b", "a"], "todos": []});
        store.put_summary(&s, &second).await.unwrap();
        assert_eq!(store.summary(&s).await.unwrap(), Some(second));
        store.clear(&s).await.unwrap();
        assert_eq!(
            store.summary(&s).await.unwrap(),
            None,
            "cleared with the messages"
        );
        assert!(store.load(&s).await.unwrap().is_empty());
    }
}
