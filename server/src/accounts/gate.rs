//! What the gate (`crate::gate`) asks of accounts: who a request is (a personal token, a
//! trusted proxy's header, or a login cookie), and whether a browser's state-changing
//! request really comes from Parlor's own pages (CSRF).

use super::{Accounts, User};
use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use std::net::SocketAddr;

/// Who a request is, as the gate found it.
pub enum Found {
    Nobody,
    User(User, Via),
}

/// How the request showed who it is (in the request's extensions once the gate found it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Token,
    Proxy,
    Cookie,
}

/// Who `request` is, by its personal token, the trusted proxy's header or its login cookie.
/// On an `open` route other bearer tokens are not personal ones and are left to the route;
/// a refusal is said as JSON when `api`.
pub fn identify<'a>(
    accounts: &'a Accounts,
    request: &Request,
    open: bool,
    api: bool,
) -> impl std::future::Future<Output = Result<Found, Response>> + Send + 'a {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip().to_canonical());
    // The headers alone cross the awaits (a request's body is not `Sync`).
    let headers = request.headers().clone();
    async move { find(accounts, &headers, open, api, peer).await }
}

async fn find(
    accounts: &Accounts,
    headers: &HeaderMap,
    open: bool,
    api: bool,
    peer: Option<std::net::IpAddr>,
) -> Result<Found, Response> {
    let now = crate::store::now_ms();
    let unavailable = |e: crate::store::StoreError| {
        tracing::warn!("could not check a login: {e}");
        refuse_as(
            api,
            StatusCode::SERVICE_UNAVAILABLE,
            "accounts are unavailable, try again",
        )
    };
    let bearer = bearer(headers).map_err(|why| refuse_as(api, StatusCode::UNAUTHORIZED, why))?;
    // The open routes take other bearer tokens.
    let bearer = bearer.filter(|b| b.starts_with(super::TOKEN_PREFIX) || !open);
    if let Some(bearer) = bearer {
        return match accounts.of_token(bearer, now).await.map_err(unavailable)? {
            Some(user) => Ok(Found::User(user, Via::Token)),
            None => Err(refuse_as(
                api,
                StatusCode::UNAUTHORIZED,
                "unknown or revoked token",
            )),
        };
    }
    if accounts.config.mode == crate::config::auth::AuthMode::Proxy {
        if let Some(found) = from_proxy(accounts, headers, api, peer).await? {
            return Ok(found);
        }
    }
    let jar = CookieJar::from_headers(headers);
    let Some(cookie) = jar.get(accounts.config.login_cookie) else {
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
    api: bool,
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
        return Err(refuse_as(
            api,
            StatusCode::UNAUTHORIZED,
            "the user header is only accepted from a trusted proxy",
        ));
    }
    let [value] = values.as_slice() else {
        return Err(refuse_as(
            api,
            StatusCode::UNAUTHORIZED,
            "the user header was sent more than once",
        ));
    };
    let Some(name) = value.to_str().ok().filter(|v| !v.trim().is_empty()) else {
        return Err(refuse_as(
            api,
            StatusCode::UNAUTHORIZED,
            "the user header is empty or not text",
        ));
    };
    match accounts.of_proxy(name).await {
        Ok(Some(user)) => Ok(Some(Found::User(user, Via::Proxy))),
        Ok(None) => Err(refuse_as(
            api,
            StatusCode::UNAUTHORIZED,
            "the user header names no usable user",
        )),
        Err(e) => {
            tracing::warn!("could not read a proxy user's account: {e}");
            Err(refuse_as(
                api,
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

/// The token of an `Authorization` value of the Bearer scheme (whose name is matched without
/// case, RFC 9110); `None` for another scheme.
pub fn bearer_of(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
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
            .and_then(bearer_of)
            .map(Some)
            .ok_or("Authorization must be \"Bearer <token>\""),
        _ => Err("Authorization was sent more than once"),
    }
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

/// With `PARLOR_PUBLIC_URL`, the one origin it names (scheme, host and port: a plain-http
/// page on the same name is another site); without, a page of the host the request names,
/// over http or https (a proxy may end TLS in front of Parlor).
fn is_own(origin: &str, headers: &HeaderMap, public_url: Option<&str>) -> bool {
    if let Some(public) = public_url.and_then(origin_of) {
        return origin.eq_ignore_ascii_case(&public);
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

/// A refusal: JSON for the API, text for pages and forms.
pub fn refuse_as(api: bool, status: StatusCode, reason: &str) -> Response {
    match api {
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
