//! Reaching one tool server, with Parlor's bounds on everything it sends: a stdio server is
//! started in a process group of its own that dies with Parlor, and its output is read a
//! bounded line at a time; a streamable HTTP server's bodies and events are bounded the same
//! way; its tool list is paged a bounded number of times and checked
//! ([`parlor_domain::tool::list`]) before a model sees it.

use super::bounds::{Bounds, GuardedHttp, Lines};
use super::spec::{ServerSpec, Transport};
use parlor_domain::tool::list::{self, Checked, Listed};
use rmcp::model::PaginatedRequestParams;
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The most pages of `tools/list` read, and the most tools kept from them before checking.
const MAX_PAGES: usize = 16;
const MAX_LISTED: usize = 1024;
/// How long a stdio server has to end after its input closes, and again after SIGTERM.
const END_GRACE: Duration = Duration::from_secs(3);

/// Parlor's side of the connection: it hears a server's `notifications/tools/list_changed`.
#[derive(Clone, Default)]
pub struct Client {
    pub tools_changed: Arc<Notify>,
}

impl ClientHandler for Client {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

pub use super::bounds::Fault;

/// A connected server: the MCP service, and for stdio the process group it runs in.
pub struct Connection {
    pub service: RunningService<RoleClient, Client>,
    pub process: Option<Group>,
    pub checked: Checked,
}

/// Connects to `spec`'s server and lists its tools; `fault` learns why Parlor closed it.
pub async fn connect(
    spec: &ServerSpec,
    client: Client,
    fault: Fault,
) -> Result<Connection, String> {
    let bounds = Bounds {
        max_bytes: spec.max_read_bytes,
        max_items: spec.max_result_items,
    };
    let (service, process) = match &spec.transport {
        Transport::Stdio { command, args, env } => {
            let (group, stdout, stdin) = Group::spawn(command, args, env)?;
            if let Some(stderr) = group.stderr.lock().ok().and_then(|mut e| e.take()) {
                tokio::spawn(log_stderr(spec.id.clone(), stderr));
            }
            let reader = Lines::new(stdout, bounds, fault);
            // rmcp's own bound is left above Parlor's, which ends the connection instead of
            // dropping the line (a dropped line leaves its call waiting for its timeout).
            let transport = AsyncRwTransport::new_client(reader, stdin)
                .with_max_line_length(spec.max_read_bytes.saturating_add(1));
            let service = client.serve(transport).await.map_err(|e| e.to_string())?;
            (service, Some(group))
        }
        Transport::Http { url, headers } => {
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(
                    headers
                        .iter()
                        .filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?)))
                        .collect(),
                )
                .max_sse_event_size(spec.max_read_bytes)
                .max_json_response_size(spec.max_read_bytes);
            let http = GuardedHttp {
                inner: reqwest_rmcp::Client::new(),
                bounds,
            };
            let transport =
                rmcp::transport::StreamableHttpClientTransport::with_client(http, config);
            let service = client.serve(transport).await.map_err(|e| e.to_string())?;
            (service, None)
        }
        Transport::Builtin => return Err("the built-in server runs in process".into()),
    };
    let checked = tools(&spec.id, service.peer()).await?;
    Ok(Connection {
        service,
        process,
        checked,
    })
}

/// The server's tools, paged at most [`MAX_PAGES`] times, checked.
pub async fn tools(server: &str, peer: &Peer<RoleClient>) -> Result<Checked, String> {
    let mut listed: Vec<Listed> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut truncated = false;
    for page in 0.. {
        if page == MAX_PAGES || listed.len() >= MAX_LISTED {
            truncated = true;
            break;
        }
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let result = peer
            .list_tools(Some(params))
            .await
            .map_err(|e| format!("cannot list its tools: {e}"))?;
        listed.extend(result.tools.into_iter().map(|t| Listed {
            name: t.name.into_owned(),
            description: t.description.map(|d| d.into_owned()).unwrap_or_default(),
            schema: serde_json::Value::Object((*t.input_schema).clone()),
        }));
        match result.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => break,
        }
    }
    listed.truncate(MAX_LISTED);
    let mut checked = list::check(server, listed).map_err(|clash| clash.to_string())?;
    if truncated {
        checked.warnings.push(list::Warning {
            tool: "the rest".into(),
            why: format!("not read: at most {MAX_PAGES} pages and {MAX_LISTED} tools are listed"),
        });
    }
    for warning in &checked.warnings {
        tracing::warn!("tool server {server:?}: {warning}");
    }
    Ok(checked)
}

/// A stdio server's process, leader of its own process group. On Linux it is killed when
/// Parlor dies (even by SIGKILL); Parlor ends the whole group when the server ends or is
/// stopped, so helpers it started do not outlive it either.
pub struct Group {
    child: tokio::process::Child,
    pgid: Option<i32>,
    /// What the process writes on its standard error, until it is read (into Parlor's log).
    stderr: std::sync::Mutex<Option<tokio::process::ChildStderr>>,
}

