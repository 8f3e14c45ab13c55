//! Logging in and out, signing up: `GET /login`, `GET /signup`, `POST /auth/login`,
//! `POST /auth/logout`, `POST /auth/signup`. Forms from the pages get a redirect (or the page
//! again with the error); JSON from scripts gets 204 with the cookie (or a JSON error).

use super::session::{logged_in_response, redirect_next, safe_next};
use crate::accounts::pages::{self, LoginView};
use crate::accounts::{Accounts, LoginError};
use crate::ops::browser::set_cookie;
use crate::state::{AppState, Services};
use crate::table::Mount;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use axum_extra::extract::cookie::CookieJar;
use parlor_domain::ApiError;
use std::collections::HashMap;
use std::net::SocketAddr;

/// The routes of logging in, signing up and the account's own page and API.
pub fn router() -> Router<AppState> {
    Router::new()
        .mount("/login", get(get_login))
        .mount("/signup", get(get_signup))
        .mount("/auth/signup", post(post_signup))
        .mount("/auth/oidc", get(super::callback::get_start))
        .mount("/auth/callback", get(super::callback::get_callback))
        .merge(super::tokens::router())
}

/// What a login or sign-up form (or JSON body) carries.
#[derive(Default)]
struct Credentials {
    username: String,
    password: String,
    next: String,
    json: bool,
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"))
}

/// The form's or JSON body's fields; a JSON body that is not an object is refused.
fn credentials(headers: &HeaderMap, body: &[u8]) -> Result<Credentials, String> {
    let json = is_json(headers);
    let fields: HashMap<String, String> = match json {
        true => serde_json::from_slice::<HashMap<String, serde_json::Value>>(body)
            .map_err(|e| format!("the body is not a JSON object: {e}"))?
            .into_iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_owned())))
            .collect(),
        false => url::form_urlencoded::parse(body).into_owned().collect(),
    };
    let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
    Ok(Credentials {
        username: field("username"),
        password: field("password"),
        next: field("next"),
        json,
    })
}

fn bad_request(json: bool, reason: &str) -> Response {
    match json {
        true => (
            StatusCode::BAD_REQUEST,
            axum::Json(serde_json::json!({ "error": reason })),
        )
            .into_response(),
        false => pages::page(
            StatusCode::BAD_REQUEST,
            "Log in",
            &format!("<p>{}</p>", parlor_app::components::escape_html(reason)),
        ),
    }
}

fn accounts(services: &Services) -> &Accounts {
    services
        .accounts
        .as_deref()
        .expect("the accounts' routes are served only when accounts are on")
}

async fn get_login(
    State(app): State<AppState>,
    user: Option<axum::Extension<crate::accounts::User>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let accounts = accounts(&app.services);
    let next = query.get("next").map(String::as_str).unwrap_or("/");
    if user.is_some() {
        // Logged in already: on to where the login was for.
        return redirect_next(next);
    }
    if let Some(provider) = &accounts.provider {
        // Says at once when the provider cannot be reached.
        let status = provider.status().await;
        let down = (status != "ok").then_some(status);
        let code = match down {
            Some(_) => StatusCode::SERVICE_UNAVAILABLE,
            None => StatusCode::OK,
        };
        // Only Parlor's own words: never text from the URL (anyone can send a link).
        let view = LoginView {
            error: down.as_deref(),
            next: &safe_next(next),
            name: "",
            signup: false,
            provider: Some(&provider.display_name()),
        };
        return pages::login(code, &view);
    }
    if accounts.config.mode == crate::config::auth::AuthMode::Proxy {
        return pages::page(
            StatusCode::UNAUTHORIZED,
            "Log in",
            "<p>Parlor takes who you are from the proxy in front of it: open Parlor through it.</p>",
        );
    }
    pages::login(
        StatusCode::OK,
        &LoginView {
            error: None,
            next: &safe_next(next),
            name: "",
            signup: signup_open(accounts),
            provider: None,
        },
    )
}

fn signup_open(accounts: &Accounts) -> bool {
    accounts.config.signup && accounts.config.mode == crate::config::auth::AuthMode::Local
}

