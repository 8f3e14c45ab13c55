//! Per-user servers (`scope = "per_user"`): one process or HTTP session per user, started on
//! the user's first turn that uses it, ended after `idle_minutes` without one, or to make
//! room when `max_users` are served (the least recently used one not in a call: a turn
//! holds a server only while one of its calls runs, so turns that wait, for an approval or
//! a slow model, hold no slot), or when the user's secrets change (the next turn starts it
//! with the new ones).

use super::server::ToolServer;
use super::spec::{for_user, PerUser, ServerSpec};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A user's running servers, by (server id, user).
pub struct Users {
    /// Where each user's folder (`{user_dir}`) is made: `<root>/<server>/<user>`.
    root: Option<PathBuf>,
    running: Mutex<HashMap<(String, String), Instance>>,
}

struct Instance {
    server: Arc<ToolServer>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    /// What it was started with (the user's values and folder), hashed.
    fingerprint: [u8; 32],
    used: Arc<Mutex<Instant>>,
    /// Calls running on it now: it is not ended meanwhile.
    leases: Arc<AtomicUsize>,
}

impl Instance {
    fn end(mut self) -> Option<tokio::task::JoinHandle<()>> {
        self.stop.cancel();
        self.task.take()
    }

    fn idle_since(&self) -> Option<Instant> {
        let used = self
            .used
            .lock()
            .map(|u| *u)
            .unwrap_or_else(|_| Instant::now());
        (self.leases.load(Ordering::Relaxed) == 0).then_some(used)
    }
}

/// A call's hold on a user's server: while held, it is not ended (idle or to make room);
/// dropping it counts as a use.
pub struct Lease {
    used: Arc<Mutex<Instant>>,
    leases: Arc<AtomicUsize>,
}

impl Lease {
    fn new(instance: &Instance) -> Lease {
        instance.leases.fetch_add(1, Ordering::Relaxed);
        Lease {
            used: instance.used.clone(),
            leases: instance.leases.clone(),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(mut used) = self.used.lock() {
            *used = Instant::now();
        }
        self.leases.fetch_sub(1, Ordering::Relaxed);
    }
}

fn fingerprint(values: &BTreeMap<String, String>, dir: &std::path::Path) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for (name, value) in values {
        hash.update(name.as_bytes());
        hash.update([0]);
        hash.update(value.as_bytes());
        hash.update([0]);
    }
    hash.update(dir.as_os_str().as_encoded_bytes());
    hash.finalize().into()
}

/// Whether a user's process of `spec` has a folder (a stdio server's: its `HOME`, and
/// [`super::spec::USER_DIR`]).
fn has_user_dir(spec: &ServerSpec) -> bool {
    matches!(spec.transport, super::spec::Transport::Stdio { .. })
}

/// The name of `user`'s folders: the first 32 of the 64 hex digits of a user key (a
/// store's owner key); none for anything else.
fn folder_name(user: &str) -> Option<&str> {
    let hex = user.len() == 64 && user.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| &user[..32])
}

