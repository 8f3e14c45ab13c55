//! Per-client rate limits (`tower_governor`): the chat API and the pages each allow a number
//! of requests per minute per client address, answering 429 with `Retry-After` beyond it.
//!
//! The client address is the connection's peer; only when that peer is a proxy the operator
//! trusts (`PARLOR_TRUSTED_PROXIES`) is `X-Forwarded-For` read, from the right, skipping the
//! trusted proxies, so a client cannot choose its own address.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, Response, StatusCode};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

/// The address a request counts against.
#[derive(Clone, Debug, Default)]
pub struct ClientAddress {
    trusted_proxies: Arc<Vec<IpAddr>>,
}

impl ClientAddress {
    pub fn new(trusted_proxies: Vec<IpAddr>) -> Self {
        Self {
            trusted_proxies: Arc::new(trusted_proxies),
        }
    }

    /// The client's address: the peer's, or, from a trusted proxy, the last address in
    /// `X-Forwarded-For` that is not a trusted proxy.
    pub fn of(&self, peer: IpAddr, forwarded_for: Option<&str>) -> IpAddr {
        if !self.trusted_proxies.contains(&peer) {
            return peer;
        }
        let Some(chain) = forwarded_for else {
            return peer;
        };
        chain
            .rsplit(',')
            .filter_map(|hop| hop.trim().parse::<IpAddr>().ok())
            .find(|hop| !self.trusted_proxies.contains(hop))
            .unwrap_or(peer)
    }
}

impl KeyExtractor for ClientAddress {
    type Key = IpAddr;

    fn extract<T>(&self, request: &Request<T>) -> Result<IpAddr, GovernorError> {
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())
            .ok_or(GovernorError::UnableToExtractKey)?;
        let forwarded = request
            .headers()
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok());
        Ok(self.of(peer, forwarded))
    }
}

/// How a refusal is said: as the API's JSON error or as a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Json,
    Html,
}

/// `router`'s routes (not its fallback, so static files are never limited) allow
/// `per_minute` requests per client address, in bursts of up to that many; 0: no limit.
pub fn limit<S>(
    router: axum::Router<S>,
    per_minute: u32,
    addresses: ClientAddress,
    answer: Answer,
) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    if per_minute == 0 {
        return router;
    }
    let period = Duration::from_secs(60) / per_minute;
    let Some(config) = GovernorConfigBuilder::default()
        .key_extractor(addresses)
        .period(period)
        .burst_size(per_minute)
        .finish()
    else {
        tracing::error!("the rate limit {per_minute}/min could not be set up");
        return router;
    };
    let limiter = config.limiter().clone();
    // Forget clients that have been quiet for a while, so the table does not grow forever.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                limiter.retain_recent();
            }
        });
    }
    router.route_layer(
        GovernorLayer::new(Arc::new(config)).error_handler(move |e| refusal(e, answer)),
    )
}

/// The 429 (with `Retry-After`) a limited client gets.
fn refusal(error: GovernorError, answer: Answer) -> Response<Body> {
    let (status, wait, headers) = match error {
        GovernorError::TooManyRequests { wait_time, headers } => {
            (StatusCode::TOO_MANY_REQUESTS, wait_time, headers)
        }
        GovernorError::UnableToExtractKey => (StatusCode::INTERNAL_SERVER_ERROR, 0, None),
        GovernorError::Other { code, headers, .. } => (code, 0, headers),
    };
    if status == StatusCode::TOO_MANY_REQUESTS {
        crate::metrics::rate_limited(match answer {
            Answer::Json => "api",
            Answer::Html => "pages",
        });
    }
    let message = if status == StatusCode::TOO_MANY_REQUESTS {
        format!("Too many requests from your address: try again in {wait} s.")
    } else {
        "Could not tell who sent this request.".to_owned()
    };
    let (content_type, body) = match answer {
        Answer::Json => (
            "application/json",
            serde_json::to_string(&parlor_domain::ApiError { error: message }).unwrap_or_default(),
        ),
        Answer::Html => (
            "text/html; charset=utf-8",
            format!(
                "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
                 <title>Slow down</title></head><body><h1>Slow down</h1>\
                 <p role=\"alert\">{message}</p></body></html>"
            ),
        ),
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    if let Some(headers) = headers {
        response.headers_mut().extend(headers);
    }
    if status == StatusCode::TOO_MANY_REQUESTS
        && !response.headers().contains_key(header::RETRY_AFTER)
    {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, wait.max(1).into());
    }
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_addresses_count_only_from_a_trusted_proxy() {
        let addresses = ClientAddress::new(vec![ip("10.0.0.1"), ip("10.0.0.2")]);
        // Straight from a client: its own address, whatever it claims.
        assert_eq!(
            addresses.of(ip("203.0.113.9"), Some("198.51.100.1")),
            ip("203.0.113.9")
        );
        // Through the trusted proxies: the last address they did not add themselves.
        assert_eq!(
            addresses.of(ip("10.0.0.1"), Some("198.51.100.1, 203.0.113.7, 10.0.0.2")),
            ip("203.0.113.7")
        );
        // A proxy without the header, or with only proxies or garbage in it: the proxy.
        assert_eq!(addresses.of(ip("10.0.0.1"), None), ip("10.0.0.1"));
        assert_eq!(
            addresses.of(ip("10.0.0.1"), Some("10.0.0.2, not-an-address")),
            ip("10.0.0.1")
        );
    }
}
