//! `parlor`: serves the chat app.

use anyhow::Context;
use axum::serve::ListenerExt;
use parlor_server::cli::{Command, HistoryCommand};
use parlor_server::config::agents::AgentCatalog;
use parlor_server::config::{Config, LogFormat};
use std::future::IntoFuture;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("parlor: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = parlor_server::cli::Cli::parse_with_env_help();
    if let Some(Command::History(HistoryCommand::Trim {
        policy,
        length,
        no_preserve_system,
    })) = &cli.command
    {
        let mut input = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut input)
            .context("reading the messages from stdin")?;
        let output = parlor_server::cli::run_trim(policy, length, !no_preserve_system, &input)
            .map_err(anyhow::Error::msg)?;
        print!("{output}");
        return Ok(());
    }
    if let Some(
        command @ (Command::History(_) | Command::MaxUsers { .. } | Command::SessionTimeout { .. }),
    ) = cli.command
    {
        let config = Config::from_env()?;
        let path = parlor_server::config::file::locate(config.config_file.as_deref())
            .unwrap_or_else(|| "parlor.toml".into());
        let output = parlor_server::cli::run_config(command, &path, &config.data_dir)
            .map_err(anyhow::Error::msg)?;
        print!("{output}");
        return Ok(());
    }
    if let Some(Command::Mcp { stdio, history }) = &cli.command {
        if !stdio {
            anyhow::bail!(
                "parlor mcp serves MCP on stdin/stdout: run `parlor mcp --stdio` (the web server \
                 serves the same tools at /mcp when PARLOR_MCP_TOKEN is set)"
            );
        }
        let config = Config::from_env()?;
        // Logs go to stderr only: stdout carries the protocol.
        init_stderr_logs(&config);
        let (agents, _) = AgentCatalog::load_dir(&config.agents_dir).unwrap_or_default();
        let setup = parlor_server::setup(&config, &agents).await?;
        let tools = parlor_server::mcp::for_history(&setup.histories, history, &config)?;
        return parlor_server::mcp::serve_stdio(tools).await;
    }
    if let Some(command @ (Command::User(_) | Command::Token(_))) = cli.command {
        return run_accounts(command).await;
    }
    if let Some(Command::Store(command)) = cli.command {
        let config = Config::from_env()?;
        init_stderr_logs(&config);
        let (agents, _) = AgentCatalog::load_dir(&config.agents_dir).unwrap_or_default();
        let setup = parlor_server::setup(&config, &agents).await?;
        let accounts = setup.account_store.as_deref();
        let output = parlor_server::cli::run_store(command, &setup.histories, &config, accounts)
            .await
            .map_err(anyhow::Error::msg)?;
        print!("{output}");
        return Ok(());
    }
    serve().await
}

/// `parlor user …` and `parlor token …`, on the accounts the servers use.
async fn run_accounts(command: Command) -> anyhow::Result<()> {
    let config = Config::from_env()?;
    init_stderr_logs(&config);
    let (agents, _) = AgentCatalog::load_dir(&config.agents_dir).unwrap_or_default();
    let setup = parlor_server::setup(&config, &agents).await?;
    let store = setup.account_store.ok_or_else(|| {
        anyhow::anyhow!("accounts are kept with the `default` history, which is in memory")
    })?;
    let accounts = parlor_server::accounts::Accounts::new(
        config.auth.clone(),
        config.trusted_proxies.clone(),
        store.clone(),
    );
    // A removed account's tool secrets go with it.
    let removed = match &command {
        Command::User(parlor_server::cli::UserCommand::Remove { name }) => {
            let name = parlor_domain::account::UserName::parse(name).ok();
            match name {
                Some(name) => store.user(&name).await.ok().flatten(),
                None => None,
            }
        }
        _ => None,
    };
    let output = match command {
        Command::User(command) => {
            parlor_server::cli::run_user(command, &accounts, read_stdin).await
        }
        Command::Token(command) => parlor_server::cli::run_token(command, &accounts).await,
        _ => anyhow::bail!("not an accounts command"),
    }
    .map_err(anyhow::Error::msg)?;
    if let Some(account) = removed {
        let owner = parlor_server::accounts::owner_key_of(&account);
        setup.tool_secrets.forget(&owner).await?;
        let root = config.data_dir.join("tool-users");
        parlor_server::tools::users::remove_folders(&root, &owner)?;
    }
    print!("{output}");
    Ok(())
}

