//! Partition leases (`Partitions`) in processes of their own: on Redis, PostgreSQL and
//! etcd, nodes (this test binary run again, as `node_process`) are killed, started and
//! stopped while a checker reads who holds each partition from the store.

mod support;

use std::collections::HashMap;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leader::store::SharedStore;
use leader::{KeyOptions, LeaseStore, MemoryStore, PartitionEvent, PartitionOptions, Partitions};
use support::eventually;
use tokio::time::{Instant, sleep};

/// What a node process is told, through its environment.
const NODE_URL: &str = "LEADER_PARTITIONS_NODE_URL";
const NODE_HOLDER: &str = "LEADER_PARTITIONS_NODE_HOLDER";
const NODE_COUNT: &str = "LEADER_PARTITIONS_NODE_COUNT";
const NODE_LEASE_MS: &str = "LEADER_PARTITIONS_NODE_LEASE_MS";

/// The entry point of a node process ([`NodeProcess`]): with [`NODE_URL`] set, it runs node
/// [`NODE_HOLDER`] of set `fleet` on that store until its standard input closes, then stops
/// it gracefully (a kill is a death). Run as a test, without the variables, it runs the
/// same code as node `lone` on a memory store, which must end up owning every partition.
#[test]
fn node_process() {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let Ok(url) = std::env::var(NODE_URL) else {
        let store = MemoryStore::new();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        runtime.block_on(async {
            let node = tokio::spawn(run_node(
                store,
                "lone".to_owned(),
                6,
                Duration::from_secs(2),
                async {
                    let _ = stop_rx.await;
                },
            ));
            tokio::time::sleep(Duration::from_millis(500)).await;
            stop_tx.send(()).unwrap();
            let owned = node.await.unwrap();
            assert_eq!(owned, (0..6).collect::<Vec<_>>(), "a lone node owns every partition");
        });
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    let lease = Duration::from_millis(var(NODE_LEASE_MS).parse().unwrap());
    let count: u32 = var(NODE_COUNT).parse().unwrap();
    runtime.block_on(async {
        let store: SharedStore = leader::store::connect(&url).await.expect("connect");
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        });
        run_node(store, var(NODE_HOLDER), count, lease, async {
            let _ = stdin_closed.await;
        })
        .await;
    });
}

/// Runs a node of set `fleet` until `until`, working on each partition until told to stop;
/// then stops it. What it owned just before.
async fn run_node(
    store: impl LeaseStore + 'static,
    holder: String,
    count: u32,
    lease: Duration,
    until: impl Future<Output = ()>,
) -> Vec<u32> {
    let options = PartitionOptions::new().lease_time(lease).holder_id(holder);
    let mut node = Partitions::start("fleet", count, store, options).await.expect("start");
    let mut events = node.take_events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let PartitionEvent::Assigned(partition) = event {
                tokio::spawn(async move { partition.cancelled().await });
            }
        }
    });
    until.await;
    let owned = node.view().owned;
    node.stop().await.expect("a graceful stop");
    owned
}

/// A node in a process of its own: this test binary, running [`node_process`].
struct NodeProcess {
    holder: String,
    child: Child,
}

impl NodeProcess {
    fn start(url: &str, holder: &str, count: u32, lease: Duration) -> Self {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["node_process", "--exact", "--nocapture", "--test-threads=1"])
            .env(NODE_URL, url)
            .env(NODE_HOLDER, holder)
            .env(NODE_COUNT, count.to_string())
            .env(NODE_LEASE_MS, lease.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start a node process");
        NodeProcess { holder: holder.to_owned(), child }
    }

