//! No tool server outlives Parlor: ended with it on SIGTERM, and exiting by itself when
//! Parlor is killed (its input closes). A startup refusal names the entry and field.

use super::servers;
use crate::support::process;
use parlor_server::tools::spec::Transport;
use std::time::{Duration, Instant};

/// The pids of the time servers started by process `parent`.
fn time_servers_of(parent: u32) -> Vec<u32> {
    servers::children_running("mcp_server_time")
        .into_iter()
        .filter(|&pid| servers::descends(pid, parent))
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .trim_start()
            .starts_with('Z')
    })
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_with_clock(data: &std::path::Path) -> (process::Running, tempfile::NamedTempFile) {
    let Transport::Stdio { command, args, .. } = servers::time_server() else {
        unreachable!()
    };
    let config = crate::support::config_file(&format!(
        "[[mcp_servers]]\nid = \"clock\"\ncommand = {command:?}\nargs = {args:?}\n"
    ));
    let path = config.path().display().to_string();
    let running = process::start(&[("PARLOR_CONFIG", &path)], data);
    (running, config)
}

#[test]
fn tool_servers_end_with_parlor_when_stopped_or_killed() {
    let data = tempfile::tempdir().unwrap();
    // SIGTERM: Parlor ends its servers and waits for them.
    let (running, _config) = start_with_clock(data.path());
    let parlor = running.child.id();
    wait_until("the time server started", || {
        time_servers_of(parlor).len() == 1
    });
    let server = time_servers_of(parlor)[0];
    let status = std::process::Command::new("kill")
        .args(["-TERM", &parlor.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut running = running;
    let exited = running.child.wait().unwrap();
    assert!(exited.success(), "a clean stop: {exited:?}");
    assert!(!alive(server), "the server ended with Parlor");

    // SIGKILL: no shutdown code runs; the server sees its input close and exits.
    let (mut running, _config) = start_with_clock(data.path());
    let parlor = running.child.id();
    wait_until("the time server started", || {
        time_servers_of(parlor).len() == 1
    });
    let server = time_servers_of(parlor)[0];
    running.kill();
    wait_until("the orphaned server exited", || !alive(server));
}

#[test]
fn a_bad_tool_server_entry_stops_startup_naming_entry_and_field() {
    let data = tempfile::tempdir().unwrap();
    let config = crate::support::config_file(
        "[[mcp_servers]]\nid = \"clock\"\ncommand = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"\n",
    );
    let path = config.path().display().to_string();
    let stderr = process::refuses(&[("PARLOR_CONFIG", &path)], data.path());
    assert!(
        stderr.contains(
            "mcp_servers[0] (id \"clock\"): url: set only one of command, url and builtin"
        ),
        "{stderr}"
    );
}
