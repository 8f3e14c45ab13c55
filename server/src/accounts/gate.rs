//! The gate every request passes when accounts are on: who it is (a personal token, a
//! trusted proxy's header, or a login cookie), whether it may cross (the open paths, or a
//! login), and whether a browser's state-changing request really comes from Parlor's own
//! pages (CSRF).

use super::{Accounts, User, LOGIN_COOKIE};
use crate::state::Services;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::CookieJar;
use std::net::SocketAddr;
use std::sync::Arc;

/// Who a request is, as the gate found it.
enum Found {
    Nobody,
    User(User, Via),
}

/// How the request showed who it is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Token,
    Proxy,
    Cookie,
}

/// Lets a request through when accounts are off; else identifies it, refuses a foreign
/// state-changing one, and requires a login beyond the open paths. The account goes into the
/// request's extensions, with its [`User::session`] as the request's browser session.
pub async fn gate(
    State(services): State<Arc<Services>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(accounts) = services.accounts.as_deref() else {
        return next.run(request).await;
    };
    let path = request.uri().path().to_owned();
    if needs_nobody(request.method(), &path) {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip().to_canonical());
    let found = match identify(accounts, request.headers(), &path, peer).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let via_token = matches!(found, Found::User(_, Via::Token));
    if changes_state(request.method()) && !via_token {
        if let Err(reason) = same_origin(request.headers(), services.config.public_url.as_deref()) {
            return refuse(&path, StatusCode::FORBIDDEN, reason);
        }
    }
    match found {
        Found::User(user, _) => {
            request.extensions_mut().insert(user.session());
            let name = parlor_app::ssr::SignedIn(user.name.to_string());
            request.extensions_mut().insert(name);
            request.extensions_mut().insert(user);
        }
        Found::Nobody if is_open(&path) => {}
        Found::Nobody => return login_required(&request),
    }
    next.run(request).await
}

/// Requests answered without asking who is there: `/mcp` (its own bearer token, checked by
/// its route), health, and reading the site's files (a page's scripts and styles cost no
/// account lookup).
fn needs_nobody(method: &Method, path: &str) -> bool {
    path == "/mcp"
        || path.starts_with("/mcp/")
        || path == "/healthz"
        || path == "/readyz"
        || is_site_file(method, path)
}

/// A read of one of the site's files: a GET of `/pkg/…` or of a file at the site's top
/// (see `is_static`), outside the API.
fn is_site_file(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
        && !path.starts_with("/api/")
        && !path.starts_with("/auth/")
        && crate::ops::rate_limit::is_static(path)
}

/// Paths anyone may reach: the login pages and routes, health, the metrics (their own token;
/// an admin's login also works).
pub fn is_open(path: &str) -> bool {
    matches!(
        path,
        "/login" | "/signup" | "/healthz" | "/readyz" | "/metrics"
    ) || path.starts_with("/auth/")
}

async fn identify(
    accounts: &Accounts,
    headers: &HeaderMap,
    path: &str,
    peer: Option<std::net::IpAddr>,
) -> Result<Found, Response> {
    let now = crate::store::now_ms();
    let unavailable = |e: crate::store::StoreError| {
        tracing::warn!("could not check a login: {e}");
        refuse(
            path,
            StatusCode::SERVICE_UNAVAILABLE,
            "accounts are unavailable, try again",
        )
    };
    let bearer = bearer(headers).map_err(|why| refuse(path, StatusCode::UNAUTHORIZED, why))?;
    // The open paths take other bearer tokens (the admin token on /metrics).
    let bearer = bearer.filter(|b| b.starts_with(super::TOKEN_PREFIX) || !is_open(path));
    if let Some(bearer) = bearer {
        return match accounts.of_token(bearer, now).await.map_err(unavailable)? {
            Some(user) => Ok(Found::User(user, Via::Token)),
            None => Err(refuse(
                path,
                StatusCode::UNAUTHORIZED,
                "unknown or revoked token",
            )),
        };
    }
    if accounts.config.mode == crate::config::auth::AuthMode::Proxy {
        if let Some(found) = from_proxy(accounts, headers, path, peer).await? {
            return Ok(found);
        }
    }
    let jar = CookieJar::from_headers(headers);
    let Some(cookie) = jar.get(LOGIN_COOKIE) else {
        return Ok(Found::Nobody);
    };
    Ok(
        match accounts
            .of_login(cookie.value(), now)
            .await
            .map_err(unavailable)?
        {
            Some(user) => Found::User(user, Via::Cookie),
            None => Found::Nobody,
        },
    )
}

