//! The store contract for branches: what every backend does with the versions an edit or a
//! regeneration keeps, and with a change of the chosen path.

use super::*;
use parlor_domain::branch::{branch_off, choose, Branches};

fn stamped(mut message: Message) -> Message {
    message.ensure_id();
    message
}

async fn tidy(store: &dyn ConversationStore, s: &ConversationId) -> Branches {
    let path = store.load(s).await.unwrap();
    store.branches(s).await.unwrap().tidy(&path)
}

pub(super) async fn run(store: &dyn ConversationStore) {
    let t = &id("branched");
    let read: Vec<Message> = [
        Message::user("q1", 1),
        Message::assistant("a1", 2),
        Message::user("q2", 3),
    ]
    .into_iter()
    .map(stamped)
    .collect();
    store.append(t, &read).await.unwrap();
    let saved_meanwhile = stamped(Message::assistant("saved over MCP", 4));
    store
        .append(t, std::slice::from_ref(&saved_meanwhile))
        .await
        .unwrap();
    // A change computed from what was read is refused once a message was appended since.
    let stale = branch_off(&read, 2, Branches::default()).unwrap();
    assert!(!store.rebranch_if(t, &stale).await.unwrap());
    assert_eq!(texts(store, t).await, ["q1", "a1", "q2", "saved over MCP"]);

    // An edit of q2: it and what followed stay, as a version, and the version moves on.
    let path = store.load(t).await.unwrap();
    let before = store.version(t).await.unwrap();
    let edit = branch_off(&path, 2, store.branches(t).await.unwrap()).unwrap();
    assert!(store.rebranch_if(t, &edit).await.unwrap());
    assert_ne!(store.version(t).await.unwrap(), before);
    assert_eq!(texts(store, t).await, ["q1", "a1"]);
    let edited = [
        stamped(Message::user("q2 edited", 5)),
        stamped(Message::assistant("a2", 6)),
    ];
    store.append(t, &edited).await.unwrap();
    let path = store.load(t).await.unwrap();
    let branches = tidy(store, t).await;
    let v = branches.versions(&path, None)[2]
        .clone()
        .expect("two versions");
    assert_eq!((v.n, v.of), (2, 2));

    // Back to the first version: the whole old path returns; the edit is the version now.
    let back = choose(&path, &branches, &v.prev.unwrap()).unwrap().unwrap();
    assert!(store.rebranch_if(t, &back).await.unwrap());
    assert_eq!(texts(store, t).await, ["q1", "a1", "q2", "saved over MCP"]);
    let branches = tidy(store, t).await;
    assert_eq!(branches.messages(), 2);
    assert!(branches.problems(&store.load(t).await.unwrap()).is_empty());

    trimmed_and_cleared(store, t).await;
}

/// `t` holds q1 a1 q2 "saved over MCP" and a version of q2 off a1.
async fn trimmed_and_cleared(store: &dyn ConversationStore, t: &ConversationId) {
    // `max_turns` (4) trims the path's oldest messages: the version hanging off a1 goes with
    // it, never left without its parent.
    let more = [
        stamped(Message::user("q3", 7)),
        stamped(Message::assistant("a3", 8)),
    ];
    store.append(t, &more).await.unwrap();
    assert_eq!(texts(store, t).await, ["q2", "saved over MCP", "q3", "a3"]);
    assert!(store.branches(t).await.unwrap().is_empty());

    // A regeneration's old reply is a version until the conversation is cleared.
    let path = store.load(t).await.unwrap();
    let again = branch_off(&path, 3, store.branches(t).await.unwrap()).unwrap();
    assert!(store.rebranch_if(t, &again).await.unwrap());
    assert_eq!(store.branches(t).await.unwrap().messages(), 1);
    store.clear(t).await.unwrap();
    assert!(store.branches(t).await.unwrap().is_empty());
    assert!(store.load(t).await.unwrap().is_empty());
}
