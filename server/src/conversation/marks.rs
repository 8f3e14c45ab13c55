//! Pins and exclusions: the user's marks on single messages ([`SendMark`]), stored with the
//! message in every backend and applied by the plan of every model call.
//!
//! Changing a mark takes the conversation like a turn does (here and, for stores shared
//! between processes, in every process), so it never races a reply's own writes, and is
//! written through the store's atomic in-place rewrite ([`ConversationStore::rewrite`]).

use crate::state::Services;
use crate::store::histories::History;
use crate::store::{ConversationInfo, ConversationStore, StoreError};
use parlor_domain::context::Edit;
use parlor_domain::{MarkReply, Role, SendMark};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    #[error("a reply is being written in this conversation; try again when it is done")]
    Busy,
    #[error("no message with id {0:?} in this conversation")]
    NoMessage(String),
    #[error("system messages are always sent; they cannot be pinned or excluded")]
    SystemMessage,
    #[error("the conversation changed while it was being marked; try again")]
    Changed,
    #[error("the history store failed: {0}")]
    Store(#[from] StoreError),
}

/// Sets (or, with `None`, clears) the mark of the messages with id `message_id`.
pub async fn set_mark(
    services: &Arc<Services>,
    history: &History,
    info: &ConversationInfo,
    message_id: &str,
    send: Option<SendMark>,
) -> Result<MarkReply, MarkError> {
    let id = &info.session_id;
    let store = history.store.as_ref();
    let mut busy = services.claim(&history.id, id).ok_or(MarkError::Busy)?;
    busy.hold(store.lock_reply(id).await?.ok_or(MarkError::Busy)?);
    let result = apply(store, info, message_id, send).await;
    busy.release().await;
    result
}

async fn apply(
    store: &dyn ConversationStore,
    info: &ConversationInfo,
    message_id: &str,
    send: Option<SendMark>,
) -> Result<MarkReply, MarkError> {
    let id = &info.session_id;
    let mut messages = store.load(id).await?;
    let Some(at) = messages.iter().position(|m| m.id() == message_id) else {
        return Err(MarkError::NoMessage(message_id.to_owned()));
    };
    if messages[at].role == Role::System {
        return Err(MarkError::SystemMessage);
    }
    // A mark on part of a tool exchange marks all of it (a call is sent with its results or
    // not at all).
    let span = parlor_domain::exchange::span(&messages, at);
    let mut edits = Vec::new();
    for (index, message) in messages.iter_mut().enumerate() {
        if !span.contains(&index) && message.id() != message_id {
            continue;
        }
        let old = message.clone();
        message.ensure_id();
        message.send = send;
        if *message != old {
            edits.push(Edit {
                index,
                old,
                new: Some(message.clone()),
            });
        }
    }
    if store.rewrite(id, &edits).await? != edits.len() {
        return Err(MarkError::Changed);
    }
    let pinned = messages.iter().filter(|m| m.is_pinned()).count();
    // The details as stored now (a turn may have written them since the caller read them).
    let mut current = store.info(id).await?.unwrap_or_else(|| info.clone());
    if current.note_pins(&messages) {
        store.put_info(&current).await?;
    }
    Ok(MarkReply {
        id: message_id.to_owned(),
        send,
        pinned,
    })
}
