//! A throwaway `redis-server` on a free loopback port, for tests of the Redis backend.
//!
//! Runs Debian's `redis-server` (installed by `scripts/setup.sh test`) with no persistence,
//! and kills it when dropped. [`RedisServer::stop`] and [`RedisServer::restart`] let fault
//! tests take it away and bring it back on the same port.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Where a persistent server keeps its append-only file (kept across restarts).
    persist: Option<tempfile::TempDir>,
}

impl RedisServer {
    /// Starts `redis-server` and waits until it answers PING.
    pub fn start() -> std::io::Result<RedisServer> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut server = RedisServer {
            port,
            child: None,
            persist: None,
        };
        server.restart()?;
        Ok(server)
    }

    /// Starts a server that writes every change to disk before answering, so a restart
    /// brings its data back (as a production Redis with an append-only file does).
    pub fn start_persistent() -> std::io::Result<RedisServer> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut server = RedisServer {
            port,
            child: None,
            persist: Some(tempfile::tempdir()?),
        };
        server.restart()?;
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its data is gone: it keeps nothing on disk).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port.
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.stop();
        let mut command = Command::new("redis-server");
        command.args(["--port", &self.port.to_string()]).args([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ]);
        match &self.persist {
            Some(dir) => command
                .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                .arg(dir.path()),
            None => command.args(["--appendonly", "no"]),
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot run redis-server ({e}); install it with `scripts/setup.sh test`"
                    ),
                )
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(std::io::Error::other(
            "redis-server did not answer PING within 10 s",
        ))
    }

    fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
