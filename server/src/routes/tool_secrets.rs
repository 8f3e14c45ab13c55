//! The values a user sets for per-user tool servers (`user_secrets`): the page
//! `/account/tools` (a form per value; nothing set is ever shown again) and the API
//! `GET /api/account/tool-secrets`, `PUT /api/account/tool-secrets/{server}`. The user is the
//! requester as conversations know them (their account, or, with accounts off, this
//! browser). A change ends the user's running process of that server: the next turn starts
//! it with the new values.

use crate::gate::session::Requester;
use crate::state::AppState;
use crate::store::secrets::SecretError;
use crate::table::Mount;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use parlor_app::components::escape_html as escape;
use parlor_domain::ApiError;
use serde::Serialize;
use std::collections::BTreeMap;

/// The page (served in every auth mode, with the pages' browser session).
pub fn router() -> Router<AppState> {
    Router::new().mount(crate::tools::SECRETS_PAGE, get(get_page).post(post_page))
}

/// One server's values, as the user may see them: which are set.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ServerSecrets {
    pub server: String,
    pub secrets: Vec<SecretState>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretState {
    pub name: String,
    pub set: bool,
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let error = message.into();
    (status, Json(ApiError { error })).into_response()
}

/// The largest body either form of setting values takes (16 values of 4 KiB, and names).
const MAX_BODY: usize = 96 * 1024;

fn too_large() -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "the body is larger than 96 KiB",
    )
}

fn refused(e: SecretError) -> Response {
    match e {
        SecretError::Input(why) => error(StatusCode::BAD_REQUEST, why),
        SecretError::Unavailable(why) => {
            tracing::warn!("tool secrets: {why}");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "secrets are unavailable, try again",
            )
        }
    }
}

/// The answer to a request that is no user's: with accounts on the gate lets none through,
/// so this is accounts off and a client without this browser's session cookie.
fn no_user() -> Response {
    let why = "no browser session: the values belong to a browser's session (open Parlor's \
        page first, and send its parlor_session cookie)";
    error(StatusCode::BAD_REQUEST, why)
}

/// Every per-user server that asks for values, with which of them `user` has set.
async fn states(app: &AppState, user: &str) -> Result<Vec<ServerSecrets>, SecretError> {
    let set = app.services.tool_secrets.names(user).await?;
    Ok(app
        .services
        .tools
        .asking_secrets()
        .into_iter()
        .map(|(server, names)| ServerSecrets {
            server: server.to_owned(),
            secrets: names
                .iter()
                .map(|name| SecretState {
                    name: name.clone(),
                    set: set.iter().any(|(s, n)| s == server && n == name),
                })
                .collect(),
        })
        .collect())
}

/// Sets or removes one value, checking that `server` asks for `name`; ends the user's
/// running process of it.
async fn change(
    app: &AppState,
    user: &str,
    server: &str,
    name: &str,
    value: Option<&str>,
) -> Result<(), SecretError> {
    let asked = app
        .services
        .tools
        .asking_secrets()
        .into_iter()
        .any(|(s, names)| s == server && names.iter().any(|n| n == name));
    if !asked {
        return Err(SecretError::Input(format!(
            "no per-user tool server {server:?} asks for {name:?}"
        )));
    }
    let secrets = &app.services.tool_secrets;
    secrets.set(user, server, name, value).await?;
    app.services.tools.user_changed(server, user);
    Ok(())
}

#[utoipa::path(
    get,
    path = "/api/account/tool-secrets",
    responses(
        (status = 200, description = "Each per-user tool server that asks for values, and which of them you have set (never a value)", body = [ServerSecrets]),
        (status = 400, description = "With accounts off, no browser session cookie", body = ApiError),
        (status = 401, description = "No login", body = ApiError),
    )
)]
pub async fn get_secrets(State(app): State<AppState>, requester: Requester) -> Response {
    let Some(user) = requester.owner() else {
        return no_user();
    };
    match states(&app, &user).await {
        Ok(states) => Json(states).into_response(),
        Err(e) => refused(e),
    }
}

