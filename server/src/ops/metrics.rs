//! Prometheus metrics (`metrics` with its Prometheus exporter), served at `/metrics` behind
//! the admin token, or on a separate address (`PARLOR_METRICS_ADDR`).
//!
//! - `parlor_turns_total{outcome}`: chat turns by how they ended (`done`, `error`, `stopped`,
//!   `command`, `refused`);
//! - `parlor_upstream_errors_total{kind}`: model-server failures by kind;
//! - `parlor_first_token_seconds`, `parlor_reply_seconds`: time to the first piece of a reply,
//!   and to its end;
//! - `parlor_store_seconds{backend, op}`: history store latency;
//! - `parlor_live_sessions`: sessions counted against `max_users`;
//! - `parlor_rate_limited_total{route}`: requests refused by a rate limit.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// Bucket bounds of the latency histograms, in seconds.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0,
];

/// The process's recorder, installed on first use (the `metrics` facade has one recorder per
/// process, which every server in it shares).
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed: /metrics stays empty");
        }
        describe();
        handle
    })
}

fn describe() {
    metrics::describe_counter!("parlor_turns_total", "Chat turns by how they ended");
    metrics::describe_counter!(
        "parlor_upstream_errors_total",
        "Model server failures by kind"
    );
    metrics::describe_histogram!(
        "parlor_first_token_seconds",
        metrics::Unit::Seconds,
        "From the start of a reply to its first piece"
    );
    metrics::describe_histogram!(
        "parlor_reply_seconds",
        metrics::Unit::Seconds,
        "From the start of a reply to its end"
    );
    metrics::describe_histogram!(
        "parlor_store_seconds",
        metrics::Unit::Seconds,
        "History store operations"
    );
    metrics::describe_gauge!("parlor_live_sessions", "Sessions counted against max_users");
    metrics::describe_counter!(
        "parlor_rate_limited_total",
        "Requests refused by a rate limit"
    );
    metrics::describe_gauge!(
        "parlor_ready",
        "1 when /readyz answers 200 (every history's store answers, every tool server started or failed)"
    );
    metrics::describe_gauge!(
        "parlor_up",
        "What /readyz tells an admin, as numbers: 1 when a part answers, by kind (history, \
         tool_server, provider, login_provider) and name"
    );
    metrics::describe_gauge!(
        "parlor_tool_warnings",
        "Tools dropped or changed from each tool server's list (the reasons are in /readyz)"
    );
    metrics::describe_counter!(
        "parlor_prompt_tokens_total",
        "Prompt tokens the providers reported, by model and by how the provider's cache \
         served them (cached: read from it, written: written to it, fresh: neither)"
    );
}

/// Counts a turn's prompt tokens by how the cache served them (`model`: its name in
/// `[[models]]` or the agent's, a bounded set chosen by the operator).
pub fn prompt_tokens(model: &str, cache: parlor_domain::cache::CacheUse) {
    for (kind, tokens) in [
        ("cached", cache.read),
        ("written", cache.written),
        ("fresh", cache.fresh),
    ] {
        let labels = [("model", model.to_owned()), ("cache", kind.to_owned())];
        metrics::counter!("parlor_prompt_tokens_total", &labels).increment(tokens);
    }
}

pub fn turn(outcome: &'static str) {
    metrics::counter!("parlor_turns_total", "outcome" => outcome).increment(1);
}

pub fn upstream_error(kind: &'static str) {
    metrics::counter!("parlor_upstream_errors_total", "kind" => kind).increment(1);
}

pub fn first_token(seconds: f64) {
    metrics::histogram!("parlor_first_token_seconds").record(seconds);
}

pub fn reply(seconds: f64) {
    metrics::histogram!("parlor_reply_seconds").record(seconds);
}

pub fn rate_limited(route: &'static str) {
    metrics::counter!("parlor_rate_limited_total", "route" => route).increment(1);
}

/// Readiness as /readyz found it: `ready`, then each part's state (`kind`, its name, up).
pub fn readiness<'a>(ready: bool, parts: impl IntoIterator<Item = (&'static str, &'a str, bool)>) {
    metrics::gauge!("parlor_ready").set(f64::from(u8::from(ready)));
    for (kind, name, up) in parts {
        let labels = [("kind", kind.to_owned()), ("name", name.to_owned())];
        metrics::gauge!("parlor_up", &labels).set(f64::from(u8::from(up)));
    }
}

/// How many of tool server `server`'s tools were dropped or changed.
pub fn tool_warnings(server: &str, count: usize) {
    metrics::gauge!("parlor_tool_warnings", "server" => server.to_owned()).set(count as f64);
}

/// The metrics in the Prometheus text format, with `live_sessions` (counted now, when it
/// could be) set first.
pub fn render(live_sessions: Option<usize>) -> String {
    if let Some(n) = live_sessions {
        metrics::gauge!("parlor_live_sessions").set(n as f64);
    }
    handle().render()
}
