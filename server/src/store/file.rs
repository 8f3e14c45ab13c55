//! Conversations in files: the embedded default, no server needed.
//!
//! Layout (shared with the MCP History Store, so either tool can read the folder):
//! `<data dir>/.chat-history/<dialog>/messages.json` holds the messages as a JSON array;
//! Parlor adds `conversation.json` beside it for the title, agent and owner.
//! Every write goes to a temporary file that is synced and then renamed over the old one,
//! and the folder is synced, so a crash leaves either the old or the new file, never a torn
//! one. Writes to one dialog are serialized.

use super::{newest_first, ConversationInfo, ConversationStore, StoreError};
use async_trait::async_trait;
use parlor_domain::{Message, SessionId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const MESSAGES: &str = "messages.json";
const INFO: &str = "conversation.json";

pub struct FileStore {
    root: PathBuf,
    locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Conversation infos, read from disk once at startup and kept in step with every write,
    /// so listing a browser's conversations never scans the folder.
    infos: Mutex<HashMap<SessionId, ConversationInfo>>,
}

impl FileStore {
    /// Opens (creating if needed) the store under `data_dir/.chat-history`.
    pub fn open(data_dir: &Path) -> Result<FileStore, StoreError> {
        let root = data_dir.join(".chat-history");
        std::fs::create_dir_all(&root)?;
        let mut infos = HashMap::new();
        for entry in std::fs::read_dir(&root)? {
            let path = entry?.path().join(INFO);
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            match serde_json::from_slice::<ConversationInfo>(&bytes) {
                Ok(info) => {
                    infos.insert(info.session_id.clone(), info);
                }
                Err(e) => tracing::error!("skipping unreadable {}: {e}", path.display()),
            }
        }
        Ok(FileStore {
            root,
            locks: Mutex::default(),
            infos: Mutex::new(infos),
        })
    }

    fn dialog_dir(&self, id: &SessionId) -> PathBuf {
        // Session ids are restricted to [A-Za-z0-9._-] without a leading dot, so the id is
        // always a single, safe path component.
        self.root.join(id.as_str())
    }

    fn lock_for(&self, id: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(id.clone()).or_default().clone()
    }

    async fn read_messages(&self, id: &SessionId) -> Result<Vec<Message>, StoreError> {
        let path = self.dialog_dir(id).join(MESSAGES);
        match tokio::fs::read(&path).await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| StoreError::Corrupt(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    async fn write_json(
        &self,
        id: &SessionId,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), StoreError> {
        let dir = self.dialog_dir(id);
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || write_atomically(&dir, &name, &bytes))
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
        Ok(())
    }
}

/// Writes `dir/name` so that readers and crashes see the old or the new contents only.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.tmp-{}", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec_pretty(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[async_trait]
impl ConversationStore for FileStore {
    async fn load(&self, id: &SessionId) -> Result<Vec<Message>, StoreError> {
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        self.read_messages(id).await
    }

    async fn append(&self, id: &SessionId, messages: &[Message]) -> Result<(), StoreError> {
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let mut all = self.read_messages(id).await?;
        all.extend_from_slice(messages);
        self.write_json(id, MESSAGES, to_json(&all)?).await
    }

    async fn replace(&self, id: &SessionId, messages: &[Message]) -> Result<(), StoreError> {
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        self.write_json(id, MESSAGES, to_json(messages)?).await
    }

    async fn info(&self, id: &SessionId) -> Result<Option<ConversationInfo>, StoreError> {
        Ok(self
            .infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned())
    }

    async fn put_info(&self, info: &ConversationInfo) -> Result<(), StoreError> {
        let lock = self.lock_for(&info.session_id);
        let _guard = lock.lock().await;
        self.write_json(&info.session_id, INFO, to_json(info)?)
            .await?;
        self.infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(info.session_id.clone(), info.clone());
        Ok(())
    }

    async fn list_owned(&self, owner: &str) -> Result<Vec<ConversationInfo>, StoreError> {
        let infos = self.infos.lock().unwrap_or_else(|e| e.into_inner());
        Ok(newest_first(
            infos
                .values()
                .filter(|info| info.owner.as_deref() == Some(owner))
                .cloned()
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_the_store_contract() {
        let dir = tempfile::tempdir().unwrap();
        super::super::contract::run(&FileStore::open(dir.path()).unwrap()).await;
    }

    #[tokio::test]
    async fn conversations_survive_a_restart_in_the_shared_layout() {
        let dir = tempfile::tempdir().unwrap();
        let id = SessionId::parse("abc").unwrap();
        {
            let store = FileStore::open(dir.path()).unwrap();
            store
                .append(&id, &[Message::user("hello", 7)])
                .await
                .unwrap();
            store
                .put_info(&ConversationInfo {
                    session_id: id.clone(),
                    agent_id: "a".into(),
                    owner: Some("b".into()),
                    title: "hello".into(),
                    created_ms: 7,
                    updated_ms: 7,
                    last_turn: None,
                })
                .await
                .unwrap();
        }
        let raw =
            std::fs::read_to_string(dir.path().join(".chat-history/abc/messages.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(json[0]["role"], "user");
        assert_eq!(json[0]["text"], "hello");
        assert_eq!(json[0]["ts"], 7);

        let reopened = FileStore::open(dir.path()).unwrap();
        assert_eq!(reopened.load(&id).await.unwrap()[0].text, "hello");
        assert_eq!(reopened.list_owned("b").await.unwrap().len(), 1);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join(".chat-history/abc"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "no temporary files left behind");
    }
}
