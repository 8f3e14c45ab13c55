//! The `parlor` command line: serving (the default) and operator commands on the stores.

use crate::settings::{apply_edit, Edit};
use crate::store::histories::DEFAULT_HISTORY;
use crate::store::ConversationStore;
use clap::{Parser, Subcommand};
use parlor_domain::ConversationId;
use std::fmt::Write;
use std::path::Path;

mod accounts;
mod store;
pub use accounts::{run_token, run_user, TokenCommand, UserCommand};
pub use store::run_store;

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

impl Cli {
    /// Parses the command line; `--help` lists every environment variable with its default.
    pub fn parse_with_env_help() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command()
            .after_help(crate::config::vars::help())
            .get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the chat app (what `parlor` does without a command).
    Serve,
    /// Look after stored conversations (uses the same configuration as the server).
    #[command(subcommand)]
    Store(StoreCommand),
    /// The history processor chain and window (edits the configuration file).
    #[command(subcommand)]
    History(HistoryCommand),
    /// Serve the history store's tools over MCP (the MCP History Store's nine tools).
    Mcp {
        /// Speak MCP on stdin/stdout (logs go to stderr).
        #[arg(long)]
        stdio: bool,
        /// The file history to serve (default: `default`).
        #[arg(long, default_value = "default")]
        history: String,
    },
    /// Accounts (PARLOR_AUTH=local, oidc or proxy), kept with the `default` history.
    #[command(subcommand)]
    User(UserCommand),
    /// Personal access tokens for the API.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Set how many live sessions are allowed (0: no limit); saved in the configuration file.
    MaxUsers {
        #[arg(allow_negative_numbers = true)]
        n: i64,
    },
    /// Set the idle minutes before a session is reaped (0: never); saved in the configuration file.
    SessionTimeout {
        #[arg(allow_negative_numbers = true)]
        minutes: i64,
    },
}

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// The available processors, the chain and the window settings.
    List,
    /// Change the chain (the policy step is always first).
    #[command(subcommand)]
    Chain(ChainCommand),
    /// Set the agent-wide window ceiling (agent_max_ctx), in messages.
    MaxCtx {
        #[arg(allow_negative_numbers = true)]
        n: i64,
    },
    /// Read a JSON array of {"role", "content"} messages on stdin and print, as JSON, the
    /// messages a history policy sends (no request starts with an orphaned reply).
    Trim {
        /// lastN, all or none.
        #[arg(long)]
        policy: String,
        /// For lastN: how many user turns; 0 or less acts as 1.
        #[arg(long, allow_negative_numbers = true)]
        length: String,
        /// Drop system messages (under lastN and none) instead of sending them first.
        #[arg(long)]
        no_preserve_system: bool,
    },
}

