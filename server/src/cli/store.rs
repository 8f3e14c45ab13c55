//! `parlor store …`: the operator's commands on stored conversations, one method each.

use super::{info_or_bare, stats_report, CliError, StoreCommand, Target};
use crate::accounts::AccountStore;
use crate::store::histories::Histories;
use crate::store::{ConversationStore, Listed};
use parlor_domain::ConversationId;
use std::fmt::Write;

/// Runs a store command; its output, or a message saying what was wrong.
pub async fn run_store(
    command: StoreCommand,
    histories: &Histories,
    config: &crate::config::Config,
    accounts: Option<&dyn AccountStore>,
) -> Result<String, CliError> {
    let cli = StoreCli {
        histories,
        config,
        accounts,
    };
    match command {
        StoreCommand::List { history } => cli.list(history).await,
        StoreCommand::Stats(target) => cli.stats(&target).await,
        StoreCommand::Clear(target) => cli.clear(&target).await,
        StoreCommand::Backups(target) => cli.backups(&target).await,
        StoreCommand::Restore { target, backup } => cli.restore(&target, &backup).await,
        StoreCommand::Export { target, format } => cli.export(&target, &format).await,
        StoreCommand::Import {
            file,
            agent,
            history,
            owner,
        } => cli.import(&file, agent, &history, owner).await,
        StoreCommand::Own { target, owner } => cli.own(&target, &owner).await,
        StoreCommand::Search { text, history } => cli.search(&text, history).await,
        StoreCommand::Check { history } => cli.check(history).await,
    }
}

/// `parlor store …`: one method per command, each returning what it prints.
struct StoreCli<'a> {
    histories: &'a Histories,
    config: &'a crate::config::Config,
    /// Where accounts are (for `--owner`); none when the `default` history is in memory.
    accounts: Option<&'a dyn AccountStore>,
}

type Store = std::sync::Arc<dyn ConversationStore>;

