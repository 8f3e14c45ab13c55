//! Versions: choosing which one of a message's versions the conversation goes on from
//! ([`parlor_domain::branch`]), and the change of the chosen path that an edit, a
//! regeneration or a choice makes, with the rolling summary kept true to the path.
//!
//! Choosing takes the conversation like a turn does (in every process that shares the
//! store), so a reply is never written onto a path that changed under it.

use crate::state::Services;
use crate::store::histories::History;
use crate::store::{ConversationInfo, ConversationStore, StoreError};
use parlor_domain::branch::{choose, BranchError, ChooseReply, Rebranch, SummaryMove};
use parlor_domain::ConversationId;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("a reply is being written in this conversation; try again when it is done")]
    Busy,
    #[error("{0}")]
    Branch(#[from] BranchError),
    #[error("the conversation changed while the version was being chosen; try again")]
    Changed,
    #[error("the history store failed: {0}")]
    Store(#[from] StoreError),
}

/// Makes the version holding `message_id` the conversation's chosen path.
pub async fn choose_version(
    services: &Arc<Services>,
    history: &History,
    info: &ConversationInfo,
    message_id: &str,
) -> Result<ChooseReply, VersionError> {
    let id = &info.session_id;
    let store = history.store.as_ref();
    let mut busy = services.claim(&history.id, id).ok_or(VersionError::Busy)?;
    busy.hold(store.lock_reply(id).await?.ok_or(VersionError::Busy)?);
    let result = apply(store, id, message_id).await;
    busy.release().await;
    result
}

async fn apply(
    store: &dyn ConversationStore,
    id: &ConversationId,
    message_id: &str,
) -> Result<ChooseReply, VersionError> {
    let path = store.load(id).await?;
    let branches = store.branches(id).await?;
    let summary = match choose(&path, &branches, message_id)? {
        None => SummaryMove::Keep,
        Some(change) => rebranch(store, id, change)
            .await?
            .ok_or(VersionError::Changed)?,
    };
    let path = store.load(id).await?;
    // The details count the pins of the path now shown.
    if let Some(mut current) = store.info(id).await? {
        if current.note_pins(&path) {
            store.put_info(&current).await?;
        }
    }
    Ok(ChooseReply {
        id: message_id.to_owned(),
        messages: path.len(),
        summary: match summary {
            SummaryMove::Keep => "kept",
            SummaryMove::Put(s) if parlor_domain::summary::says_nothing(&s) => "set aside",
            SummaryMove::Put(_) => "restored",
        }
        .into(),
    })
}

/// What the debug panel says of a conversation's versions (`None`: it has none).
pub async fn facts(
    store: &dyn ConversationStore,
    id: &ConversationId,
) -> Result<Option<parlor_domain::branch::VersionFacts>, StoreError> {
    let branches = store.branches(id).await?;
    if branches.is_empty() {
        return Ok(None);
    }
    Ok(branches.facts(&store.load(id).await?))
}

/// Writes `change` (see [`ConversationStore::rebranch_if`]) and then the rolling summary it
/// leads to. `None` when the conversation changed since the change was computed (nothing
/// was written).
pub async fn rebranch(
    store: &dyn ConversationStore,
    id: &ConversationId,
    mut change: Rebranch,
) -> Result<Option<SummaryMove>, StoreError> {
    let summary = store.summary(id).await?;
    let moved = change.move_summary(summary.as_ref());
    if !store.rebranch_if(id, &change).await? {
        return Ok(None);
    }
    if let SummaryMove::Put(summary) = &moved {
        store.put_summary(id, summary).await?;
    }
    Ok(Some(moved))
}
