//! Making a new dialog on files: recorded in the journal of new dialogs and acknowledged,
//! then its folder made under its locks ([`journal`](super::journal)); and replaying the
//! journals of processes that died.

use super::dialog::{dialog_maker, to_json};
use super::journal::make_dialog;
use super::locking::{lock_dialog, lock_path};
use super::{FileStore, NEW_DIALOG_THREADS};
use crate::store::{ConversationInfo, StoreError};
use parlor_domain::Message;

impl FileStore {
    /// `ConversationStore::create` on files: acknowledged once recorded (see the module's
    /// notes).
    pub(super) async fn create_recorded(
        &self,
        info: &ConversationInfo,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        let info_bytes = to_json(info)?;
        let messages = messages.to_vec();
        let (root, journal) = (self.root_sync.clone(), self.journal.clone());
        let id = info.session_id.clone();
        let (acknowledge, acknowledged) = tokio::sync::oneshot::channel();
        // Acknowledged once the journal holds it; the folder is made after, by the same
        // task under the dialog's locks, so the next operation on it waits for that.
        let task = self.in_turn(&id.clone(), NEW_DIALOG_THREADS, move |held| {
            let d = &held.dialog;
            if d.dir.exists() {
                held.lock()?;
                make_dialog(d, &root, &info_bytes, &messages)?;
                let _ = acknowledge.send(Ok(()));
                return Ok(());
            }
            let mut acknowledge = Some(acknowledge);
            // The lock file is taken after the record is synced: making it (a new file)
            // would delay the acknowledgement, and no other process knows of the dialog
            // before that (one that writes it first meets its folder: `make_dialog`).
            let written = journal.create(
                &id,
                (&info_bytes, &messages),
                || {
                    if let Some(acknowledge) = acknowledge.take() {
                        let _ = acknowledge.send(Ok(()));
                    }
                },
                || {
                    held.lock()?;
                    make_dialog(d, &root, &info_bytes, &messages)
                },
            );
            match acknowledge {
                // Not recorded: nothing was acknowledged, the caller hears why.
                Some(acknowledge) => {
                    let _ = acknowledge.send(written);
                    Ok(())
                }
                None => written,
            }
        });
        first_word(acknowledged, task).await?;
        self.remember(Some(info), &info.session_id);
        Ok(())
    }

    /// Replays the logs of processes that died (see [`Journal::recover`]), the dialogs made
    /// then found by the caller's scan of the folder.
    pub(super) async fn replay_journals(&self) {
        let permit = self.io.acquire().await;
        let (journal, root_sync) = (self.journal.clone(), self.root_sync.clone());
        let root = self.root.clone();
        let dialog_of = dialog_maker(
            &self.root,
            self.max_turns,
            self.backup_retention,
            &self.shapes,
        );
        let replayed = tokio::task::spawn_blocking(move || {
            journal.recover(&root_sync, &dialog_of, &lock_of(&root))
        })
        .await;
        drop(permit);
        match replayed {
            // What a turn read of them before is stale (they were written outside `in_turn`).
            Ok(Ok(made)) => made.iter().for_each(|id| self.prefetched.starts(id, 0)),
            Ok(Err(e)) => tracing::warn!("could not replay the journal of new dialogs: {e}"),
            Err(e) => tracing::warn!("could not replay the journal of new dialogs: {e}"),
        }
    }
}

/// Takes a dialog's lock shared with other processes (for the journal's replay).
pub(super) fn lock_of(
    root: &std::path::Path,
) -> impl Fn(&parlor_domain::ConversationId) -> std::io::Result<std::fs::File> + '_ {
    move |id| lock_dialog(&lock_path(root, id))
}

/// What `acknowledged` carries, or, when the work `task` ends without a word, its own
/// result. Not spawned: once `task` has started its blocking work (which it does before
/// anything is acknowledged), that work runs to its end whether `task` is awaited further
/// or not (see `FileStore::in_turn`).
async fn first_word(
    mut acknowledged: tokio::sync::oneshot::Receiver<Result<(), StoreError>>,
    task: impl std::future::Future<Output = Result<(), StoreError>>,
) -> Result<(), StoreError> {
    let mut task = std::pin::pin!(task);
    let ended = tokio::select! {
        biased;
        word = &mut acknowledged => return match word {
            Ok(result) => result,
            Err(_) => task.await,
        },
        ended = &mut task => ended,
    };
    // The work has ended, so it has spoken or never will: its word may have come between
    // the two polls above, and it is what counts (a record that could not be written, or
    // one that was, whatever happened to the folder after).
    match acknowledged.await {
        Ok(word) => word,
        Err(_) => ended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refusal_said_just_before_the_work_ended_well_is_what_counts() {
        // The record could not be written (the word), and the work then ends well: the
        // two arrive together, in either order of polling.
        let (word, heard) = tokio::sync::oneshot::channel();
        let task = async move {
            let refused = StoreError::Io(std::io::Error::other("no journal"));
            let _ = word.send(Err(refused));
            Ok(())
        };
        assert!(first_word(heard, task).await.is_err());
        let (word, heard) = tokio::sync::oneshot::channel();
        word.send(Ok(())).unwrap();
        assert!(first_word(heard, std::future::pending()).await.is_ok());
        // The record was written, then making the folder failed: the word counts (the
        // next operation makes the folder).
        let (word, heard) = tokio::sync::oneshot::channel();
        let task = async move {
            let _ = word.send(Ok(()));
            Err(StoreError::Io(std::io::Error::other("no folder yet")))
        };
        assert!(first_word(heard, task).await.is_ok());
        // No word at all: the work's own result.
        let (word, heard) = tokio::sync::oneshot::channel::<Result<(), StoreError>>();
        drop(word);
        let failed = async { Err(StoreError::Io(std::io::Error::other("lock"))) };
        assert!(first_word(heard, failed).await.is_err());
    }
}
