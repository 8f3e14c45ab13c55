//! Parlor's server: configuration → services → router.
#![recursion_limit = "256"]

pub mod accounts;
pub mod cli;
pub mod config;
pub mod context_providers;
pub mod conversation;
pub mod gate;
pub mod llm;
pub mod mcp;
pub mod ops;
pub mod routes;
pub mod settings;
pub mod state;
pub mod store;
pub mod table;
pub mod tools;
pub mod turn;

use crate::config::agents::AgentCatalog;
use crate::config::cookie_key;
use crate::config::{Config, LlmConfig};
use crate::llm::models;
use crate::llm::{LlmClient, MirrorModel, OpenAiClient};
use crate::ops::browser;
use crate::routes::{pages, site};
use crate::state::{AppState, Services};
use crate::store::histories;
use crate::store::histories::Histories;
use crate::store::StoreError;
use crate::table::Mount;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue};
use axum::routing::post;
use axum::{middleware, Router};
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, handle_server_fns_with_context, LeptosRoutes};
use parlor_app::ssr::BackendHandle;
use parlor_app::{shell, App};
use std::sync::Arc;
use tower_http::compression::{CompressionLayer, CompressionLevel};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};

/// Builds the model client the configuration asks for.
pub fn llm_client(config: &Config) -> LlmClient {
    match &config.llm {
        LlmConfig::Mirror => LlmClient::Mirror(MirrorModel {
            delay: config.mirror_delay,
        }),
        LlmConfig::OpenAi { base_url, api_key } => LlmClient::OpenAi(OpenAiClient::new(
            base_url.clone(),
            api_key.clone(),
            config.llm_timeout,
        )),
    }
}

/// A client for each `[[providers]]` entry, by id.
fn provider_clients(
    config: &Config,
    providers: &[llm::providers::ProviderSpec],
) -> std::collections::HashMap<String, LlmClient> {
    providers
        .iter()
        .map(|p| (p.id.clone(), p.client(config.llm_timeout)))
        .collect()
}

/// What the configuration file sets up: the histories and the server-wide settings.
pub struct Setup {
    pub histories: Histories,
    pub settings: crate::settings::ServerSettings,
    /// The configuration file (where admin changes are saved; created when first needed).
    pub config_path: std::path::PathBuf,
    /// Signs browser session cookies (shared by the processes sharing the `default` history).
    pub cookie_key: browser::CookieKey,
    /// The values users set for their own tool servers, kept where the cookie key is.
    pub tool_secrets: Arc<store::secrets::Secrets>,
    /// Where accounts are kept: the `default` history's backend (none when it is in memory).
    pub account_store: Option<Arc<dyn accounts::AccountStore>>,
}

/// Reads the configuration file (if any), opens every history and checks that each agent's
/// `historyId` names one. Errors name the file, entry and field.
pub async fn setup(config: &Config, agents: &AgentCatalog) -> anyhow::Result<Setup> {
    use crate::config::file::{locate, ConfigFile};
    use crate::settings::ServerSettings;
    let file = match locate(config.config_file.as_deref()) {
        Some(path) => {
            let file = ConfigFile::read(&path)?;
            tracing::info!("configuration file: {}", path.display());
            Some((path, file))
        }
        None => None,
    };
    let file_ref = file.as_ref().map(|(path, file)| (path.as_path(), file));
    let settings = ServerSettings::from_file(file_ref)?;
    let specs = histories::specs(file_ref, &config.data_dir)?;
    let histories = Histories::open(&specs, config.backup_retention).await?;
    histories.check_agents(agents.list().iter().map(|a| a.as_ref()))?;
    crate::context_providers::Providers::new(settings.providers.clone())
        .check_agents(agents.list().iter().map(|a| a.as_ref()))?;
    settings
        .tools
        .check_agents(agents.list().iter().map(|a| a.as_ref()))?;
    let config_path = file
        .map(|(path, _)| path)
        .unwrap_or_else(|| "parlor.toml".into());
    let default = histories.get("default");
    let home = match default {
        Some(history) => match &history.redis {
            Some(redis) => cookie_key::KeyHome::Redis(redis.connection.clone(), &redis.prefix),
            None if history.store.kind() == "memory" => cookie_key::KeyHome::Process,
            None => cookie_key::KeyHome::File(&config.data_dir),
        },
        None => cookie_key::KeyHome::File(&config.data_dir),
    };
    let cookie_key = cookie_key::CookieKey::load(config.cookie_key.as_ref(), home.clone()).await?;
    let asked = settings
        .tools
        .servers
        .iter()
        .any(|s| matches!(&s.scope, tools::spec::Scope::PerUser(p) if !p.secrets.is_empty()));
    let tool_secrets = Arc::new(tool_secrets(config, asked.then_some(home)).await?);
    let account_store = accounts::open_store(&histories, &config.data_dir);
    if config.auth.required() && account_store.is_none() {
        anyhow::bail!(
            "PARLOR_AUTH={} keeps accounts where the `default` history is, and it is in memory: \
             put the `default` history on file or Redis",
            config.auth.mode.name()
        );
    }
    Ok(Setup {
        histories,
        settings,
        config_path,
        cookie_key,
        tool_secrets,
        account_store,
    })
}

