//! Partition leases (`Partitions`): nodes in this process share the partitions, follow a
//! join and a leave and hand over gracefully (memory store); and, on Redis, PostgreSQL and
//! etcd, nodes in processes of their own (this test binary run again, as `node_process`)
//! are killed, started and stopped while a checker reads who holds each partition from the
//! store.

mod support;

use std::collections::HashMap;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::store::SharedStore;
use leader::{
    KeyOptions, LeaseStore, LossReason, MemoryStore, PartitionEvent, PartitionOptions, Partitions,
};
use support::eventually;
use tokio::time::Instant;

/// What an event said (not the event: an `Assigned` event holds a handle of its partition,
/// which would hold a hand-over back).
#[derive(Debug, Clone, Copy)]
enum Seen {
    Assigned { index: u32, fence: u64 },
    Revoked { reason: LossReason },
}

/// Every event of the nodes of one test: when, which node, what.
type Log = Arc<Mutex<Vec<(Instant, String, Seen)>>>;

/// Starts node `holder` of set `name` with a consumer of its events that works on each
/// partition until told to stop, then drops it (so a hand-over completes at once).
async fn node(
    name: &str,
    count: u32,
    store: impl LeaseStore + 'static,
    holder: &str,
    lease: Duration,
    log: &Log,
) -> Partitions {
    let options = PartitionOptions::new().lease_time(lease).holder_id(holder);
    let mut node = Partitions::start(name, count, store, options).await.expect("start");
    let mut events = node.take_events();
    let (log, holder) = (Arc::clone(log), holder.to_owned());
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let seen = match &event {
                PartitionEvent::Assigned(partition) => {
                    Seen::Assigned { index: partition.index(), fence: partition.fence() }
                }
                PartitionEvent::Revoked { reason, .. } => Seen::Revoked { reason: *reason },
                _ => continue,
            };
            log.lock().unwrap().push((Instant::now(), holder.clone(), seen));
            if let PartitionEvent::Assigned(partition) = event {
                tokio::spawn(async move { partition.cancelled().await });
            }
        }
    });
    node
}

/// Whether the nodes own every partition of `count` once, each floor or ceil of its share.
fn balanced(nodes: &[&Partitions], count: u32) -> bool {
    let n = nodes.len() as u32;
    let mut owners = vec![0; count as usize];
    for node in nodes {
        let owned = node.view().owned;
        if !(count / n..=count.div_ceil(n)).contains(&(owned.len() as u32)) {
            return false;
        }
        for index in owned {
            owners[index as usize] += 1;
        }
    }
    owners.iter().all(|&owners| owners == 1)
}

