//! The browser session of a page's request (made or read, and its `max_users` slot), and who
//! a request is as the handlers see it ([`Requester`]): the last of the gate's work, for the
//! routes that need it.

use crate::ops::browser::{from_jar, legacy_from_jar, live_key, new_id, owner, set_cookie, COOKIE};
use crate::state::Services;
use axum::extract::{Request, State};
use axum::http::header::SET_COOKIE;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use parlor_app::ssr::BrowserSession;
use std::sync::Arc;

/// Gives every page visitor a browser session: reuses the cookie's, or issues a new one and
/// sets the cookie on the response. The session is put in the request's extensions.
///
/// A browser takes one of the `max_users` slots only once it shows it is one: when it comes
/// back with its cookie to a page (or sends its first chat message, see `turn::start`).
/// First visits (uptime probes, crawlers, scripts without a cookie jar), static files and
/// self-declared bots never take a slot, so they cannot lock real users out. A returning
/// browser that is not live yet is admitted only within `max_users`; beyond it, it gets a
/// 503 page saying so.
pub async fn ensure_browser_session(
    State(services): State<Arc<Services>>,
    jar: CookieJar,
    mut request: Request,
    next: Next,
) -> Response {
    let key = &services.cookie_key;
    // An account's session (the gate put it there) is already this browser's.
    let account = request.extensions().get::<BrowserSession>().cloned();
    if services.accounts.is_some() && account.is_none() {
        // Accounts on: only accounts have sessions and take slots; a visitor without a login
        // gets neither (the gate lets such a request reach only the open routes).
        return next.run(request).await;
    }
    let (session, fresh) = match (account, from_jar(&jar, key)) {
        (Some(session), _) => (session, false),
        (None, Some(session)) => (session, false),
        (None, None) => match legacy_owner(&services, &jar).await {
            // Signed again on this response; it keeps its conversations.
            Some(session) => (session, true),
            None => (BrowserSession(new_id()), true),
        },
    };
    if !fresh && takes_slot(&request) {
        let admitted = services
            .live
            .touch(
                &live_key(&session),
                crate::store::now_ms(),
                services.limits.max_users(),
                false,
            )
            .await;
        match admitted {
            Ok(Ok(())) => {}
            Ok(Err(limit)) => return limit_page(&limit.to_string()),
            // The store being away must not hide the pages; chatting reports it.
            Err(e) => tracing::warn!("could not count live sessions: {e}"),
        }
    }
    request.extensions_mut().insert(session.clone());
    let mut response = next.run(request).await;
    if fresh {
        // A year, so the sidebar keeps this browser's conversations across visits.
        let secure = services.config.cookie_secure;
        if let Some(value) = set_cookie(
            COOKIE,
            key.sign(&session.0),
            "/",
            time::Duration::days(365),
            secure,
        ) {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
    response
}

/// A cookie Parlor issued before it signed them, which owns conversations: kept (and signed
/// on the response) so an upgrade loses no browser its conversations. A made-up value owns
/// none, so it is a stranger's and gets a new session.
async fn legacy_owner(services: &Services, jar: &CookieJar) -> Option<BrowserSession> {
    let session = legacy_from_jar(jar)?;
    let owner = owner(&session);
    for id in services.histories.ids() {
        let history = services.histories.get(id)?;
        if matches!(history.store.list_owned(&owner).await, Ok(owned) if !owned.is_empty()) {
            return Some(session);
        }
    }
    None
}

/// Whether a request with a browser cookie counts as that browser being here: pages and
/// the pages' server functions do; the site's files and clients that call themselves bots
/// do not.
fn takes_slot(request: &Request) -> bool {
    let route = request.extensions().get::<&'static crate::table::Route>();
    let file = route.is_some_and(|r| r.kind == crate::table::Kind::File);
    !file && !is_bot(request.headers())
}

/// A client whose User-Agent says it is a crawler, a link previewer or a monitor.
fn is_bot(headers: &axum::http::HeaderMap) -> bool {
    let Some(agent) = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let agent = agent.to_ascii_lowercase();
    [
        "bot", "crawl", "spider", "slurp", "preview", "monitor", "uptime",
    ]
    .iter()
    .any(|word| agent.contains(word))
}

/// Who owns what a request reaches: the account the accounts' gate found (see
/// [`crate::accounts::gate`]) and its session, else, while accounts are off, the browser's
/// signed cookie. With accounts on, a browser cookie alone owns nothing.
pub struct Requester {
    pub session: Option<BrowserSession>,
    pub user: Option<crate::accounts::User>,
}

impl Requester {
    /// What a store records as this requester's ownership, if any.
    pub fn owner(&self) -> Option<String> {
        self.session.as_ref().map(owner)
    }

    /// This requester as the conversations' access rule sees them: while accounts are on,
    /// only admins reach conversations without an owner.
    pub fn viewer(&self, services: &Services) -> parlor_domain::conversation::Viewer {
        crate::ops::browser::viewer(
            self.session.as_ref(),
            self.user.as_ref().is_some_and(|u| u.admin),
            services.accounts.is_some(),
        )
    }
}

impl axum::extract::FromRequestParts<crate::state::AppState> for Requester {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &crate::state::AppState,
    ) -> Result<Self, Self::Rejection> {
        let user = parts.extensions.get::<crate::accounts::User>().cloned();
        let session = match (
            parts.extensions.get::<BrowserSession>(),
            &state.services.accounts,
        ) {
            (Some(session), _) => Some(session.clone()),
            (None, Some(_)) => None,
            (None, None) => {
                let jar = CookieJar::from_headers(&parts.headers);
                from_jar(&jar, &state.services.cookie_key)
            }
        };
        Ok(Requester { session, user })
    }
}

/// The page a visitor gets when the session limit is reached.
fn limit_page(message: &str) -> Response {
    let body = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Parlor is full</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"></head>\
         <body>\
         <h1>Parlor is full</h1><p role=\"alert\">{message}</p></body></html>"
    );
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}
