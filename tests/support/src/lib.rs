//! `tideway-testkit`: real `tideway server` and `tideway agent` processes on loopback, the
//! harness of the end-to-end tests. Nodes can be stopped, killed with SIGKILL, restarted and
//! partitioned. Test support only: an unpublished workspace crate, a dev-dependency of the
//! root package, so none of it ships in the `tideway` binary.
#![allow(clippy::disallowed_methods)] // test harness: deadlines on the real wall clock

pub mod wan;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tideway_api::agent::LocalView;
use tideway_api::client::Client;
use tideway_api::cluster::NodeStatus;

/// A free loopback port (bound, then released for the child to take).
pub fn free_addr() -> anyhow::Result<String> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.to_string())
}

pub struct ProcNode {
    pub id: u64,
    pub addr: String,
    /// Its peer-plane address, used when the cluster serves the peer plane apart.
    pub peer_listen: String,
    pub data: PathBuf,
    child: Option<Child>,
}

/// A `tideway agent` process with a sim backend whose cluster state lives in `data`.
pub struct ProcAgent {
    pub name: String,
    pub region: String,
    pub layout: PathBuf,
    pub data: PathBuf,
    /// Its `/v1/local` endpoint.
    pub listen: String,
    pub extra_args: Vec<String>,
    /// The federation address it is given instead of the nodes' own (a proxy a test can cut).
    pub federation: Option<String>,
    child: Option<Child>,
}

pub struct ProcCluster {
    bin: PathBuf,
    dir: PathBuf,
    pub nodes: BTreeMap<u64, ProcNode>,
    pub agents: BTreeMap<String, ProcAgent>,
    /// Extra flags for every server (e.g. `--fault-injection`).
    pub extra_args: Vec<String>,
    /// Bearer token the harness sends, for a cluster started with `--auth-tokens`.
    pub token: Option<String>,
    /// Give every node `--peer-listen` on a port of its own.
    pub peer_plane: bool,
    /// Join with `--learner`: joined nodes stay learners until promoted.
    pub learners_only: bool,
    /// `https` for servers started with `--tls-cert` (the test trusts their CA with
    /// `tideway_api::http::trust_ca_file`).
    pub scheme: &'static str,
    /// Put every node's peer plane behind a [`wan::WanProxy`] with this link (implies
    /// `peer_plane`): nodes reach each other through the proxies (`--peer-advertise`), so
    /// every Raft round trip between two nodes crosses one proxy, both ways.
    pub wan: Option<wan::Link>,
    /// The peer-plane proxies, by node; they outlive a node's restarts.
    pub peer_proxies: BTreeMap<u64, wan::WanProxy>,
    /// Proxies in front of the nodes' APIs, for agents ([`ProcCluster::api_via_wan`]).
    api_proxies: Vec<wan::WanProxy>,
}

