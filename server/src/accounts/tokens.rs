//! The account's own page and API: `/account/tokens` (made and revoked from the page),
//! `GET /api/account` (who, admin, today's use), `GET|POST /api/account/tokens`,
//! `DELETE /api/account/tokens/{id}`. Each needs a login (the gate sees to it).

use super::pages;
use super::{Accounts, Token, User};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/account/tokens", get(get_page).post(post_page))
        .route("/account/tokens/{id}/revoke", post(post_revoke))
        .route("/api/account", get(get_account))
        .route("/api/account/tokens", get(get_tokens).post(post_token))
        .route("/api/account/tokens/{id}", delete(delete_token))
}

fn accounts(app: &AppState) -> &Accounts {
    app.services
        .accounts
        .as_deref()
        .expect("served only when accounts are on")
}

fn unavailable(e: impl std::fmt::Display) -> Response {
    tracing::warn!("accounts: {e}");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({ "error": "accounts are unavailable, try again" })),
    )
        .into_response()
}

async fn page(app: &AppState, user: &User, made: Option<&str>, error: Option<&str>) -> Response {
    match accounts(app).store().tokens(&user.name).await {
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
    match accounts(&app)
        .create_token(user.name.as_str(), &label)
        .await
    {
        Ok((secret, _)) => page(&app, &user, Some(&secret), None).await,
        Err(super::AccountError::Input(why)) => page(&app, &user, None, Some(&why)).await,
        Err(e) => unavailable(e),
    }
}

async fn post_revoke(
    State(app): State<AppState>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Response {
    match accounts(&app).store().revoke_token(&user.name, &id).await {
        Ok(_) => Redirect::to("/account/tokens").into_response(),
        Err(e) => unavailable(e),
    }
}

/// Who is logged in, and their day's use.
#[derive(Debug, Serialize)]
pub struct AccountView {
    pub name: String,
    pub admin: bool,
    /// Model tokens used today (UTC), counted when a quota is set.
    pub used_today: u64,
    /// `PARLOR_TOKENS_PER_DAY` (0: none).
    pub tokens_per_day: u64,
    /// When today's count starts again (epoch milliseconds).
    pub resets_ms: i64,
}

async fn get_account(State(app): State<AppState>, Extension(user): Extension<User>) -> Response {
    let now = crate::store::now_ms();
    match accounts(&app).quota(&user, now).await {
        Ok(quota) => Json(AccountView {
            name: user.name.to_string(),
            admin: user.admin,
            used_today: quota.used,
            tokens_per_day: quota.per_day,
            resets_ms: quota.resets_ms,
        })
        .into_response(),
        Err(e) => unavailable(e),
    }
}

async fn get_tokens(State(app): State<AppState>, Extension(user): Extension<User>) -> Response {
    match accounts(&app).store().tokens(&user.name).await {
        Ok(list) => Json(list).into_response(),
        Err(e) => unavailable(e),
    }
}

/// A new token's label.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    #[serde(default)]
    pub label: String,
}

/// A token just made: its value, shown this once.
#[derive(Debug, Serialize)]
pub struct MadeToken {
    pub token: String,
    #[serde(flatten)]
    pub record: Token,
}

async fn post_token(
    State(app): State<AppState>,
    Extension(user): Extension<User>,
    body: Bytes,
) -> Response {
    let request: NewToken = match body.is_empty() {
        true => NewToken::default(),
        false => match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(e) => return (
                StatusCode::BAD_REQUEST,
                Json(serde_json::json!({ "error": format!("expected {{\"label\": \"…\"}}: {e}") })),
            )
                .into_response(),
        },
    };
    match accounts(&app)
        .create_token(user.name.as_str(), &request.label)
        .await
    {
        Ok((token, record)) => {
            (StatusCode::CREATED, Json(MadeToken { token, record })).into_response()
        }
        Err(super::AccountError::Input(why)) => (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": why })),
        )
            .into_response(),
        Err(e) => unavailable(e),
    }
}

async fn delete_token(
    State(app): State<AppState>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Response {
    match accounts(&app).store().revoke_token(&user.name, &id).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error": "you have no token with this id" })),
        )
            .into_response(),
        Err(e) => unavailable(e),
    }
}