/// The users' tool secrets, beside the cookie key, sealed with a key kept the same way
/// (`home`: none when no server asks for any: then no key is made or kept).
async fn tool_secrets(
    config: &Config,
    home: Option<cookie_key::KeyHome<'_>>,
) -> anyhow::Result<store::secrets::Secrets> {
    use store::secrets::{Home, Secrets};
    let Some(home) = home else {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        return Ok(Secrets::in_memory(&key));
    };
    let configured = config.secrets_key.as_ref();
    let kept = match &home {
        cookie_key::KeyHome::Redis(connection, prefix) => {
            Home::Redis(connection.clone(), prefix.to_string())
        }
        cookie_key::KeyHome::File(dir) => Home::Files(dir.join("tool-secrets")),
        cookie_key::KeyHome::Process => Home::Memory(Default::default()),
    };
    let key = cookie_key::CookieKey::load_named(configured, home, "secrets-key").await?;
    Ok(Secrets::new(key.bytes(), kept))
}

pub fn services(config: Config, agents: AgentCatalog, setup: Setup) -> Arc<Services> {
    use llm::providers::Kind;
    let mut settings = setup.settings;
    settings.tools.user_root = Some(config.data_dir.join("tool-users"));
    let anthropic = settings
        .llm_providers
        .iter()
        .find(|p| p.kind == Kind::Anthropic);
    let models = models::Models::new(
        settings.models,
        (
            llm_client(&config),
            provider_clients(&config, &settings.llm_providers),
        ),
        config.model_override.clone(),
        config.mirror_delay,
    )
    .with_anthropic_default(anthropic.map(|p| p.id.clone()))
    .with_default_steps(settings.steps);
    let live = ops::live::of_histories(&setup.histories);
    let config_auth = (config.auth.clone(), config.trusted_proxies.clone());
    let public = config.public_url.as_deref().unwrap_or_default();
    if !config.auth.required() && public.starts_with("https://") {
        tracing::warn!(
            "PARLOR_AUTH=none on {public}: anyone who reaches this address can chat on your \
             model's account; set PARLOR_AUTH=local, oidc or proxy"
        );
    }
    let services = Arc::new(Services {
        config,
        agents,
        histories: setup.histories,
        models,
        providers: context_providers::Providers::new(settings.providers),
        busy: Default::default(),
        chain: parlor_domain::chain::Chain::from_names(&settings.chain)
            .expect("validated with the configuration"),
        limits: state::Limits::new(
            settings.agent_max_ctx,
            settings.max_users,
            settings.idle_timeout_minutes,
        ),
        live,
        config_path: setup.config_path,
        replies: state::Replies::default(),
        stops: state::Stops::default(),
        summarizers: Default::default(),
        summary_model: settings.summary_model,
        cookie_key: setup.cookie_key,
        tools: crate::tools::Tools::start(settings.tools),
        tool_secrets: setup.tool_secrets,
        accounts: accounts::Accounts::for_config(&config_auth, setup.account_store),
    });
    // The metrics recorder is installed before anything is measured.
    ops::metrics::handle();
    spawn_reaper(&services);
    spawn_account_sweeper(&services);
    services
}