#[utoipa::path(
    put,
    path = "/api/account/tool-secrets/{server}",
    params(("server" = String, Path, description = "The tool server's id")),
    request_body(content = BTreeMap<String, Option<String>>, description = "Each name to set (a string of 1 to 4096 bytes, no control characters) or remove (null)"),
    responses(
        (status = 204, description = "Set (the server's running process for you is ended; your next turn starts it with these)"),
        (status = 400, description = "Not a JSON object of strings or nulls, a name the server does not ask for, a bad value, or (accounts off) no browser session cookie", body = ApiError),
        (status = 401, description = "No login", body = ApiError),
        (status = 403, description = "From another site (its `Origin`)", body = ApiError),
        (status = 413, description = "A body over 96 KiB", body = ApiError),
    )
)]
pub async fn put_secrets(
    State(app): State<AppState>,
    requester: Requester,
    Path(server): Path<String>,
    body: Bytes,
) -> Response {
    let Some(user) = requester.owner() else {
        return no_user();
    };
    if body.len() > MAX_BODY {
        return too_large();
    }
    let Ok(values) = serde_json::from_slice::<BTreeMap<String, Option<String>>>(&body) else {
        let why = "the body must be a JSON object of names to strings (or null to remove)";
        return error(StatusCode::BAD_REQUEST, why);
    };
    // All checked before any is written.
    for (name, value) in &values {
        let asked = app.services.tools.asking_secrets().into_iter();
        if !asked
            .clone()
            .any(|(s, names)| s == server && names.contains(name))
        {
            let why = format!("no per-user tool server {server:?} asks for {name:?}");
            return error(StatusCode::BAD_REQUEST, why);
        }
        if let Some(Err(e)) = value.as_deref().map(crate::store::secrets::check_value) {
            return refused(e);
        }
    }
    for (name, value) in &values {
        if let Err(e) = change(&app, &user, &server, name, value.as_deref()).await {
            return refused(e);
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn get_page(State(app): State<AppState>, requester: Requester) -> Response {
    page(&app, &requester, None).await
}

/// The page's forms: `server`, `name`, and `value` to set it or `remove` to remove it.
async fn post_page(State(app): State<AppState>, requester: Requester, body: Bytes) -> Response {
    let Some(user) = requester.owner() else {
        return no_user();
    };
    if body.len() > MAX_BODY {
        return too_large();
    }
    let fields: BTreeMap<String, String> =
        url::form_urlencoded::parse(&body).into_owned().collect();
    let field = |k: &str| fields.get(k).map(String::as_str).unwrap_or_default();
    let (server, name) = (field("server"), field("name"));
    let value = (!fields.contains_key("remove")).then(|| field("value"));
    let said = match change(&app, &user, server, name, value).await {
        Ok(()) if value.is_some() => Ok(format!("{name} of {server} is set.")),
        Ok(()) => Ok(format!("{name} of {server} is removed.")),
        Err(SecretError::Input(why)) => Err(why),
        Err(e) => return refused(e),
    };
    page(&app, &requester, Some(said)).await
}

async fn page(
    app: &AppState,
    requester: &Requester,
    said: Option<Result<String, String>>,
) -> Response {
    let Some(user) = requester.owner() else {
        return no_user();
    };
    let states = match states(app, &user).await {
        Ok(states) => states,
        Err(e) => return refused(e),
    };
    let mut body = String::from(
        "<p>Tool servers that run apart for each user may ask for your own values (an API \
         key, a token). They are kept sealed, given only to your own process of that server, \
         and never shown again: set a new one to change it.</p>",
    );
    match &said {
        Some(Ok(text)) => body.push_str(&format!("<p role=\"status\">{}</p>", escape(text))),
        Some(Err(text)) => body.push_str(&format!("<p role=\"alert\">{}</p>", escape(text))),
        None => {}
    }
    if states.is_empty() {
        body.push_str("<p>No tool server asks for your values.</p>");
    }
    for server in &states {
        body.push_str(&format!("<h2>{}</h2><ul>", escape(&server.server)));
        for secret in &server.secrets {
            body.push_str(&row(&server.server, secret));
        }
        body.push_str("</ul>");
    }
    body.push_str("<p><a href=\"/\">Back to the chat</a></p>");
    crate::accounts::pages::page(StatusCode::OK, "Your tool credentials", &body)
}

/// One value's line: whether it is set, a form to set it, and one to remove it.
fn row(server: &str, secret: &SecretState) -> String {
    let (server, name) = (escape(server), escape(&secret.name));
    let state = if secret.set { "set" } else { "not set" };
    let hidden = format!(
        "<input type=\"hidden\" name=\"server\" value=\"{server}\">\
         <input type=\"hidden\" name=\"name\" value=\"{name}\">"
    );
    let remove = match secret.set {
        true => format!(
            "<form method=\"post\">{hidden}<button type=\"submit\" name=\"remove\" value=\"1\">Remove</button></form>"
        ),
        false => String::new(),
    };
    format!(
        "<li><strong>{name}</strong> <span data-state=\"{state}\">({state})</span>\
         <form method=\"post\">{hidden}<label>New value \
         <input type=\"password\" name=\"value\" required autocomplete=\"off\"></label>\
         <button type=\"submit\">Save</button></form>{remove}</li>"
    )
}
