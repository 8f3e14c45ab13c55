//! What a user does with whole conversations: fork, rename, delete, export, import, search.
//!
//! Every operation that changes a conversation takes it like a turn does (one writer at a
//! time, here and, for shared stores, in every process), so it never races a reply's own
//! writes. New conversations (forks, imports) are written messages first, details last: a
//! conversation becomes visible only once it is whole.

pub mod marks;
pub mod recall;
pub mod summarizer;
pub mod versions;

use crate::state::Services;
use crate::store::histories::{Histories, History};
use crate::store::{
    now_ms, BackupInfo, ConversationInfo, ConversationStore, ForkOrigin, Listed, StoreError,
};
use futures::StreamExt;
use parlor_domain::branch::Rebranch;
use parlor_domain::conversation::longest_retention;
use parlor_domain::message::title_of;
use parlor_domain::transfer::{self, Export, ImportError};
use parlor_domain::{ConversationId, Message, Role};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The longest title a conversation may be given, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// How many results a search returns at most.
pub const MAX_RESULTS: usize = 50;
/// How long the line of a search result is, about, in characters.
const LINE_CHARS: usize = 160;
/// How many conversations a search reads at once.
const SEARCH_READS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    #[error("a reply is being written in this conversation; try again when it is done")]
    Busy,
    #[error("no message with id {0:?} in this conversation")]
    NoMessage(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Import(#[from] ImportError),
    #[error("the history store failed: {0}")]
    Store(#[from] StoreError),
}

/// Where a fork ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForkAt {
    /// Up to and including this message ("Fork from here").
    Through(String),
    /// Up to this message, without it (editing a message that is not the last).
    Before(String),
}

/// A conversation as lists show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Summary {
    pub session_id: String,
    pub agent_id: String,
    pub title: String,
    /// How many messages it holds.
    pub messages: usize,
}

impl Summary {
    pub fn new(info: &ConversationInfo, messages: usize) -> Self {
        Self {
            session_id: info.session_id.to_string(),
            agent_id: info.agent_id.clone(),
            title: info.title.clone(),
            messages,
        }
    }
}

/// A search result: a conversation and the first line in it that matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Hit {
    pub session_id: String,
    pub agent_id: String,
    pub title: String,
    /// The matching line (its title, when the title matched).
    pub line: String,
    /// The message the line is from (`None`: the title).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The message is on a version that is not the chosen path (choosing `message_id`
    /// brings it back: `POST …/messages/{message_id}/choose`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_branch: bool,
}

/// A new conversation's id: unguessable.
pub(crate) fn new_conversation_id() -> ConversationId {
    ConversationId::from_random(uuid::Uuid::new_v4().as_u128())
}

/// A new conversation of the same agent and browser with the messages of `info`'s up to
/// `at` (their ids, context blocks and marks copied; the summary not), titled "Fork of …"
/// and linked to its origin. The original is unchanged.
pub async fn fork(
    history: &History,
    info: &ConversationInfo,
    at: ForkAt,
) -> Result<(ConversationInfo, usize), ConversationError> {
    let store = history.store.as_ref();
    let mut messages = store.load(&info.session_id).await?;
    let (ForkAt::Through(id) | ForkAt::Before(id)) = &at;
    let index = messages
        .iter()
        .position(|m| m.id() == id.as_str())
        .ok_or_else(|| ConversationError::NoMessage(id.clone()))?;
    let len = match at {
        ForkAt::Through(_) => index + 1,
        ForkAt::Before(_) => index,
    };
    // A fork at a tool call, or before one of its results, takes the exchange whole.
    messages.truncate(parlor_domain::exchange::prefix_end(&messages, len));
    for message in &mut messages {
        message.ensure_id();
    }
    let now = now_ms();
    let title = if info.title.is_empty() {
        "Fork".to_owned()
    } else {
        title_of(&format!("Fork of {}", info.title))
    };
    let mut fork = ConversationInfo {
        session_id: new_conversation_id(),
        agent_id: info.agent_id.clone(),
        owner: info.owner.clone(),
        title,
        created_ms: now,
        updated_ms: now,
        last_turn: None,
        model: info.model.clone(),
        context_turns: longest_retention(&messages),
        pinned: 0,
        pinned_at: Vec::new(),
        forked_from: Some(ForkOrigin {
            session_id: info.session_id.clone(),
            message_id: messages.last().map(|m| m.id().into_owned()),
        }),
        spent_nano_usd: 0,
        approved_tools: Vec::new(),
    };
    fork.note_pins(&messages);
    let stored = write_new(store, &fork, &messages).await?;
    Ok((fork, stored))
}

