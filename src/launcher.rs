//! The small launcher of `tideway bench`: a few `tideway server` processes of this binary on
//! loopback, in a temporary directory removed when the launcher is dropped. The tests have a
//! fuller harness (restarts, partitions, agents) in `tideway-testkit`; the shipped binary only
//! needs to start, find the leader, kill it and start it again.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tempfile::TempDir;
use tideway_api::client::Client;
use tideway_api::clock::{Clock, RealClock};
use tideway_api::cluster::NodeStatus;

struct Server {
    addr: String,
    child: Option<Child>,
}

/// Federation nodes started by the bench; killed and their data removed on drop.
pub struct Launcher {
    servers: BTreeMap<u64, Server>,
    dir: TempDir,
}

/// A free loopback port (bound, then released for the child to take).
fn free_addr() -> anyhow::Result<String> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.to_string())
}

impl Launcher {
    /// Starts `n` nodes (node 1 bootstraps, the others join through it) and waits until the
    /// leader counts `n` voters.
    pub async fn start(n: u64) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("tideway-bench-")
            .tempdir()?;
        eprintln!(
            "starting {n} federation nodes under {}",
            dir.path().display()
        );
        let mut l = Self {
            servers: BTreeMap::new(),
            dir,
        };
        for id in 1..=n {
            let join = (id > 1).then(|| l.servers[&1].addr.clone());
            l.spawn(id, free_addr()?, join.as_deref())?;
        }
        let deadline = RealClock.instant() + Duration::from_secs(60);
        loop {
            if let Ok(leader) = l.leader().await
                && let Ok(s) = l.status(leader).await
                && s.voters.len() == n as usize
            {
                return Ok(l);
            }
            if RealClock.instant() > deadline {
                bail!("the cluster did not reach {n} voters within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn spawn(&mut self, id: u64, addr: String, join: Option<&str>) -> anyhow::Result<()> {
        let bin = std::env::current_exe()?;
        let data = self.dir.path().join(format!("node-{id}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))?;
        let mut cmd = Command::new(&bin);
        cmd.arg("server")
            .args(["--id", &id.to_string()])
            .args(["--listen", &addr])
            .arg("--data")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(j) = join {
            cmd.args(["--join", j]);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        self.servers.insert(
            id,
            Server {
                addr,
                child: Some(child),
            },
        );
        Ok(())
    }

    /// Every node's address.
    pub fn addrs(&self) -> Vec<String> {
        self.servers.values().map(|s| s.addr.clone()).collect()
    }

    /// One node's address.
    pub fn addr(&self, id: u64) -> Option<String> {
        self.servers.get(&id).map(|s| s.addr.clone())
    }

    /// Every node's id.
    pub fn ids(&self) -> Vec<u64> {
        self.servers.keys().copied().collect()
    }

    /// The process id of a running node.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.servers.get(&id)?.child.as_ref().map(Child::id)
    }

    /// One node's own status, without the state digest (see `cluster_status_brief`).
    pub async fn status(&self, id: u64) -> anyhow::Result<NodeStatus> {
        let s = self.servers.get(&id).context("no such node")?;
        Ok(Client::new(&s.addr)?.cluster_status_brief().await?)
    }

    /// The leader a running node names (and that is itself running).
    async fn leader(&self) -> anyhow::Result<u64> {
        for (id, s) in &self.servers {
            if s.child.is_none() {
                continue;
            }
            // The named leader must say so itself: a node that just restarted, or was cut off,
            // can name a leader that has since stepped down.
            if let Ok(st) = self.status(*id).await
                && let Some(l) = st.leader
                && self.servers.get(&l).is_some_and(|s| s.child.is_some())
                && self
                    .status(l)
                    .await
                    .is_ok_and(|ls| ls.leader == Some(l) && ls.state == "Leader")
            {
                return Ok(l);
            }
        }
        bail!("no running node knows a running leader")
    }

    /// Waits for a leader.
    pub async fn wait_for_leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        let deadline = RealClock.instant() + timeout;
        loop {
            if let Ok(l) = self.leader().await {
                return Ok(l);
            }
            if RealClock.instant() > deadline {
                bail!("no leader within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Node `id`'s log file (both runs of a restarted node, one after the other).
    pub fn log_path(&self, id: u64) -> std::path::PathBuf {
        self.dir.path().join(format!("node-{id}.log"))
    }

    /// Starts a killed node again on its address and data (it rejoins as the member it was).
    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let s = self.servers.get(&id).context("no such node")?;
        if s.child.is_some() {
            bail!("node {id} is running");
        }
        let addr = s.addr.clone();
        self.spawn(id, addr, None)
    }

    /// Waits until node `id` answers and names a running leader whose log it has caught up
    /// with (its applied index at least the leader's committed index when first asked).
    pub async fn wait_caught_up(&self, id: u64, timeout: Duration) -> anyhow::Result<()> {
        let deadline = RealClock.instant() + timeout;
        let mut target = None;
        loop {
            if target.is_none()
                && let Ok(l) = self.leader().await
                && let Ok(s) = self.status(l).await
            {
                target = s.committed;
            }
            if let Some(t) = target
                && let Ok(s) = self.status(id).await
                && s.leader.is_some()
                && s.last_applied.unwrap_or(0) >= t
            {
                return Ok(());
            }
            if RealClock.instant() > deadline {
                bail!("node {id} did not catch up within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until node `id` keeps pace with the leader: its applied index has reached what
    /// the leader had committed one poll (50 ms) earlier. [`Self::wait_caught_up`] aims at
    /// the leader's index when first asked, which a restarted node under load reaches while
    /// the entries committed during its own start-up (seconds of submissions) are still on
    /// their way to it; a node in that state answers appends slowly, and a failover that
    /// needs its vote and its acks measures the catch-up, not the election.
    pub async fn wait_in_step(&self, id: u64, timeout: Duration) -> anyhow::Result<()> {
        let deadline = RealClock.instant() + timeout;
        let mut previous: Option<u64> = None;
        loop {
            let committed = match self.leader().await {
                Ok(l) => self.status(l).await.ok().and_then(|s| s.committed),
                Err(_) => None,
            };
            if let Some(t) = previous
                && let Ok(s) = self.status(id).await
                && s.leader.is_some()
                && s.last_applied.unwrap_or(0) >= t
            {
                return Ok(());
            }
            previous = committed;
            if RealClock.instant() > deadline {
                bail!("node {id} did not keep pace with the leader within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no chance to flush or say goodbye.
    pub fn kill9(&mut self, id: u64) -> anyhow::Result<()> {
        let s = self.servers.get_mut(&id).context("no such node")?;
        if let Some(mut c) = s.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        for s in self.servers.values_mut() {
            if let Some(mut c) = s.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
