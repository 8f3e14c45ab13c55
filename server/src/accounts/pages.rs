//! The accounts' pages: log in, sign up, and personal access tokens. Plain HTML forms with
//! the site's stylesheet and no script, so they work before (and without) the app's WASM.

use super::Token;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use parlor_app::components::escape_html as escape;

/// What a login page shows besides its form.
pub struct LoginView<'a> {
    pub error: Option<&'a str>,
    pub next: &'a str,
    pub name: &'a str,
    pub signup: bool,
    /// The button to the OpenID provider instead of the form (`oidc` mode).
    pub provider: Option<&'a str>,
}

/// A page of the accounts: the site's stylesheet, nothing else allowed.
pub fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · Parlor</title><link rel=\"stylesheet\" href=\"/pkg/parlor.css\">\
         <link rel=\"icon\" href=\"/favicon.svg\"></head>\
         <body><main class=\"account-page\"><h1>{}</h1>{body}</main></body></html>",
        escape(title),
        escape(title),
    );
    let mut response = (status, Html(html)).into_response();
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn error_line(error: Option<&str>) -> String {
    error
        .map(|e| {
            format!(
                "<p class=\"account-error\" role=\"alert\">{}</p>",
                escape(e)
            )
        })
        .unwrap_or_default()
}

pub fn login(status: StatusCode, view: &LoginView) -> Response {
    let error = error_line(view.error);
    let next = escape(view.next);
    if let Some(provider) = view.provider {
        let body = format!(
            "{error}<p><a class=\"account-button\" href=\"/auth/oidc?next={}\">Log in with {}</a></p>",
            url_encode(view.next),
            escape(provider)
        );
        return page(status, "Log in", &body);
    }
    let signup = match view.signup {
        true => "<p>No account yet? <a href=\"/signup\">Sign up</a></p>",
        false => "",
    };
    let body = format!(
        "{error}<form method=\"post\" action=\"/auth/login\" class=\"account-form\">\
         <input type=\"hidden\" name=\"next\" value=\"{next}\">\
         <label>User name <input name=\"username\" autocomplete=\"username\" required \
         maxlength=\"64\" autofocus value=\"{}\"></label>\
         <label>Password <input name=\"password\" type=\"password\" \
         autocomplete=\"current-password\" required></label>\
         <button type=\"submit\">Log in</button></form>{signup}",
        escape(view.name)
    );
    page(status, "Log in", &body)
}

pub fn signup(status: StatusCode, error: Option<&str>, name: &str) -> Response {
    let body = format!(
        "{}<form method=\"post\" action=\"/auth/signup\" class=\"account-form\">\
         <label>User name <input name=\"username\" autocomplete=\"username\" required \
         maxlength=\"64\" autofocus value=\"{}\"></label>\
         <label>Password (at least {} characters) <input name=\"password\" type=\"password\" \
         autocomplete=\"new-password\" required minlength=\"{}\"></label>\
         <button type=\"submit\">Sign up</button></form>\
         <p>Have an account? <a href=\"/login\">Log in</a></p>",
        error_line(error),
        escape(name),
        parlor_domain::account::PASSWORD_MIN,
        parlor_domain::account::PASSWORD_MIN,
    );
    page(status, "Sign up", &body)
}

/// The tokens page: the new token once (when one was just made), the list, and the form.
pub fn tokens(user: &str, made: Option<&str>, list: &[Token], error: Option<&str>) -> Response {
    let made = made
        .map(|t| {
            format!(
                "<div class=\"account-made\" role=\"status\"><p>Your new token (copy it now: it \
                 is not shown again):</p><code class=\"token-value\">{}</code></div>",
                escape(t)
            )
        })
        .unwrap_or_default();
    let rows: String = list.iter().map(token_row).collect();
    let table = match list.is_empty() {
        true => "<p>No tokens yet.</p>".to_owned(),
        false => format!(
            "<table class=\"account-tokens\"><thead><tr><th>Label</th><th>Made</th>\
             <th>Last used</th><th></th></tr></thead><tbody>{rows}</tbody></table>"
        ),
    };
    let body = format!(
        "<p>Logged in as <strong>{}</strong> · <a href=\"/\">Back to chat</a></p>{}{made}\
         <h2>Personal access tokens</h2><p>Send one as <code>Authorization: Bearer …</code> to \
         use the API as yourself.</p>{table}\
         <form method=\"post\" action=\"/account/tokens\" class=\"account-form\">\
         <label>Label <input name=\"label\" maxlength=\"100\" placeholder=\"e.g. laptop script\">\
         </label><button type=\"submit\">Make a token</button></form>\
         <h2>Sessions</h2><div class=\"account-sessions\">\
         <form method=\"post\" action=\"/account/logout-others\">\
         <button type=\"submit\" class=\"logout-others\">Log out other sessions</button></form>\
         <form method=\"post\" action=\"/auth/logout\"><button type=\"submit\">Log out</button></form></div>",
        escape(user),
        error_line(error),
    );
    page(StatusCode::OK, "Your account", &body)
}

fn token_row(token: &Token) -> String {
    let used = token
        .last_used_ms
        .map(when)
        .unwrap_or_else(|| "never".into());
    format!(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td><form method=\"post\" \
         action=\"/account/tokens/{}/revoke\"><button type=\"submit\">Revoke</button></form></td></tr>",
        escape(if token.label.is_empty() { "(no label)" } else { &token.label }),
        when(token.created_ms),
        used,
        escape(&token.id),
    )
}

/// A time as UTC text, to the minute.
fn when(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default()
}

pub fn url_encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