/// Writes a new conversation: its messages, then its details (which make it visible).
async fn write_new(
    store: &dyn ConversationStore,
    info: &ConversationInfo,
    messages: &[Message],
) -> Result<usize, StoreError> {
    if !messages.is_empty() {
        store.replace(&info.session_id, messages).await?;
    }
    if let Err(e) = store.put_info(info).await {
        // Nothing half-made stays behind: without its details nobody can see it anyway.
        let _ = store.delete(&info.session_id).await;
        return Err(e);
    }
    // What the store kept (`max_turns` may keep fewer).
    Ok(store.stats(&info.session_id).await?.messages)
}

/// A title as the user typed it, on one line; refused when empty or too long.
pub fn clean_title(title: &str) -> Result<String, ConversationError> {
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() {
        return Err(ConversationError::Invalid("the title is empty".into()));
    }
    let chars = title.chars().count();
    if chars > MAX_TITLE_CHARS {
        return Err(ConversationError::Invalid(format!(
            "the title has {chars} characters; at most {MAX_TITLE_CHARS}"
        )));
    }
    Ok(title)
}

/// Renames a conversation.
pub async fn rename(
    services: &Arc<Services>,
    history: &History,
    info: &ConversationInfo,
    title: &str,
) -> Result<ConversationInfo, ConversationError> {
    let title = clean_title(title)?;
    let store = history.store.as_ref();
    let id = &info.session_id;
    let busy = claim(services, history, id).await?;
    let result = async {
        // The details as stored now (a turn may have written them since they were read).
        let mut current = store.info(id).await?.unwrap_or_else(|| info.clone());
        current.title = title;
        store.put_info(&current).await?;
        Ok(current)
    }
    .await;
    busy.release().await;
    result
}

/// Deletes a conversation (backed up first where the backend keeps backups).
pub async fn delete(
    services: &Arc<Services>,
    history: &History,
    info: &ConversationInfo,
) -> Result<Option<BackupInfo>, ConversationError> {
    let id = &info.session_id;
    let busy = claim(services, history, id).await?;
    let result = history.store.delete(id).await;
    busy.release().await;
    Ok(result?)
}

async fn claim(
    services: &Arc<Services>,
    history: &History,
    id: &ConversationId,
) -> Result<crate::state::BusyGuard, ConversationError> {
    let mut busy = services
        .claim(&history.id, id)
        .ok_or(ConversationError::Busy)?;
    let shared = history.store.lock_reply(id).await?;
    busy.hold(shared.ok_or(ConversationError::Busy)?);
    Ok(busy)
}

/// The conversation in Parlor's export form.
pub async fn export(
    store: &dyn ConversationStore,
    info: &ConversationInfo,
) -> Result<Export, StoreError> {
    let messages = store.load(&info.session_id).await?;
    let branches = store.branches(&info.session_id).await?.shown(&messages);
    Ok(Export {
        forked_from: info.forked_from.as_ref().map(|f| f.link()),
        branches: branches.branches,
        ..Export::new(
            &info.agent_id,
            &info.title,
            info.created_ms,
            info.updated_ms,
            messages,
        )
    })
}

