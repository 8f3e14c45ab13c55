//! What every way of logging in ends with: a new login id in the cookie (the one the
//! browser carried ended), the browser's cookie conversations moved to the account, and the
//! way on to where the user was going.

use crate::accounts::{Account, User};
use crate::ops::browser::{self, set_cookie};
use crate::state::Services;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use std::sync::Arc;

/// Where to go after logging in: a path of this site only (never another site's address),
/// as the URL standard resolves it against the site's own origin. Anything that is not
/// plainly such a path (another origin, `//host`, a backslash, a control character or any
/// whitespace a browser would drop, the login routes themselves) is `/`. The answer is
/// percent-encoded as URLs are, so it is always a valid `Location`.
pub fn safe_next(next: &str) -> String {
    const BASE: &str = "http://parlor.invalid/";
    let plain = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(|c| c.is_control() || c.is_whitespace());
    let resolved = plain
        .then(|| url::Url::parse(BASE).ok()?.join(next).ok())
        .flatten()
        .filter(|url| url.origin() == url::Url::parse(BASE).expect("a valid base").origin());
    let Some(url) = resolved else {
        return "/".to_owned();
    };
    let path = url.path();
    if path.starts_with("/auth/") || path == "/login" || path == "/signup" || path.starts_with("//")
    {
        return "/".to_owned();
    }
    match url.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    }
}

/// A 303 to `next` after [`safe_next`] (never a panic, whatever `next` holds).
pub fn redirect_next(next: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let location = header::HeaderValue::from_str(&safe_next(next))
        .unwrap_or(header::HeaderValue::from_static("/"));
    response.headers_mut().insert(header::LOCATION, location);
    response
}

/// A login that succeeded: a new login id in the cookie (the old one ended), and the
/// conversations this browser owned by cookie moved to the account.
pub async fn logged_in_response(
    services: &Arc<Services>,
    headers: &HeaderMap,
    account: &Account,
    next: &str,
    json: bool,
) -> Response {
    let accounts = services
        .accounts
        .as_deref()
        .expect("logins are made only when accounts are on");
    let jar = CookieJar::from_headers(headers);
    if let Some(old) = jar.get(accounts.config.login_cookie) {
        if let Err(e) = accounts.end_login(old.value()).await {
            tracing::warn!("could not end the previous login: {e}");
        }
    }
    let now = crate::store::now_ms();
    let (secret, _) = match accounts.start_login(account, now).await {
        Ok(started) => started,
        Err(e) => {
            tracing::warn!("a login could not be stored: {e}");
            let status = StatusCode::SERVICE_UNAVAILABLE;
            return (status, "accounts are unavailable, try again").into_response();
        }
    };
    let user = accounts.user_of(account);
    if let Some(browser) = browser::from_jar(&jar, &services.cookie_key) {
        move_conversations(services, &browser, &user).await;
    }
    let mut response = match json {
        true => StatusCode::NO_CONTENT.into_response(),
        false => redirect_next(next),
    };
    let lasts = time::Duration::days(accounts.config.login_days as i64);
    let secure = services.config.cookie_secure;
    if let Some(cookie) = set_cookie(accounts.config.login_cookie, secret, "/", lasts, secure) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// Gives the account what this browser owned by its cookie (at its first login; later
/// logins find nothing left to move).
pub async fn move_conversations(
    services: &Services,
    browser: &parlor_app::ssr::BrowserSession,
    user: &User,
) {
    let from = browser::owner(browser);
    let to = browser::owner(&user.session());
    for id in services.histories.ids() {
        let Some(history) = services.histories.get(id) else {
            continue;
        };
        let owned = match history.store.list_owned(&from).await {
            Ok(owned) => owned,
            Err(e) => {
                tracing::warn!("could not list a browser's conversations in {id}: {e}");
                continue;
            }
        };
        for listed in owned {
            // The whole details: the list has only what the sidebar shows.
            let moved = match history.store.info(&listed.session_id).await {
                Ok(Some(mut info)) => {
                    info.owner = Some(to.clone());
                    history.store.put_info(&info).await
                }
                Ok(None) => continue,
                Err(e) => Err(e),
            };
            if let Err(e) = moved {
                tracing::warn!("could not move {} to {}: {e}", listed.session_id, user.name);
            }
        }
    }
}