/// All of stdin (a password for `parlor user add` and `passwd`).
fn read_stdin() -> String {
    let mut input = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut input);
    input
}

async fn serve() -> anyhow::Result<()> {
    // Listened for from the start: a SIGTERM while Parlor starts (its tool servers may be
    // running already) stops it cleanly too, instead of killing it.
    let signals = StopSignals::listen();
    // Leptos.toml (in the working directory) is the run-time configuration when started
    // without cargo-leptos; LEPTOS_* variables (which cargo-leptos sets) take precedence, and
    // without the file they are all there is.
    let file = std::path::Path::new("Leptos.toml")
        .exists()
        .then_some("Leptos.toml");
    let mut leptos = leptos_config::get_configuration(file)
        .context("reading the Leptos configuration (Leptos.toml or LEPTOS_* variables)")?
        .leptos_options;
    // Leptos takes a run without Leptos.toml or LEPTOS_ENV for development (a looser
    // Content-Security-Policy, debug logs); a release binary copied anywhere (the Docker
    // image) is a production one unless told otherwise.
    if file.is_none() && std::env::var_os("LEPTOS_ENV").is_none() && !cfg!(debug_assertions) {
        leptos.env = leptos_config::Env::PROD;
    }
    let config = Config::from_env()?;
    init_logs(&config, matches!(leptos.env, leptos_config::Env::DEV));
    // Every open chat stream holds a socket: allow as many open files as the system lets
    // this process have (the usual soft limit of 1,024 would refuse connections first).
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!("open file limit: {limit}"),
        Err(e) => tracing::warn!("could not raise the open file limit: {e}"),
    }
    let agents = load_agents(&config)?;
    let setup = parlor_server::setup(&config, &agents).await?;
    match &config.llm {
        parlor_server::config::LlmConfig::Mirror => {
            tracing::info!("OPENAI_BASE_URL is not set: agents reply with the built-in mirror model unless their model is on a [[providers]] entry")
        }
        parlor_server::config::LlmConfig::OpenAi { .. } => {
            tracing::info!("using the OpenAI-compatible server configured by OPENAI_BASE_URL")
        }
    }
    let addr = leptos.site_addr;
    let grace = config.shutdown_grace;
    let metrics_addr = config.metrics_addr;
    let services = parlor_server::services(config, agents, setup);
    let warm = services.clone();
    tokio::task::spawn_blocking(move || warm.models.warm_tokenizers(&warm.agents.list()));
    if let Some(addr) = metrics_addr {
        serve_metrics(addr, services.clone()).await?;
    }
    let replies = services.replies.clone();
    let tools = services.tools.clone();
    let limits = parlor_server::ops::connections::Limits::of(&services.config);
    limits.warn_if_replies_would_be_cut();
    let app = parlor_server::router(leptos, services);
    let listener = listen(addr).with_context(|| format!("listening on {addr}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!("Parlor is listening on http://{bound}");
    let listener = parlor_server::ops::connections::Guarded::new(listener, limits);
    let served = serve_until_stopped(listener, app, replies, grace, signals).await;
    // The tool servers Parlor started end with it (waited for: no process is left).
    tools.shutdown().await;
    served
}

/// The log filter: `RUST_LOG`, else `fallback` (also when `RUST_LOG` does not parse).
fn log_filter(config: &Config, fallback: &str) -> EnvFilter {
    config
        .log_filter
        .as_deref()
        .and_then(|filter| EnvFilter::try_new(filter).ok())
        .unwrap_or_else(|| EnvFilter::new(fallback))
}

/// Logs to stdout, as text (coloured on a terminal) or JSON lines (`PARLOR_LOG_FORMAT`),
/// filtered by `RUST_LOG` (default: `info`, and debug for Parlor in development).
fn init_logs(config: &Config, dev: bool) {
    use std::io::IsTerminal;
    let filter = log_filter(
        config,
        if dev {
            "info,parlor_server=debug"
        } else {
            // rmcp logs every notification a tool server sends, whole: a server could
            // flood the log.
            "info,rmcp=warn"
        },
    );
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match config.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.with_ansi(std::io::stdout().is_terminal()).init(),
    }
    parlor_server::ops::panics::log_panics();
}