type Spawned = (
    Group,
    tokio::process::ChildStdout,
    tokio::process::ChildStdin,
);

impl Group {
    fn spawn(
        command: &str,
        args: &[String],
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Spawned, String> {
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args)
            .env_clear()
            .envs(env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id() as libc::pid_t;
            // SAFETY: only async-signal-safe calls (prctl, getppid) run between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // Parlor died before the signal was armed.
                    if libc::getppid() != parent {
                        return Err(std::io::Error::other("Parlor has exited"));
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {command:?}: {e}"))?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(format!("cannot start {command:?}: no pipes"));
        };
        let pgid = child.id().map(|id| id as i32);
        let stderr = std::sync::Mutex::new(child.stderr.take());
        Ok((
            Group {
                child,
                pgid,
                stderr,
            },
            stdout,
            stdin,
        ))
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(pgid) = self.pgid {
            // SAFETY: kill(2) on a process group Parlor created; errors (gone) are fine.
            unsafe {
                libc::kill(-pgid, signal);
            }
        }
    }

    /// Ends the group after its input was closed: waits, then SIGTERM, then SIGKILL.
    pub async fn end(mut self) {
        if tokio::time::timeout(END_GRACE, self.child.wait())
            .await
            .is_err()
        {
            self.signal(libc::SIGTERM);
            if tokio::time::timeout(END_GRACE, self.child.wait())
                .await
                .is_err()
            {
                self.signal(libc::SIGKILL);
                let _ = self.child.wait().await;
            }
        }
        // The leader is gone; what it started goes too.
        self.signal(libc::SIGKILL);
        self.pgid = None;
    }
}

impl Drop for Group {
    /// A start that is abandoned (Parlor stops meanwhile): the group is killed and the
    /// leader reaped before Parlor goes on (death by SIGKILL takes a moment, not more).
    fn drop(&mut self) {
        if self.pgid.is_none() {
            return;
        }
        self.signal(libc::SIGKILL);
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The longest line of a server's standard error that is logged (the rest is cut).
const STDERR_LINE: usize = 2000;
/// Lines of a server's standard error logged a second at most (the rest are counted).
const STDERR_PER_SECOND: u32 = 20;

/// Logs what server `id` writes on its standard error, line by line, as its own (never
/// mixed into Parlor's own lines), each cut to [`STDERR_LINE`] bytes and at most
/// [`STDERR_PER_SECOND`] a second: a server cannot flood Parlor's log or forge its lines.
async fn log_stderr(id: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncReadExt;
    let mut stderr = stderr;
    let mut buffer = vec![0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let (mut second, mut logged, mut dropped) = (std::time::Instant::now(), 0u32, 0u64);
    let mut emit = |line: &[u8]| {
        if second.elapsed() >= Duration::from_secs(1) {
            if dropped > 0 {
                tracing::warn!(server = %id, "tool server wrote {dropped} more line(s) on stderr (not logged)");
            }
            (second, logged, dropped) = (std::time::Instant::now(), 0, 0);
        }
        if logged >= STDERR_PER_SECOND {
            dropped += 1;
            return;
        }
        logged += 1;
        let text = String::from_utf8_lossy(&line[..line.len().min(STDERR_LINE)]);
        let text: String = text
            .chars()
            .map(|c| if shown(c) { c } else { ' ' })
            .collect();
        tracing::info!(target: "tool_server", server = %id, "stderr of {id}: {text}");
    };
    while let Ok(n @ 1..) = stderr.read(&mut buffer).await {
        for &byte in &buffer[..n] {
            if byte == b'\n' {
                emit(&line);
                line.clear();
            } else if line.len() <= STDERR_LINE {
                line.push(byte);
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
    if dropped > 0 {
        tracing::warn!(server = %id, "tool server wrote {dropped} more line(s) on stderr (not logged)");
    }
}

/// Whether a character of a server's line is logged as it is: not a control character, a
/// line or paragraph separator, or a bidirectional mark or override (which would make a
/// line read differently in a log viewer).
fn shown(c: char) -> bool {
    let hidden = matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c);
    !c.is_control() && !hidden
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_servers_line_cannot_hide_or_reorder_text_in_the_log() {
        for hidden in [
            '\u{1b}', '\r', '\0', '\u{85}', '\u{2028}', '\u{202e}', '\u{2066}', '\u{200f}',
        ] {
            assert!(!super::shown(hidden), "{hidden:?}");
        }
        for kept in ['a', 'é', '→', '中', ' '] {
            assert!(super::shown(kept), "{kept:?}");
        }
    }
}