impl ProcCluster {
    pub fn new(bin: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Self {
        Self {
            bin: bin.into(),
            dir: dir.into(),
            nodes: BTreeMap::new(),
            agents: BTreeMap::new(),
            extra_args: Vec::new(),
            token: None,
            peer_plane: false,
            learners_only: false,
            scheme: "http",
            wan: None,
            peer_proxies: BTreeMap::new(),
            api_proxies: Vec::new(),
        }
    }

    /// As [`ProcCluster::start`], every node's peer plane behind a proxy with `link`.
    pub async fn start_wan(
        bin: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        n: u64,
        extra_args: &[&str],
        link: wan::Link,
    ) -> anyhow::Result<Self> {
        let mut c = Self::new(bin, dir);
        c.extra_args = extra_args.iter().map(|s| s.to_string()).collect();
        c.wan = Some(link);
        c.add_node(1, None).await?;
        for id in 2..=n {
            let via = c.nodes[&1].addr.clone();
            c.add_node(id, Some(&via)).await?;
        }
        c.wait_for_voters(n as usize, Duration::from_secs(60))
            .await?;
        Ok(c)
    }

    /// A `--federation` value for an agent that reaches every node's API through a proxy
    /// with `link` (the agent "in another region"); the proxies live as long as the cluster.
    pub async fn api_via_wan(&mut self, link: wan::Link) -> anyhow::Result<String> {
        let mut addrs = Vec::new();
        for n in self.nodes.values() {
            let p = wan::WanProxy::to(&n.addr, link).await?;
            addrs.push(p.addr.clone());
            self.api_proxies.push(p);
        }
        Ok(addrs.join(","))
    }

    /// Starts `n` nodes: node 1 bootstraps, the others join through it.
    pub async fn start(
        bin: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        n: u64,
        extra_args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_with_token(bin, dir, n, extra_args, None).await
    }

    /// As [`ProcCluster::start`], for servers that require `token` (given in `extra_args`'
    /// `--auth-tokens` file and passed to joining nodes with `--token-file`).
    pub async fn start_with_token(
        bin: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        n: u64,
        extra_args: &[&str],
        token: Option<String>,
    ) -> anyhow::Result<Self> {
        let mut c = Self::new(bin, dir);
        c.extra_args = extra_args.iter().map(|s| s.to_string()).collect();
        c.token = token;
        c.add_node(1, None).await?;
        for id in 2..=n {
            let via = c.nodes[&1].addr.clone();
            c.add_node(id, Some(&via)).await?;
        }
        c.wait_for_voters(n as usize, Duration::from_secs(60))
            .await?;
        Ok(c)
    }

    pub fn client(&self, id: u64) -> anyhow::Result<Client> {
        Ok(Client::with_token(&self.url(id), self.token.as_deref())?)
    }

    /// The base URL of node `id`'s API.
    pub fn url(&self, id: u64) -> String {
        format!("{}://{}", self.scheme, self.nodes[&id].addr)
    }

    pub fn addrs(&self) -> Vec<String> {
        self.nodes.values().map(|n| n.addr.clone()).collect()
    }

    /// Starts a new node with a fresh data directory, joining through `join` if given.
    pub async fn add_node(&mut self, id: u64, join: Option<&str>) -> anyhow::Result<()> {
        let addr = free_addr()?;
        let data = self.dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&data)?;
        let mut node = ProcNode {
            id,
            addr,
            peer_listen: free_addr()?,
            data,
            child: None,
        };
        if let Some(link) = self.wan {
            let proxy = wan::WanProxy::to(&node.peer_listen, link).await?;
            self.peer_proxies.insert(id, proxy);
        }
        node.child = Some(self.spawn(&node, join)?);
        self.nodes.insert(id, node);
        wait_for_http(&self.url(id), Duration::from_secs(30)).await?;
        Ok(())
    }

