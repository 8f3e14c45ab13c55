//! The load runs' client (`scripts/load.sh`, `scripts/load-tools.sh`): CONCURRENCY workers
//! chat with Parlor for SECONDS, each turn over a fresh connection, and one JSON object
//! tells what came back (errors, time to the first delta, the servers' peak memory).
//!
//! Usage: `load-streams SECONDS CONCURRENCY URL [URL ...]`, the workers spread over the URLs.
//! `LOAD_BROWSERS=1`: each worker opens the chat page first and chats with the cookie it
//! got, so every conversation is its own, as a person's are. `LOAD_AGENT`, `LOAD_MESSAGE`
//! (`{id}` is the worker and its turn), `PARLOR_PIDS` (the servers to watch, comma
//! separated), `SETTLE_SECONDS` (wait up to that for their descriptors to settle).
//!
//! It runs on one thread and reads each stream in large chunks, so it takes little of the
//! CPU it shares with the servers it measures (the Python client it replaces took about
//! two fifths of this machine's two cores).

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Settings {
    agent: String,
    message: String,
    browsers: bool,
}

/// What one worker saw.
#[derive(Default)]
struct Tally {
    firsts: Vec<Duration>,
    completed: u64,
    errors: u64,
    statuses: BTreeMap<String, u64>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(seconds), Some(concurrency), urls) = (
        args.first().and_then(|s| s.parse::<u64>().ok()),
        args.get(1).and_then(|s| s.parse::<usize>().ok()),
        args.get(2..).unwrap_or_default(),
    ) else {
        eprintln!("usage: load-streams SECONDS CONCURRENCY URL [URL ...]");
        std::process::exit(2);
    };
    let hosts: Vec<String> = urls
        .iter()
        .filter_map(|u| u.strip_prefix("http://"))
        .map(|h| h.trim_end_matches('/').to_owned())
        .collect();
    if hosts.is_empty() || hosts.len() != urls.len() {
        eprintln!("every URL must be http://host:port");
        std::process::exit(2);
    }
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let settings = std::sync::Arc::new(Settings {
        agent: env("LOAD_AGENT", "general"),
        message: env("LOAD_MESSAGE", "load {id}"),
        browsers: env("LOAD_BROWSERS", "") == "1",
    });
    let pids: Vec<u32> = env("PARLOR_PIDS", "")
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect();
    let settle: u64 = env("SETTLE_SECONDS", "0").parse().unwrap_or(0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let result = runtime.block_on(run(seconds, concurrency, hosts, settings, pids, settle));
    println!(
        "{}",
        serde_json::to_string_pretty(&result).expect("JSON of plain values")
    );
}

async fn run(
    seconds: u64,
    concurrency: usize,
    hosts: Vec<String>,
    settings: std::sync::Arc<Settings>,
    pids: Vec<u32>,
    settle: u64,
) -> Value {
    let baseline: Vec<usize> = pids.iter().map(|&p| process_stats(p).1).collect();
    let children_before: Vec<usize> = pids.iter().map(|&p| children(p)).collect();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let local = tokio::task::LocalSet::new();
    let workers: Vec<_> = (0..concurrency)
        .map(|i| {
            let host = hosts[i % hosts.len()].clone();
            local.spawn_local(worker(i, host, settings.clone(), deadline))
        })
        .collect();
    let mut tally = Tally::default();
    local
        .run_until(async {
            for handle in workers {
                let one = handle.await.unwrap_or_default();
                tally.firsts.extend(one.firsts);
                tally.completed += one.completed;
                tally.errors += one.errors;
                for (status, n) in one.statuses {
                    *tally.statuses.entry(status).or_default() += n;
                }
            }
        })
        .await;
    // Replies stored, connections closed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after: Vec<(u64, usize)> = pids.iter().map(|&p| process_stats(p)).collect();
    // Idle upstream connections stay pooled for a while: wait (up to SETTLE_SECONDS) until
    // every server is back to its descriptors before the run.
    let mut settled = 2;
    while settled < settle
        && pids
            .iter()
            .zip(&baseline)
            .any(|(&p, &before)| process_stats(p).1 > before)
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
        settled += 1;
    }
    tally.firsts.sort();
    let ms = |d: Duration| (d.as_secs_f64() * 10_000.0).round() / 10.0;
    let (p50, p99) = match tally.firsts.len() {
        0 => (Value::Null, Value::Null),
        n => (
            json!(ms(if n % 2 == 1 {
                tally.firsts[n / 2]
            } else {
                (tally.firsts[n / 2 - 1] + tally.firsts[n / 2]) / 2
            })),
            json!(ms(tally.firsts[(n * 99 / 100).max(1) - 1])),
        ),
    };
    let per_pid = |values: Vec<Value>| -> Map<String, Value> {
        pids.iter().map(|p| p.to_string()).zip(values).collect()
    };
    json!({
        "client": "load-streams",
        "seconds": seconds,
        "concurrency": concurrency,
        "browsers": settings.browsers,
        "processes": pids.len(),
        "completed": tally.completed,
        "errors": tally.errors,
        "statuses": tally.statuses,
        "first_delta_ms_p50": p50,
        "first_delta_ms_p99": p99,
        "rss_peak_mib": per_pid(after.iter().map(|(kib, _)| json!((*kib as f64 / 102.4).round() / 10.0)).collect()),
        "fds_before": per_pid(baseline.iter().map(|&n| json!(n)).collect()),
        "fds_after": per_pid(after.iter().map(|&(_, n)| json!(n)).collect()),
        "fds_settled": per_pid(pids.iter().map(|&p| json!(process_stats(p).1)).collect()),
        "settled_after_s": settled,
        "children_before": per_pid(children_before.iter().map(|&n| json!(n)).collect()),
        "children_after": per_pid(pids.iter().map(|&p| json!(children(p))).collect()),
    })
}

