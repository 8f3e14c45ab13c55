//! Starting the real tool servers the tests use, and finding the processes they leave.

use parlor_server::tools::spec::Transport;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn env_with_path() -> std::collections::BTreeMap<String, String> {
    let mut env = std::collections::BTreeMap::new();
    if let Ok(path) = std::env::var("PATH") {
        env.insert("PATH".into(), path);
    }
    env
}

/// PyPI `mcp-server-time` from the project's virtual environment.
pub fn time_server() -> Transport {
    let python = repo().join(".tools/venv/bin/python");
    assert!(
        python.exists(),
        "run scripts/setup.sh test (it installs mcp-server-time)"
    );
    Transport::Stdio {
        command: python.display().to_string(),
        args: vec![
            "-m".into(),
            "mcp_server_time".into(),
            "--local-timezone".into(),
            "UTC".into(),
        ],
        env: env_with_path(),
    }
}

fn everything_bin() -> PathBuf {
    let bin = repo().join("end2end/node_modules/.bin/mcp-server-everything");
    assert!(
        bin.exists(),
        "run scripts/setup.sh test (it installs the npm packages)"
    );
    bin
}

/// npm `@modelcontextprotocol/server-everything`, over streamable HTTP on a free port.
pub struct Everything {
    child: Child,
    port: u16,
}

impl Everything {
    pub fn start_http() -> Everything {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(everything_bin())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Everything { child, port };
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("server-everything did not listen on {port}");
    }

    pub fn transport(&self) -> Transport {
        Transport::Http {
            url: format!("http://127.0.0.1:{}/mcp", self.port),
            headers: Default::default(),
        }
    }

    /// The same server over stdio, started by Parlor.
    pub fn stdio() -> Transport {
        Transport::Stdio {
            command: everything_bin().display().to_string(),
            args: vec!["stdio".into()],
            env: env_with_path(),
        }
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pids of this test process's descendants whose command line mentions `needle`.
pub fn children_running(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let words = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !words.contains(needle) {
            continue;
        }
        if descends_from(pid, me) {
            found.push(pid);
        }
    }
    found
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (in parentheses): state, then the parent pid.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` descends from `ancestor`.
pub fn descends(pid: u32, ancestor: u32) -> bool {
    descends_from(pid, ancestor)
}

fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    while let Some(p) = parent(pid) {
        if p == ancestor {
            return true;
        }
        if p <= 1 {
            return false;
        }
        pid = p;
    }
    false
}

pub fn kill(pid: u32) {
    let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
}