async fn get_signup(State(app): State<AppState>) -> Response {
    match signup_open(accounts(&app.services)) {
        true => pages::signup(StatusCode::OK, None, ""),
        false => not_found(),
    }
}

fn api_not_found() -> Response {
    let error = ApiError {
        error: "there is no password login here (PARLOR_AUTH is not local)".into(),
    };
    (StatusCode::NOT_FOUND, axum::Json(error)).into_response()
}

fn not_found() -> Response {
    pages::page(
        StatusCode::NOT_FOUND,
        "Not found",
        "<p>There is no such page.</p>",
    )
}

/// A login, as a script sends it (the page's form sends the same fields form-encoded).
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct LoginRequest {
    pub username: String,
    pub password: String,
    /// Where a form's redirect goes (a path of this site).
    #[serde(default)]
    pub next: Option<String>,
}

#[utoipa::path(
    post,
    path = "/auth/login",
    request_body(content = LoginRequest, content_type = "application/json", description = "Or form-encoded, as the login page sends it"),
    responses(
        (status = 204, description = "Logged in (JSON): the `parlor_login` cookie is set"),
        (status = 303, description = "Logged in (form): on to `next`, with the cookie"),
        (status = 400, description = "A body that does not read, a name over 256 bytes or a password over 1024 bytes", body = ApiError),
        (status = 401, description = "A wrong name or password (the same answer for both)", body = ApiError),
        (status = 403, description = "A form from another site, or without `Origin`", body = ApiError),
        (status = 404, description = "Not `PARLOR_AUTH=local`", body = ApiError),
        (status = 429, description = "Too many failures for this name or from this address; see Retry-After", body = ApiError),
    )
)]
pub async fn post_login(State(app): State<AppState>, request: Request) -> Response {
    let services = app.services.clone();
    let Some(accounts) = services.accounts.as_deref() else {
        return api_not_found();
    };
    if accounts.config.mode != crate::config::auth::AuthMode::Local {
        return api_not_found();
    }
    let address = client_address(&services, &request);
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, crate::config::MAX_BODY_BYTES).await else {
        return bad_request(false, "the request body is too large");
    };
    let form = match credentials(&parts.headers, &body) {
        Ok(form) => form,
        Err(why) => return bad_request(true, &why),
    };
    let now = crate::store::now_ms();
    match accounts
        .check_password(&form.username, &form.password, address, now)
        .await
    {
        Ok(account) => {
            logged_in_response(&services, &parts.headers, &account, &form.next, form.json).await
        }
        Err(e) => login_refused(e, &form),
    }
}

fn login_refused(error: LoginError, form: &Credentials) -> Response {
    let (status, retry) = match &error {
        LoginError::Wrong => (StatusCode::UNAUTHORIZED, None),
        LoginError::Locked { retry_after_s } => {
            (StatusCode::TOO_MANY_REQUESTS, Some(*retry_after_s))
        }
        LoginError::Input(_) => (StatusCode::BAD_REQUEST, None),
        LoginError::Busy => (StatusCode::SERVICE_UNAVAILABLE, Some(1)),
        LoginError::Store(e) => {
            tracing::warn!("a login could not be checked: {e}");
            (StatusCode::SERVICE_UNAVAILABLE, None)
        }
    };
    let message = match &error {
        LoginError::Store(_) => "accounts are unavailable, try again".to_owned(),
        other => other.to_string(),
    };
    let mut response = match form.json {
        true => (status, axum::Json(serde_json::json!({ "error": message }))).into_response(),
        false => pages::login(
            status,
            &LoginView {
                error: Some(&message),
                next: &safe_next(&form.next),
                name: if form.username.len() <= 64 {
                    &form.username
                } else {
                    ""
                },
                signup: false,
                provider: None,
            },
        ),
    };
    if let Some(seconds) = retry {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

#[utoipa::path(
    post,
    path = "/auth/logout",
    responses(
        (status = 204, description = "Logged out (a JSON request); the login ends on every process"),
        (status = 303, description = "Logged out (a form): on to the login page"),
        (status = 404, description = "Accounts are off", body = ApiError),
    )
)]
pub async fn post_logout(State(app): State<AppState>, headers: HeaderMap) -> Response {
    let services = &app.services;
    let Some(accounts) = services.accounts.as_deref() else {
        return api_not_found();
    };
    let jar = CookieJar::from_headers(&headers);
    if let Some(login) = jar.get(accounts.config.login_cookie) {
        if let Err(e) = accounts.end_login(login.value()).await {
            tracing::warn!("could not end a login: {e}");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "accounts are unavailable, try again",
            )
                .into_response();
        }
    }
    let mut response = match is_json(&headers) {
        true => StatusCode::NO_CONTENT.into_response(),
        false => Redirect::to("/login").into_response(),
    };
    let secure = services.config.cookie_secure;
    if let Some(cookie) = set_cookie(
        accounts.config.login_cookie,
        String::new(),
        "/",
        time::Duration::ZERO,
        secure,
    ) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

