//! `parlor user …` and `parlor token …`: the operator's commands on accounts, kept where the
//! server keeps them (the `default` history's backend), so they apply to running servers.

use super::CliError;
use crate::accounts::{AccountError, Accounts};
use clap::Subcommand;
use std::fmt::Write;

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Make a local account; its password is read from stdin (one line, at least 10 characters).
    Add {
        name: String,
        /// An admin: admin chat commands and /metrics without the admin token.
        #[arg(long)]
        admin: bool,
    },
    /// Set an account's password (read from stdin).
    Passwd { name: String },
    /// End every login of an account, on every process (its tokens stay; a new password
    /// does this too).
    Logout { name: String },
    /// List the accounts.
    List,
    /// Remove an account and end its logins and tokens on every process (its conversations
    /// stay stored, for `parlor store`).
    Remove { name: String },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a personal access token for an account: the token alone is the last line printed.
    Create {
        name: String,
        #[arg(long, default_value = "")]
        label: String,
    },
    /// List an account's tokens (never their values).
    List { name: String },
    /// Revoke one of an account's tokens by its id.
    Revoke { name: String, id: String },
}

impl From<AccountError> for CliError {
    fn from(e: AccountError) -> CliError {
        match e {
            AccountError::Store(e) => CliError::Store(e),
            other => CliError::Usage(other.to_string()),
        }
    }
}

/// The password on stdin: its first line, without the line ending.
pub fn read_password(input: &str) -> String {
    input
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('\r')
        .to_owned()
}

fn date(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_default()
}

/// The accounts, one a line: name, kind (and admin), since when, and the name it is shown
/// under when that differs.
async fn list_users(accounts: &Accounts) -> Result<String, CliError> {
    let mut users = accounts.store().users().await?;
    users.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for account in users {
        let kind = match (&account.password, &account.subject) {
            (Some(_), _) => "local",
            (None, Some(_)) => "oidc",
            (None, None) => "proxy",
        };
        let admin = if accounts.is_admin(&account) {
            " admin"
        } else {
            ""
        };
        // A proxy's or provider's name for it, quoted so a space or a tab in it
        // cannot shift the columns.
        let shown = account
            .display
            .as_deref()
            .map(|d| format!("\t{d:?}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}\t{kind}{admin}\tsince {}{shown}",
            account.name,
            date(account.created_ms)
        );
    }
    Ok(out)
}

/// Runs `parlor user …`; `stdin` is what was read for a password (when the command takes one).
pub async fn run_user(
    command: UserCommand,
    accounts: &Accounts,
    stdin: impl FnOnce() -> String,
) -> Result<String, CliError> {
    Ok(match command {
        UserCommand::Add { name, admin } => {
            let account = accounts.add(&name, &read_password(&stdin()), admin).await?;
            let role = if account.admin { " (admin)" } else { "" };
            format!("added {}{role}\n", account.name)
        }
        UserCommand::Passwd { name } => {
            accounts
                .set_password(&name, &read_password(&stdin()))
                .await?;
            format!("password of {} changed\n", name.trim().to_lowercase())
        }
        UserCommand::Logout { name } => {
            accounts.end_logins(&name).await?;
            format!(
                "ended every login of {} (its tokens stay: `parlor token revoke`)\n",
                name.trim().to_lowercase()
            )
        }
        UserCommand::List => list_users(accounts).await?,
        UserCommand::Remove { name } => {
            accounts.remove(&name).await?;
            format!(
                "removed {} (its conversations stay stored)\n",
                name.trim().to_lowercase()
            )
        }
    })
}

/// Runs `parlor token …`.
pub async fn run_token(command: TokenCommand, accounts: &Accounts) -> Result<String, CliError> {
    Ok(match command {
        TokenCommand::Create { name, label } => {
            let (secret, token) = accounts.create_token(&name, &label).await?;
            format!(
                "token {} for {} (shown once; send it as Authorization: Bearer …):\n{secret}\n",
                token.id, token.name
            )
        }
        TokenCommand::List { name } => {
            let name = parlor_domain::account::UserName::parse(&name)
                .map_err(|e| CliError::Usage(e.to_string()))?;
            let mut out = String::new();
            for token in accounts.store().tokens(&name).await? {
                let used = token
                    .last_used_ms
                    .map(date)
                    .unwrap_or_else(|| "never".into());
                let _ = writeln!(
                    out,
                    "{}\t{}\tmade {}\tlast used {used}",
                    token.id,
                    token.label,
                    date(token.created_ms)
                );
            }
            out
        }
        TokenCommand::Revoke { name, id } => {
            let name = parlor_domain::account::UserName::parse(&name)
                .map_err(|e| CliError::Usage(e.to_string()))?;
            match accounts.store().revoke_token(&name, &id).await? {
                true => format!("revoked token {id} of {name}\n"),
                false => return Err(CliError::Usage(format!("{name} has no token {id:?}"))),
            }
        }
    })
}
