//! Running Parlor among its users: browser sessions and their signed cookies, live
//! sessions for `max_users`, rate limits per client address, and metrics.

pub mod browser;
pub mod connections;
pub mod live;
pub mod metrics;
pub mod panics;
pub mod rate_limit;
pub mod request_id;