    /// A death: SIGKILL, nothing handed over.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// A graceful leave: its standard input closes, it stops and exits.
    fn leave(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{} exited with {status}", self.holder);
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads who holds each partition of set `fleet` from the store, and checks that a
/// partition's fence only ever rises, and rises whenever its holder changes.
struct Checker {
    store: SharedStore,
    count: u32,
    last: HashMap<u32, (String, u64)>,
}

impl Checker {
    /// The holders of the partitions now (`None`: free), checked against what came before.
    async fn holders(&mut self) -> Vec<Option<String>> {
        let mut holders = Vec::new();
        for index in 0..self.count {
            let key = KeyOptions::new().resolve(&format!("fleet/{index}")).unwrap();
            let group = self.store.state(&key).await.expect("state");
            assert!(group.leaders.len() <= 1, "partition {index} has two holders: {group:?}");
            let now = group.leaders.first().map(|slot| (slot.holder.clone(), slot.fence));
            if let (Some((holder, fence)), Some((was, was_fence))) = (&now, self.last.get(&index)) {
                assert!(fence >= was_fence, "partition {index}: fence {fence} after {was_fence}");
                assert!(
                    holder == was || fence > was_fence,
                    "partition {index} moved from {was} to {holder} under the same fence"
                );
            }
            if let Some(now) = &now {
                self.last.insert(index, now.clone());
            }
            holders.push(now.map(|(holder, _)| holder));
        }
        holders
    }

    /// Waits until the partitions are held by exactly `nodes`, each floor or ceil of its
    /// share; how long that took.
    async fn until_balanced_over(
        &mut self,
        nodes: &[&str],
        within: Duration,
        what: &str,
    ) -> Duration {
        let started = Instant::now();
        let n = nodes.len() as u32;
        loop {
            let holders = self.holders().await;
            let mut load: HashMap<&str, u32> = nodes.iter().map(|node| (*node, 0)).collect();
            let mut balanced = true;
            for holder in &holders {
                match holder.as_deref().and_then(|holder| load.get_mut(holder)) {
                    Some(count) => *count += 1,
                    None => balanced = false,
                }
            }
            let (floor, ceil) = (self.count / n, self.count.div_ceil(n));
            if balanced && load.values().all(|load| (floor..=ceil).contains(load)) {
                let took = started.elapsed();
                println!("{what}: balanced over {nodes:?} after {took:?}");
                return took;
            }
            assert!(
                started.elapsed() < within,
                "{what}: not balanced over {nodes:?} within {within:?}: {holders:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Nodes in processes of their own on the store at `url`: three share 12 partitions; one is
/// killed (the others re-own its partitions within its lease plus one of their renewal
/// intervals, and a margin); one joins (within two leases); one leaves gracefully (well
/// within one lease: its partitions are released, not left to expire); one killed and
/// started again at once under its id takes its share again. `takeover` is the
/// store's extra wait after a death (etcd's lock-delay: one lease more).
async fn fleet_in_processes(url: &str, lease: Duration, takeover: Duration) {
    let count = 12;
    let mut checker =
        Checker { store: leader::store::connect(url).await.unwrap(), count, last: HashMap::new() };
    let mut one = NodeProcess::start(url, "one", count, lease);
    let two = NodeProcess::start(url, "two", count, lease);
    let mut three = NodeProcess::start(url, "three", count, lease);
    // Process start-up (a few hundred ms on a busy machine) counts against this one.
    checker.until_balanced_over(&["one", "two", "three"], 5 * lease, "three start").await;

    one.kill();
    let renew_interval = lease / 3;
    let death = checker
        .until_balanced_over(
            &["two", "three"],
            lease + renew_interval + takeover + lease / 2,
            "one killed",
        )
        .await;
    assert!(death >= lease / 2, "re-owned after {death:?}: before the dead node's lease could end");

    let four = NodeProcess::start(url, "four", count, lease);
    checker
        .until_balanced_over(
            &["two", "three", "four"],
            2 * lease + Duration::from_secs(2),
            "four joins",
        )
        .await;

    // Killed and started again at once under its id, before its announcement expired (a
    // crash loop): it waits that announcement out and takes its share again. (Balanced
    // over the three once the dead process's slots, under the same holder, have expired.)
    three.kill();
    let three = NodeProcess::start(url, "three", count, lease);
    sleep(lease + takeover).await;
    checker
        .until_balanced_over(
            &["two", "three", "four"],
            lease + takeover + Duration::from_secs(2),
            "three restarted after a crash",
        )
        .await;

    let left = Instant::now();
    two.leave();
    checker.until_balanced_over(&["three", "four"], lease, "two leaves").await;
    println!("two's leave, stop included: {:?}", left.elapsed());
    three.leave();
    four.leave();
    // Nothing is held once every node has left.
    assert!(checker.holders().await.iter().all(Option::is_none), "partitions left held");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_in_processes_share_partitions_on_redis() {
    let server = support::redis_server::RedisServer::start();
    fleet_in_processes(&server.url(), Duration::from_secs(2), Duration::ZERO).await;
}

/// A node started while its store does not answer starts all the same, and takes its
/// partitions once the store answers.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_while_the_store_is_unreachable_catches_up() {
    use support::proxy::{Fault, Proxy};
    let server = support::redis_server::RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    proxy.set(Fault::BlackHole);
    let store = leader::store::builder(proxy.url())
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let options = PartitionOptions::new().lease_time(Duration::from_secs(2)).holder_id("late");
    let node = Partitions::start("late", 4, store, options).await.expect("no error for an outage");
    assert!(node.view().owned.is_empty());
    proxy.set(Fault::None);
    eventually(Duration::from_secs(5), "the node owns its partitions", || async {
        node.view().owned == [0, 1, 2, 3]
    })
    .await;
    node.stop().await.unwrap();
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_in_processes_share_partitions_on_postgres() {
    let server = support::postgres_server::PostgresServer::start();
    fleet_in_processes(&server.url(), Duration::from_secs(2), Duration::ZERO).await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_in_processes_share_partitions_on_etcd() {
    let server = support::etcd::EtcdServer::start();
    // A takeover of a dead holder's partition waits out etcd's lock-delay: one TTL more.
    fleet_in_processes(&server.url(), Duration::from_secs(2), Duration::from_secs(2)).await;
}
