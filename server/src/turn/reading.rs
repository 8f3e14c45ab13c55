//! A turn's reads: what the domain asks for of the stored conversation.

use crate::store::{ConversationInfo, ConversationStore, StoreError, Tail};
use parlor_domain::turn::Read;
use parlor_domain::Message;

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