/// The user a trusted proxy names. The header from anyone else is refused, never ignored:
/// a proxy that forgot to strip it must be noticed.
async fn from_proxy(
    accounts: &Accounts,
    headers: &HeaderMap,
    path: &str,
    peer: Option<std::net::IpAddr>,
) -> Result<Option<Found>, Response> {
    let values: Vec<_> = headers
        .get_all(accounts.config.header.as_str())
        .iter()
        .collect();
    if values.is_empty() {
        return Ok(None);
    }
    let trusted = peer.is_some_and(|ip| accounts_trust(accounts, ip));
    if !trusted {
        return Err(refuse(
            path,
            StatusCode::UNAUTHORIZED,
            "the user header is only accepted from a trusted proxy",
        ));
    }
    let [value] = values.as_slice() else {
        return Err(refuse(
            path,
            StatusCode::UNAUTHORIZED,
            "the user header was sent more than once",
        ));
    };
    let Some(name) = value.to_str().ok().filter(|v| !v.trim().is_empty()) else {
        return Err(refuse(
            path,
            StatusCode::UNAUTHORIZED,
            "the user header is empty or not text",
        ));
    };
    match accounts.of_proxy(name).await {
        Ok(Some(user)) => Ok(Some(Found::User(user, Via::Proxy))),
        Ok(None) => Err(refuse(
            path,
            StatusCode::UNAUTHORIZED,
            "the user header names no usable user",
        )),
        Err(e) => {
            tracing::warn!("could not read a proxy user's account: {e}");
            Err(refuse(
                path,
                StatusCode::SERVICE_UNAVAILABLE,
                "accounts are unavailable, try again",
            ))
        }
    }
}

fn accounts_trust(accounts: &Accounts, ip: std::net::IpAddr) -> bool {
    accounts
        .trusted_proxies
        .iter()
        .any(|t| t.to_canonical() == ip)
}

/// The bearer token of `Authorization`, if one was sent; more than one, or another scheme,
/// is refused.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, &'static str> {
    let values: Vec<_> = headers.get_all(header::AUTHORIZATION).iter().collect();
    match values.as_slice() {
        [] => Ok(None),
        [value] => value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| Some(t.trim()))
            .ok_or("Authorization must be \"Bearer <token>\""),
        _ => Err("Authorization was sent more than once"),
    }
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a state-changing request comes from Parlor's own pages: its `Origin` (one) is
/// Parlor's (the public address's, or the request's own host); without `Origin`, only a
/// request no browser form could send (JSON) from no other site.
pub fn same_origin(headers: &HeaderMap, public_url: Option<&str>) -> Result<(), &'static str> {
    let origins: Vec<_> = headers.get_all(header::ORIGIN).iter().collect();
    match origins.as_slice() {
        [] => {
            let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
            if site.is_some_and(|s| s != "same-origin" && s != "none") {
                return Err("this request came from another site");
            }
            match sent_as_json(headers) {
                true => Ok(()),
                false => Err("a form must be sent from Parlor's own page (no Origin)"),
            }
        }
        [origin] => {
            let origin = origin.to_str().unwrap_or_default();
            match is_own(origin, headers, public_url) {
                true => Ok(()),
                false => Err("this request came from another site"),
            }
        }
        _ => Err("Origin was sent more than once"),
    }
}

fn is_own(origin: &str, headers: &HeaderMap, public_url: Option<&str>) -> bool {
    if let Some(public) = public_url.and_then(origin_of) {
        if origin.eq_ignore_ascii_case(&public) {
            return true;
        }
    }
    let hosts: Vec<_> = headers.get_all(header::HOST).iter().collect();
    let [host] = hosts.as_slice() else {
        return false;
    };
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    matches!((authority, host.to_str()), (Some(a), Ok(h)) if !h.is_empty() && a.eq_ignore_ascii_case(h))
}

/// `scheme://host[:port]` of a URL.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

