//! A turn's reads in one step: the details of the conversation a turn continues, and with
//! them its last messages and pins, read under the dialog's locks on one blocking thread and
//! kept for the turn's next reads (`load_pinned`, `load_tail`, `load`), which then need no
//! thread of their own. Each hand-over to a blocking thread and back costs tens of
//! microseconds on a busy machine, all of it before the model is called.
//!
//! What is kept is exactly what a read at that point would find: the first operation on the
//! dialog in this process after the one that read it (operations on a dialog run one at a
//! time, see [`FileStore::in_turn`]) forgets it, the turn's read takes it, and it is not used
//! after [`FRESH`]. Another process can write in between, as it can between any read and the
//! write that follows it.

use super::{FileStore, INFO};
use crate::store::{ConversationInfo, StoreError, Tail};
use parlor_domain::{ConversationId, Message};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many of the last messages are read with the details of a conversation no turn has
/// read here yet (a user message and its reply for each of AgentDock's default 10 turns);
/// after that, as many as its last turn asked for, up to [`MOST_MESSAGES`] (parsing what
/// a turn does not use costs more than it saves).
const MESSAGES: usize = 20;
const MOST_MESSAGES: usize = 256;
/// How long what was read stays usable (a turn reads it microseconds later).
const FRESH: Duration = Duration::from_secs(1);
/// At most this many dialogs' reads are kept (a turn refused after its read leaves its own).
const MOST: usize = 1024;

/// A dialog's end as read with its details.
struct Read {
    at: Instant,
    tail: Tail,
    size: usize,
    pins: Option<Vec<(usize, Message)>>,
}

enum Slot {
    /// The read numbered so is under way (or waits for the dialog's locks).
    Reading(u64),
    Read(Read),
}

#[derive(Default)]
pub(super) struct Prefetched {
    slots: Mutex<HashMap<ConversationId, Slot>>,
    tickets: AtomicU64,
    /// How many messages each conversation's last turn read.
    asked: Mutex<HashMap<ConversationId, usize>>,
}

impl Prefetched {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An operation on `id` starts, holding its locks (`ticket`: the read it is, 0 for any
    /// other): anything read before it is stale now.
    pub(super) fn starts(&self, id: &ConversationId, ticket: u64) {
        let mut slots = self.slots();
        if slots.is_empty() {
            return;
        }
        if !matches!(slots.get(id), Some(Slot::Reading(t)) if *t == ticket) {
            slots.remove(id);
        }
    }

    /// A read of `id` is about to be asked for: its ticket.
    fn expect(&self, id: &ConversationId) -> u64 {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed) + 1;
        let mut slots = self.slots();
        if slots.len() >= MOST {
            slots.retain(|_, s| matches!(s, Slot::Read(r) if r.at.elapsed() < FRESH));
        }
        if slots.len() < MOST {
            slots.insert(id.clone(), Slot::Reading(ticket));
        }
        ticket
    }

    /// Keeps what read `ticket` found, unless an operation started on the dialog since.
    fn keep(&self, id: &ConversationId, ticket: u64, read: Read) {
        let mut slots = self.slots();
        if let Some(slot) = slots.get_mut(id) {
            if matches!(slot, Slot::Reading(t) if *t == ticket) {
                *slot = Slot::Read(read);
            }
        }
    }

    /// What was read of `id`, while fresh.
    fn read_mut<'a>(
        slots: &'a mut HashMap<ConversationId, Slot>,
        id: &ConversationId,
    ) -> Option<&'a mut Read> {
        match slots.get_mut(id)? {
            Slot::Read(read) if read.at.elapsed() < FRESH => Some(read),
            _ => None,
        }
    }

    /// The pinned messages, from what was read (asked for before the tail).
    pub(super) fn pins(&self, id: &ConversationId) -> Option<Vec<(usize, Message)>> {
        let mut slots = self.slots();
        Self::read_mut(&mut slots, id)?.pins.take()
    }

    /// How many messages to read with the details of `id`.
    fn wanted(&self, id: &ConversationId) -> usize {
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        asked
            .get(id)
            .copied()
            .unwrap_or(MESSAGES)
            .min(MOST_MESSAGES)
    }

    /// The last `count` messages and the size, when what was read holds them; taken.
    pub(super) fn tail(&self, id: &ConversationId, count: usize) -> Option<(Tail, usize)> {
        {
            let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            if asked.len() >= MOST && !asked.contains_key(id) {
                asked.clear();
            }
            asked.insert(id.clone(), count);
        }
        let mut slots = self.slots();
        let read = Self::read_mut(&mut slots, id)?;
        let held = read.tail.messages.len();
        if count > held && held < read.tail.total {
            return None;
        }
        let Some(Slot::Read(mut read)) = slots.remove(id) else {
            return None;
        };
        read.tail.messages.drain(..held.saturating_sub(count));
        Some((read.tail, read.size))
    }

    /// The whole conversation, when what was read holds all of it; taken.
    pub(super) fn whole(&self, id: &ConversationId) -> Option<Vec<Message>> {
        let mut slots = self.slots();
        let read = Self::read_mut(&mut slots, id)?;
        if read.tail.messages.len() < read.tail.total {
            return None;
        }
        match slots.remove(id) {
            Some(Slot::Read(read)) => Some(read.tail.messages),
            _ => None,
        }
    }
}

