//! The gate: the first thing every request meets. It reads the route table
//! ([`crate::table::TABLE`]) and nothing else to decide, in this order:
//!
//! 1. the path's spelling ([`path::check`]): one that could mean another path is a 400;
//! 2. the route: a path the table does not name (or names for another configuration) is a
//!    plain 404, and a method the route does not answer a 405, before any session, cookie
//!    or page rendering;
//! 3. the route's limiter, per client address;
//! 4. where there is something to protect, the name the request gives Parlor ([`host`]:
//!    `PARLOR_PUBLIC_URL`'s host, `localhost` or an IP address; else a 421);
//! 5. who is asking (a personal token, the trusted proxy's header, a login cookie, the admin
//!    or MCP token) and whether the route's access lets them in;
//! 6. for a state-changing request from a browser (its credentials, or with accounts off
//!    anything a browser sends: a cookie, `Origin`, `Sec-Fetch-Site`), that it comes from
//!    Parlor's own pages (CSRF).
//!
//! What passes carries its [`crate::table::Route`] in the request's extensions.

mod host;
pub use host::only_own_names;
mod path;
pub mod session;

use crate::accounts::gate::{identify, refuse_as, same_origin, Found, Via};
use crate::ops::rate_limit::{Answer, Limiters};
use crate::state::Services;
use crate::table::{Access, Kind, Limit, Matcher, Route, When};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashSet;
use std::sync::Arc;

/// In a request's extensions when it carried the operator's admin token (checked, and
/// counted as a guess when wrong).
#[derive(Clone, Copy, Debug)]
pub struct AdminByToken;

/// Failed admin-token guesses one client address may make per minute (on `/metrics`, and
/// with `X-Parlor-Admin-Token` on the chat API).
pub const ADMIN_GUESSES_PER_MINUTE: u32 = 10;

/// What the gate decides with: the table as this configuration has it, the limiters, the
/// registered server functions.
pub struct Gate {
    services: Arc<Services>,
    matcher: Matcher,
    limiters: Arc<Limiters>,
    server_fns: HashSet<String>,
}

impl Gate {
    pub fn new(services: Arc<Services>) -> Arc<Gate> {
        let accounts = services.accounts.is_some();
        let oidc = services
            .accounts
            .as_ref()
            .is_some_and(|a| a.provider.is_some());
        let mcp = services.config.mcp_token.is_some();
        let signup = services.accounts.as_ref().is_some_and(|a| {
            a.config.signup && a.config.mode == crate::config::auth::AuthMode::Local
        });
        let matcher = Matcher::new(|when| match when {
            When::Always => true,
            When::Accounts => accounts,
            When::Oidc => oidc,
            When::Signup => signup,
            When::Mcp => mcp,
        });
        let limiters = Limiters::new(&services.config, ADMIN_GUESSES_PER_MINUTE);
        let server_fns = leptos::server_fn::axum::server_fn_paths()
            .map(|(path, _)| path.to_owned())
            .collect();
        Arc::new(Gate {
            services,
            matcher,
            limiters,
            server_fns,
        })
    }

    pub fn limiters(&self) -> &Arc<Limiters> {
        &self.limiters
    }

    /// The route a path names under this configuration.
    pub fn route(&self, path: &str) -> Option<&'static Route> {
        let route = self.matcher.find(path)?;
        match route.kind {
            Kind::ServerFn => self.server_fns.contains(path).then_some(route),
            _ => Some(route),
        }
    }
}

/// A refusal said plainly (no page, no cookie): text for everything but the API.
fn plain(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.to_owned(),
    )
        .into_response()
}

fn answer_of(route: Option<&Route>) -> Answer {
    match route.map(|r| r.kind) {
        Some(Kind::Api) => Answer::Json,
        _ => Answer::Html,
    }
}

