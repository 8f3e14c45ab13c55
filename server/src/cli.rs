//! The `parlor` command line: serving (the default) and operator commands on the stores.

use crate::histories::{Histories, DEFAULT_HISTORY};
use crate::store::ConversationStore;
use clap::{Parser, Subcommand};
use parlor_domain::SessionId;
use std::fmt::Write;

#[derive(Debug, Parser)]
#[command(
    name = "parlor",
    version,
    about = "Parlor: a self-hosted web chat for LLM agents"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the chat app (what `parlor` does without a command).
    Serve,
    /// Look after stored conversations (uses the same configuration as the server).
    #[command(subcommand)]
    Store(StoreCommand),
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// List the histories and the conversations they hold.
    List {
        /// Only this history.
        #[arg(long)]
        history: Option<String>,
    },
    /// A conversation's numbers: messages, size, last message time, backups.
    Stats(Target),
    /// Remove a conversation's messages (file histories back them up first).
    Clear(Target),
    /// List a conversation's backups, oldest first.
    Backups(Target),
    /// Put a backup back (the current state is backed up first).
    Restore {
        #[command(flatten)]
        target: Target,
        /// The backup's id, as `parlor store backups` lists it.
        backup: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct Target {
    /// The conversation's session id.
    pub session: String,
    /// The history it is in.
    #[arg(long, default_value = DEFAULT_HISTORY)]
    pub history: String,
}

/// Runs a store command; its output, or a message saying what was wrong.
pub async fn run_store(command: StoreCommand, histories: &Histories) -> Result<String, String> {
    let store_of = |history: &str| {
        histories
            .get(history)
            .map(|h| h.store.clone())
            .ok_or_else(|| {
                format!(
                    "no history {history:?} (declared: {})",
                    histories.ids().join(", ")
                )
            })
    };
    let parse =
        |target: &Target| -> Result<(std::sync::Arc<dyn ConversationStore>, SessionId), String> {
            let id = SessionId::parse(&target.session)
                .map_err(|e| format!("{:?} is not a session id: {e}", target.session))?;
            Ok((store_of(&target.history)?, id))
        };
    let mut out = String::new();
    match command {
        StoreCommand::List { history } => {
            let ids: Vec<String> = match history {
                Some(id) => {
                    store_of(&id)?;
                    vec![id]
                }
                None => histories.ids().into_iter().map(str::to_owned).collect(),
            };
            for id in ids {
                let store = store_of(&id)?;
                let mut sessions = store.list().await.map_err(|e| e.to_string())?;
                sessions.sort();
                let _ = writeln!(
                    out,
                    "{id}: {} — {} conversation(s)",
                    store.describe(),
                    sessions.len()
                );
                for session in sessions {
                    let stats = store.stats(&session).await.map_err(|e| e.to_string())?;
                    let _ = writeln!(
                        out,
                        "  {session}  {} message(s), {} bytes",
                        stats.messages, stats.approx_bytes
                    );
                }
            }
        }
        StoreCommand::Stats(target) => {
            let (store, id) = parse(&target)?;
            let stats = store.stats(&id).await.map_err(|e| e.to_string())?;
            out = serde_json::to_string_pretty(&stats).map_err(|e| e.to_string())? + "\n";
        }
        StoreCommand::Clear(target) => {
            let (store, id) = parse(&target)?;
            match store.clear(&id).await.map_err(|e| e.to_string())? {
                Some(backup) => {
                    let _ = writeln!(out, "cleared {id}; backup {}", backup.id);
                }
                None => {
                    let _ = writeln!(out, "cleared {id} (no backup: {} backend)", store.kind());
                }
            }
        }
        StoreCommand::Backups(target) => {
            let (store, id) = parse(&target)?;
            let backups = store.list_backups(&id).await.map_err(|e| e.to_string())?;
            if backups.is_empty() {
                let _ = writeln!(out, "no backups of {id}");
            }
            for backup in backups {
                let _ = writeln!(out, "{}  {}", backup.id, backup.files.join(", "));
            }
        }
        StoreCommand::Restore { target, backup } => {
            let (store, id) = parse(&target)?;
            store
                .restore_backup(&id, &backup)
                .await
                .map_err(|e| e.to_string())?;
            let _ = writeln!(out, "restored {id} from {backup}");
        }
    }
    Ok(out)
}