/// How often expired account records (OpenID flows, logins, failure counts) are removed.
const SWEEP_ACCOUNTS_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// Removes expired account records every ten minutes, when accounts are on (a file backend
/// would otherwise keep every abandoned login attempt).
fn spawn_account_sweeper(services: &Arc<Services>) {
    let (Ok(runtime), Some(_)) = (tokio::runtime::Handle::try_current(), &services.accounts) else {
        return;
    };
    let weak = Arc::downgrade(services);
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_ACCOUNTS_EVERY);
        loop {
            tick.tick().await;
            let Some(accounts) = weak.upgrade().and_then(|s| s.accounts.clone()) else {
                return;
            };
            match accounts.store().sweep(store::now_ms()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("removed {n} expired account record(s)"),
                Err(e) => tracing::warn!("could not remove expired account records: {e}"),
            }
        }
    });
}

/// How often idle sessions are looked for.
const REAP_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// Frees the sessions idle for longer than the configured timeout at `now_ms` (none when the
/// timeout is 0): their slots go back to `max_users`, their conversations stay stored.
/// Returns how many were freed.
pub async fn reap_idle_sessions(services: &Services, now_ms: i64) -> Result<usize, StoreError> {
    let timeout_ms = services
        .limits
        .idle_timeout_minutes()
        .saturating_mul(60_000);
    services.live.reap(now_ms, timeout_ms).await
}

/// Runs [`reap_idle_sessions`] every 15 seconds (when inside a Tokio runtime). The timeout is
/// read each time, so `!sessiontimeout` applies at once.
fn spawn_reaper(services: &Arc<Services>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let weak = Arc::downgrade(services);
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(REAP_EVERY);
        loop {
            tick.tick().await;
            let Some(services) = weak.upgrade() else {
                return;
            };
            match reap_idle_sessions(&services, store::now_ms()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("freed {n} idle session(s)"),
                Err(e) => tracing::warn!("could not reap idle sessions: {e}"),
            }
        }
    });
}

/// Server functions (`/api/…`; Leptos registers each at its own path) answer every error with
/// 500: see [`client_errors`].
async fn server_fn_errors(
    request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    let is_server_fn = request.uri().path().starts_with("/api/");
    let response = next.run(request).await;
    if is_server_fn {
        client_errors(response).await
    } else {
        response
    }
}

/// Server functions answer every error with 500; the ones the request caused (arguments
/// that do not parse or are missing, an unknown function) are client errors: 400 and 404,
/// with the same body, which the browser's server-function client reads the same way.
async fn client_errors(response: axum::response::Response) -> axum::response::Response {
    use axum::http::StatusCode;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        parts.status = StatusCode::BAD_REQUEST;
        return axum::response::Response::from_parts(parts, axum::body::Body::empty());
    };
    let kind = bytes.split(|&b| b == b'|').next().unwrap_or_default();
    parts.status = match kind {
        b"Args" | b"MissingArg" | b"Deserialization" => StatusCode::BAD_REQUEST,
        b"Registration" => StatusCode::NOT_FOUND,
        _ => parts.status,
    };
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Failed `/metrics` authorizations one client address may make per minute.
pub const METRICS_FAILURES_PER_MINUTE: u32 = gate::ADMIN_GUESSES_PER_MINUTE;

/// The router of `PARLOR_METRICS_ADDR`: `/metrics` only, without the admin token (the operator
/// chose a private address for it).
pub fn metrics_router(services: Arc<Services>) -> Router {
    let public_url = services.config.public_url.clone();
    Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let services = services.clone();
                async move { routes::metrics::text(&services).await }
            }),
        )
        // Under Parlor's own names only, as behind the gate (DNS rebinding).
        .layer(middleware::from_fn_with_state(
            public_url,
            gate::only_own_names,
        ))
}

/// The whole HTTP application: the chat API, server functions, pages and static files,
/// behind the gate (`gate`), which decides from the route table what reaches them.
pub fn router(mut leptos_options: LeptosOptions, services: Arc<Services>) -> Router {
    let build = site::SiteBuild::name(&mut leptos_options);
    let state = AppState {
        leptos_options: leptos_options.clone(),
        services: services.clone(),
    };
    let pages =
        pages_router(&state).layer(middleware::from_fn_with_state(build, site::serve_build));
    let mut app = api_router(&services).merge(pages);
    if services.accounts.is_some() {
        app = app.merge(routes::accounts::login::router());
    }
    let app = app.layer(middleware::from_fn_with_state(
        gate::Gate::new(services.clone()),
        gate::gate,
    ));
    with_common_layers(app).with_state(state)
}

