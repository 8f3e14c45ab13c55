//! Plain axum routes (everything that is not a Leptos page or server function).

pub mod accounts;
pub mod pages;
pub mod site;

mod chat;
mod conversations;
mod debug;
pub mod error;
mod head_first;
mod messages;
pub mod metrics;
pub mod openapi;
mod ready;
pub mod render;
mod stop;
mod tool_calls;
pub mod tool_secrets;

use crate::state::AppState;
use axum::Router;

pub use crate::config::MAX_BODY_BYTES;

/// Declares routers and, from the same list, the routes each answers (`(path, method)`),
/// so the OpenAPI test checks the document against what is really served: a route added
/// here and not documented fails it.
macro_rules! routes {
    ($(
        $(#[$doc:meta])*
        $name:ident, $list:ident {
            $( $path:literal => $( $method:ident ( $handler:path ) ),+ ; )*
        }
    )*) => {
        $(
            $(#[$doc])*
            pub fn $name() -> Router<AppState> {
                use crate::table::Mount;
                Router::new() $( .mount($path, axum::routing::MethodRouter::new() $( .$method($handler) )+ ) )*
            }

            /// The `(path, method)` pairs the router of the same name answers.
            pub const $list: &[(&str, &str)] = &[ $( $( ($path, stringify!($method)) ),+ ),* ];
        )*

        /// Every documented route of the HTTP API: all the routers above.
        pub const ALL_ROUTES: &[&[(&str, &str)]] = &[ $( $list ),* ];
    };
}

routes! {
    /// The chat API (rate-limited per client address by the caller).
    api, API_ROUTES {
        "/api/chat/{agent_id}" => post(chat::post_chat);
        "/api/chat/{agent_id}/debug" => get(debug::get_debug);
        "/api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}" => put(messages::put_mark);
        "/api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}/choose" =>
            post(messages::post_choose);
        "/api/chat/{agent_id}/sessions/{session_id}/messages" => get(messages::get_older);
        "/api/chat/{agent_id}/sessions/{session_id}/tool-calls/{call_id}" =>
            post(tool_calls::post_answer);
        "/api/chat/{agent_id}/sessions/{session_id}/stop" => post(stop::post_stop);
        "/api/chat/{agent_id}/sessions/import" => post(conversations::post_import);
        "/api/chat/{agent_id}/sessions/{session_id}" =>
            patch(conversations::patch_conversation), delete(conversations::delete_conversation);
        "/api/chat/{agent_id}/sessions/{session_id}/fork" => post(conversations::post_fork);
        "/api/chat/{agent_id}/sessions/{session_id}/export" => get(conversations::get_export);
        "/api/conversations/search" => get(conversations::get_search);
    }
    /// Accounts (`PARLOR_AUTH` other than `none`): who is logged in, their personal tokens,
    /// logging in and out from scripts (rate-limited like the chat API).
    account, ACCOUNT_ROUTES {
        "/api/account" => get(accounts::tokens::get_account);
        "/api/account/tokens" =>
            get(accounts::tokens::get_tokens), post(accounts::tokens::post_token);
        "/api/account/tokens/{id}" => delete(accounts::tokens::delete_token);
        "/api/account/tool-secrets" => get(tool_secrets::get_secrets);
        "/api/account/tool-secrets/{server}" => put(tool_secrets::put_secrets);
        "/auth/login" => post(accounts::login::post_login);
        "/auth/logout" => post(accounts::login::post_logout);
    }
    /// Liveness and this document: never limited.
    health, HEALTH_ROUTES {
        "/healthz" => get(healthz);
        "/api/openapi.json" => get(openapi::get_openapi);
    }
    /// Readiness: rate-limited per client address (see `crate::router`).
    ready, READY_ROUTES {
        "/readyz" => get(ready::get_ready);
    }
    /// The metrics: their failed authorizations are limited (see `crate::router`).
    metrics, METRICS_ROUTES {
        "/metrics" => get(metrics::get_metrics);
    }
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "`ok` while the process runs", body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// A query parameter's first value (the page URL's rule: the first value counts if a key
/// repeats).
pub fn first_value<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}