/// Removes `user`'s folders of every per-user server under `root` (an account removed).
pub fn remove_folders(root: &std::path::Path, user: &str) -> std::io::Result<()> {
    let Some(name) = folder_name(user) else {
        return Ok(());
    };
    let servers = match std::fs::read_dir(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    for server in servers {
        match std::fs::remove_dir_all(server?.path().join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

impl Users {
    pub fn new(root: Option<PathBuf>) -> Users {
        Users {
            root,
            running: Mutex::default(),
        }
    }

    /// User `user`'s server `id`, when it runs.
    pub fn server(&self, id: &str, user: &str) -> Option<Arc<ToolServer>> {
        let running = self.running.lock().ok()?;
        let instance = running.get(&(id.to_owned(), user.to_owned()))?;
        Some(instance.server.clone())
    }

    /// How many users server `id` serves now.
    pub fn count(&self, id: &str) -> usize {
        self.running
            .lock()
            .map(|r| r.keys().filter(|(s, _)| s == id).count())
            .unwrap_or(0)
    }

    /// User `user`'s server `id` for a call, held until the lease is dropped.
    pub fn lease(&self, id: &str, user: &str) -> Option<Lease> {
        let running = self.running.lock().ok()?;
        let instance = running.get(&(id.to_owned(), user.to_owned()))?;
        Some(Lease::new(instance))
    }

    /// Starts `user`'s own server of `spec` with `values` when it does not run (or runs
    /// with other values), and counts this as a use. Refused (why) when the server serves
    /// as many users as it may, all of them in a call.
    pub fn open(
        &self,
        spec: &ServerSpec,
        per_user: &PerUser,
        user: &str,
        values: &BTreeMap<String, String>,
        stop: &CancellationToken,
    ) -> Result<(), String> {
        let dir = self.dir(spec, user)?;
        let fingerprint = fingerprint(values, &dir);
        let key = (spec.id.clone(), user.to_owned());
        let mut running = self.running.lock().map_err(|_| "a lock was poisoned")?;
        if let Some(instance) = running.get(&key) {
            if instance.fingerprint == fingerprint {
                if let Ok(mut used) = instance.used.lock() {
                    *used = Instant::now();
                }
                return Ok(());
            }
            // The user's values changed: the next process gets the new ones.
            running.remove(&key).and_then(Instance::end);
        }
        if running.keys().filter(|(s, _)| *s == spec.id).count() >= per_user.max_users {
            let idlest = running
                .iter()
                .filter(|((s, _), _)| *s == spec.id)
                .filter_map(|(k, i)| Some((i.idle_since()?, k.clone())))
                .min();
            let Some((_, idlest)) = idlest else {
                return Err(format!(
                    "it serves {} users at once, the most it may, and all are busy; try again shortly",
                    per_user.max_users
                ));
            };
            running.remove(&idlest).and_then(Instance::end);
        }
        let transport = for_user(&spec.transport, per_user, &dir, values)?;
        let server = ToolServer::new(ServerSpec {
            transport,
            ..spec.clone()
        });
        let stop = stop.child_token();
        let task = tokio::runtime::Handle::try_current()
            .ok()
            .map(|runtime| runtime.spawn(server.clone().supervise(stop.clone())));
        let instance = Instance {
            server,
            stop,
            task,
            fingerprint,
            used: Arc::new(Mutex::new(Instant::now())),
            leases: Arc::default(),
        };
        running.insert(key, instance);
        Ok(())
    }

    /// The user's own folder for `spec` (made, only the owner may enter it), when it has
    /// one.
    fn dir(&self, spec: &ServerSpec, user: &str) -> Result<PathBuf, String> {
        if !has_user_dir(spec) {
            return Ok(PathBuf::new());
        }
        let Some(root) = &self.root else {
            return Err("Parlor has no data folder for users' files".into());
        };
        let Some(name) = folder_name(user) else {
            return Err("this conversation's user cannot have a folder".into());
        };
        let dir = root.join(&spec.id).join(name);
        use std::os::unix::fs::DirBuilderExt;
        let (files, home) = super::spec::user_folders(&dir);
        for folder in [&files, &home] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(folder)
                .map_err(|e| format!("the user's folder could not be made ({e})"))?;
        }
        Ok(dir)
    }

    /// Ends the servers no turn has used for their `idle_minutes` (`idle`: for every server,
    /// instead; tests) as of `now`; returns their tasks, which end soon.
    pub fn end_idle(
        &self,
        specs: &[Arc<ToolServer>],
        idle: Option<Duration>,
        now: Instant,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let limit = |id: &str| {
            idle.or_else(|| {
                let spec = &specs.iter().find(|s| s.spec.id == id)?.spec;
                match &spec.scope {
                    super::spec::Scope::PerUser(p) => Some(p.idle),
                    super::spec::Scope::Shared => None,
                }
            })
        };
        let Ok(mut running) = self.running.lock() else {
            return Vec::new();
        };
        let idle: Vec<_> = running
            .iter()
            .filter(|((id, _), instance)| {
                let since = instance.idle_since();
                let limit = limit(id);
                matches!((since, limit), (Some(s), Some(l)) if now.saturating_duration_since(s) >= l)
            })
            .map(|(key, _)| key.clone())
            .collect();
        idle.iter()
            .filter_map(|key| running.remove(key).and_then(Instance::end))
            .collect()
    }

    /// Ends `user`'s server `id` (their values changed or were removed).
    pub fn end(&self, id: &str, user: &str) {
        if let Ok(mut running) = self.running.lock() {
            running
                .remove(&(id.to_owned(), user.to_owned()))
                .and_then(Instance::end);
        }
    }

    /// Every user's server, ended: their tasks, to wait for.
    pub fn end_all(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let Ok(mut running) = self.running.lock() else {
            return Vec::new();
        };
        running
            .drain()
            .filter_map(|(_, instance)| instance.end())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_removed_users_folders_go_and_nobody_elses() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        for server in ["memory", "files"] {
            for user in [&a, &b] {
                let dir = root.path().join(server).join(&user[..32]);
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("memory.jsonl"), "x").unwrap();
            }
        }
        super::remove_folders(root.path(), &a).unwrap();
        for server in ["memory", "files"] {
            assert!(!root.path().join(server).join(&a[..32]).exists());
            assert!(root.path().join(server).join(&b[..32]).exists());
        }
        // Not a user key: nothing is touched (no path is made of it).
        super::remove_folders(root.path(), "../..").unwrap();
        super::remove_folders(&root.path().join("none"), &b).unwrap();
        assert!(root.path().join("memory").join(&b[..32]).exists());
    }
}