impl FileStore {
    /// `ConversationStore::info_for_turn` on files: the details, and the dialog's end read
    /// in the same step (kept for the turn's reads).
    pub(super) async fn info_and_end(
        &self,
        id: &ConversationId,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        let ticket = self.prefetched.expect(id);
        let wanted = self.prefetched.wanted(id);
        let (details, session) = (self.details.clone(), id.clone());
        let (info, read) = self
            .in_turn_as(id, 1, ticket, move |held| {
                // Read before the lock shared with other processes is taken, as `info`
                // reads them: a conversation not made yet gets nothing made for it (not
                // even its lock file), and a new dialog's first turn takes that lock only
                // once its record is durable (see `journal`). A dialog recorded and not made
                // yet is made first (taking the lock does).
                if held.journal.is_pending(&held.id) {
                    held.lock()?;
                }
                let d = &held.dialog;
                let Some(info) = details.read(&d.dir.join(INFO), &session) else {
                    return Ok((None, None));
                };
                let Some(info) = info else {
                    return Ok((Some(None), None));
                };
                held.lock()?;
                let (tail, size) = d.read_tail(wanted)?;
                let pins = match info.pinned {
                    0 => None,
                    _ => Some(d.read_pins()?),
                };
                let at = Instant::now();
                let read = Read {
                    at,
                    tail,
                    size,
                    pins,
                };
                Ok((Some(Some(info)), Some(read)))
            })
            .await?;
        if let Some(read) = read {
            self.prefetched.keep(id, ticket, read);
        }
        self.details_found(id, info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ConversationStore;

    fn texts(tail: &Tail) -> Vec<&str> {
        tail.messages.iter().map(|m| m.text.as_str()).collect()
    }

    async fn stored(dir: &std::path::Path, id: &ConversationId) -> FileStore {
        let store = FileStore::open(dir, None, 3).unwrap();
        let mut info = ConversationInfo::bare(id, Some(1));
        info.pinned = 1;
        let mut pinned = Message::user("pinned", 1);
        pinned.send = Some(parlor_domain::SendMark::Always);
        store.create(&info, &[pinned]).await.unwrap();
        store
            .append(id, &[Message::assistant("two", 2)])
            .await
            .unwrap();
        store
    }

    #[tokio::test]
    async fn a_turns_reads_are_made_with_its_details_and_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let id = ConversationId::parse("prefetched").unwrap();
        let store = stored(dir.path(), &id).await;
        let info = store.info_for_turn(&id).await.unwrap().unwrap();
        assert_eq!(info.session_id, id);
        // Another process appends now: the turn reads what was there with its details (the
        // same as between any read and the write after it), once; the next read is fresh.
        let other = FileStore::open(dir.path(), None, 3).unwrap();
        other
            .append(&id, &[Message::user("three", 3)])
            .await
            .unwrap();
        let pins = store.load_pinned(&id, &[0]).await.unwrap().unwrap();
        assert_eq!(pins[0].1.text, "pinned");
        assert_eq!(
            texts(&store.load_tail(&id, 5).await.unwrap()),
            ["pinned", "two"]
        );
        let again = store.load_tail(&id, 5).await.unwrap();
        assert_eq!(texts(&again), ["pinned", "two", "three"]);
    }

    #[tokio::test]
    async fn a_turn_that_reads_no_more_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let id = ConversationId::parse("refused").unwrap();
        let store = stored(dir.path(), &id).await;
        store.info_for_turn(&id).await.unwrap();
        assert_eq!(store.prefetched.slots().len(), 1);
        // Refused (another browser's conversation, a reply still running): done at once.
        store.turn_read_done(&id);
        assert!(store.prefetched.slots().is_empty());
        let other = FileStore::open(dir.path(), None, 3).unwrap();
        other
            .append(&id, &[Message::user("three", 3)])
            .await
            .unwrap();
        assert_eq!(store.load_tail(&id, 5).await.unwrap().total, 3);
    }

    #[tokio::test]
    async fn an_operation_of_this_process_after_the_read_makes_it_stale() {
        let dir = tempfile::tempdir().unwrap();
        let id = ConversationId::parse("written").unwrap();
        let store = stored(dir.path(), &id).await;
        store.info_for_turn(&id).await.unwrap();
        store
            .append(&id, &[Message::user("three", 3)])
            .await
            .unwrap();
        let tail = store.load_tail(&id, 2).await.unwrap();
        assert_eq!((texts(&tail), tail.total), (vec!["two", "three"], 3));
        // The whole conversation, too, comes from the files after a write.
        store.info_for_turn(&id).await.unwrap();
        store
            .put_summary(&id, &serde_json::json!({"text": "s"}))
            .await
            .unwrap();
        store
            .append(&id, &[Message::assistant("four", 4)])
            .await
            .unwrap();
        assert_eq!(store.load(&id).await.unwrap().len(), 4);
    }

    #[tokio::test]
    async fn a_read_asking_for_more_than_was_read_reads_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let id = ConversationId::parse("long").unwrap();
        let store = stored(dir.path(), &id).await;
        let more: Vec<Message> = (0..100)
            .map(|i| Message::user(format!("m{i}"), 10 + i))
            .collect();
        store.append(&id, &more).await.unwrap();
        store.info_for_turn(&id).await.unwrap();
        let tail = store.load_tail(&id, 80).await.unwrap();
        assert_eq!((tail.messages.len(), tail.total), (80, 102));
        assert_eq!(tail.messages[0].text, "m20");
        // The next turn's read holds as many as this one asked for: another process's
        // append after it is not seen (it was read before), which shows where it came from.
        store.info_for_turn(&id).await.unwrap();
        let other = FileStore::open(dir.path(), None, 3).unwrap();
        other
            .append(&id, &[Message::user("late", 200)])
            .await
            .unwrap();
        let tail = store.load_tail(&id, 80).await.unwrap();
        assert_eq!((tail.messages.len(), tail.total), (80, 102));
        // A conversation that was read whole serves `load` too.
        let short = ConversationId::parse("short").unwrap();
        let store = stored(dir.path(), &short).await;
        store.info_for_turn(&short).await.unwrap();
        assert_eq!(store.load(&short).await.unwrap().len(), 2);
    }
}
