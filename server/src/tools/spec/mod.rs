//! `[tools]` and `[[mcp_servers]]` of `parlor.toml`, checked: every refusal names the entry
//! and the field (spec `tools.md`, "Declaring tool servers").

use crate::config::file::{ConfigFile, ConfigFileError, McpServerEntry};
use parlor_domain::context::Save;
use parlor_domain::tool::{is_server_id, Confirm, Limits};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

mod scope;
pub use scope::{for_user, user_folders, PerUser, Scope, USER_DIR};

/// The id of Parlor's own tool server kind (`builtin = "parlor"`).
pub const BUILTIN_PARLOR: &str = "parlor";
/// A call's timeout when the entry sets none.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The longest result kept when the entry sets no `max_result_bytes`.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;
/// The largest read from a server (a stdio line, an HTTP body, one SSE event) when the entry
/// sets no `max_read_bytes`: this, or twice `max_result_bytes` and 64 KiB more when larger.
pub const DEFAULT_MAX_READ_BYTES: usize = 8 * 1024 * 1024;
/// The most content items a result may hold when the entry sets no `max_result_items`.
pub const DEFAULT_MAX_RESULT_ITEMS: usize = 64;
/// The range of `max_read_bytes`.
pub const READ_BYTES: std::ops::RangeInclusive<i64> = 65_536..=67_108_864;

/// How Parlor reaches a tool server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A process Parlor starts, speaking MCP on its standard input and output.
    Stdio {
        command: String,
        args: Vec<String>,
        /// The whole environment the process gets (PATH and HOME added when Parlor has them).
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
    /// Parlor's own tools over the conversations of the current conversation's owner.
    Builtin,
}

/// One tool server, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    pub id: String,
    pub transport: Transport,
    pub timeout: Duration,
    pub max_result_bytes: usize,
    /// The largest message (one stdio line, HTTP body or SSE event) read from the server;
    /// a larger one ends the connection and the calls waiting on it.
    pub max_read_bytes: usize,
    /// The most content items of one result; a result with more is a tool error.
    pub max_result_items: usize,
    pub confirm: Confirm,
    /// The tools offered; `None`: every tool the server lists.
    pub allow: Option<Vec<String>>,
    pub save: Save,
    /// Who one process or session serves: everyone, or one user.
    pub scope: Scope,
}

/// Every tool server, and the loop's limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolSpecs {
    pub limits: Limits,
    pub servers: Vec<ServerSpec>,
    /// Where per-user servers' folders (`{user_dir}`) are made (`tool-users` in the data
    /// folder).
    pub user_root: Option<std::path::PathBuf>,
}

/// An agent names a tool server that is not declared, or a tool its server does not allow.
#[derive(Debug, thiserror::Error)]
#[error("agent {agent:?}: chatSettings.tools: {tool:?} {why}")]
pub struct UnknownTool {
    pub agent: String,
    pub tool: String,
    pub why: String,
}

