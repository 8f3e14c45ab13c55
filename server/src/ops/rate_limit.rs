//! Per-client rate limits (`governor`): the chat API and the pages each allow a number of
//! requests per minute per client address, answering 429 with `Retry-After` beyond it.
//!
//! The client address is the connection's peer; only when that peer is a proxy the operator
//! trusts (`PARLOR_TRUSTED_PROXIES`) is `X-Forwarded-For` read: every line of it, in order,
//! walked from the right over trusted proxies; the first address that is not one is the
//! client, and a hop that cannot be read ends the walk at the nearest trusted proxy, so a
//! client cannot choose its own address whatever its proxies append. IPv6 clients count
//! by their /64 (one host usually holds a whole /64).

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderMap, Response, StatusCode};
use axum::middleware::Next;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// The address a request counts against.
#[derive(Clone, Debug, Default)]
pub struct ClientAddress {
    trusted_proxies: Arc<Vec<IpAddr>>,
}

impl ClientAddress {
    pub fn new(trusted_proxies: Vec<IpAddr>) -> Self {
        Self {
            trusted_proxies: Arc::new(
                trusted_proxies
                    .into_iter()
                    .map(|ip| ip.to_canonical())
                    .collect(),
            ),
        }
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.contains(&ip)
    }

    /// The client's address: the peer's, or, from a trusted proxy, the nearest address in
    /// `X-Forwarded-For` (its lines in order, read from the right) that is not a trusted
    /// proxy. A hop that is not an address (`ip:port` and `[ip]:port` are read as their
    /// address) ends the walk at the nearest trusted proxy: what lies beyond it may be
    /// anyone's claim.
    pub fn of<'a>(
        &self,
        peer: IpAddr,
        forwarded_for: impl DoubleEndedIterator<Item = &'a str>,
    ) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return peer;
        }
        let mut nearest = peer;
        for hop in forwarded_for.rev().flat_map(|line| line.rsplit(',')) {
            match parse_hop(hop) {
                Some(ip) if self.trusts(ip) => nearest = ip,
                Some(ip) => return ip,
                None => return nearest,
            }
        }
        nearest
    }

    /// The key a request counts under: its client's address, an IPv6 one cut to its /64.
    pub fn key(&self, request: &Request) -> Option<IpAddr> {
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())?;
        let lines = forwarded_lines(request.headers());
        Some(network_of(self.of(peer, lines.into_iter())))
    }
}

/// Every `X-Forwarded-For` line, in order (a proxy may add its own line rather than append
/// to the client's); a line that is not text counts as a hop that cannot be read.
fn forwarded_lines(headers: &HeaderMap) -> Vec<&str> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .map(|v| v.to_str().unwrap_or("\u{0}"))
        .collect()
}

/// One hop of `X-Forwarded-For`: an address, `ip:port` or `[ipv6]:port`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>()
        .or_else(|_| hop.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

/// What a client counts as: an IPv4 address, or an IPv6 address's /64.
pub fn network_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        v4 => v4,
    }
}

/// How a refusal is said: as the API's JSON error or as a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Json,
    Html,
}

/// Which requests a limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counts {
    /// Every request the router answers, its fallback too.
    All,
    /// All but static files (see [`is_static`]): pages, page data and unknown paths.
    NotStatic,
}

/// The files at the top of the site: what `public/` holds (a test keeps the two equal).
const SITE_ROOT_FILES: &[&str] = &["favicon.svg"];

/// Whether a path names a static file of the site: one in its package folder, or one of
/// [`SITE_ROOT_FILES`]. Any other path (`/x.php`, `/chat.json`) is answered by the app,
/// with its 404 page at least, so it counts as a page.
pub fn is_static(path: &str) -> bool {
    path.starts_with("/pkg/") || SITE_ROOT_FILES.contains(&path.trim_start_matches('/'))
}

