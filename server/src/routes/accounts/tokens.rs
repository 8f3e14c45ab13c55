//! The account's own page and API: `/account/tokens` (tokens made and revoked from the page),
//! `GET /api/account` (who, admin, today's use), `GET|POST /api/account/tokens`,
//! `DELETE /api/account/tokens/{id}`. Each needs a login (the gate sees to it); with accounts
//! off, the API answers 404 saying so.

use crate::accounts::pages;
use crate::accounts::{AccountError, Accounts, Token, User};
use crate::state::AppState;
use crate::table::Mount;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use parlor_domain::ApiError;
use serde::{Deserialize, Serialize};

/// The tokens page (served when accounts are on).
pub fn router() -> Router<AppState> {
    Router::new()
        .mount("/account/tokens", get(get_page).post(post_page))
        .mount("/account/tokens/{id}/revoke", post(post_revoke))
        .mount("/account/logout-others", post(post_logout_others))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(ApiError {
            error: message.into(),
        }),
    )
        .into_response()
}

fn unavailable(e: impl std::fmt::Display) -> Response {
    tracing::warn!("accounts: {e}");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "accounts are unavailable, try again",
    )
}

/// Why the account API cannot answer for this request.
struct Refused(StatusCode, &'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// The accounts and who is asking, or why the API cannot answer.
fn signed_in(app: &AppState, user: Option<Extension<User>>) -> Result<(&Accounts, User), Refused> {
    let Some(accounts) = app.services.accounts.as_deref() else {
        return Err(Refused(
            StatusCode::NOT_FOUND,
            "accounts are off (PARLOR_AUTH=none): there is no account",
        ));
    };
    match user {
        Some(Extension(user)) => Ok((accounts, user)),
        None => Err(Refused(StatusCode::UNAUTHORIZED, "log in first")),
    }
}

async fn page(app: &AppState, user: &User, made: Option<&str>, error: Option<&str>) -> Response {
    let Some(accounts) = app.services.accounts.as_deref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match accounts.store().tokens(&user.name).await {
        Ok(list) => pages::tokens(user.name.as_str(), made, &list, error),
        Err(e) => unavailable(e),
    }
}

async fn get_page(State(app): State<AppState>, Extension(user): Extension<User>) -> Response {
    page(&app, &user, None, None).await
}

/// The page's form: makes a token and shows it once.
async fn post_page(
    State(app): State<AppState>,
    Extension(user): Extension<User>,
    body: Bytes,
) -> Response {
    let label: String = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "label")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let Some(accounts) = app.services.accounts.as_deref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match accounts.create_token(user.name.as_str(), &label).await {
        Ok((secret, _)) => page(&app, &user, Some(&secret), None).await,
        Err(AccountError::Input(why)) => page(&app, &user, None, Some(&why)).await,
        Err(e) => unavailable(e),
    }
}

/// "Log out other sessions": every login of this account ends, on every process; this
/// browser, when a login cookie is how it came, gets a new one (a proxy's user needs none:
/// a login cookie would let them past the proxy).
async fn post_logout_others(
    State(app): State<AppState>,
    Extension(user): Extension<User>,
    Extension(via): Extension<crate::accounts::gate::Via>,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some(accounts) = app.services.accounts.as_deref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Err(e) = accounts.end_logins(user.name.as_str()).await {
        return unavailable(e);
    }
    if via != crate::accounts::gate::Via::Cookie {
        return Redirect::to("/account/tokens").into_response();
    }
    let account = match accounts.store().user(&user.name).await {
        Ok(Some(account)) => account,
        Ok(None) => return StatusCode::NOT_FOUND.into_response(),
        Err(e) => return unavailable(AccountError::Store(e)),
    };
    super::session::logged_in_response(&app.services, &headers, &account, "/account/tokens", false)
        .await
}

async fn post_revoke(
    State(app): State<AppState>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Response {
    let Some(accounts) = app.services.accounts.as_deref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match accounts.store().revoke_token(&user.name, &id).await {
        Ok(_) => Redirect::to("/account/tokens").into_response(),
        Err(e) => unavailable(e),
    }
}

/// Who is logged in, and their day's use.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AccountView {
    pub name: String,
    /// What the page calls them: the identity their proxy or OpenID provider gives, else
    /// `name`.
    pub display: String,
    pub admin: bool,
    /// Model tokens used today (UTC), counted when a quota is set.
    pub used_today: u64,
    /// `PARLOR_TOKENS_PER_DAY` (0: none).
    pub tokens_per_day: u64,
    /// When today's count starts again (epoch milliseconds).
    pub resets_ms: i64,
}

