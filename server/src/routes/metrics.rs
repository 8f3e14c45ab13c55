//! `GET /metrics`: the Prometheus metrics (see [`crate::ops::metrics`]), for the operator only:
//! the request must carry the admin token (`Authorization: Bearer …` or
//! `X-Parlor-Admin-Token`). Without an admin token the route is off; `PARLOR_METRICS_ADDR`
//! serves the same text on a separate (private) address instead.

use super::error::ApiError;
use crate::state::{AppState, Services};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

#[utoipa::path(
    get,
    path = "/metrics",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Prometheus metrics", content_type = "text/plain", body = String),
        (status = 401, description = "Without the admin token", body = parlor_domain::ApiError),
        (status = 404, description = "Off: no admin token is configured", body = parlor_domain::ApiError),
    )
)]
pub async fn get_metrics(
    State(app): State<AppState>,
    user: Option<axum::Extension<crate::accounts::User>>,
    headers: HeaderMap,
) -> Response {
    let services = &app.services;
    // An admin's login is enough (accounts on); scripts keep using the admin token.
    if user.is_some_and(|axum::Extension(u)| u.admin) {
        return text(services).await;
    }
    if services.config.admin_token.is_none() {
        return ApiError::not_found(
            "metrics are off: set PARLOR_ADMIN_TOKEN (and send it as a bearer token) or \
             PARLOR_METRICS_ADDR",
        )
        .into_response();
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::accounts::gate::bearer_of);
    let token = bearer.or_else(|| {
        headers
            .get("x-parlor-admin-token")
            .and_then(|v| v.to_str().ok())
    });
    if !services.config.admin_token_matches(token) {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the metrics need the operator's admin token",
        )
        .into_response();
    }
    text(services).await
}

/// The metrics as a Prometheus text response.
pub async fn text(services: &Services) -> Response {
    let (ready, details) = super::ready::check(services).await;
    details.record(ready);
    let live = match services.live.count().await {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!("could not count live sessions: {e}");
            None
        }
    };
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::ops::metrics::render(live),
    )
        .into_response()
}