/// Every partition's grants, in the order they came, have strictly increasing fences.
fn fences_increase(log: &Log) {
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut events = log.lock().unwrap().clone();
    events.sort_by_key(|(at, ..)| *at);
    for (_, holder, seen) in events {
        if let Seen::Assigned { index, fence } = seen {
            let previous = last.insert(index, fence);
            assert!(
                previous.is_none_or(|previous| previous < fence),
                "partition {index} granted to {holder} with fence {fence} after {previous:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn nodes_share_the_partitions_and_hand_them_over_gracefully() {
    let store = MemoryStore::new();
    let lease = Duration::from_secs(2);
    let log: Log = Log::default();
    let a = node("orders", 10, store.clone(), "a", lease, &log).await;
    eventually(lease, "a alone owns all 10", || async { balanced(&[&a], 10) }).await;

    // Two join: within two leases, 4/3/3, and a gave up its extras gracefully.
    let joined = Instant::now();
    let b = node("orders", 10, store.clone(), "b", lease, &log).await;
    let c = node("orders", 10, store.clone(), "c", lease, &log).await;
    eventually(2 * lease, "a, b, c share 10", || async { balanced(&[&a, &b, &c], 10) }).await;
    println!("join of 2 balanced after {:?}", joined.elapsed());
    let revoked: Vec<LossReason> = log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, holder, seen)| match seen {
            Seen::Revoked { reason } if holder == "a" => Some(*reason),
            _ => None,
        })
        .collect();
    assert!(revoked.len() >= 6, "a handed over {} partitions", revoked.len());
    assert!(revoked.iter().all(|reason| *reason == LossReason::SteppedDown), "{revoked:?}");

    // c leaves: its partitions are released at once, so a and b take them well within a
    // lease (an expiry would take the whole lease).
    let left = Instant::now();
    c.stop().await.unwrap();
    println!("c stopped after {:?}", left.elapsed());
    eventually(lease, "a, b share 10", || async { balanced(&[&a, &b], 10) }).await;
    println!("leave balanced after {:?}", left.elapsed());
    assert!(store.state("leader:orders/members").await.unwrap().leaders.len() == 2);

    // A node's handles of a partition it owns give its fence while it lives.
    let owned = a.owned();
    assert_eq!(owned.len(), 5);
    assert!(owned.iter().all(|partition| partition.live_fence() == Some(partition.fence())));
    fences_increase(&log);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
    // Stopped nodes leave nothing held.
    for index in 0..10 {
        let key = format!("leader:orders/{index}");
        assert!(store.state(&key).await.unwrap().leaders.is_empty(), "{key} still held");
    }
    // Every handle handed out saw its partition stop.
    assert!(owned.iter().all(|partition| partition.live_fence().is_none()));
}

/// A partition's work holds a hand-over back until it drops its handle (or the grace ends).
#[tokio::test(start_paused = true)]
async fn a_handover_waits_for_the_work_to_drop_its_handle() {
    let store = MemoryStore::new();
    let options = |holder| {
        PartitionOptions::new()
            .lease_time(Duration::from_secs(3))
            .handover_grace(Duration::from_secs(3))
            .holder_id(holder)
    };
    let mut a = Partitions::start("pair", 2, store.clone(), options("a")).await.unwrap();
    let mut handles = Vec::new();
    while handles.len() < 2 {
        if let Some(PartitionEvent::Assigned(partition)) = a.next_event().await {
            handles.push(partition);
        }
    }
    let b = Partitions::start("pair", 2, store.clone(), options("b")).await.unwrap();
    // One of a's two partitions is b's share: a's work on it is told to stop...
    let Some(PartitionEvent::Revoked { index, reason }) = a.next_event().await else { panic!() };
    assert_eq!(reason, LossReason::SteppedDown);
    let position = handles.iter().position(|partition| partition.index() == index).unwrap();
    let moving = handles.remove(position);
    tokio::time::timeout(Duration::from_secs(1), moving.cancelled()).await.unwrap();
    assert!(moving.cancel_token().is_cancelled());
    assert_eq!(moving.live_fence(), None);
    assert_eq!(a.view().owned, [handles[0].index()]);
    // ...but a holds it while the handle is out.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let key = format!("leader:pair/{index}");
    assert_eq!(store.state(&key).await.unwrap().leaders[0].holder, "a");
    assert!(b.view().owned.is_empty());
    let dropped = Instant::now();
    drop(moving);
    eventually(Duration::from_secs(2), "b owns the partition", || async {
        b.view().owned == [index]
    })
    .await;
    println!("b took partition {index} {:?} after a's handle was dropped", dropped.elapsed());
    assert!(handles[0].live_fence().is_some(), "a's other partition stays a's");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// Bad input gets a clear error naming the value and what is allowed.
#[tokio::test]
async fn bad_input_is_refused_with_the_value_and_what_is_allowed() {
    let refused = |result: Result<Partitions, leader::Error>| result.unwrap_err().to_string();
    let store = MemoryStore::new();
    let error = refused(Partitions::start("x", 0, store.clone(), PartitionOptions::new()).await);
    assert!(error.contains("count") && error.contains("between 1 and 1000000"), "{error}");
    let error =
        refused(Partitions::start("x", 2_000_000, store.clone(), PartitionOptions::new()).await);
    assert!(error.contains("2000000"), "{error}");
    let exact = PartitionOptions::new().keys(KeyOptions::new().exact_key("one-key"));
    let error = refused(Partitions::start("x", 4, store.clone(), exact).await);
    assert!(error.contains("keys") && error.contains("exact key"), "{error}");
    let grace = PartitionOptions::new()
        .lease_time(Duration::from_secs(1))
        .handover_grace(Duration::from_secs(2));
    let error = refused(Partitions::start("x", 4, store.clone(), grace).await);
    assert!(error.contains("handover_grace") && error.contains("lease_time"), "{error}");
    let error =
        refused(Partitions::start("bad name", 4, store.clone(), PartitionOptions::new()).await);
    assert!(error.contains("bad name") && error.contains("whitespace"), "{error}");
}

/// Nodes that would split the set two ways are refused at start, with an error naming what
/// differs: a holder id a live node announced, another partition count. A full set of
/// nodes is its own error. The refused nodes leave no announcement behind.
#[tokio::test(start_paused = true)]
async fn a_node_that_disagrees_with_the_live_ones_is_refused() {
    let store = MemoryStore::new();
    let options = || PartitionOptions::new().lease_time(Duration::from_secs(3));
    let first = Partitions::start("orders", 8, store.clone(), options().holder_id("a")).await;
    let first = first.expect("the first node starts");
    let taken = Partitions::start("orders", 8, store.clone(), options().holder_id("a")).await;
    match taken.unwrap_err() {
        leader::Error::HolderInUse { holder, set } => {
            assert_eq!((&*holder, &*set), ("a", "orders"))
        }
        other => panic!("a taken holder id gave {other}"),
    }
    let other_count =
        Partitions::start("orders", 16, store.clone(), options().holder_id("b")).await;
    let error = other_count.unwrap_err();
    assert!(
        matches!(error, leader::Error::PartitionCountMismatch { requested: 16, existing: 8, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("same count"), "{error}");
    let members = store.state("leader:orders/members").await.unwrap();
    assert_eq!(members.leaders.len(), 1, "{members:?}");
    assert_eq!(members.leaders[0].holder, "a [8 partitions]");
    first.stop().await.unwrap();

    // A set of as many live nodes as a set may have: no more join.
    for node in 0..1024 {
        let holder = format!("node-{node} [4 partitions]");
        let request = leader::store::AcquireRequest::new(
            "leader:full/members",
            std::num::NonZeroU32::new(1024).unwrap(),
            leader::LeaseToken::generate().unwrap(),
            &holder,
            Duration::from_secs(60),
        );
        store.acquire(request).await.unwrap();
    }
    let full = Partitions::start("full", 4, store.clone(), options().holder_id("late")).await;
    match full.unwrap_err() {
        leader::Error::SetFull { max_nodes: 1024, set, .. } => assert_eq!(set, "full"),
        other => panic!("a full set gave {other}"),
    }
}

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
/// within one lease: its partitions are released, not left to expire). `takeover` is the
/// store's extra wait after a death (etcd's lock-delay: one lease more).
async fn fleet_in_processes(url: &str, lease: Duration, takeover: Duration) {
    let count = 12;
    let mut checker =
        Checker { store: leader::store::connect(url).await.unwrap(), count, last: HashMap::new() };
    let mut one = NodeProcess::start(url, "one", count, lease);
    let two = NodeProcess::start(url, "two", count, lease);
    let three = NodeProcess::start(url, "three", count, lease);
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

/// Once stable, a node costs the store one batch of renewals and one read of the members
/// per renewal interval: counted through a layer over three nodes for six intervals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stable_node_reads_the_members_once_per_renewal() {
    use leader::store::GroupSnapshot;
    use leader::store::author::{Layered, StoreLayer};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Default)]
    struct Count {
        reads: AtomicUsize,
        batches: AtomicUsize,
    }
    #[async_trait::async_trait]
    impl StoreLayer for Count {
        async fn state(
            &self,
            inner: &dyn LeaseStore,
            key: &str,
        ) -> Result<GroupSnapshot, leader::Error> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            inner.state(key).await
        }
        async fn renew_many(
            &self,
            inner: &dyn LeaseStore,
            slots: &[leader::store::author::HeldSlot<'_>],
            lease_time: Duration,
        ) -> Result<Vec<leader::store::RenewOutcome>, leader::Error> {
            self.batches.fetch_add(1, Ordering::Relaxed);
            inner.renew_many(slots, lease_time).await
        }
    }
    let count = Arc::new(Count::default());
    let store = Layered::new(Arc::clone(&count), MemoryStore::new());
    let store = Arc::new(store);
    let (lease, log) = (Duration::from_millis(600), Log::default());
    let mut nodes = Vec::new();
    for holder in ["a", "b", "c"] {
        nodes.push(node("steady", 30, Arc::clone(&store), holder, lease, &log).await);
    }
    let refs: Vec<&Partitions> = nodes.iter().collect();
    eventually(4 * lease, "balanced", || async { balanced(&refs, 30) }).await;
    tokio::time::sleep(lease).await; // the start's hand-overs done
    let (reads, batches) =
        (count.reads.load(Ordering::Relaxed), count.batches.load(Ordering::Relaxed));
    let intervals = 6;
    tokio::time::sleep(lease / 3 * intervals).await;
    let reads = count.reads.load(Ordering::Relaxed) - reads;
    let batches = count.batches.load(Ordering::Relaxed) - batches;
    println!(
        "3 nodes, {intervals} renewal intervals: {reads} reads of the members, {batches} batches"
    );
    // One each per node and interval, and one more at either end of the window.
    let most = 3 * (intervals as usize + 1);
    assert!(reads <= most && batches <= most, "{reads} reads, {batches} batches: more than {most}");
    for node in nodes {
        node.stop().await.unwrap();
    }
}