impl StoreCli<'_> {
    fn store_of(&self, history: &str) -> Result<Store, CliError> {
        self.histories
            .get(history)
            .map(|h| h.store.clone())
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "no history {history:?} (declared: {})",
                    self.histories.ids().join(", ")
                ))
            })
    }

    /// The store and conversation a command names.
    fn target(&self, target: &Target) -> Result<(Store, ConversationId), CliError> {
        let id = ConversationId::parse(&target.session).map_err(|e| {
            CliError::Usage(format!("{:?} is not a session id: {e}", target.session))
        })?;
        Ok((self.store_of(&target.history)?, id))
    }

    /// The history named (checked), or all of them.
    fn history_ids(&self, history: Option<String>) -> Result<Vec<String>, CliError> {
        match history {
            Some(id) => {
                self.store_of(&id)?;
                Ok(vec![id])
            }
            None => Ok(self
                .histories
                .ids()
                .into_iter()
                .map(str::to_owned)
                .collect()),
        }
    }

    async fn list(&self, history: Option<String>) -> Result<String, CliError> {
        let mut out = String::new();
        for id in self.history_ids(history)? {
            let store = self.store_of(&id)?;
            let mut sessions = store.list().await?;
            sessions.sort();
            let _ = writeln!(
                out,
                "{id}: {} — {} conversation(s)",
                store.describe(),
                sessions.len()
            );
            for session in sessions {
                let stats = store.stats(&session).await?;
                let _ = writeln!(
                    out,
                    "  {session}  {} message(s), {} bytes",
                    stats.messages, stats.approx_bytes
                );
            }
        }
        Ok(out)
    }

    /// Every conversation's path and versions, read and checked; one line per problem.
    async fn check(&self, history: Option<String>) -> Result<String, CliError> {
        let mut out = String::new();
        let mut found = 0;
        for id in self.history_ids(history)? {
            let store = self.store_of(&id)?;
            let mut sessions = store.list().await?;
            sessions.sort();
            for session in &sessions {
                let problems = problems_of(&store, session).await?;
                found += problems.len();
                for problem in problems {
                    let _ = writeln!(out, "{id} {session}: {problem}");
                }
            }
            let _ = writeln!(out, "{id}: {} conversation(s) checked", sessions.len());
        }
        if found > 0 {
            return Err(CliError::Check(format!("{out}{found} problem(s) found")));
        }
        Ok(out + "no problem found\n")
    }

    async fn stats(&self, target: &Target) -> Result<String, CliError> {
        let (store, id) = self.target(target)?;
        let stats = store.stats(&id).await?;
        let summary = store.summary(&id).await?;
        let report = stats_report(&stats, summary.as_ref(), self.config);
        Ok(serde_json::to_string_pretty(&report)? + "\n")
    }

    async fn clear(&self, target: &Target) -> Result<String, CliError> {
        let (store, id) = self.target(target)?;
        Ok(match store.clear(&id).await? {
            Some(backup) => format!("cleared {id}; backup {}\n", backup.id),
            None => format!("cleared {id} (no backup: {} backend)\n", store.kind()),
        })
    }

    async fn backups(&self, target: &Target) -> Result<String, CliError> {
        let (store, id) = self.target(target)?;
        let backups = store.list_backups(&id).await?;
        if backups.is_empty() {
            return Ok(format!("no backups of {id}\n"));
        }
        Ok(backups
            .iter()
            .map(|b| format!("{}  {}\n", b.id, b.files.join(", ")))
            .collect())
    }

    async fn restore(&self, target: &Target, backup: &str) -> Result<String, CliError> {
        let (store, id) = self.target(target)?;
        store.restore_backup(&id, backup).await?;
        Ok(format!("restored {id} from {backup}\n"))
    }

    async fn export(&self, target: &Target, format: &str) -> Result<String, CliError> {
        let (store, id) = self.target(target)?;
        let markdown = match format {
            "json" => false,
            "md" | "markdown" => true,
            other => {
                return Err(CliError::Usage(format!(
                    "--format {other:?}: use json or md"
                )))
            }
        };
        let Some(info) = info_or_bare(store.as_ref(), &id).await? else {
            return Err(CliError::Usage(format!(
                "no conversation {id} in history {:?}",
                target.history
            )));
        };
        let export = crate::conversation::export(store.as_ref(), &info).await?;
        Ok(if markdown {
            export.to_markdown()
        } else {
            serde_json::to_string_pretty(&export)? + "\n"
        })
    }

    /// What a store records as the owner of `name`'s conversations.
    async fn owner_key(&self, name: &str) -> Result<String, CliError> {
        let accounts = self.accounts.ok_or_else(|| {
            CliError::Usage(
                "accounts are kept with the `default` history, which is in memory".into(),
            )
        })?;
        let parsed = parlor_domain::account::UserName::parse(name)
            .map_err(|e| CliError::Usage(format!("{name:?}: {e}")))?;
        let account = accounts
            .user(&parsed)
            .await?
            .ok_or_else(|| CliError::Usage(format!("no account {parsed}")))?;
        Ok(crate::accounts::owner_key_of(&account))
    }

    async fn own(&self, target: &Target, owner: &str) -> Result<String, CliError> {
        let (store, id) = self.target(target)?;
        let owner_key = self.owner_key(owner).await?;
        let mut info = store.info(&id).await?.ok_or_else(|| {
            CliError::Usage(format!("no conversation {id} in {}", target.history))
        })?;
        info.owner = Some(owner_key);
        store.put_info(&info).await?;
        Ok(format!(
            "{id} now belongs to {}\n",
            owner.trim().to_lowercase()
        ))
    }

    async fn import(
        &self,
        file: &std::path::Path,
        agent: Option<String>,
        history: &str,
        owner: Option<String>,
    ) -> Result<String, CliError> {
        let owner = match owner {
            Some(name) => Some(self.owner_key(&name).await?),
            None => None,
        };
        let store = self.store_of(history)?;
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", file.display())))?;
        let agent = match agent {
            Some(agent) => agent,
            None => agent_named_in(&text)?,
        };
        let (info, messages) = crate::conversation::import(store.as_ref(), &agent, owner, &text)
            .await
            .map_err(|e| match e {
                crate::conversation::ConversationError::Store(e) => CliError::Store(e),
                other => CliError::Usage(format!("{}: {other}", file.display())),
            })?;
        Ok(format!(
            "imported {messages} message(s) as {} (agent {agent}, history {history}): {}\n",
            info.session_id, info.title
        ))
    }

    async fn search(&self, text: &str, history: Option<String>) -> Result<String, CliError> {
        let mut conversations = Vec::new();
        let mut history_of = std::collections::HashMap::new();
        for history in self.history_ids(history)? {
            let store = self.store_of(&history)?;
            for id in store.list().await? {
                if let Some(info) = info_or_bare(store.as_ref(), &id).await? {
                    history_of.insert(id.to_string(), history.clone());
                    conversations.push((store.clone(), Listed::from(&info)));
                }
            }
        }
        conversations.sort_by_key(|(_, info)| std::cmp::Reverse(info.updated_ms));
        let hits = crate::conversation::search(conversations, text).await?;
        let mut out = String::new();
        if hits.is_empty() {
            let _ = writeln!(out, "no conversation contains {text:?}");
        }
        for hit in &hits {
            let title = if hit.title.is_empty() {
                "(untitled)"
            } else {
                &hit.title
            };
            let history = history_of.get(&hit.session_id).map_or("", String::as_str);
            let _ = writeln!(
                out,
                "{history}  {}  {title}\n    {}",
                hit.session_id, hit.line
            );
        }
        if hits.len() == crate::conversation::MAX_RESULTS {
            let _ = writeln!(out, "(the first {} only)", hits.len());
        }
        Ok(out)
    }
}

/// The agent an export names (`agent_id`), for an import without `--agent`.
/// What `parlor store check` says of one conversation. The leftovers of a change a crash
/// interrupted (a version already on the path) are hidden and removed at the next change:
/// not a problem.
async fn problems_of(store: &Store, session: &ConversationId) -> Result<Vec<String>, CliError> {
    let mut problems = store.unreadable(session).await?;
    match (store.load(session).await, store.branches(session).await) {
        (Ok(path), Ok(branches)) => problems.extend(branches.tidy(&path).problems(&path)),
        (Err(e), _) | (_, Err(e)) => problems.push(format!("does not read: {e}")),
    }
    Ok(problems)
}

fn agent_named_in(text: &str) -> Result<String, CliError> {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("agent_id")?.as_str().map(str::to_owned))
        .filter(|agent| !agent.is_empty())
        .ok_or_else(|| {
            CliError::Usage(
                "say which agent the conversation is for with --agent (the file does not name \
                 one)"
                    .into(),
            )
        })
}