/// Why a command failed: its message is what `parlor` prints.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A bad argument or input, said in words.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Edit(#[from] crate::settings::EditError),
    #[error(transparent)]
    ConfigFile(#[from] crate::config::file::ConfigFileError),
    #[error(transparent)]
    Chain(#[from] parlor_domain::chain::ChainConfigError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("cannot write the output: {0}")]
    Output(#[from] serde_json::Error),
    /// `parlor store check` found problems: its report.
    #[error("{0}")]
    Check(String),
}

/// A message as `parlor history trim` reads and prints it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct TrimMessage {
    role: String,
    content: String,
}

/// `parlor history trim`: the messages `policy` sends from `input` (a JSON array of
/// `{"role", "content"}`), as a JSON array; or what is wrong with the arguments or input.
pub fn run_trim(
    policy: &str,
    length: &str,
    preserve_system: bool,
    input: &str,
) -> Result<String, CliError> {
    use parlor_domain::history::{HistoryLength, HistoryPolicy};
    use parlor_domain::{Message, Role};
    let policy: HistoryPolicy = policy
        .parse()
        .map_err(|e| CliError::Usage(format!("--policy: {e}")))?;
    let length: HistoryLength = length
        .parse()
        .map_err(|e| CliError::Usage(format!("--length: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(input)
        .map_err(|e| CliError::Usage(format!("stdin is not JSON: {e}")))?;
    let serde_json::Value::Array(items) = value else {
        return Err(CliError::Usage(
            "stdin must be a JSON array of {\"role\", \"content\"} messages".into(),
        ));
    };
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let item: TrimMessage = serde_json::from_value(item).map_err(|e| {
            CliError::Usage(format!(
                "message {i}: {e} (expected {{\"role\": …, \"content\": \"…\"}})"
            ))
        })?;
        let role = match item.role.as_str() {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => {
                return Err(CliError::Usage(format!(
                    "message {i}: unknown role {other:?} (allowed: system, user, assistant, tool)"
                )))
            }
        };
        messages.push(Message::new(role, item.content, i as i64));
    }
    let sent: Vec<TrimMessage> =
        parlor_domain::plan::trim(messages, policy, length, preserve_system)
            .into_iter()
            .map(|m| TrimMessage {
                role: m.role.as_str().to_owned(),
                content: m.text,
            })
            .collect();
    let mut out = serde_json::to_string_pretty(&sent)?;
    out.push('\n');
    Ok(out)
}

#[derive(Debug, Subcommand)]
pub enum ChainCommand {
    /// Append a processor.
    Add { name: String },
    /// Remove a processor.
    Remove { name: String },
    /// Move a processor to a position (1 is right after the policy step).
    Move {
        name: String,
        #[arg(allow_negative_numbers = true)]
        position: i64,
    },
}

/// Runs a configuration command on the file at `path`; its output or what was wrong.
pub fn run_config(
    command: Command,
    path: &std::path::Path,
    data_dir: &std::path::Path,
) -> Result<String, CliError> {
    match command {
        Command::History(HistoryCommand::List) => Ok(show_settings(&current_settings(path)?)),
        Command::History(HistoryCommand::Chain(edit)) => change_chain(path, data_dir, edit),
        Command::History(HistoryCommand::MaxCtx { n }) => set_max_ctx(path, data_dir, n),
        Command::MaxUsers { n } => set_max_users(path, data_dir, n),
        Command::SessionTimeout { minutes } => set_idle_timeout(path, data_dir, minutes),
        Command::Serve
        | Command::Store(_)
        | Command::User(_)
        | Command::Token(_)
        | Command::Mcp { .. }
        | Command::History(HistoryCommand::Trim { .. }) => {
            Err(CliError::Usage("not a configuration command".into()))
        }
    }
}

/// `parlor history chain …`: adds, removes or moves a processor of the chain.
fn change_chain(
    path: &std::path::Path,
    data_dir: &std::path::Path,
    edit: ChainCommand,
) -> Result<String, CliError> {
    use parlor_domain::chain::{edit_chain, ChainEdit, POLICY_STEP};
    let settings = current_settings(path)?;
    let edit = match edit {
        ChainCommand::Add { name } => ChainEdit::Add(name),
        ChainCommand::Remove { name } => ChainEdit::Remove(name),
        ChainCommand::Move { name, position } => ChainEdit::Move(name, position),
    };
    let chain = edit_chain(&settings.chain, &edit)?;
    apply_edit(path, &Edit::Chain(chain.clone()), data_dir)?;
    let what = format!("chain: {POLICY_STEP}, {}", chain.join(", "));
    Ok(saved(path, what))
}

/// `parlor history max-ctx N`: the agents' window ceiling (at least 1).
fn set_max_ctx(path: &Path, data_dir: &Path, n: i64) -> Result<String, CliError> {
    if n < 1 {
        let rule = format!("agent_max_ctx must be at least 1 (got {n})");
        return Err(CliError::Usage(rule));
    }
    apply_edit(path, &Edit::AgentMaxCtx(n as usize), data_dir)?;
    Ok(saved(path, format!("agent_max_ctx: {n}")))
}

/// `parlor max-users N`: browsers chatting at once (0: no limit).
fn set_max_users(path: &Path, data_dir: &Path, n: i64) -> Result<String, CliError> {
    if n < 0 {
        let rule = format!("max_users must be 0 (no limit) or more (got {n})");
        return Err(CliError::Usage(rule));
    }
    apply_edit(path, &Edit::MaxUsers(n as usize), data_dir)?;
    Ok(saved(path, format!("max_users: {n}")))
}

/// `parlor session-timeout MINUTES`: when an idle browser's slot is freed (0: never).
fn set_idle_timeout(path: &Path, data_dir: &Path, minutes: i64) -> Result<String, CliError> {
    if minutes < 0 {
        let rule =
            format!("session_idle_timeout_minutes must be 0 (never) or more (got {minutes})");
        return Err(CliError::Usage(rule));
    }
    apply_edit(path, &Edit::IdleTimeoutMinutes(minutes as u64), data_dir)?;
    Ok(saved(
        path,
        format!("session_idle_timeout_minutes: {minutes}"),
    ))
}

/// What a configuration command answers once it saved `what` to `path`.
fn saved(path: &std::path::Path, what: String) -> String {
    format!(
        "{what} (saved to {}; restart Parlor to apply)\n",
        path.display()
    )
}

/// The server-wide settings as the configuration file `path` has them (its defaults when
/// there is no file).
fn current_settings(path: &std::path::Path) -> Result<crate::settings::ServerSettings, CliError> {
    use crate::config::file::ConfigFile;
    let file = match path.exists() {
        true => Some(ConfigFile::read(path)?),
        false => None,
    };
    Ok(crate::settings::ServerSettings::from_file(
        file.as_ref().map(|f| (path, f)),
    )?)
}

/// `parlor history list`: the processors, the chain and the server-wide limits.
fn show_settings(settings: &crate::settings::ServerSettings) -> String {
    use parlor_domain::chain::{builtins, POLICY_STEP};
    let mut out = String::from("Available processors:\n");
    for p in builtins() {
        let _ = writeln!(out, "  {:<17} {}", p.name(), p.describe());
    }
    let _ = writeln!(out, "Chain:");
    let _ = writeln!(out, "  0. {POLICY_STEP} (always first)");
    for (i, name) in settings.chain.iter().enumerate() {
        let _ = writeln!(out, "  {}. {name}", i + 1);
    }
    let _ = writeln!(out, "agent_max_ctx: {}", settings.agent_max_ctx);
    let _ = writeln!(out, "max_users: {}", settings.max_users);
    let _ = writeln!(
        out,
        "session_idle_timeout_minutes: {}",
        settings.idle_timeout_minutes
    );
    out
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
    /// Print a conversation as JSON (what `parlor store import` and the page's import read)
    /// or as readable Markdown.
    Export {
        #[command(flatten)]
        target: Target,
        /// json or md.
        #[arg(long, default_value = "json")]
        format: String,
    },
    /// Import a conversation from a file: a Parlor JSON export, or an OpenAI-style array of
    /// {"role", "content"} messages. Nothing is stored unless all of it can be.
    Import {
        /// The file to read.
        file: std::path::PathBuf,
        /// The agent it belongs to (default: the export's; needed for an OpenAI array).
        #[arg(long)]
        agent: Option<String>,
        /// The history to store it in.
        #[arg(long, default_value = DEFAULT_HISTORY)]
        history: String,
        /// The account that owns it (with accounts on, a conversation without an owner is
        /// reachable by admins only).
        #[arg(long)]
        owner: Option<String>,
    },
    /// Give a stored conversation an owner: the account named (e.g. one made by an API
    /// client before accounts were on, or by an MCP client).
    Own {
        #[command(flatten)]
        target: Target,
        /// The account's name.
        owner: String,
    },
    /// Check every conversation (of every history, or one): its messages read, and each of
    /// its other versions leads back to its chosen path (no missing parent, no cycle, no
    /// message stored twice). Exits with an error when anything is wrong.
    Check {
        /// Only this history.
        #[arg(long)]
        history: Option<String>,
    },
    /// Find conversations whose title or messages contain a text (case-insensitive), in
    /// every history or one; prints each with its first matching line.
    Search {
        text: String,
        /// Only this history.
        #[arg(long)]
        history: Option<String>,
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

/// `parlor store stats`: the store's numbers, the summary's size and coverage, and the
/// maintenance signal when it is raised.
fn stats_report(
    stats: &crate::store::Stats,
    summary: Option<&serde_json::Value>,
    config: &crate::config::Config,
) -> serde_json::Value {
    use parlor_domain::summary::{Covers, Maintenance};
    let mut report = serde_json::to_value(stats).unwrap_or_default();
    let summary_bytes = summary.map_or(0, |s| s.to_string().len());
    report["summary"] = match summary {
        Some(summary) => {
            let covers = Covers::of(summary);
            serde_json::json!({
                "bytes": summary_bytes,
                "covers": covers.messages,
                "updated_ms": covers.updated_ms,
            })
        }
        None => serde_json::Value::Null,
    };
    let signal = Maintenance::check(
        stats.messages,
        stats.approx_bytes as usize + summary_bytes,
        config.maintenance,
        config.backup_retention,
    );
    if let Some(signal) = signal {
        report["maintenance"] = serde_json::to_value(signal).unwrap_or_default();
    }
    report
}

/// A conversation's details; for one written without them (by `parlor mcp`), bare ones
/// when it has messages; `None` when there is no such conversation.
async fn info_or_bare(
    store: &dyn ConversationStore,
    id: &ConversationId,
) -> Result<Option<crate::store::ConversationInfo>, CliError> {
    if let Some(info) = store.info(id).await? {
        return Ok(Some(info));
    }
    let stats = store.stats(id).await?;
    Ok((stats.messages > 0).then(|| crate::store::ConversationInfo::bare(id, stats.last_ts)))
}
