//! The API's answers as the chat page reads them: parsed by the browser's `JSON.parse` and
//! read by the same small readers as the island's data (`crate::start`), so the browser's
//! code holds no serde_json parser (see `stream::read_answer`).

use crate::api::{ConversationRef, OlderMessages};
use crate::start::{optional, required, FromJson, Json};

impl FromJson for ConversationRef {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(ConversationRef {
            session_id: required(json, "session_id")?,
            agent_id: required(json, "agent_id")?,
            title: required(json, "title")?,
        })
    }
}

impl FromJson for OlderMessages {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(OlderMessages {
            messages: required(json, "messages")?,
            html: required(json, "html")?,
            first_index: required(json, "first_index")?,
            summarized: required(json, "summarized")?,
        })
    }
}

impl FromJson for parlor_domain::MarkReply {
    fn from_json(json: &impl Json) -> Option<Self> {
        Some(parlor_domain::MarkReply {
            id: required(json, "id")?,
            send: optional(json, "send")?,
            pinned: required(json, "pinned")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::StoredMessage;

    #[test]
    fn the_apis_answers_are_read_as_the_server_writes_them() {
        fn read<T: FromJson>(value: &impl serde::Serialize) -> Option<T> {
            T::from_json(&serde_json::to_value(value).unwrap())
        }
        let fork = ConversationRef {
            session_id: "s2".into(),
            agent_id: "general".into(),
            title: "a fork".into(),
        };
        assert_eq!(read::<ConversationRef>(&fork), Some(fork));
        for send in [None, Some(parlor_domain::SendMark::Always)] {
            let mark = parlor_domain::MarkReply {
                id: "m3".into(),
                send,
                pinned: 2,
            };
            assert_eq!(read::<parlor_domain::MarkReply>(&mark), Some(mark));
        }
        let older = OlderMessages {
            messages: vec![StoredMessage {
                id: "m40".into(),
                role: parlor_domain::Role::User,
                text: "older".into(),
                send: Some(parlor_domain::SendMark::Never),
                html: None,
                status: None,
                context: Vec::new(),
                tokens: Some(3),
                calls: false,
                card: None,
                versions: Some(parlor_domain::branch::Versions {
                    n: 2,
                    of: 3,
                    prev: Some("m39a".into()),
                    next: None,
                }),
            }],
            html: vec![String::new()],
            first_index: 40,
            summarized: 12,
        };
        assert_eq!(read::<OlderMessages>(&older), Some(older));
        assert_eq!(
            read::<ConversationRef>(&serde_json::json!({"session_id": "s"})),
            None
        );
    }
}