/// A keyed limiter and how it answers.
#[derive(Clone)]
struct Limiter {
    limiter: Arc<DefaultKeyedRateLimiter<IpAddr>>,
    addresses: ClientAddress,
    answer: Answer,
    counts: Counts,
}

impl Limiter {
    async fn check(self, request: Request, next: Next) -> Response<Body> {
        if self.counts == Counts::NotStatic && is_static(request.uri().path()) {
            return next.run(request).await;
        }
        let Some(key) = self.addresses.key(&request) else {
            return refusal(None, self.answer);
        };
        match self.limiter.check_key(&key) {
            Ok(()) => next.run(request).await,
            Err(not_until) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                refusal(Some(wait), self.answer)
            }
        }
    }
}

/// Every request `router` answers that `counts` counts (its fallback too) is limited to
/// `per_minute` per client address, in bursts of up to that many; 0: no limit.
pub fn limit<S>(
    router: axum::Router<S>,
    per_minute: u32,
    addresses: ClientAddress,
    answer: Answer,
    counts: Counts,
) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let Some(burst) = NonZeroU32::new(per_minute) else {
        return router;
    };
    let Some(quota) = Quota::with_period(Duration::from_secs(60) / per_minute) else {
        tracing::error!("the rate limit {per_minute}/min could not be set up");
        return router;
    };
    let limiter = Arc::new(RateLimiter::keyed(quota.allow_burst(burst)));
    // Forget clients that have been quiet for a while, so the table does not grow forever.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let limiter = Arc::downgrade(&limiter);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                let Some(limiter) = limiter.upgrade() else {
                    return;
                };
                limiter.retain_recent();
            }
        });
    }
    let limiter = Limiter {
        limiter,
        addresses,
        answer,
        counts,
    };
    router.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| limiter.clone().check(request, next),
    ))
}

/// Failed authorizations (`status` answers, e.g. 401) of `router` allowed per client
/// address in a minute; beyond them, every request from that address is refused with 429
/// until the minute is over, so a token cannot be guessed by trying (a right guess gets
/// the same 429). Requests that succeed are not counted.
pub fn limit_failures<S>(
    router: axum::Router<S>,
    per_minute: u32,
    addresses: ClientAddress,
    status: StatusCode,
) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    type Windows = std::collections::HashMap<IpAddr, (std::time::Instant, u32)>;
    let windows: Arc<std::sync::Mutex<Windows>> = Arc::default();
    router.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let (windows, addresses) = (windows.clone(), addresses.clone());
            async move {
                let Some(key) = addresses.key(&request) else {
                    return refusal(None, Answer::Json);
                };
                let lock = || windows.lock().unwrap_or_else(|e| e.into_inner());
                let minute = Duration::from_secs(60);
                {
                    let mut windows = lock();
                    windows.retain(|_, (start, _)| start.elapsed() < minute);
                    if let Some((start, failures)) = windows.get(&key) {
                        if *failures >= per_minute {
                            return refusal(
                                Some(minute.saturating_sub(start.elapsed())),
                                Answer::Json,
                            );
                        }
                    }
                }
                let response = next.run(request).await;
                if response.status() == status {
                    let mut windows = lock();
                    let entry = windows.entry(key).or_insert((std::time::Instant::now(), 0));
                    entry.1 += 1;
                }
                response
            }
        },
    ))
}