impl ToolSpecs {
    /// Checks that every tool an agent names (`<server>` or `<server>.<tool>`) is declared.
    pub fn check_agents<'a>(
        &self,
        agents: impl IntoIterator<Item = &'a parlor_domain::Agent>,
    ) -> Result<(), UnknownTool> {
        for agent in agents {
            for name in &agent.tools {
                let (server, tool) = match name.split_once('.') {
                    Some((server, tool)) => (server, Some(tool)),
                    None => (name.as_str(), None),
                };
                let refuse = |why: String| UnknownTool {
                    agent: agent.id.clone(),
                    tool: name.clone(),
                    why,
                };
                let Some(spec) = self.servers.iter().find(|s| s.id == server) else {
                    let declared: Vec<&str> = self.servers.iter().map(|s| s.id.as_str()).collect();
                    let why = format!("names no declared tool server (declared: {declared:?})");
                    return Err(refuse(why));
                };
                let allowed = |tool: &str| {
                    spec.allow
                        .as_ref()
                        .is_none_or(|a| a.iter().any(|t| t == tool))
                };
                match tool {
                    Some("") => return Err(refuse("names no tool after the dot".into())),
                    Some(tool) if !allowed(tool) => {
                        return Err(refuse(format!("is not in the allow list of {server:?}")))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Why an entry is refused: the field, and what it must be.
pub(super) type Refusal = (&'static str, String);

/// Checks `[tools]` and `[[mcp_servers]]`; `${VAR}` in `env` and `headers` is read through
/// `var` (Parlor's environment).
pub fn specs(
    file: &ConfigFile,
    path: &Path,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<ToolSpecs, ConfigFileError> {
    let fail = |entry: String, (field, message): Refusal| ConfigFileError::Field {
        path: path.to_owned(),
        entry,
        field,
        message,
    };
    let section = file.tools.as_ref();
    let limits = Limits::new(
        section.and_then(|t| t.max_rounds),
        section.and_then(|t| t.max_calls),
    )
    .map_err(|e| fail("[tools]".into(), (e.field, e.to_string())))?;
    let mut servers: Vec<ServerSpec> = Vec::new();
    for (index, entry) in file.mcp_servers.iter().enumerate() {
        let name = format!("mcp_servers[{index}] (id {:?})", entry.id);
        if servers.iter().any(|s| s.id == entry.id) {
            return Err(fail(name, ("id", "duplicate id".into())));
        }
        servers.push(server(entry, var).map_err(|refusal| fail(name, refusal))?);
    }
    Ok(ToolSpecs {
        limits,
        servers,
        user_root: None,
    })
}

fn server(
    entry: &McpServerEntry,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<ServerSpec, Refusal> {
    if !is_server_id(&entry.id) {
        let rule = "must be 1 to 32 of a-z, 0-9, _ and -, without __ and not ending in _ \
            (the model sees its tools as <id>__<tool>)"
            .to_owned();
        return Err(("id", rule));
    }
    let transport = transport(entry, var)?;
    let scope = scope::scope(entry, &transport)?;
    let Numbers {
        timeout,
        max_result_bytes,
        max_read_bytes,
        max_result_items,
    } = numbers(entry)?;
    let confirm = match entry.confirm.as_deref() {
        None | Some("never") => Confirm::Never,
        Some("always") => Confirm::Always,
        Some("first") => Confirm::First,
        Some(other) => {
            let rule = format!("must be \"never\", \"always\" or \"first\" (got {other:?})");
            return Err(("confirm", rule));
        }
    };
    if let Some(allow) = &entry.allow {
        if let Some(bad) = allow.iter().find(|t| t.trim().is_empty()) {
            return Err(("allow", format!("names an empty tool ({bad:?})")));
        }
    }
    Ok(ServerSpec {
        id: entry.id.clone(),
        transport,
        timeout: Duration::from_secs(timeout as u64),
        max_result_bytes,
        max_read_bytes,
        max_result_items,
        confirm,
        allow: entry.allow.clone(),
        save: entry.save.unwrap_or(Save::Always),
        scope,
    })
}

/// An entry's numbers, checked.
struct Numbers {
    timeout: usize,
    max_result_bytes: usize,
    max_read_bytes: usize,
    max_result_items: usize,
}

fn numbers(entry: &McpServerEntry) -> Result<Numbers, Refusal> {
    let timeout = within(
        "timeout_secs",
        entry.timeout_secs,
        1..=600,
        DEFAULT_TIMEOUT_SECS as i64,
    )?;
    let max_result_bytes = within(
        "max_result_bytes",
        entry.max_result_bytes,
        1..=16_777_216,
        DEFAULT_MAX_RESULT_BYTES as i64,
    )?;
    let default_read = DEFAULT_MAX_READ_BYTES.max(max_result_bytes * 2 + 65_536);
    let max_read_bytes = within(
        "max_read_bytes",
        entry.max_read_bytes,
        READ_BYTES,
        default_read as i64,
    )?;
    if max_read_bytes < max_result_bytes {
        let rule =
            format!("must be at least max_result_bytes ({max_result_bytes}; got {max_read_bytes})");
        return Err(("max_read_bytes", rule));
    }
    let max_result_items = within(
        "max_result_items",
        entry.max_result_items,
        1..=10_000,
        DEFAULT_MAX_RESULT_ITEMS as i64,
    )?;
    Ok(Numbers {
        timeout,
        max_result_bytes,
        max_read_bytes,
        max_result_items,
    })
}

/// `value` (`default` when unset) when it is in `range`; else the refusal naming `field`.
pub(super) fn within(
    field: &'static str,
    value: Option<i64>,
    range: std::ops::RangeInclusive<i64>,
    default: i64,
) -> Result<usize, Refusal> {
    match value {
        None => Ok(default as usize),
        Some(n) if range.contains(&n) => Ok(n as usize),
        Some(n) => {
            let (low, high) = (range.start(), range.end());
            Err((field, format!("must be between {low} and {high} (got {n})")))
        }
    }
}

fn transport(
    entry: &McpServerEntry,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Transport, Refusal> {
    let stdio_only = !entry.args.is_empty() || !entry.env.is_empty();
    match (&entry.command, &entry.url, &entry.builtin) {
        (Some(command), None, None) => {
            if command.trim().is_empty() {
                return Err(("command", "must name a program".into()));
            }
            if !entry.headers.is_empty() {
                return Err(("headers", "applies to url servers only".into()));
            }
            let mut env = expand_all(&entry.env, var).map_err(|m| ("env", m))?;
            for name in ["PATH", "HOME"] {
                if let (false, Some(value)) = (env.contains_key(name), var(name)) {
                    env.insert(name.to_owned(), value);
                }
            }
            Ok(Transport::Stdio {
                command: command.clone(),
                args: entry.args.clone(),
                env,
            })
        }
        (None, Some(url), None) => {
            if stdio_only {
                return Err(("args", "args and env apply to command servers only".into()));
            }
            let parsed = reqwest::Url::parse(url).map_err(|e| ("url", format!("{e} ({url:?})")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(("url", format!("must be http or https (got {url:?})")));
            }
            let headers = expand_all(&entry.headers, var).map_err(|m| ("headers", m))?;
            for (name, value) in &headers {
                let valid = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
                    && reqwest::header::HeaderValue::from_str(value).is_ok();
                if !valid {
                    return Err(("headers", format!("{name:?} is not a valid header")));
                }
            }
            Ok(Transport::Http {
                url: url.clone(),
                headers,
            })
        }
        (None, None, Some(kind)) if kind == BUILTIN_PARLOR => {
            if stdio_only || !entry.headers.is_empty() {
                return Err(("builtin", "takes no args, env or headers".into()));
            }
            Ok(Transport::Builtin)
        }
        (None, None, Some(kind)) => Err((
            "builtin",
            format!("unknown built-in {kind:?} (allowed: parlor)"),
        )),
        (None, None, None) => Err(("command", "set one of command, url or builtin".into())),
        _ => Err(("url", "set only one of command, url and builtin".into())),
    }
}

/// `values` with every `${VAR}` replaced by Parlor's variable; one that is not set is refused.
fn expand_all(
    values: &BTreeMap<String, String>,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, String> {
    values
        .iter()
        .map(|(key, value)| {
            Ok((
                key.clone(),
                expand(value, var).map_err(|m| format!("{key}: {m}"))?,
            ))
        })
        .collect()
}

fn expand(text: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("an unclosed ${".into());
        };
        let name = &after[..end];
        match var(name) {
            Some(value) => out.push_str(&value),
            None => return Err(format!("${{{name}}} is not set in Parlor's environment")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests;