    fn spawn(&self, node: &ProcNode, join: Option<&str>) -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node-{}.log", node.id)))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("server")
            .args(["--id", &node.id.to_string()])
            .args(["--listen", &node.addr])
            .arg("--data")
            .arg(&node.data)
            .args(&self.extra_args)
            .args(self.raft_timing())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(j) = join {
            cmd.args(["--join", j]);
            // Promotion after catching up is the server's default; `--auto-promote` is the
            // older spelling, kept working, and passed here so that it stays tested.
            cmd.arg(if self.learners_only {
                "--learner"
            } else {
                "--auto-promote"
            });
        }
        if self.peer_plane || self.wan.is_some() {
            cmd.args(["--peer-listen", &node.peer_listen]);
        }
        if let Some(p) = self.peer_proxies.get(&node.id) {
            cmd.args(["--peer-advertise", &p.addr]);
        }
        cmd.spawn()
            .with_context(|| format!("spawning {}", self.bin.display()))
    }

    /// Raft timing for test clusters, unless a test sets its own: a 100 ms heartbeat and a
    /// 400-800 ms election timeout instead of the server's 50 ms and 200-400 ms. The tests
    /// run on loaded CI machines (two cores, a build and several clusters at once), where a
    /// leader stalled for half a second would lose its followers and the extra elections
    /// would move log indexes that tests about "nothing written" compare. The defaults'
    /// failover time is measured by `tideway bench submit --kills`, not by these tests.
    fn raft_timing(&self) -> Vec<&'static str> {
        let set = |flag: &str| self.extra_args.iter().any(|a| a.starts_with(flag));
        let mut out = Vec::new();
        if !set("--heartbeat-ms") {
            out.extend(["--heartbeat-ms", "100"]);
        }
        if !set("--election-timeout-min-ms") {
            out.extend(["--election-timeout-min-ms", "400"]);
        }
        if !set("--election-timeout-max-ms") {
            out.extend(["--election-timeout-max-ms", "800"]);
        }
        out
    }

    /// SIGKILL: no chance to flush or say goodbye.
    pub fn kill9(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self.nodes.get_mut(&id).context("no such node")?;
        if let Some(mut c) = node.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// SIGTERM and wait: a clean shutdown.
    pub fn stop(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self.nodes.get_mut(&id).context("no such node")?;
        if let Some(mut c) = node.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if c.try_wait()?.is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    c.kill()?;
                    c.wait()?;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Starts a stopped node again on its old address and data.
    pub async fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let child = {
            let node = self.nodes.get(&id).context("no such node")?;
            if node.child.is_some() {
                bail!("node {id} is running");
            }
            self.spawn(node, None)?
        };
        let node = self.nodes.get_mut(&id).context("no such node")?;
        node.child = Some(child);
        wait_for_http(&self.url(id), Duration::from_secs(30)).await
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.child.is_some())
    }

    pub async fn status(&self, id: u64) -> anyhow::Result<NodeStatus> {
        Ok(self.client(id)?.cluster_status().await?)
    }

    /// The leader that a majority of the running nodes agree on.
    pub async fn leader(&self) -> Option<u64> {
        let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
        let mut running = 0;
        for id in self.nodes.keys() {
            if !self.is_running(*id) {
                continue;
            }
            running += 1;
            if let Ok(s) = self.status(*id).await
                && let Some(l) = s.leader
                && self.is_running(l)
            {
                *votes.entry(l).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .find(|(_, v)| *v * 2 > running)
            .map(|(l, _)| l)
    }

    pub async fn wait_for_leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader().await {
                return Ok(l);
            }
            if Instant::now() > deadline {
                bail!("no leader within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_for_voters(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader().await
                && let Ok(s) = self.status(l).await
                && s.voters.len() == n
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the cluster did not reach {n} voters within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every running node has applied the same index, and returns their statuses.
    pub async fn wait_converged(&self, timeout: Duration) -> anyhow::Result<Vec<NodeStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut all = Vec::new();
            for id in self.nodes.keys() {
                if self.is_running(*id)
                    && let Ok(s) = self.status(*id).await
                {
                    all.push(s);
                }
            }
            let running = self.nodes.keys().filter(|id| self.is_running(**id)).count();
            if all.len() == running
                && all.windows(2).all(|w| {
                    w[0].last_applied == w[1].last_applied && w[0].state_digest == w[1].state_digest
                })
                && all.iter().all(|s| s.last_applied == s.committed)
            {
                return Ok(all);
            }
            if Instant::now() > deadline {
                bail!("nodes did not converge within {timeout:?}: {all:#?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Cuts `id` off from every other node, both ways (needs `--fault-injection`).
    pub async fn isolate(&self, id: u64) -> anyhow::Result<()> {
        let others: Vec<u64> = self.nodes.keys().copied().filter(|o| *o != id).collect();
        self.client(id)?.partition(&others).await?;
        for o in &others {
            if self.is_running(*o) {
                self.client(*o)?.partition(&[id]).await?;
            }
        }
        Ok(())
    }

    pub async fn heal(&self) -> anyhow::Result<()> {
        for id in self.nodes.keys() {
            if self.is_running(*id) {
                self.client(*id)?.partition(&[]).await?;
            }
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts a sim-backed agent for cluster `name`, talking to every federation node.
    pub async fn add_agent(
        &mut self,
        name: &str,
        region: &str,
        layout: &Path,
        extra_args: &[&str],
    ) -> anyhow::Result<()> {
        let agent = ProcAgent {
            name: name.to_string(),
            region: region.to_string(),
            layout: layout.to_path_buf(),
            data: self.dir.join(format!("agent-{name}")),
            listen: free_addr()?,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            federation: None,
            child: None,
        };
        self.agents.insert(name.to_string(), agent);
        self.restart_agent(name).await
    }

    /// Like [`Self::add_agent`], the agent reaching the federation only through `federation`
    /// (for example a TCP proxy in front of one node, which the test can cut).
    pub async fn add_agent_via(
        &mut self,
        name: &str,
        region: &str,
        layout: &Path,
        extra_args: &[&str],
        federation: &str,
    ) -> anyhow::Result<()> {
        let agent = ProcAgent {
            name: name.to_string(),
            region: region.to_string(),
            layout: layout.to_path_buf(),
            data: self.dir.join(format!("agent-{name}")),
            listen: free_addr()?,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            federation: Some(federation.to_string()),
            child: None,
        };
        self.agents.insert(name.to_string(), agent);
        self.restart_agent(name).await
    }

    /// Starts a stopped agent again, on the same data (its cluster kept running meanwhile).
    pub async fn restart_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let all = self.addrs().join(",");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("agent-{name}.log")))?;
        let a = self.agents.get_mut(name).context("no such agent")?;
        if a.child.is_some() {
            bail!("agent {name} is running");
        }
        let federation = a.federation.clone().unwrap_or(all);
        let child = Command::new(&self.bin)
            .arg("agent")
            .args(["--cluster", &a.name, "--region", &a.region])
            .args(["--federation", &federation])
            .args(["--backend", "sim"])
            .arg("--config")
            .arg(&a.layout)
            .arg("--data")
            .arg(&a.data)
            .args(["--listen", &a.listen])
            .args(&a.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning agent {name}"))?;
        a.child = Some(child);
        let listen = a.listen.clone();
        wait_for_http(&format!("http://{listen}"), Duration::from_secs(30)).await?;
        // Its local view answers once the agent has fenced and registered; an agent whose
        // registration is refused never gets there, so this wait is bounded and not an error.
        let deadline = Instant::now() + Duration::from_secs(15);
        let c = Client::new(&listen)?;
        while c.agent_local_view().await.is_err() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    pub fn kill9_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let a = self.agents.get_mut(name).context("no such agent")?;
        if let Some(mut c) = a.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// Sends `signal` (a name `kill` knows: `STOP`, `CONT`) to a running agent process, e.g.
    /// to freeze it past its lease and resume it.
    pub fn signal_agent(&self, name: &str, signal: &str) -> anyhow::Result<()> {
        let a = self.agents.get(name).context("no such agent")?;
        let c = a.child.as_ref().context("the agent is not running")?;
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(c.id().to_string())
            .status()?
            .success();
        if !ok {
            bail!("kill -{signal} {name} failed");
        }
        Ok(())
    }

    /// What an agent's cluster holds: `/v1/local` of the agent.
    pub async fn agent_local(&self, name: &str) -> anyhow::Result<LocalView> {
        let a = self.agents.get(name).context("no such agent")?;
        Ok(Client::new(&a.listen)?.agent_local_view().await?)
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        for a in self.agents.values_mut() {
            if let Some(mut c) = a.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for n in self.nodes.values_mut() {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Waits for `/healthz` at `base` (`http://HOST:PORT` or `https://...`).
async fn wait_for_http(base: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let http = tideway_api::http::client_builder().build()?;
    loop {
        if let Ok(r) = http
            .get(format!("{base}/healthz"))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            && r.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{base} did not answer within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