/// The pages, their server functions and the site's files. A page's request gets the
/// browser session; the site's files never do.
fn pages_router(state: &AppState) -> Router<AppState> {
    let services = &state.services;
    let backend = BackendHandle(Arc::new(pages::PageBackend {
        services: services.clone(),
    }));
    let context = move || provide_context(backend.clone());
    // The route list is made once per process: generating it renders the app in a special
    // mode, and doing that while another router serves pages (several servers in one test
    // process) could leave a page render waiting forever.
    static ROUTES: std::sync::OnceLock<Vec<leptos_axum::AxumRouteListing>> =
        std::sync::OnceLock::new();
    let routes = ROUTES.get_or_init(|| generate_route_list(App)).clone();
    for listing in &routes {
        assert!(
            table::declared(listing.path()).is_some(),
            "the page {} is not declared in the gate's table (server/src/table.rs)",
            listing.path()
        );
    }
    let server_fns = {
        let context = context.clone();
        move |request| handle_server_fns_with_context(context.clone(), request)
    };
    let options = state.leptos_options.clone();
    let pages = Router::new()
        .mount("/api/{server_fn}", post(server_fns))
        .leptos_routes_with_context(state, routes, context, move || shell(options.clone()))
        .layer(middleware::from_fn_with_state(
            services.clone(),
            pages::decide_chat_head,
        ))
        .layer(middleware::from_fn(routes::render::render_whole))
        .merge(routes::tool_secrets::router())
        .layer(middleware::from_fn_with_state(
            services.clone(),
            gate::session::ensure_browser_session,
        ));
    // After the session's layer: reading a file takes no session.
    let pages = pages
        .mount("/pkg/{*file}", axum::routing::get(site::site_file))
        .mount("/favicon.svg", axum::routing::get(site::site_file))
        .layer(middleware::from_fn(server_fn_errors));
    // The release binary answers its site's files itself, before any session handling.
    #[cfg(feature = "embed-site")]
    let pages = pages.layer(middleware::from_fn(site::serve_embedded));
    pages
}

/// The chat API, `/mcp` (when on), the health checks and the metrics.
fn api_router(services: &Arc<Services>) -> Router<AppState> {
    let config = &services.config;
    // Chat requests with images may be larger; the chat route refuses the others over
    // `MAX_BODY_BYTES`.
    let body_limit = config.max_context_bytes.max(routes::MAX_BODY_BYTES);
    let api = routes::api()
        .merge(routes::account())
        .layer(DefaultBodyLimit::max(body_limit));
    Router::new()
        .merge(api)
        .merge(routes::health())
        .merge(routes::ready())
        .merge(routes::metrics())
        .merge(mcp::http(&services.config, &services.histories).unwrap_or_default())
}

/// What every response gets: compression, security headers, the request id and its log.
fn with_common_layers(router: Router<AppState>) -> Router<AppState> {
    router
        // Pages and JSON are compressed on the fly at the fastest level: it keeps most of the
        // saving at a fraction of the time. Static files are served precompressed at the
        // highest level instead, and the chat stream is never compressed (it would delay events).
        .layer(CompressionLayer::new().quality(CompressionLevel::Fastest))
        // Security headers on every response; pages set their own Content-Security-Policy
        // (with the nonce of their hydration scripts), everything else gets one that allows
        // nothing.
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        // Request logs: every request is a `request` span (method, path, request id) in which
        // its handler, and a chat's reply task, log; it ends with one line giving the status
        // and latency. The request id is the `x-request-id` a proxy set (when it looks like
        // one), or a new one, and is returned in the response.
        .layer(PropagateRequestIdLayer::new(ops::request_id::HEADER))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(ops::request_id::span)
                .on_request(())
                .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
        )
        .layer(SetRequestIdLayer::new(
            ops::request_id::HEADER,
            MakeRequestUuid,
        ))
        .layer(axum::middleware::map_request(
            ops::request_id::keep_only_ids,
        ))
}