async fn post_signup(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let services = app.services.clone();
    let accounts = accounts(&services);
    if !signup_open(accounts) {
        return not_found();
    }
    let form = match credentials(&headers, &body) {
        Ok(form) => form,
        Err(why) => return bad_request(true, &why),
    };
    match accounts.sign_up(&form.username, &form.password).await {
        Ok(account) => {
            logged_in_response(&services, &headers, &account, &form.next, form.json).await
        }
        Err(e) => {
            let status = match e {
                crate::accounts::AccountError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                crate::accounts::AccountError::Taken(_) => StatusCode::CONFLICT,
                _ => StatusCode::BAD_REQUEST,
            };
            match form.json {
                true => (
                    status,
                    axum::Json(serde_json::json!({ "error": e.to_string() })),
                )
                    .into_response(),
                false => {
                    let name = if form.username.len() <= 64 {
                        form.username.as_str()
                    } else {
                        ""
                    };
                    pages::signup(status, Some(&e.to_string()), name)
                }
            }
        }
    }
}

/// The address failed logins count against (as the rate limits see it).
fn client_address(services: &Services, request: &Request) -> std::net::IpAddr {
    crate::ops::rate_limit::ClientAddress::new(services.config.trusted_proxies.clone())
        .key(request)
        .or_else(|| {
            request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(a)| a.ip())
        })
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_login_only_a_path_of_this_site_is_followed() {
        assert_eq!(
            safe_next("/chat/default?debug=true"),
            "/chat/default?debug=true"
        );
        assert_eq!(safe_next("https://evil.test/"), "/");
        assert_eq!(safe_next("//evil.test/"), "/");
        assert_eq!(safe_next("/\\evil.test"), "/");
        assert_eq!(safe_next(""), "/");
        assert_eq!(safe_next("/auth/logout"), "/");
        // Browsers drop tabs and line breaks from a Location, which would leave `//host`.
        assert_eq!(safe_next("/\t/evil.example"), "/");
        assert_eq!(safe_next("/\n/evil.example"), "/");
        assert_eq!(safe_next("/\r\nset-cookie: x=y"), "/");
        assert_eq!(safe_next("/ /evil.example"), "/");
        assert_eq!(safe_next("/\u{a0}/evil.example"), "/");
        assert_eq!(safe_next("/\u{3000}/evil.example"), "/");
        // A dot segment resolving to another spelling of `//host`, or to the login.
        assert_eq!(safe_next("/./evil.example"), "/evil.example");
        assert_eq!(safe_next("/a/..//evil.example"), "/");
        assert_eq!(safe_next("/x/../auth/logout"), "/");
        assert_eq!(safe_next("/%09/evil.example"), "/%09/evil.example");
        assert_eq!(safe_next("/chat?agent=a b"), "/");
        assert_eq!(safe_next("/chat?agent=\u{e9}"), "/chat?agent=%C3%A9");
        for next in [
            "/",
            "/chat?agent=general",
            "/%09/evil.example",
            "/./evil.example",
        ] {
            assert!(!safe_next(next).starts_with("//"), "{next}");
        }
    }
}
