//! The OpenID routes: `GET /auth/oidc` sends the browser to the provider (its `state` in the
//! `parlor_oidc` cookie), `GET /auth/callback` finishes the login there.

use super::session::{logged_in_response, safe_next};
use crate::accounts::oidc::{OidcError, FLOW_MS};
use crate::accounts::pages::{self, LoginView};
use crate::ops::browser::set_cookie;
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::CookieJar;
use std::collections::HashMap;

/// The cookie holding the `state` of this browser's login at the provider.
const FLOW_COOKIE: &str = "parlor_oidc";

/// The login page again, with why the login failed.
/// What an OAuth error code (RFC 6749, OpenID Connect Core) means, in Parlor's words.
fn refusal_text(code: &str) -> &'static str {
    match code {
        "access_denied" => "access was denied",
        "login_required" | "interaction_required" => "you need to log in at the provider",
        "consent_required" => "Parlor needs your consent at the provider",
        "temporarily_unavailable" => "the provider is busy; try again in a moment",
        "server_error" => "the provider had an error",
        _ => "the provider did not complete the login",
    }
}

fn failed(error: &OidcError, provider: &str) -> Response {
    let status = match error {
        OidcError::Unreachable(_) => StatusCode::SERVICE_UNAVAILABLE,
        OidcError::Store(e) => {
            tracing::warn!("an OpenID login could not be stored: {e}");
            StatusCode::SERVICE_UNAVAILABLE
        }
        OidcError::Domain(_) => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    };
    let message = match error {
        OidcError::Store(_) => "accounts are unavailable, try again".to_owned(),
        other => other.to_string(),
    };
    pages::login(
        status,
        &LoginView {
            error: Some(&message),
            next: "/",
            name: "",
            signup: false,
            provider: Some(provider),
        },
    )
}

pub async fn get_start(
    State(app): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let services = &app.services;
    let Some(accounts) = services.accounts.as_deref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some(provider) = accounts.provider.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let next = safe_next(query.get("next").map(String::as_str).unwrap_or("/"));
    let now = crate::store::now_ms();
    match provider.start(accounts, &next, now).await {
        Ok((url, state)) => {
            let mut response = Redirect::to(&url).into_response();
            let secure = services.config.cookie_secure;
            let minutes = time::Duration::milliseconds(FLOW_MS);
            if let Some(cookie) = flow_cookie(state, minutes, secure) {
                response.headers_mut().append(header::SET_COOKIE, cookie);
            }
            response
        }
        Err(e) => failed(&e, &provider.display_name()),
    }
}

/// The flow cookie: `HttpOnly`, `SameSite=Lax` (the provider sends the browser back with a
/// top-level GET, which carries it), for the flow's ten minutes at most.
fn flow_cookie(
    state: String,
    lasts: time::Duration,
    secure: bool,
) -> Option<axum::http::HeaderValue> {
    set_cookie(FLOW_COOKIE, state, "/auth/", lasts, secure)
}

pub async fn get_callback(
    State(app): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let services = app.services.clone();
    let Some(accounts) = services.accounts.as_deref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some(provider) = accounts.provider.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let name = provider.display_name();
    if let Some(error) = query.get("error") {
        // The page says only what the standard error code means: the description is text
        // from a URL anyone can send (it goes to the log, cut short).
        let detail: String = query
            .get("error_description")
            .map(|d| d.chars().take(200).collect())
            .unwrap_or_default();
        tracing::info!("the provider refused a login: {:.40} {detail:?}", error);
        return failed(&OidcError::Refused(refusal_text(error).to_owned()), &name);
    }
    let jar = CookieJar::from_headers(&headers);
    let browser_state = jar.get(FLOW_COOKIE).map(|c| c.value().to_owned());
    let code = query.get("code").map(String::as_str).unwrap_or_default();
    let state = query.get("state").map(String::as_str).unwrap_or_default();
    let now = crate::store::now_ms();
    let finished = provider
        .finish(accounts, code, state, browser_state.as_deref(), now)
        .await;
    let mut response = match finished {
        Ok((identity, next)) => {
            let admin = provider.is_admin(&identity);
            match accounts.of_identity(&identity, admin).await {
                Ok(account) => {
                    logged_in_response(&services, &headers, &account, &next, false).await
                }
                Err(e) => failed(&OidcError::Store(e), &name),
            }
        }
        Err(e) => failed(&e, &name),
    };
    // The flow is over either way.
    if let Some(cookie) = flow_cookie(
        String::new(),
        time::Duration::ZERO,
        services.config.cookie_secure,
    ) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}
