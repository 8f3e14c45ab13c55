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
    acknowledged: tokio::sync::oneshot::Receiver<Result<(), StoreError>>,
    task: impl std::future::Future<Output = Result<(), StoreError>>,
) -> Result<(), StoreError> {
    let mut task = std::pin::pin!(task);
    tokio::select! {
        biased;
        acknowledged = acknowledged => match acknowledged {
            Ok(result) => result,
            Err(_) => task.await,
        },
        ended = &mut task => ended,
    }
}