/// Logs of the CLI's commands: warnings and errors on stderr (unless `RUST_LOG` says
/// otherwise), so stdout carries only the command's output or the MCP protocol.
fn init_stderr_logs(config: &Config) {
    tracing_subscriber::fmt()
        .with_env_filter(log_filter(config, "warn"))
        .with_writer(std::io::stderr)
        .init();
}

/// The agent templates, each problem logged (a broken template is skipped).
fn load_agents(config: &Config) -> anyhow::Result<AgentCatalog> {
    let (agents, problems) = AgentCatalog::load_dir(&config.agents_dir)
        .with_context(|| format!("reading the agents folder {}", config.agents_dir.display()))?;
    for problem in &problems {
        if problem.fatal_for_template {
            tracing::error!("agent template skipped: {problem}");
        } else {
            tracing::warn!("agent template: {problem}");
        }
    }
    if agents.is_empty() {
        tracing::warn!("no agents loaded from {}", config.agents_dir.display());
    }
    Ok(agents)
}

/// How many connections may wait to be accepted. Every chat turn of a client that does not
/// keep its connection open arrives as a new one: with tokio's default (1,024), a thousand
/// such clients overflowed the queue (1,286 overflows and 498 SYN cookies in one `load.sh`
/// run; none with this), and in one run of five a connection was reset. The kernel caps it at
/// `net.core.somaxconn` (4,096 by default).
const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` (reusing the address, as `TcpListener::bind` does) with
/// [`LISTEN_BACKLOG`].
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// `/metrics` on its own address (`PARLOR_METRICS_ADDR`), in the background.
async fn serve_metrics(
    addr: std::net::SocketAddr,
    services: std::sync::Arc<parlor_server::state::Services>,
) -> anyhow::Result<()> {
    let listener = listen(addr)
        .with_context(|| format!("listening for metrics on {addr} (PARLOR_METRICS_ADDR)"))?;
    let router = parlor_server::metrics_router(services);
    tracing::info!("metrics on http://{addr}/metrics");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!("the metrics listener stopped: {e}");
        }
    });
    Ok(())
}

/// Serves until SIGTERM or Ctrl-C: then stops accepting; replies in progress get `grace`
/// to finish, then store what they have (marked incomplete); then Parlor exits, open
/// connections or not.
async fn serve_until_stopped(
    listener: parlor_server::ops::connections::Guarded,
    app: axum::Router,
    replies: parlor_server::state::Replies,
    grace: std::time::Duration,
    signals: StopSignals,
) -> anyhow::Result<()> {
    // (The guarded listener sets TCP_NODELAY itself; the tap gives it axum's connect info.)
    let listener = listener.tap_io(|_| {});
    let (signalled, mut on_signal) = tokio::sync::watch::channel(false);
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            signals.received().await;
            tracing::info!(
                "shutting down: no new requests; replies in progress get {} s to finish",
                grace.as_secs()
            );
            let _ = signalled.send(true);
        })
        .into_future();
    let deadline = {
        let replies = replies.clone();
        async move {
            let _ = on_signal.wait_for(|s| *s).await;
            replies.drain(grace, STORE_FOR).await;
            // Time for the last events to reach the browsers still listening.
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    };
    tokio::select! {
        served = server => served.context("serving")?,
        _ = deadline => tracing::info!("the grace period is over: closing the remaining connections"),
    }
    // Replies whose browser has gone may still be storing what they have.
    replies.drain(grace, STORE_FOR).await;
    tracing::info!("Parlor stopped");
    Ok(())
}

/// How long replies cut short at shutdown may take to store what they have.
const STORE_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// The signals that stop Parlor (SIGTERM, and Ctrl-C), registered when made: one that
/// arrives before [`StopSignals::received`] is awaited is kept, not fatal.
struct StopSignals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn listen() -> StopSignals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            StopSignals {
                terminate: signal(SignalKind::terminate()).ok(),
                interrupt: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    async fn received(self) {
        #[cfg(unix)]
        {
            async fn next(signal: Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                _ = next(self.terminate) => {},
                _ = next(self.interrupt) => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