/// The middleware: see the module's documentation.
pub async fn gate(State(gate): State<Arc<Gate>>, mut request: Request, next: Next) -> Response {
    if let Err(bad) = path::check(request.uri().path()) {
        return plain(StatusCode::BAD_REQUEST, bad.0);
    }
    let route = gate.route(request.uri().path());
    let limit = route.map_or(Limit::Pages, |r| r.limit);
    if let Err(limited) = gate.limiters.count(limit, &request, answer_of(route)) {
        return limited.into_response();
    }
    let Some(route) = route else {
        return plain(StatusCode::NOT_FOUND, "no such page");
    };
    if !route.allows(request.method()) {
        let mut refused = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here");
        if let Ok(allow) = HeaderValue::from_str(&route.allow_header()) {
            refused.headers_mut().insert(header::ALLOW, allow);
        }
        return refused;
    }
    // Where there is something to protect, only under Parlor's own names (a page of another
    // name that resolves here, DNS rebinding, would otherwise be a page of this site).
    let protected = !(route.access == Access::Public && route.limit == Limit::None);
    if protected {
        let public_url = gate.services.config.public_url.as_deref();
        if let Err(why) = host::check(&request, public_url) {
            return plain(StatusCode::MISDIRECTED_REQUEST, &why);
        }
    }
    request.extensions_mut().insert(route);
    let mut response = match let_in(&gate, route, &mut request).await {
        Ok(()) => next.run(request).await,
        Err(refused) => refused,
    };
    // Answers may be someone's (a conversation, an account, an admin's readiness details, a
    // login's cookie): no cache keeps them. Only the site's own files are for caches.
    if route.kind != Kind::File {
        let headers = response.headers_mut();
        if !headers.contains_key(header::CACHE_CONTROL) {
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
    }
    response
}

/// Decides access and CSRF for a request of `route`; what it finds about the requester
/// goes into the request's extensions.
async fn let_in(gate: &Gate, route: &'static Route, request: &mut Request) -> Result<(), Response> {
    let services = &gate.services;
    let refuse = |status, why: &str| refuse_as(route.kind == Kind::Api, status, why);
    match route.access {
        Access::McpToken => return admit_mcp(gate, route, request),
        Access::Admin => return admit_admin(gate, route, request).await,
        Access::Public | Access::Login => admin_token_along(gate, request)?,
    }
    if route.access == Access::Public && route.limit == Limit::None {
        return Ok(());
    }
    let Some(accounts) = services.accounts.as_deref() else {
        // Accounts off: a script may chat without a cookie, but a browser may not be made
        // to by a foreign page (which can reach a Parlor on the user's own machine): what
        // carries the browser's cookie, or says a browser sent it, must come from Parlor's
        // own pages.
        let headers = request.headers();
        let from_a_browser = [header::COOKIE.as_str(), "origin", "sec-fetch-site"]
            .iter()
            .any(|name| headers.contains_key(*name));
        if changes_state(request.method()) && route.csrf && from_a_browser {
            from_own_pages(request, services).map_err(|why| refuse(StatusCode::FORBIDDEN, why))?;
        }
        return Ok(());
    };
    let open = route.access == Access::Public;
    let found = identify(accounts, request, open, route.kind == Kind::Api).await?;
    let via = match &found {
        Found::Nobody if open => None,
        Found::Nobody => return Err(login_required(route, request)),
        Found::User(_, via) => Some(*via),
    };
    // A personal token is for scripts on the API: the pages, their data and their forms
    // (which make tokens, log sessions out, hand out logins) want a browser's login.
    if via == Some(Via::Token) && matches!(route.kind, Kind::Page | Kind::ServerFn) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "a personal token is for the API: log in to use the pages",
        ));
    }
    if changes_state(request.method()) && route.csrf && via != Some(Via::Token) {
        from_own_pages(request, services).map_err(|why| refuse(StatusCode::FORBIDDEN, why))?;
    }
    if let Some(via) = via {
        request.extensions_mut().insert(via);
    }
    if let Found::User(user, _) = found {
        request.extensions_mut().insert(user.session());
        let name = parlor_app::ssr::SignedIn(user.display.clone());
        request.extensions_mut().insert(name);
        request.extensions_mut().insert(user);
    }
    Ok(())
}

/// `PARLOR_MCP_TOKEN` as a bearer, counted as a guess before it is checked.
// A refusal is a whole response, as the middleware's other steps return.
#[allow(clippy::result_large_err)]
fn admit_mcp(gate: &Gate, route: &'static Route, request: &Request) -> Result<(), Response> {
    let guess = gate
        .limiters
        .guess(request)
        .map_err(IntoResponse::into_response)?;
    let given = bearer_value(request);
    if gate.services.config.mcp_token_matches(given.as_deref()) {
        gate.limiters.right(guess);
        return Ok(());
    }
    let mut refused = refuse_as(
        route.kind == Kind::Api,
        StatusCode::UNAUTHORIZED,
        "send the MCP token (PARLOR_MCP_TOKEN) as a bearer token",
    );
    refused
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Err(refused)
}

/// An admin token sent along another route (admin chat commands, readiness's details)
/// counts as a guess, as one on /metrics does; a right one is noted for the route
/// ([`AdminByToken`]).
#[allow(clippy::result_large_err)]
fn admin_token_along(gate: &Gate, request: &mut Request) -> Result<(), Response> {
    let Some(given) = header_text(request, "x-parlor-admin-token") else {
        return Ok(());
    };
    let guess = gate
        .limiters
        .guess(request)
        .map_err(IntoResponse::into_response)?;
    if gate.services.config.admin_token_matches(Some(&given)) {
        gate.limiters.right(guess);
        request.extensions_mut().insert(AdminByToken);
    }
    Ok(())
}

