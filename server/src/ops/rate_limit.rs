//! Per-client rate limits (`governor`): the chat API and the pages each allow a number of
//! requests per minute per client address, answering 429 with `Retry-After` beyond it.
//!
//! The client address is the connection's peer; only when that peer is a proxy the operator
//! trusts (`PARLOR_TRUSTED_PROXIES`) is `X-Forwarded-For` read: every line of it, in order,
//! walked from the right over trusted proxies; the first address that is not one is the
//! client, and a hop that cannot be read ends the walk at the nearest trusted proxy, so a
//! client cannot choose its own address whatever its proxies append. IPv6 clients count
//! by their /64 (one host usually holds a whole /64).

use crate::table::Limit;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderMap, Response, StatusCode};
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

type Keyed = Arc<DefaultKeyedRateLimiter<IpAddr>>;

/// One keyed limiter: `per_period` requests per address, in bursts of that many (none: no
/// limit).
fn keyed(per_period: u32, period: Duration) -> Option<Keyed> {
    let burst = NonZeroU32::new(per_period)?;
    let Some(quota) = Quota::with_period(period / per_period) else {
        tracing::error!("the rate limit {per_period} per {period:?} could not be set up");
        return None;
    };
    Some(Arc::new(RateLimiter::keyed(quota.allow_burst(burst))))
}

/// The per-address limits the gate applies, one per [`Limit`] of the route table.
pub struct Limiters {
    pub addresses: ClientAddress,
    pages: Option<Keyed>,
    chat: Option<Keyed>,
    login: Option<Keyed>,
    signup: Option<Keyed>,
    /// Wrong admin tokens per address in the current minute.
    guesses: std::sync::Mutex<std::collections::HashMap<IpAddr, (std::time::Instant, u32)>>,
    guesses_per_minute: u32,
}

/// A request over its limit: answered as [`refusal`] says.
pub struct Limited {
    wait: Option<Duration>,
    answer: Answer,
}

impl axum::response::IntoResponse for Limited {
    fn into_response(self) -> axum::response::Response {
        refusal(self.wait, self.answer)
    }
}

/// A wrong-admin-token reservation: counted when made; given back with [`Limiters::right`].
#[must_use]
pub struct Guess(IpAddr);

const MINUTE: Duration = Duration::from_secs(60);

impl Limiters {
    pub fn new(config: &crate::config::Config, guesses_per_minute: u32) -> Arc<Limiters> {
        let limiters = Arc::new(Limiters {
            addresses: ClientAddress::new(config.trusted_proxies.clone()),
            pages: keyed(config.rate_limit_pages, MINUTE),
            chat: keyed(config.rate_limit_chat, MINUTE),
            login: keyed(config.rate_limit_login, MINUTE),
            signup: keyed(config.rate_limit_signup, 60 * MINUTE),
            guesses: Default::default(),
            guesses_per_minute,
        });
        // Forget clients that have been quiet for a while, so the tables do not grow forever.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&limiters);
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(MINUTE);
                loop {
                    tick.tick().await;
                    let Some(limiters) = weak.upgrade() else {
                        return;
                    };
                    limiters.forget_quiet();
                }
            });
        }
        limiters
    }

    fn forget_quiet(&self) {
        for limiter in [&self.pages, &self.chat, &self.login, &self.signup]
            .into_iter()
            .flatten()
        {
            limiter.retain_recent();
        }
        self.lock_guesses()
            .retain(|_, (start, _)| start.elapsed() < MINUTE);
    }

    fn lock_guesses(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<IpAddr, (std::time::Instant, u32)>>
    {
        self.guesses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one request of `limit` from `request`'s client: the refusal (429 with
    /// `Retry-After`) when it is over its limit.
    pub fn count(&self, limit: Limit, request: &Request, answer: Answer) -> Result<(), Limited> {
        let limiter = match limit {
            Limit::Pages => &self.pages,
            Limit::Chat => &self.chat,
            Limit::Login => &self.login,
            Limit::Signup => &self.signup,
            Limit::AdminGuesses | Limit::None => return Ok(()),
        };
        let Some(limiter) = limiter else {
            return Ok(());
        };
        let Some(key) = self.addresses.key(request) else {
            return Err(Limited { wait: None, answer });
        };
        limiter.check_key(&key).map_err(|not_until| Limited {
            wait: Some(not_until.wait_time_from(DefaultClock::default().now())),
            answer,
        })
    }

    /// Counts an admin token guess from `request`'s client before it is checked, so
    /// parallel guesses cannot all pass the count: the 429 when this minute's guesses are
    /// used up (a right token waits too: a guess cannot be confirmed by trying), else a
    /// reservation to give back with [`Limiters::right`] when the token was right.
    pub fn guess(&self, request: &Request) -> Result<Guess, Limited> {
        let Some(key) = self.addresses.key(request) else {
            return Err(Limited {
                wait: None,
                answer: Answer::Json,
            });
        };
        let mut guesses = self.lock_guesses();
        let entry = guesses.entry(key).or_insert((std::time::Instant::now(), 0));
        if entry.0.elapsed() >= MINUTE {
            *entry = (std::time::Instant::now(), 0);
        }
        if entry.1 >= self.guesses_per_minute {
            return Err(Limited {
                wait: Some(MINUTE.saturating_sub(entry.0.elapsed())),
                answer: Answer::Json,
            });
        }
        entry.1 += 1;
        Ok(Guess(key))
    }

    /// The guess was right: it does not count.
    pub fn right(&self, guess: Guess) {
        if let Some(entry) = self.lock_guesses().get_mut(&guess.0) {
            entry.1 = entry.1.saturating_sub(1);
        }
    }
}

/// The 429 (with `Retry-After`) a limited client gets; without a wait, the 500 of a request
/// whose sender could not be told.
pub fn refusal(wait: Option<Duration>, answer: Answer) -> Response<Body> {
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
}
