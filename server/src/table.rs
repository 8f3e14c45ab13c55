//! Every route Parlor serves, declared once: who may reach it, which limiter counts it,
//! whether a browser's request to it must come from Parlor's own pages (CSRF), and when it
//! exists. The gate, the limiters and the routers read this table; a path it does not name
//! is a plain 404 before anything else runs, and a router that mounts a path it does not
//! name stops the server at startup.

use axum::http::Method;

/// Who may reach a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone: the site's files, liveness and readiness, the login pages and forms.
    Public,
    /// A login when accounts are on (a cookie, a personal token or the trusted proxy's
    /// header); anyone while they are off (the browser's signed cookie owns what it makes).
    Login,
    /// The operator's admin token (as a bearer or `X-Parlor-Admin-Token`), or an admin's login.
    Admin,
    /// `PARLOR_MCP_TOKEN` as a bearer token.
    McpToken,
}

/// Which per-address limit counts a route's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `PARLOR_RATE_LIMIT_PAGES`: pages, page data, readiness, unknown paths.
    Pages,
    /// `PARLOR_RATE_LIMIT_CHAT`: the chat and account APIs, `/mcp`.
    Chat,
    /// `PARLOR_RATE_LIMIT_LOGIN`: logging in and the OpenID round trip.
    Login,
    /// `PARLOR_RATE_LIMIT_SIGNUP`: new accounts, per hour.
    Signup,
    /// Wrong admin tokens: a few a minute, counted before the answer.
    AdminGuesses,
    /// Never limited: the site's files and liveness.
    None,
}

/// How a route answers, and so how a refusal is said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An HTML page (a refusal is a page; no login: a redirect to the login page).
    Page,
    /// JSON (a refusal is `{"error": …}`).
    Api,
    /// A Leptos server function: one route per registered function.
    ServerFn,
    /// A file of the site.
    File,
}

/// When a route exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Always,
    /// `PARLOR_AUTH` other than `none`.
    Accounts,
    /// `PARLOR_MCP_TOKEN` set.
    Mcp,
    /// `PARLOR_AUTH=oidc`.
    Oidc,
    /// `PARLOR_AUTH=local` with `PARLOR_SIGNUP=true`.
    Signup,
}

/// One HTTP method a route answers (HEAD is answered wherever GET is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Verb {
    pub const ALL: [Verb; 5] = [Verb::Get, Verb::Post, Verb::Put, Verb::Patch, Verb::Delete];

    pub fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Patch => Method::PATCH,
            Verb::Delete => Method::DELETE,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
        }
    }

    /// Whether a request of this method changes something (the CSRF check applies).
    pub fn changes_state(self) -> bool {
        self != Verb::Get
    }
}

/// One route of the table.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// The path in axum's syntax (`{param}`, `{*rest}`).
    pub path: &'static str,
    pub verbs: &'static [Verb],
    pub access: Access,
    pub limit: Limit,
    pub kind: Kind,
    /// Whether a state-changing request sent with a browser's credentials must come from
    /// Parlor's own pages (`Origin`, or JSON from no other site).
    pub csrf: bool,
    /// Described in the OpenAPI document (`/api/openapi.json`; its test reads this).
    pub documented: bool,
    pub when: When,
}

impl Route {
    /// Whether `method` is one this route answers (HEAD where GET is).
    pub fn allows(&self, method: &Method) -> bool {
        let method = match *method {
            Method::HEAD => Method::GET,
            ref other => other.clone(),
        };
        self.verbs.iter().any(|v| v.method() == method)
    }

    /// The `Allow` header's value.
    pub fn allow_header(&self) -> String {
        let mut names: Vec<&str> = self.verbs.iter().map(|v| v.name()).collect();
        if self.verbs.contains(&Verb::Get) {
            names.push("HEAD");
        }
        names.join(", ")
    }
}

use Access::*;
use Kind::*;
use Verb::*;

macro_rules! route {
    ($path:literal, [$($verb:ident),+], $access:ident, $limit:ident, $kind:ident, $when:ident) => {
        Route {
            path: $path,
            verbs: &[$($verb),+],
            access: $access,
            limit: Limit::$limit,
            kind: $kind,
            csrf: true,
            documented: matches!($kind, Api),
            when: When::$when,
        }
    };
}

