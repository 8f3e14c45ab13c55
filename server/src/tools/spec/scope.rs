//! `scope`, `idle_minutes`, `max_users`, `user_secrets` and `user_headers` of an
//! `[[mcp_servers]]` entry: who a server's process or session serves, and what each user
//! gives it of their own.

use super::{within, Refusal, Transport};
use crate::config::file::McpServerEntry;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// In a per-user stdio server's `env` values and `args`: the user's own folder.
pub const USER_DIR: &str = "{user_dir}";
/// The most `user_secrets` of one server.
const MAX_SECRETS: usize = 16;

/// Who one process (or HTTP session) of a server serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One for every user: a stateful server carries what one user left to the next.
    Shared,
    PerUser(PerUser),
}

/// A per-user server's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerUser {
    /// Without a call this long, a user's process or session is ended.
    pub idle: Duration,
    /// The most users served at once.
    pub max_users: usize,
    /// The names of the values each user sets.
    pub secrets: Vec<String>,
    /// url servers: header name → template (`{NAME}` is the user's value of NAME).
    pub headers: BTreeMap<String, String>,
}

/// Variables that make a program load or run other code, or send its traffic elsewhere
/// (with the operator's credentials in it): a user's value must never be one. These, and
/// any name starting with one of [`CODE_LOADING_PREFIXES`]. Only the operator chooses the
/// names; this refuses the well-known ones.
const CODE_LOADING: [&str; 26] = [
    "ENV",
    "BASH_ENV",
    "BASHOPTS",
    "SHELLOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "GCONV_PATH",
    "GLIBC_TUNABLES",
    "LOCPATH",
    "HOSTALIASES",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "LESSOPEN",
    "PAGER",
    "EDITOR",
    "VISUAL",
    "SSH_ASKPASS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
];
const CODE_LOADING_PREFIXES: [&str; 17] = [
    "LD_",
    "DYLD_",
    "NODE_",
    "NPM_",
    "YARN_",
    "COREPACK_",
    "BUN_",
    "DENO_",
    "PYTHON",
    "PIP_",
    "UV_",
    "PERL",
    "RUBY",
    "GEM_",
    "GIT_",
    "OPENSSL_",
    "SSL_",
];

/// Whether `name` may name a secret: an environment variable's name, `[A-Z_][A-Z0-9_]*`,
/// 1 to 64 characters, none that makes a program load other code.
fn is_secret_name(name: &str) -> bool {
    if CODE_LOADING.contains(&name) || CODE_LOADING_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return false;
    }
    let mut bytes = name.bytes();
    (1..=64).contains(&name.len())
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// The entry's scope, checked against its `transport`.
pub(super) fn scope(entry: &McpServerEntry, transport: &Transport) -> Result<Scope, Refusal> {
    let per_user = match entry.scope.as_deref() {
        None | Some("shared") => false,
        Some("per_user") => true,
        Some(other) => {
            let rule = format!("must be \"shared\" or \"per_user\" (got {other:?})");
            return Err(("scope", rule));
        }
    };
    let uses_dir = entry
        .env
        .values()
        .chain(&entry.args)
        .any(|v| v.contains(USER_DIR));
    if !per_user {
        let only = |field| Err((field, "applies to scope = \"per_user\" servers only".into()));
        return match () {
            _ if entry.idle_minutes.is_some() => only("idle_minutes"),
            _ if entry.max_users.is_some() => only("max_users"),
            _ if !entry.user_secrets.is_empty() => only("user_secrets"),
            _ if !entry.user_headers.is_empty() => only("user_headers"),
            _ if uses_dir => only("env"),
            _ => Ok(Scope::Shared),
        };
    }
    let secrets = secrets(entry, transport)?;
    let headers = headers(entry, transport, &secrets)?;
    if let Transport::Http { .. } = transport {
        if let Some(unused) = secrets
            .iter()
            .find(|s| !headers.values().any(|t| t.contains(&format!("{{{s}}}"))))
        {
            let why = format!("{unused} is not used in user_headers (a url server gets a user's secrets only as headers)");
            return Err(("user_secrets", why));
        }
    }
    let idle = within("idle_minutes", entry.idle_minutes, 1..=1440, 15)?;
    let max_users = within("max_users", entry.max_users, 1..=1000, 32)?;
    Ok(Scope::PerUser(PerUser {
        idle: Duration::from_secs(idle as u64 * 60),
        max_users,
        secrets,
        headers,
    }))
}

