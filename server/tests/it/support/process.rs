//! The real `parlor` binary, started as its own process.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The binary with only `vars` (and PATH) in its environment, run from the project root, on
/// a free port, with `data` as its data folder.
pub fn command(vars: &[(&str, &str)], data: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_parlor"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    command
        .current_dir(&root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LEPTOS_SITE_ADDR", "127.0.0.1:0")
        .env("PARLOR_DATA_DIR", data)
        .env("PARLOR_COOKIE_KEY", super::COOKIE_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in vars {
        command.env(k, v);
    }
    command
}

/// A running `parlor`; killed (SIGKILL) when dropped.
pub struct Running {
    pub child: Child,
    /// Its log up to the moment it listened.
    pub log: String,
    pub port: u16,
    /// The rest of its log, line by line.
    pub lines: mpsc::Receiver<String>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Kills the process at once (SIGKILL: no shutdown code runs).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the binary and waits (at most 60 s) until it listens.
pub fn start(vars: &[(&str, &str)], data: &Path) -> Running {
    let mut child = command(vars, data).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            let output = child.wait_with_output().ok();
            let stderr = output
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default();
            panic!("the server did not start listening:\n{log}\n{stderr}");
        };
        log.push_str(&line);
        log.push('\n');
        if let Some(rest) = line.split("listening on http://127.0.0.1:").nth(1) {
            // The digits after the address (a JSON log line goes on after them).
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let port = digits.parse::<u16>().unwrap();
            return Running {
                child,
                log,
                port,
                lines: rx,
            };
        }
    }
}

/// Runs the binary expecting it to refuse to start; returns its stderr.
pub fn refuses(vars: &[(&str, &str)], data: &Path) -> String {
    let output = command(vars, data).output().unwrap();
    assert!(!output.status.success(), "{vars:?} started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}