/// One worker: turns back to back until the deadline, each a new conversation.
async fn worker(
    i: usize,
    host: String,
    settings: std::sync::Arc<Settings>,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut cookie: Option<String> = None;
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        if settings.browsers && cookie.is_none() {
            match browser_cookie(&host, &settings.agent).await {
                Ok(found) => cookie = Some(found),
                Err(e) => {
                    tally.errors += 1;
                    *tally.statuses.entry(e).or_default() += 1;
                    continue;
                }
            }
        }
        let message = settings.message.replace("{id}", &format!("{i}-{n}"));
        match chat_once(&host, &settings.agent, &message, cookie.as_deref()).await {
            Ok((first, ok, status)) => {
                *tally.statuses.entry(status.to_string()).or_default() += 1;
                match (ok, first) {
                    (true, Some(first)) => {
                        tally.completed += 1;
                        tally.firsts.push(first);
                    }
                    _ => tally.errors += 1,
                }
            }
            Err(e) => {
                tally.errors += 1;
                *tally.statuses.entry(e).or_default() += 1;
            }
        }
    }
    tally
}

/// One chat turn over a fresh connection: (time to the first delta, whether it ended with
/// `done` and a 200, the status).
async fn chat_once(
    host: &str,
    agent: &str,
    message: &str,
    cookie: Option<&str>,
) -> Result<(Option<Duration>, bool, u16), String> {
    let body = json!({ "message": message }).to_string();
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /api/chat/{agent} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n{cookie}\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
    let started = Instant::now();
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut chunk = vec![0u8; 65536];
    // What was read, less what is known not to hold the start of a marker.
    let mut window: Vec<u8> = Vec::new();
    let (mut status, mut first, mut ok) = (None, None, false);
    loop {
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        window.extend_from_slice(&chunk[..n]);
        if status.is_none() {
            status = status_of(&window);
        }
        if first.is_none() && contains(&window, b"event: delta") {
            first = Some(started.elapsed());
        }
        if contains(&window, b"event: done") {
            ok = true;
        }
        if contains(&window, b"event: error") {
            break;
        }
        // Keep only the tail: the markers span at most a few bytes across reads.
        if status.is_some() && window.len() > 64 {
            window.drain(..window.len() - 64);
        }
    }
    let status = status.unwrap_or(0);
    Ok((first, ok && status == 200, status))
}

/// The session cookie a browser gets with its first page, as `name=value`.
async fn browser_cookie(host: &str, agent: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
    let request =
        format!("GET /chat?agent={agent} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    let head_end = find(&response, b"\r\n\r\n").unwrap_or(response.len());
    let head = String::from_utf8_lossy(&response[..head_end]);
    session_cookie(&head)
        .ok_or_else(|| format!("no session cookie: {}", head.lines().next().unwrap_or("")))
}

/// The `parlor_session=…` cookie a response's head sets.
fn session_cookie(head: &str) -> Option<String> {
    head.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("set-cookie").then_some(value)
        })
        .map(|value| value.trim().split(';').next().unwrap_or_default())
        .find(|cookie| cookie.starts_with("parlor_session="))
        .map(str::to_owned)
}

/// The status of a response whose first line has been read.
fn status_of(bytes: &[u8]) -> Option<u16> {
    let line_end = find(bytes, b"\r\n")?;
    let line = std::str::from_utf8(&bytes[..line_end]).ok()?;
    Some(line.split_whitespace().nth(1)?.parse().unwrap_or(0))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

/// (peak RSS in KiB, open descriptors) of a local process.
fn process_stats(pid: u32) -> (u64, usize) {
    let peak = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (peak, fds)
}

/// How many processes `pid` started that are still running.
fn children(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid)
                && fields.first() != Some(&"Z")
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_status_once_its_line_is_whole() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\ncontent-type: x"), Some(200));
        assert_eq!(status_of(b"HTTP/1.1 429 Too Many Requests\r\n"), Some(429));
        assert_eq!(status_of(b"HTTP/1.1 20"), None);
    }

    #[test]
    fn finds_the_session_cookie_among_others() {
        let head = "HTTP/1.1 200 OK\r\nSet-Cookie: other=1; Path=/\r\n\
                    set-cookie: parlor_session=abc.def; HttpOnly; Path=/\r\n";
        assert_eq!(
            session_cookie(head).as_deref(),
            Some("parlor_session=abc.def")
        );
        assert_eq!(session_cookie("HTTP/1.1 503 Busy\r\n"), None);
    }
}
