//! `parlor mcp --stdio` latency: `history_save` and `history_get_dialog_detail` (p50 and p99)
//! at 10, 1,000 and 10,000 stored messages, through the real binary over stdio, beside the
//! time of a plain durable file append (write + fdatasync) and of rewriting the whole file
//! (what a store that re-serializes the array on every save pays), measured in the same run.
//!
//! `cargo bench -p parlor-server --bench mcp` (part of `make bench`); prints a Markdown table
//! for `docs/storage.md`. Messages are about 200 bytes, like a short chat turn.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [10, 1_000, 10_000];
const SAMPLES: usize = 200;

struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Client {
    fn start(data: &Path) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_parlor"))
            .args(["mcp", "--stdio"])
            .env("PARLOR_DATA_DIR", data)
            .env("RUST_LOG", "warn")
            .current_dir(data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the parlor binary runs");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut client = Client {
            child,
            stdin,
            stdout,
            next: 1,
        };
        client.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).unwrap();
            let message: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let reply = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert_ne!(reply["result"]["isError"], json!(true), "{reply}");
        reply
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(i: usize) -> String {
    format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(6))
}

fn entry(i: usize) -> Value {
    json!({"role": if i.is_multiple_of(2) { "user" } else { "assistant" }, "text": text(i)})
}

/// p50 and p99 of `samples` runs of `op`.
fn percentiles(samples: usize, mut op: impl FnMut(usize)) -> (Duration, Duration) {
    let mut times: Vec<Duration> = (0..samples)
        .map(|i| {
            let started = Instant::now();
            op(i);
            started.elapsed()
        })
        .collect();
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// A plain durable append: open, write one message at the end, fdatasync.
fn plain_append(path: &Path, i: usize) {
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    let line = serde_json::to_vec(&entry(i)).unwrap();
    file.write_all(&line).unwrap();
    file.write_all(b"\n").unwrap();
    file.sync_data().unwrap();
}

/// A save that rewrites the whole array: read, parse, push, serialize, atomic replace.
fn rewrite_save(dir: &Path, i: usize) {
    let path = dir.join("array.json");
    let mut all: Vec<Value> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    all.push(entry(i));
    let tmp = dir.join(".array.json.tmp");
    let mut file = std::fs::File::create(&tmp).unwrap();
    file.write_all(&serde_json::to_vec(&all).unwrap()).unwrap();
    file.sync_all().unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let samples = if quick { 5 } else { SAMPLES };
    println!("| messages stored | history_save p50 / p99 | history_get_dialog_detail p50 / p99 | plain append + fdatasync p50 / p99 | whole-file rewrite p50 / p99 |");
    println!("|---:|---:|---:|---:|---:|");
    for size in SIZES {
        let size = if quick { size.min(100) } else { size };
        let data = tempfile::tempdir().unwrap();
        let mut client = Client::start(data.path());
        // Fill the dialog over MCP, in saves of 1,000.
        let all: Vec<Value> = (0..size).map(entry).collect();
        for chunk in all.chunks(1_000) {
            client.call("history_save", json!({"dialog": "bench", "entries": chunk}));
        }
        let (save50, save99) = percentiles(samples, |i| {
            client.call(
                "history_save",
                json!({"dialog": "bench", "entry": entry(size + i)}),
            );
        });
        let (detail50, detail99) = percentiles(samples, |_| {
            let reply = client.call("history_get_dialog_detail", json!({"dialog": "bench"}));
            assert!(reply.to_string().contains("U: message"));
        });

        let plain = data.path().join("plain.jsonl");
        std::fs::write(&plain, b"").unwrap();
        for i in 0..size {
            plain_append(&plain, i);
        }
        let (plain50, plain99) = percentiles(samples, |i| plain_append(&plain, size + i));

        std::fs::write(
            data.path().join("array.json"),
            serde_json::to_vec(&all).unwrap(),
        )
        .unwrap();
        let (rewrite50, rewrite99) = percentiles(samples, |i| rewrite_save(data.path(), size + i));

        println!(
            "| {size} | {} / {} ms | {} / {} ms | {} / {} ms | {} / {} ms |",
            ms(save50),
            ms(save99),
            ms(detail50),
            ms(detail99),
            ms(plain50),
            ms(plain99),
            ms(rewrite50),
            ms(rewrite99),
        );
    }
}