/// The 429 (with `Retry-After`) a limited client gets; without a wait, the 500 of a request
/// whose sender could not be told.
fn refusal(wait: Option<Duration>, answer: Answer) -> Response<Body> {
    let (status, message) = match wait {
        Some(wait) => {
            crate::ops::metrics::rate_limited(match answer {
                Answer::Json => "api",
                Answer::Html => "pages",
            });
            (
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "Too many requests from your address: try again in {} s.",
                    wait_secs(wait)
                ),
            )
        }
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Could not tell who sent this request.".to_owned(),
        ),
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
    if let Some(wait) = wait {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, wait_secs(wait).into());
    }
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// A wait in whole seconds, at least one.
fn wait_secs(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
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
        let of = |peer: &str, lines: &[&str]| addresses.of(ip(peer), lines.iter().copied());
        // Straight from a client: its own address, whatever it claims.
        assert_eq!(of("203.0.113.9", &["198.51.100.1"]), ip("203.0.113.9"));
        // Through the trusted proxies: the last address they did not add themselves.
        assert_eq!(
            of("10.0.0.1", &["198.51.100.1, 203.0.113.7, 10.0.0.2"]),
            ip("203.0.113.7")
        );
        // A proxy without the header, or with only proxies in it: the nearest proxy.
        assert_eq!(of("10.0.0.1", &[]), ip("10.0.0.1"));
        assert_eq!(of("10.0.0.1", &["10.0.0.2"]), ip("10.0.0.2"));
    }

    #[test]
    fn a_client_cannot_choose_its_address_whatever_its_proxies_add() {
        let addresses = ClientAddress::new(vec![ip("10.0.0.1"), ip("10.0.0.2")]);
        let of = |peer: &str, lines: &[&str]| addresses.of(ip(peer), lines.iter().copied());
        // A proxy that adds its own line (HAProxy): the client's forged line comes first;
        // the proxy's own, last, names the client.
        assert_eq!(
            of("10.0.0.1", &["1.2.3.4", "203.0.113.7"]),
            ip("203.0.113.7")
        );
        // The header sent twice by the client, then the proxy's line.
        assert_eq!(
            of("10.0.0.1", &["1.1.1.1", "2.2.2.2", "203.0.113.8, 10.0.0.2"]),
            ip("203.0.113.8")
        );
        // A proxy that appends ip:port: that is the client, not the forged entry before it.
        assert_eq!(
            of("10.0.0.1", &["1.2.3.4, 203.0.113.9:51234"]),
            ip("203.0.113.9")
        );
        assert_eq!(
            of("10.0.0.1", &["1.2.3.4, [2001:db8::7]:443"]),
            ip("2001:db8::7")
        );
        // A hop that cannot be read ends the walk at the nearest trusted proxy.
        assert_eq!(
            of("10.0.0.1", &["1.2.3.4, garbage, 10.0.0.2"]),
            ip("10.0.0.2")
        );
        assert_eq!(of("10.0.0.1", &["1.2.3.4, "]), ip("10.0.0.1"));
        assert_eq!(of("10.0.0.1", &[""]), ip("10.0.0.1"));
        assert_eq!(of("10.0.0.1", &["1.2.3.4", "unknown"]), ip("10.0.0.1"));
        // An IPv4-mapped peer is the same proxy.
        assert_eq!(of("::ffff:10.0.0.1", &["203.0.113.7"]), ip("203.0.113.7"));
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        assert_eq!(
            network_of(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            network_of(ip("2001:db8:1:2::1")),
            network_of(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            network_of(ip("2001:db8:1:2::1")),
            network_of(ip("2001:db8:1:3::1"))
        );
        assert_eq!(network_of(ip("192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(network_of(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
    }

    #[test]
    fn static_files_are_told_from_pages() {
        for path in ["/pkg/parlor.wasm", "/favicon.svg", "/pkg/abc/x"] {
            assert!(is_static(path), "{path}");
        }
        // A dot does not make a file: unknown paths render the 404 page, so they are
        // limited like pages (they were not, and cost a render each).
        for path in [
            "/",
            "/chat/general",
            "/anything",
            "/api/ListConversations",
            "/x.php",
            "/favicon.ico",
            "/chat/favicon.svg",
            "//favicon.svg.x",
        ] {
            assert!(!is_static(path), "{path}");
        }
    }

    #[test]
    fn the_site_root_files_are_what_public_holds() {
        let public = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../public");
        let mut held: Vec<String> = std::fs::read_dir(public)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        held.sort();
        let mut listed = SITE_ROOT_FILES.to_vec();
        listed.sort();
        assert_eq!(held, listed);
    }
}