#[utoipa::path(
    get,
    path = "/api/account",
    responses(
        (status = 200, description = "The account logged in (by its cookie or token)", body = AccountView),
        (status = 401, description = "No login", body = ApiError),
        (status = 404, description = "Accounts are off (`PARLOR_AUTH=none`)", body = ApiError),
    )
)]
pub async fn get_account(State(app): State<AppState>, user: Option<Extension<User>>) -> Response {
    let (accounts, user) = match signed_in(&app, user) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    match accounts.quota(&user, crate::store::now_ms()).await {
        Ok(quota) => Json(AccountView {
            name: user.name.to_string(),
            display: user.display.clone(),
            admin: user.admin,
            used_today: quota.used,
            tokens_per_day: quota.per_day,
            resets_ms: quota.resets_ms,
        })
        .into_response(),
        Err(e) => unavailable(e),
    }
}

/// A personal access token as it is listed: never its value.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenView {
    /// What revokes it.
    pub id: String,
    pub label: String,
    pub created_ms: i64,
    pub last_used_ms: Option<i64>,
}

impl From<Token> for TokenView {
    fn from(token: Token) -> TokenView {
        TokenView {
            id: token.id,
            label: token.label,
            created_ms: token.created_ms,
            last_used_ms: token.last_used_ms,
        }
    }
}

#[utoipa::path(
    get,
    path = "/api/account/tokens",
    responses(
        (status = 200, description = "The account's tokens, oldest first", body = [TokenView]),
        (status = 401, description = "No login", body = ApiError),
        (status = 404, description = "Accounts are off", body = ApiError),
    )
)]
pub async fn get_tokens(State(app): State<AppState>, user: Option<Extension<User>>) -> Response {
    let (accounts, user) = match signed_in(&app, user) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    match accounts.store().tokens(&user.name).await {
        Ok(list) => Json(list.into_iter().map(TokenView::from).collect::<Vec<_>>()).into_response(),
        Err(e) => unavailable(e),
    }
}

/// A new token's label.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// What it is for (at most 100 characters).
    #[serde(default)]
    pub label: String,
}

/// A token just made: its value, shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MadeToken {
    /// Send it as `Authorization: Bearer <token>`.
    pub token: String,
    #[serde(flatten)]
    pub listed: TokenView,
}

#[utoipa::path(
    post,
    path = "/api/account/tokens",
    request_body = NewToken,
    responses(
        (status = 201, description = "The new token, shown once", body = MadeToken),
        (status = 400, description = "A body that is not `{\"label\": …}`, or a label over 100 characters", body = ApiError),
        (status = 401, description = "No login", body = ApiError),
        (status = 403, description = "From another site (its `Origin`)", body = ApiError),
        (status = 404, description = "Accounts are off", body = ApiError),
    )
)]
pub async fn post_token(
    State(app): State<AppState>,
    user: Option<Extension<User>>,
    via: Option<Extension<crate::accounts::gate::Via>>,
    body: Bytes,
) -> Response {
    let (accounts, user) = match signed_in(&app, user) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    if via.is_some_and(|Extension(via)| via == crate::accounts::gate::Via::Token) {
        // A token that leaked must not be able to make itself a successor.
        return error(
            StatusCode::FORBIDDEN,
            "a personal token cannot make tokens: log in to make one",
        );
    }
    let request: NewToken = match body.is_empty() {
        true => NewToken::default(),
        false => match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(e) => {
                let why = format!("expected {{\"label\": \"…\"}}: {e}");
                return error(StatusCode::BAD_REQUEST, why);
            }
        },
    };
    match accounts
        .create_token(user.name.as_str(), &request.label)
        .await
    {
        Ok((token, record)) => {
            let made = MadeToken {
                token,
                listed: record.into(),
            };
            (StatusCode::CREATED, Json(made)).into_response()
        }
        Err(AccountError::Input(why)) => error(StatusCode::BAD_REQUEST, why),
        Err(e) => unavailable(e),
    }
}

#[utoipa::path(
    delete,
    path = "/api/account/tokens/{id}",
    params(("id" = String, Path, description = "The token's id, as listed")),
    responses(
        (status = 204, description = "Revoked: it opens nothing any more, on every process"),
        (status = 401, description = "No login", body = ApiError),
        (status = 404, description = "No token of this account has this id, or accounts are off", body = ApiError),
    )
)]
pub async fn delete_token(
    State(app): State<AppState>,
    user: Option<Extension<User>>,
    Path(id): Path<String>,
) -> Response {
    let (accounts, user) = match signed_in(&app, user) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    match accounts.store().revoke_token(&user.name, &id).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => error(StatusCode::NOT_FOUND, "you have no token with this id"),
        Err(e) => unavailable(e),
    }
}