fn sent_as_json(headers: &HeaderMap) -> bool {
    let types: Vec<_> = headers.get_all(header::CONTENT_TYPE).iter().collect();
    matches!(types.as_slice(), [t] if t.to_str().is_ok_and(|t| t.trim_start().to_ascii_lowercase().starts_with("application/json")))
}

/// Pages send the browser to the login page (and back afterwards); the API answers 401.
fn login_required(request: &Request) -> Response {
    let path = request.uri().path();
    if is_api(path) || !matches!(*request.method(), Method::GET | Method::HEAD) {
        return refuse(
            path,
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
    Redirect::to(&format!("/login?next={next}")).into_response()
}

fn is_api(path: &str) -> bool {
    path.starts_with("/api/") || path == "/metrics"
}

/// A refusal: JSON for the API, text for pages and forms.
pub fn refuse(path: &str, status: StatusCode, reason: &str) -> Response {
    match is_api(path) {
        true => (status, axum::Json(serde_json::json!({ "error": reason }))).into_response(),
        false => (status, reason.to_owned()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn only_parlors_own_origin_may_change_state() {
        let own = headers(&[
            ("host", "chat.local:3000"),
            ("origin", "http://chat.local:3000"),
        ]);
        assert!(same_origin(&own, None).is_ok());
        let public = headers(&[
            ("host", "internal:3000"),
            ("origin", "https://chat.example.com"),
        ]);
        assert!(same_origin(&public, Some("https://chat.example.com/")).is_ok());
        assert!(same_origin(&public, None).is_err());
        let foreign = headers(&[("host", "chat.local:3000"), ("origin", "http://evil.test")]);
        assert!(same_origin(&foreign, None).is_err());
        let twice = headers(&[
            ("host", "chat.local:3000"),
            ("origin", "http://chat.local:3000"),
            ("origin", "http://evil.test"),
        ]);
        assert!(same_origin(&twice, None).is_err());
        let two_hosts = headers(&[
            ("host", "evil.test"),
            ("host", "chat.local"),
            ("origin", "http://evil.test"),
        ]);
        assert!(same_origin(&two_hosts, None).is_err());
        let null = headers(&[("host", "chat.local"), ("origin", "null")]);
        assert!(same_origin(&null, None).is_err());
    }

    #[test]
    fn without_origin_only_json_from_no_other_site_passes() {
        let json = headers(&[("content-type", "application/json")]);
        assert!(same_origin(&json, None).is_ok());
        let form = headers(&[("content-type", "application/x-www-form-urlencoded")]);
        assert!(same_origin(&form, None).is_err());
        assert!(same_origin(&HeaderMap::new(), None).is_err());
        let cross = headers(&[
            ("content-type", "application/json"),
            ("sec-fetch-site", "cross-site"),
        ]);
        assert!(same_origin(&cross, None).is_err());
    }

    #[test]
    fn only_reading_the_sites_files_skips_the_login() {
        assert!(needs_nobody(&Method::GET, "/pkg/parlor.wasm"));
        assert!(needs_nobody(&Method::GET, "/favicon.svg"));
        assert!(needs_nobody(&Method::POST, "/mcp"));
        // A conversation id with a dot is not a file, and changing anything never is.
        assert!(!needs_nobody(
            &Method::PATCH,
            "/api/chat/general/sessions/a.b"
        ));
        assert!(!needs_nobody(
            &Method::DELETE,
            "/api/chat/general/sessions/a.b"
        ));
        assert!(!needs_nobody(
            &Method::GET,
            "/api/chat/general/sessions/a.b/export"
        ));
        assert!(!needs_nobody(&Method::GET, "/api/x.json"));
        // Nor is a path that only looks like one: it renders the app's 404 page.
        assert!(!needs_nobody(&Method::GET, "/x.php"));
        assert!(!needs_nobody(&Method::POST, "/favicon.svg"));
        assert!(!is_open("/favicon.svg"));
    }

    #[test]
    fn a_bearer_is_read_once_and_only_as_a_bearer() {
        assert_eq!(bearer(&HeaderMap::new()), Ok(None));
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer abc")])),
            Ok(Some("abc"))
        );
        assert!(bearer(&headers(&[("authorization", "Basic abc")])).is_err());
        assert!(bearer(&headers(&[
            ("authorization", "Bearer a"),
            ("authorization", "Bearer b")
        ]))
        .is_err());
    }
}