fn secrets(entry: &McpServerEntry, transport: &Transport) -> Result<Vec<String>, Refusal> {
    let names = &entry.user_secrets;
    if matches!(transport, Transport::Builtin) {
        return Err((
            "scope",
            "the built-in server already serves each user apart".into(),
        ));
    }
    if names.len() > MAX_SECRETS {
        return Err(("user_secrets", format!("at most {MAX_SECRETS} names")));
    }
    for (i, name) in names.iter().enumerate() {
        if !is_secret_name(name) {
            let rule = format!(
                "{name:?} must be 1 to 64 of A-Z, 0-9 and _, not starting with a digit, and \
                 not a variable that makes programs load code (LD_*, NODE_*, PYTHON*, …)"
            );
            return Err(("user_secrets", rule));
        }
        if names[..i].contains(name) {
            return Err(("user_secrets", format!("{name:?} is named twice")));
        }
        if entry.env.contains_key(name) || name == "PATH" || name == "HOME" {
            let why = format!("{name:?} is also set by the operator (env); use another name");
            return Err(("user_secrets", why));
        }
    }
    Ok(names.clone())
}

fn headers(
    entry: &McpServerEntry,
    transport: &Transport,
    secrets: &[String],
) -> Result<BTreeMap<String, String>, Refusal> {
    if entry.user_headers.is_empty() {
        return Ok(BTreeMap::new());
    }
    let Transport::Http { headers, .. } = transport else {
        return Err(("user_headers", "applies to url servers only".into()));
    };
    for (name, template) in &entry.user_headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(("user_headers", format!("{name:?} is not a header name")));
        }
        if headers.keys().any(|h| h.eq_ignore_ascii_case(name)) {
            return Err(("user_headers", format!("{name:?} is also in headers")));
        }
        let named = placeholders(template).map_err(|m| ("user_headers", format!("{name}: {m}")))?;
        if let Some(unknown) = named.iter().find(|n| !secrets.contains(n)) {
            let why = format!("{name}: {{{unknown}}} is not one of user_secrets");
            return Err(("user_headers", why));
        }
        if named.is_empty() {
            let why = format!("{name}: names no secret (a fixed header goes in headers)");
            return Err(("user_headers", why));
        }
    }
    Ok(entry.user_headers.clone())
}

/// The `{NAME}`s of a template.
fn placeholders(template: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let end = after.find('}').ok_or("an unclosed {")?;
        names.push(after[..end].to_owned());
        rest = &after[end + 1..];
    }
    Ok(names)
}

/// A user's folders of a server (`dir`): what the server keeps for them (`{user_dir}`),
/// and the process's home.
pub fn user_folders(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    (dir.join("files"), dir.join("home"))
}

/// Fills `template`'s `{NAME}`s with `values`, in one pass (a value is never read as a
/// template).
fn fill(template: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        out.push_str(values.get(&after[..end]).map_or("", String::as_str));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The transport of `user`'s own process or session (`dir`: the user's folder of this
/// server): the user's secrets in its environment or headers, [`USER_DIR`] replaced by
/// `dir/files` (what the server keeps for the user, which its tools may write), and
/// `dir/home` as its `HOME`: apart, so that what a user has a server write can never be a
/// file programs load from their home (Python's user site, `.npmrc`), and Python's user
/// site off all the same. A header the values make
/// invalid is refused (the user is told to set it again).
pub fn for_user(
    transport: &Transport,
    per_user: &PerUser,
    dir: &Path,
    values: &BTreeMap<String, String>,
) -> Result<Transport, String> {
    let (files, home) = user_folders(dir);
    let (dir, home) = (files.to_string_lossy(), home.to_string_lossy());
    match transport {
        Transport::Stdio { command, args, env } => {
            let mut env: BTreeMap<String, String> = env
                .iter()
                .map(|(k, v)| (k.clone(), v.replace(USER_DIR, &dir)))
                .collect();
            for name in &per_user.secrets {
                if let Some(value) = values.get(name) {
                    env.insert(name.clone(), value.clone());
                }
            }
            // What a server keeps in its home is the user's too.
            env.insert("HOME".into(), home.to_string());
            env.insert("PYTHONNOUSERSITE".into(), "1".into());
            Ok(Transport::Stdio {
                command: command.clone(),
                args: args.iter().map(|a| a.replace(USER_DIR, &dir)).collect(),
                env,
            })
        }
        Transport::Http { url, headers } => {
            let mut headers = headers.clone();
            for (name, template) in &per_user.headers {
                let value = fill(template, values);
                if reqwest::header::HeaderValue::from_str(&value).is_err() {
                    return Err(format!(
                        "the header {name} made from your secrets is not valid"
                    ));
                }
                headers.insert(name.clone(), value);
            }
            Ok(Transport::Http {
                url: url.clone(),
                headers,
            })
        }
        Transport::Builtin => Ok(Transport::Builtin),
    }
}