/// The admin token (a bearer, or `X-Parlor-Admin-Token`) counted as a guess before it is
/// checked; or, with accounts on and no other token sent, an admin's login or personal token.
async fn admit_admin(
    gate: &Gate,
    route: &'static Route,
    request: &mut Request,
) -> Result<(), Response> {
    let services = &gate.services;
    let refuse = |status, why: &str| refuse_as(route.kind == Kind::Api, status, why);
    let token = bearer_value(request).or_else(|| header_text(request, "x-parlor-admin-token"));
    let personal = token
        .as_deref()
        .is_none_or(|t| t.starts_with(crate::accounts::TOKEN_PREFIX));
    if let (Some(accounts), true) = (services.accounts.as_deref(), personal) {
        if let Found::User(user, via) = identify(accounts, request, false, true).await? {
            if !user.admin {
                return Err(refuse(StatusCode::FORBIDDEN, "this needs an admin"));
            }
            if via != Via::Token && changes_state(request.method()) {
                from_own_pages(request, services)
                    .map_err(|why| refuse(StatusCode::FORBIDDEN, why))?;
            }
            request.extensions_mut().insert(user.session());
            request.extensions_mut().insert(user);
            return Ok(());
        }
    }
    if services.config.admin_token.is_none() {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            "this is off: set PARLOR_ADMIN_TOKEN (and send it as a bearer token)",
        ));
    }
    let guess = gate
        .limiters
        .guess(request)
        .map_err(IntoResponse::into_response)?;
    match services.config.admin_token_matches(token.as_deref()) {
        true => {
            gate.limiters.right(guess);
            Ok(())
        }
        false => Err(refuse(
            StatusCode::UNAUTHORIZED,
            "this needs the operator's admin token",
        )),
    }
}

/// Whether a state-changing request is not a foreign page's (CSRF): see [`same_origin`].
/// A PUT, PATCH or DELETE without `Origin` is no browser's (browsers send `Origin` with
/// every such request), unless it says it crossed sites.
fn from_own_pages(request: &Request, services: &Services) -> Result<(), &'static str> {
    let headers = request.headers();
    let no_origin = !headers.contains_key(header::ORIGIN);
    let crossed = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v != "same-origin" && v != "none");
    if no_origin
        && !crossed
        && matches!(
            *request.method(),
            Method::PUT | Method::PATCH | Method::DELETE
        )
    {
        return Ok(());
    }
    // HTTP/2 names the host in `:authority`, not in a `Host` header.
    let authority = request.uri().authority().map(|a| a.as_str());
    if let (false, Some(authority)) = (headers.contains_key(header::HOST), authority) {
        let mut with_host = headers.clone();
        if let Ok(host) = HeaderValue::from_str(authority) {
            with_host.insert(header::HOST, host);
        }
        return same_origin(&with_host, services.config.public_url.as_deref());
    }
    same_origin(headers, services.config.public_url.as_deref())
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn header_text(request: &Request, name: &str) -> Option<String> {
    let values: Vec<_> = request.headers().get_all(name).iter().collect();
    match values.as_slice() {
        [one] => one.to_str().ok().map(str::to_owned),
        // Sent twice: neither counts (a wrong one is still a guess).
        [_, _, ..] => Some(String::new()),
        [] => None,
    }
}

/// The bearer token of a single `Authorization` header, if any.
fn bearer_value(request: &Request) -> Option<String> {
    header_text(request, header::AUTHORIZATION.as_str()).map(|v| {
        crate::accounts::gate::bearer_of(&v)
            .unwrap_or_default()
            .to_owned()
    })
}

/// Pages send the browser to the login page (and back afterwards); the rest answer 401.
fn login_required(route: &Route, request: &Request) -> Response {
    let is_page =
        route.kind == Kind::Page && matches!(*request.method(), Method::GET | Method::HEAD);
    if !is_page {
        return refuse_as(
            route.kind != Kind::Page,
            StatusCode::UNAUTHORIZED,
            "log in first (a login cookie or a bearer token)",
        );
    }
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let next: String = url::form_urlencoded::byte_serialize(target.as_bytes()).collect();
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(location) = HeaderValue::from_str(&format!("/login?next={next}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

#[cfg(test)]
mod tests {
    use crate::table::{Kind, TABLE};

    #[test]
    fn the_site_files_at_the_top_are_what_public_holds() {
        let public = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../public");
        let mut held: Vec<String> = std::fs::read_dir(public)
            .unwrap()
            .map(|entry| format!("/{}", entry.unwrap().file_name().to_string_lossy()))
            .collect();
        held.sort();
        let mut declared: Vec<String> = TABLE
            .iter()
            .filter(|r| r.kind == Kind::File && !r.path.starts_with("/pkg/"))
            .map(|r| r.path.to_owned())
            .collect();
        declared.sort();
        assert_eq!(held, declared);
    }
}
