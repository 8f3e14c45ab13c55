//! The names Parlor answers under. A page served under another name that resolves to
//! Parlor's address (DNS rebinding: a foreign site whose name the attacker points at
//! 127.0.0.1) would be same-origin with itself, so no Origin check could tell it apart; the
//! `Host` it sends can. Allowed: the host of `PARLOR_PUBLIC_URL`, `localhost`, and any IP
//! address (no name to rebind). Another name is a `421` saying what to set.

use axum::extract::Request;
use axum::http::header;
use std::net::IpAddr;

/// Whether `request` names Parlor by one of its names; why not, otherwise.
pub fn check(request: &Request, public_url: Option<&str>) -> Result<(), String> {
    let hosts: Vec<_> = request.headers().get_all(header::HOST).iter().collect();
    // The target's own authority wins where there is one (HTTP/2's `:authority`, an
    // absolute-form target: RFC 9113 and 9112), so both names must be Parlor's.
    if let Some(authority) = request.uri().authority() {
        if !allowed(authority.as_str(), public_url) {
            return Err(not_ours(authority.as_str()));
        }
    }
    let named = match hosts.as_slice() {
        [one] => one.to_str().ok().map(str::to_owned),
        // HTTP/2 names the host in `:authority`, not in a `Host` header.
        [] => request.uri().authority().map(|a| a.as_str().to_owned()),
        _ => return Err("Host was sent more than once".into()),
    };
    let Some(named) = named.filter(|n| !n.is_empty()) else {
        return Err("the request names no host".into());
    };
    match allowed(&named, public_url) {
        true => Ok(()),
        false => Err(not_ours(&named)),
    }
}

fn not_ours(authority: &str) -> String {
    format!(
        "this Parlor is not served under the name {:?}: set PARLOR_PUBLIC_URL to the address \
         users reach it at",
        name_of(authority)
    )
}

/// A middleware for a listener outside the gate (`PARLOR_METRICS_ADDR`): the same rule.
pub async fn only_own_names(
    axum::extract::State(public_url): axum::extract::State<Option<String>>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match check(&request, public_url.as_deref()) {
        Ok(()) => next.run(request).await,
        Err(why) => axum::response::IntoResponse::into_response((
            axum::http::StatusCode::MISDIRECTED_REQUEST,
            why,
        )),
    }
}

/// The host of `host[:port]` (an IPv6 address in brackets keeps them).
fn name_of(authority: &str) -> &str {
    match authority.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !name.ends_with(':') => {
            name
        }
        _ => authority,
    }
}

fn allowed(authority: &str, public_url: Option<&str>) -> bool {
    let name = name_of(authority);
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if name.eq_ignore_ascii_case("localhost") || bare.parse::<IpAddr>().is_ok() {
        return true;
    }
    let public = public_url
        .and_then(|url| url.split_once("://"))
        .and_then(|(_, rest)| rest.split('/').next())
        .map(name_of);
    public.is_some_and(|public| public.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parlors_own_names_and_addresses_only() {
        let public = Some("https://chat.example.com/");
        for ok in [
            "127.0.0.1:3000",
            "127.0.0.1",
            "[::1]:3000",
            "localhost:3000",
            "LOCALHOST",
            "192.168.1.5:3000",
            "chat.example.com",
            "Chat.Example.com:443",
        ] {
            assert!(allowed(ok, public), "{ok}");
        }
        for refused in [
            "evil.test:3000",
            "localhost.evil.test",
            "127.0.0.1.nip.io:3000",
            "chat.example.com.evil.test",
            "example.com",
        ] {
            assert!(!allowed(refused, public), "{refused}");
        }
        assert!(
            !allowed("chat.example.com", None),
            "only when it is the public URL's"
        );
        assert!(allowed("parlor.lan:8080", Some("http://parlor.lan:8080")));
    }
}
