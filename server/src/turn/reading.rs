//! A turn's reads: what the domain asks for of the stored conversation.

use crate::store::{ConversationInfo, ConversationStore, StoreError, Tail};
use parlor_domain::turn::Read;
use parlor_domain::{ConversationId, Message};
use std::sync::Arc;

/// The conversation a turn asked the store about with
/// [`ConversationStore::info_for_turn`]; when the turn ends, read or refused, the store hears
/// it ([`ConversationStore::turn_read_done`]), so what it read ahead lives no longer than the
/// turn that asked for it.
pub struct ReadAhead {
    store: Arc<dyn ConversationStore>,
    id: Option<ConversationId>,
}

impl ReadAhead {
    pub fn new(store: &Arc<dyn ConversationStore>) -> ReadAhead {
        ReadAhead {
            store: store.clone(),
            id: None,
        }
    }

    /// The details of `id` for the turn (its end possibly read with them).
    pub async fn info(
        &mut self,
        id: &ConversationId,
    ) -> Result<Option<ConversationInfo>, StoreError> {
        if let Some(earlier) = self.id.replace(id.clone()) {
            self.store.turn_read_done(&earlier);
        }
        self.store.info_for_turn(id).await
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Some(id) = &self.id {
            self.store.turn_read_done(id);
        }
    }
}

/// The pinned messages of a conversation, with their positions.
pub type Pins = Vec<(usize, Message)>;

/// Reads what the domain asked for; beside a tail, the pinned messages when the details count
/// some (`None` when the store could not find them: the domain then asks for the whole).
pub async fn read(
    store: &dyn ConversationStore,
    info: &ConversationInfo,
    read: Read,
) -> Result<(Tail, Option<Pins>), StoreError> {
    let id = &info.session_id;
    match read {
        Read::Nothing => Ok((Tail::default(), None)),
        Read::Tail(count) => {
            let pins = match info.pinned {
                0 => None,
                _ => store.load_pinned(id, &info.pinned_at).await?,
            };
            Ok((store.load_tail(id, count).await?, pins))
        }
        Read::Whole => {
            let messages = store.load(id).await?;
            let total = messages.len();
            Ok((Tail { messages, total }, None))
        }
    }
}