/// Imports `text` (see [`transfer::parse_import`]) as a new conversation of `agent_id`,
/// owned by `owner` (`None`: reachable by its id, as API clients' conversations are).
/// Checked whole before anything is written.
pub async fn import(
    store: &dyn ConversationStore,
    agent_id: &str,
    owner: Option<String>,
    text: &str,
) -> Result<(ConversationInfo, usize), ConversationError> {
    let now = now_ms();
    let imported = transfer::parse_import(text, now)?;
    let mut info = ConversationInfo {
        session_id: new_conversation_id(),
        agent_id: agent_id.to_owned(),
        owner,
        title: clean_title(&imported.title).unwrap_or_else(|_| title_of(&imported.title)),
        created_ms: now,
        updated_ms: now,
        last_turn: None,
        model: None,
        context_turns: longest_retention(&imported.messages),
        pinned: 0,
        pinned_at: Vec::new(),
        forked_from: None,
        spent_nano_usd: 0,
        approved_tools: Vec::new(),
    };
    info.note_pins(&imported.messages);
    let stored = write_new(store, &info, &imported.messages).await?;
    if !imported.branches.is_empty() {
        // The other versions, beside the path as stored (`max_turns` may have kept less).
        let path = store.load(&info.session_id).await?;
        let versions = Rebranch::keeping(&path, imported.branches);
        store.rebranch_if(&info.session_id, &versions).await?;
    }
    Ok((info, stored))
}

/// Searches the conversations of the browser `owner` in every history, newest first: a
/// title that matches, else the first message line that does.
pub async fn search_owned(
    histories: &Histories,
    owner: &str,
    query: &str,
) -> Result<Vec<Hit>, StoreError> {
    let mut conversations = Vec::new();
    for id in histories.ids() {
        let Some(history) = histories.get(id) else {
            continue;
        };
        for info in history.store.list_owned(owner).await? {
            conversations.push((history.store.clone(), info));
        }
    }
    conversations.sort_by_key(|(_, info)| std::cmp::Reverse(info.updated_ms));
    search(conversations, query).await
}

/// Searches the given conversations in their order, reading a few at once; at most
/// [`MAX_RESULTS`] hits.
pub async fn search(
    conversations: Vec<(Arc<dyn ConversationStore>, Listed)>,
    query: &str,
) -> Result<Vec<Hit>, StoreError> {
    if query.trim().is_empty() {
        return Ok(Vec::new());
    }
    // The reads are made before the stream (no closure in the stream's type: rustc cannot
    // prove such a stream `Send` for the axum handler).
    let reads: Vec<_> = conversations
        .into_iter()
        .map(|(store, info)| search_one(store, info, query.to_owned()))
        .collect();
    let mut reads = futures::stream::iter(reads).buffered(SEARCH_READS);
    let mut hits = Vec::new();
    while let Some(hit) = reads.next().await {
        hits.extend(hit?);
        if hits.len() == MAX_RESULTS {
            break;
        }
    }
    Ok(hits)
}

/// A conversation's title when it matches, else its first matching message line.
async fn search_one(
    store: Arc<dyn ConversationStore>,
    info: Listed,
    query: String,
) -> Result<Option<Hit>, StoreError> {
    if let Some(line) = transfer::matching_line(&info.title, &query, LINE_CHARS) {
        return Ok(Some(hit(&info, line, None)));
    }
    let messages = store.load(&info.session_id).await?;
    let found = messages.iter().find_map(|m| {
        transfer::message_line(m, &query, LINE_CHARS).map(|line| hit(&info, line, Some(m)))
    });
    if found.is_some() {
        return Ok(found);
    }
    // Then every other version.
    let branches = store.branches(&info.session_id).await?.shown(&messages);
    let off_path = branches.branches.iter().flat_map(|b| &b.messages);
    Ok(off_path
        .filter_map(|m| {
            let line = transfer::message_line(m, &query, LINE_CHARS)?;
            Some(Hit {
                on_branch: true,
                ..hit(&info, line, Some(m))
            })
        })
        .next())
}

fn hit(info: &Listed, line: String, message: Option<&Message>) -> Hit {
    Hit {
        session_id: info.session_id.to_string(),
        agent_id: info.agent_id.clone(),
        title: info.title.clone(),
        line,
        message_id: message.map(|m| m.id().into_owned()),
        role: message.map(|m| m.role),
        on_branch: false,
    }
}