/// The table. Order does not matter: paths are matched as axum matches them (a literal
/// segment before a parameter).
pub const TABLE: &[Route] = &[
    // The pages and their data.
    route!("/", [Get], Login, Pages, Page, Always),
    route!("/chat", [Get], Login, Pages, Page, Always),
    route!("/api/{server_fn}", [Post], Login, Pages, ServerFn, Always),
    // The site's files (release builds answer them from the binary, debug builds from
    // `target/site`).
    route!("/pkg/{*file}", [Get], Public, None, File, Always),
    route!("/favicon.svg", [Get], Public, None, File, Always),
    // The chat API.
    route!("/api/chat/{agent_id}", [Post], Login, Chat, Api, Always),
    route!(
        "/api/chat/{agent_id}/debug",
        [Get],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}",
        [Put],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/{session_id}/messages/{message_id}/choose",
        [Post],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/{session_id}/messages",
        [Get],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/{session_id}/tool-calls/{call_id}",
        [Post],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/{session_id}/stop",
        [Post],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/import",
        [Post],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/{session_id}",
        [Patch, Delete],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/{session_id}/fork",
        [Post],
        Login,
        Chat,
        Api,
        Always
    ),
    route!(
        "/api/chat/{agent_id}/sessions/{session_id}/export",
        [Get],
        Login,
        Chat,
        Api,
        Always
    ),
    route!("/api/conversations/search", [Get], Login, Chat, Api, Always),
    route!("/api/openapi.json", [Get], Login, Pages, Api, Always),
    // Operations.
    route!("/healthz", [Get], Public, None, Api, Always),
    route!("/readyz", [Get], Public, Pages, Api, Always),
    route!("/metrics", [Get], Admin, AdminGuesses, Api, Always),
    Route {
        // The MCP protocol, not Parlor's API: described by MCP itself.
        csrf: false,
        documented: false,
        ..route!("/mcp", [Get, Post, Delete], McpToken, Chat, Api, Mcp)
    },
    // Accounts (the account API and the login form always exist: without accounts they
    // say there are none).
    route!("/login", [Get], Public, Pages, Page, Accounts),
    route!("/signup", [Get], Public, Pages, Page, Signup),
    // Forms from the pages, and JSON from scripts (documented for those).
    Route {
        documented: true,
        ..route!("/auth/login", [Post], Public, Login, Page, Always)
    },
    Route {
        documented: true,
        ..route!("/auth/logout", [Post], Public, Login, Page, Always)
    },
    route!("/auth/signup", [Post], Public, Signup, Page, Signup),
    route!("/auth/oidc", [Get], Public, Login, Page, Oidc),
    route!("/auth/callback", [Get], Public, Login, Page, Oidc),
    route!("/account/tokens", [Get, Post], Login, Pages, Page, Accounts),
    route!(
        "/account/tokens/{id}/revoke",
        [Post],
        Login,
        Pages,
        Page,
        Accounts
    ),
    route!(
        "/account/logout-others",
        [Post],
        Login,
        Pages,
        Page,
        Accounts
    ),
    route!("/api/account", [Get], Login, Chat, Api, Always),
    // The values users set for their own tool servers (every auth mode: without accounts,
    // each browser is a user).
    route!("/account/tools", [Get, Post], Login, Pages, Page, Always),
    route!("/api/account/tool-secrets", [Get], Login, Chat, Api, Always),
    route!(
        "/api/account/tool-secrets/{server}",
        [Put],
        Login,
        Chat,
        Api,
        Always
    ),
    route!("/api/account/tokens", [Get, Post], Login, Chat, Api, Always),
    route!(
        "/api/account/tokens/{id}",
        [Delete],
        Login,
        Chat,
        Api,
        Always
    ),
];

/// The declared route of `path` as axum spells it (a router mounting it checks this).
pub fn declared(path: &str) -> Option<&'static Route> {
    TABLE.iter().find(|r| r.path == path)
}

/// The one way Parlor's routers add a route: a path missing from [`TABLE`] stops the
/// server at startup instead of being served past the gate's rules.
pub trait Mount {
    type Handler;
    fn mount(self, path: &'static str, handler: Self::Handler) -> Self;
}

impl<S> Mount for axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    type Handler = axum::routing::MethodRouter<S>;

    fn mount(self, path: &'static str, handler: Self::Handler) -> Self {
        assert!(
            declared(path).is_some(),
            "the route {path} is not declared in the gate's table (server/src/table.rs)"
        );
        self.route(path, handler)
    }
}

/// The table's routes that exist under a configuration, found by path.
pub struct Matcher {
    router: matchit::Router<&'static Route>,
}

impl Matcher {
    pub fn new(exists: impl Fn(When) -> bool) -> Matcher {
        let mut router = matchit::Router::new();
        for route in TABLE.iter().filter(|r| exists(r.when)) {
            router
                .insert(route.path, route)
                .unwrap_or_else(|e| panic!("the gate's table has a bad path {}: {e}", route.path));
        }
        Matcher { router }
    }

    /// The route `path` (as requested, still percent-encoded) names, if any.
    pub fn find(&self, path: &str) -> Option<&'static Route> {
        self.router.at(path).ok().map(|m| *m.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_declared_once_and_parses() {
        let matcher = Matcher::new(|_| true);
        for route in TABLE {
            assert_eq!(
                TABLE.iter().filter(|r| r.path == route.path).count(),
                1,
                "{}",
                route.path
            );
            assert!(!route.verbs.is_empty(), "{}", route.path);
            let _ = matcher.find(route.path);
        }
    }

    #[test]
    fn paths_find_their_routes_and_only_those() {
        let all = Matcher::new(|_| true);
        let path_of = |p: &str| all.find(p).map(|r| r.path);
        assert_eq!(path_of("/chat"), Some("/chat"));
        assert_eq!(path_of("/api/account"), Some("/api/account"));
        assert_eq!(path_of("/api/load_chat123"), Some("/api/{server_fn}"));
        assert_eq!(
            path_of("/api/chat/general/sessions/import"),
            Some("/api/chat/{agent_id}/sessions/import")
        );
        assert_eq!(path_of("/pkg/a/b.wasm"), Some("/pkg/{*file}"));
        for unknown in [
            "/chat/",
            "/chat/general",
            "/auth/x",
            "/x.php",
            "/api/a/b",
            "/mcp/x",
        ] {
            assert_eq!(path_of(unknown), None, "{unknown}");
        }
        let off = Matcher::new(|w| w == When::Always);
        assert!(off.find("/login").is_none());
        assert!(off.find("/mcp").is_none());
    }

    #[test]
    fn head_is_answered_where_get_is() {
        let chat = declared("/chat").unwrap();
        assert!(chat.allows(&Method::HEAD));
        assert!(!chat.allows(&Method::POST));
        assert_eq!(chat.allow_header(), "GET, HEAD");
        let login = declared("/auth/login").unwrap();
        assert!(!login.allows(&Method::HEAD));
    }
}
