//! Partition leases (`Partitions`) in one process, on the memory store: nodes share the
//! partitions, follow a join and a leave (moving only what must move), hand over
//! gracefully, refuse bad input and a disagreeing node, cost one read and one batch per
//! renewal once stable, and share by the weights they announce. (Nodes in processes of their own, on the real stores:
//! `partitions_processes.rs`.)

#[path = "partitions/moves.rs"]
mod moves;
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::{
    KeyOptions, LeaseStore, LossReason, MemoryStore, PartitionEvent, PartitionOptions, Partitions,
};
use support::eventually;
use tokio::time::{Instant, sleep};

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

/// A second `stop`, made while the first waits for a hand-over, waits for the node to have
/// stopped too (and returns `Ok`).
#[tokio::test(start_paused = true)]
async fn a_second_stop_waits_for_the_first() {
    let store = MemoryStore::new();
    let options = PartitionOptions::new()
        .lease_time(Duration::from_secs(3))
        .handover_grace(Duration::from_secs(2))
        .holder_id("a");
    let mut node = Partitions::start("twice", 1, store.clone(), options).await.unwrap();
    let held = loop {
        if let Some(PartitionEvent::Assigned(partition)) = node.next_event().await {
            break partition;
        }
    };
    let started = Instant::now();
    let first = async {
        node.stop().await.unwrap();
        started.elapsed()
    };
    let second = async {
        tokio::task::yield_now().await;
        node.stop().await.unwrap();
        started.elapsed()
    };
    let (first, second) = tokio::join!(first, second);
    assert!(first >= Duration::from_secs(2), "{first:?}: the handle was held for the grace");
    assert!(
        second >= first,
        "the second stop returned after {second:?}, the first after {first:?}"
    );
    assert!(store.state("leader:twice/0").await.unwrap().leaders.is_empty());
    drop(held);
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

/// A node restarted under its holder id after a crash meets its old announcement, which
/// nobody renews: it waits for it to expire and starts, where a live node's announcement
/// under the id (renewed meanwhile) refuses it.
#[tokio::test(start_paused = true)]
async fn a_node_restarted_after_a_crash_waits_out_its_old_announcement() {
    let store = MemoryStore::new();
    let lease = Duration::from_secs(3);
    let crashed = leader::store::AcquireRequest::new(
        "leader:orders/members",
        std::num::NonZeroU32::new(1024).unwrap(),
        leader::LeaseToken::generate().unwrap(),
        "a [8 partitions]",
        lease,
    );
    store.acquire(crashed).await.unwrap();
    let began = Instant::now();
    let options = PartitionOptions::new().lease_time(lease).holder_id("a");
    let restarted = Partitions::start("orders", 8, store.clone(), options).await;
    let restarted = restarted.expect("the restarted node starts once the old announcement expired");
    let waited = began.elapsed();
    assert!(waited >= lease && waited < lease + Duration::from_secs(1), "started after {waited:?}");
    eventually(Duration::from_secs(1), "the restarted node owns every partition", || {
        let owned = restarted.owned().len();
        async move { owned == 8 }
    })
    .await;
    restarted.stop().await.unwrap();
}

/// Once stable, a node costs the store one batch of renewals and one read of the members
/// per renewal interval, and no read of the partitions' holders (a node holding its cap
/// needs none): counted through a layer over three nodes for six intervals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stable_node_reads_the_members_once_per_renewal() {
    use leader::store::GroupSnapshot;
    use leader::store::author::{Layered, StoreLayer};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Default)]
    struct Count {
        reads: AtomicUsize,
        batches: AtomicUsize,
        holders_reads: AtomicUsize,
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
        async fn state_many(
            &self,
            inner: &dyn LeaseStore,
            keys: &[&str],
        ) -> Result<Vec<GroupSnapshot>, leader::Error> {
            self.holders_reads.fetch_add(1, Ordering::Relaxed);
            inner.state_many(keys).await
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
    let holders_reads = count.holders_reads.load(Ordering::Relaxed);
    assert!(holders_reads > 0, "the nodes read the holders while they balanced");
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
    let holders_reads = count.holders_reads.load(Ordering::Relaxed) - holders_reads;
    assert_eq!(holders_reads, 0, "reads of the holders once balanced");
    for node in nodes {
        node.stop().await.unwrap();
    }
}

// Node weights: a node announces its capacity, and shares follow it.

const SECOND: Duration = Duration::from_secs(1);

async fn weighted_node(store: &MemoryStore, holder: &str, weight: u32) -> Partitions {
    let options = PartitionOptions::new().lease_time(3 * SECOND).holder_id(holder).weight(weight);
    Partitions::start("weighted", 100, store.clone(), options).await.expect("start")
}

/// Waits (paused time) until the nodes own `expected` partitions each.
async fn until_owned(nodes: &[&Partitions], expected: &[usize]) {
    let deadline = Instant::now() + 30 * SECOND;
    loop {
        let owned: Vec<usize> = nodes.iter().map(|node| node.owned().len()).collect();
        if owned == expected {
            return;
        }
        assert!(Instant::now() < deadline, "owned {owned:?}, expected {expected:?}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// A node of weight 3 beside one of weight 1 owns three quarters of the partitions; a
/// third node of weight 1 joins and the shares become 20, 60, 20. The announcement says
/// the weight (an unweighted node's says what it always did).
#[tokio::test(start_paused = true)]
async fn shares_follow_the_weights_the_nodes_announce() {
    let store = MemoryStore::new();
    let light = weighted_node(&store, "light", 1).await;
    let heavy = weighted_node(&store, "heavy", 3).await;
    until_owned(&[&light, &heavy], &[25, 75]).await;
    let members = store.state("leader:weighted/members").await.unwrap();
    let mut holders: Vec<&str> = members.leaders.iter().map(|slot| &*slot.holder).collect();
    holders.sort_unstable();
    assert_eq!(holders, ["heavy [100 partitions, weight 3]", "light [100 partitions]"]);

    let other = weighted_node(&store, "other", 1).await;
    until_owned(&[&light, &heavy, &other], &[20, 60, 20]).await;
    for node in [&light, &heavy, &other] {
        node.stop().await.expect("stopped");
    }
}

/// A weight out of range is refused at start and by `validate`, naming the value and what
/// is allowed.
#[tokio::test]
async fn a_weight_out_of_range_is_refused() {
    for weight in [0, leader::MAX_WEIGHT + 1] {
        let options = PartitionOptions::new().weight(weight);
        let error = options.validate().unwrap_err().to_string();
        assert_eq!(error, format!("invalid `weight` {weight}: must be between 1 and 1000"));
        let refused = Partitions::start("weighted", 4, MemoryStore::new(), options).await;
        assert_eq!(refused.unwrap_err().to_string(), error);
    }
}
