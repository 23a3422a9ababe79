//! Partition leases keep every partition owned: at thousands of partitions (a lone node
//! takes them all at once; a survivor takes a dead node's within a lease, plus one TTL on
//! etcd, however many there are), after a long etcd quorum loss, without leaving a
//! keep-alive stream open per stopped node, and with dozens of nodes started at once.

mod support;

use std::time::Duration;

use leader::{LeaseStore, MemoryStore, PartitionEvent, PartitionOptions, Partitions};
use support::eventually;
use tokio::time::Instant;

/// Starts node `holder` of set `name` whose events a task consumes, dropping each
/// partition's handle once its work must stop (so a hand-over never waits for it).
async fn node(
    name: &str,
    count: u32,
    store: impl LeaseStore + 'static,
    holder: &str,
    lease: Duration,
) -> Partitions {
    let options = PartitionOptions::new().lease_time(lease).holder_id(holder);
    let mut node = Partitions::start(name, count, store, options).await.expect("start");
    let mut events = node.take_events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let PartitionEvent::Assigned(partition) = event {
                tokio::spawn(async move { partition.cancelled().await });
            }
        }
    });
    node
}

/// Waits until `nodes` own every partition of `count` between them, once each; how long
/// that took.
async fn until_all_owned(
    nodes: &[&Partitions],
    count: u32,
    within: Duration,
    what: &str,
) -> Duration {
    let started = Instant::now();
    loop {
        let mut owned: Vec<u32> = nodes.iter().flat_map(|node| node.view().owned).collect();
        owned.sort_unstable();
        if owned.len() == count as usize && owned.iter().copied().eq(0..count) {
            let took = started.elapsed();
            println!("{what}: all {count} owned after {took:?}");
            return took;
        }
        let loads: Vec<usize> = nodes.iter().map(|node| node.view().owned.len()).collect();
        assert!(
            started.elapsed() < within,
            "{what}: not all {count} partitions owned within {within:?}: {loads:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lone node on the memory store owns 20,000 partitions within seconds: its loop's cost
/// per grant does not grow with what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_node_owns_20000_partitions_within_seconds() {
    let count = 20_000;
    let lone = node("many", count, MemoryStore::new(), "lone", Duration::from_secs(10)).await;
    until_all_owned(&[&lone], count, Duration::from_secs(5), "a lone node").await;
    lone.stop().await.unwrap();
}

/// On Redis, 4,096 partitions: a lone node takes them all at once (not 128 per retry
/// interval), and after a second node joined and the first died (its store unreachable for
/// good), the survivor owns all 4,096 within the dead node's lease plus a margin.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_takes_4096_partitions_within_a_lease_on_redis() {
    use support::proxy::{Fault, Proxy};
    let server = support::redis_server::RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let (count, lease) = (4096, Duration::from_secs(2));
    let dying_store = leader::store::builder(proxy.url())
        .command_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let dying = node("fleet", count, dying_store, "dying", lease).await;
    until_all_owned(&[&dying], count, Duration::from_secs(3), "a lone node").await;
    let survivor_store = leader::store::connect(&server.url()).await.unwrap();
    let survivor = node("fleet", count, survivor_store, "survivor", lease).await;
    eventually(Duration::from_secs(10), "the survivor owns its half", || async {
        survivor.view().owned.len() == count as usize / 2
    })
    .await;
    proxy.set(Fault::BlackHole);
    let took =
        until_all_owned(&[&survivor], count, lease + Duration::from_secs(2), "the survivor").await;
    assert!(took >= lease / 2, "taken after {took:?}: before the dead node's lease could end");
    survivor.stop().await.unwrap();
}

/// On etcd, a dead node's 512 partitions come back together: each takeover waits out its
/// lock-delay (one TTL) at the same time as the others, not 128 at a time.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_takes_1024_partitions_within_a_lease_and_a_ttl_on_etcd() {
    use leader::EtcdStore;
    use support::etcd::EtcdServer;
    use support::proxy::{Fault, Proxy};
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.member.client_port).await;
    let (count, lease) = (1024, Duration::from_secs(2));
    // Not shorter: the subject is the survivor's takeover, and during the start's hand-over
    // of 512 partitions (512 releases beside the survivor's 512 claims) a call can take more
    // than 500 ms on a slow machine. With leader-core built unoptimized, at 500 ms they timed
    // out by the hundred and the HTTP/2 client closed the connection (docs/etcd-store.md):
    // halves after 3 to 10 s; at 2 s, 1.5 to 3.6 s. (Optimized, 500 ms passed 5 runs of 5.)
    let dying_store = EtcdStore::builder(format!("etcd://127.0.0.1:{}", proxy.port))
        .command_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let dying = node("fleet", count, dying_store, "dying", lease).await;
    let survivor_store = EtcdStore::connect(&server.url()).await.unwrap();
    let survivor = node("fleet", count, survivor_store, "survivor", lease).await;
    let halves = Duration::from_secs(20);
    let started = Instant::now();
    eventually(halves, "the nodes own half each", || async {
        survivor.view().owned.len() == count as usize / 2
            && dying.view().owned.len() == count as usize / 2
    })
    .await;
    println!("the nodes own half each after {:?}", started.elapsed());
    proxy.set(Fault::BlackHole);
    // The dead node's session expires after a lease; each of its partitions is then granted
    // after its lock-delay, one TTL (the lease) more.
    let within = 2 * lease + Duration::from_secs(3);
    let took = until_all_owned(&[&survivor], count, within, "the survivor").await;
    assert!(took >= 2 * lease - lease / 4, "taken after {took:?}: before the lock-delay ended");
    survivor.stop().await.unwrap();
}

/// On etcd, after a quorum loss of many leases (two followers of three paused), every
/// partition is owned again within a lease, a lock-delay and a few seconds: the slots a node
/// gave up in its session are given back (tried again while the node lives), not left to
/// the session lease its renewals keep alive.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_partition_is_owned_again_after_a_long_etcd_quorum_loss() {
    use leader::EtcdStore;
    use support::etcd::EtcdCluster;
    let cluster = EtcdCluster::start(3).await;
    let (count, lease) = (16, Duration::from_secs(2));
    let connect = || async {
        EtcdStore::builder(cluster.url())
            .command_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap()
    };
    let one = node("fleet", count, connect().await, "one", lease).await;
    let two = node("fleet", count, connect().await, "two", lease).await;
    eventually(Duration::from_secs(20), "the nodes own half each", || async {
        one.view().owned.len() == count as usize / 2 && two.view().owned.len() == count as usize / 2
    })
    .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let followers: Vec<usize> = (0..cluster.members.len()).filter(|m| *m != leader).collect();
    for member in &followers {
        cluster.members[*member].pause();
    }
    // Seven leases: every partition lapses at the nodes, and their releases fail until the
    // quorum is back.
    tokio::time::sleep(Duration::from_secs(14)).await;
    assert!(one.view().owned.is_empty() && two.view().owned.is_empty(), "owned without a quorum");
    for member in &followers {
        cluster.members[*member].resume();
    }
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    let within = 2 * lease + Duration::from_secs(5);
    until_all_owned(&[&one, &two], count, within, "after the quorum loss").await;
    one.stop().await.unwrap();
    two.stop().await.unwrap();
}

/// On etcd, a node stopped while it takes a dead node's partitions over (its claims wait out
/// their lock-delays) leaves at once: the partitions it held are owned again well within
/// the lock-delay its claims still wait.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_during_a_takeover_leaves_before_its_claims_end_on_etcd() {
    use leader::EtcdStore;
    use support::etcd::EtcdServer;
    use support::proxy::{Fault, Proxy};
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.member.client_port).await;
    let (count, lease) = (48, Duration::from_secs(3));
    let dying_store = EtcdStore::builder(format!("etcd://127.0.0.1:{}", proxy.port))
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let store = EtcdStore::connect(&server.url()).await.unwrap();
    let store_handle = store.clone();
    let dying = node("takeover", count, dying_store, "dying", lease).await;
    let stopping = node("takeover", count, store.clone(), "stopping", lease).await;
    let survivor = node("takeover", count, store, "survivor", lease).await;
    eventually(Duration::from_secs(20), "the nodes own a third each", || async {
        [&dying, &stopping, &survivor].iter().all(|node| node.view().owned.len() == 16)
    })
    .await;
    proxy.set(Fault::BlackHole);
    // The dead node's announcement ends after a lease; the others then claim its partitions,
    // each claim waiting out the partition's lock-delay (one TTL, the lease).
    eventually(2 * lease + Duration::from_secs(2), "the stopping node claims", || async {
        let view = stopping.view();
        view.members == 2 && view.share.len() > view.owned.len()
    })
    .await;
    let held = stopping.view().owned;
    let started = Instant::now();
    let stopped = tokio::spawn(async move { stopping.stop().await });
    eventually(lease, "the survivor owns what the stopped node held", || async {
        let owned = survivor.view().owned;
        held.iter().all(|index| owned.contains(index))
    })
    .await;
    let took = started.elapsed();
    println!(
        "the {} partitions of a node stopped during a takeover owned after {took:?}",
        held.len()
    );
    assert!(took < lease / 2, "owned again after {took:?}: the node left after its claims ended");
    stopped.await.unwrap().unwrap();
    until_all_owned(&[&survivor], count, 2 * lease, "the survivor").await;
    survivor.stop().await.unwrap();
    // The stopped node's claims kept its session's lease alive through their lock-delays,
    // after its session ended: once that lease has run out, no stream is kept for it.
    eventually(4 * lease, "no keep-alive stream kept", || async {
        format!("{store_handle:?}").contains("keep_alive_streams: 0")
    })
    .await;
}

/// On etcd, a stopped node leaves no keep-alive stream open: 20 nodes started and stopped
/// one after another on one store leave the member with the streams it had before, and the
/// store with no session lease on record.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_nodes_leave_no_keep_alive_stream_open_on_etcd() {
    use support::etcd_store::solo;
    let (store, server) = solo().await;
    let keep_alive = "grpc_method=\"LeaseKeepAlive\"";
    let open_streams = || {
        let started = server.member.metric_with("grpc_server_started_total", keep_alive);
        let handled = server.member.metric_with("grpc_server_handled_total", keep_alive);
        started.unwrap_or(0.0) - handled.unwrap_or(0.0)
    };
    let lease = Duration::from_secs(2);
    for round in 0..20 {
        let node = node("churn", 4, store.clone(), &format!("node-{round}"), lease).await;
        eventually(Duration::from_secs(10), "the node owns its partitions", || async {
            node.view().owned.len() == 4
        })
        .await;
        // Past a renewal: the session's keep-alive stream is open.
        tokio::time::sleep(lease / 2).await;
        node.stop().await.unwrap();
    }
    eventually(Duration::from_secs(5), "every stream closed", || async { open_streams() < 1.0 })
        .await;
    // Nor a session lease: the store's own records of them do not grow with churn.
    let debug = format!("{store:?}");
    assert!(debug.contains("session_leases: 0"), "session leases kept: {debug}");
}

/// On etcd, whose times to live are whole seconds (an announcement's last second reads as
/// 0), a survivor reads the members a few times while a dead node's announcement runs out,
/// not every few milliseconds of its last second.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_members_last_second_costs_a_few_reads_on_etcd() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use leader::store::GroupSnapshot;
    use leader::store::author::{Layered, StoreLayer};
    use leader::{Error, EtcdStore};
    use support::etcd::EtcdServer;
    use support::proxy::{Fault, Proxy};

    /// Counts the reads of the members' group.
    #[derive(Debug, Default)]
    struct MemberReads(AtomicUsize);
    #[async_trait::async_trait]
    impl StoreLayer for MemberReads {
        async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
            if key.ends_with("/members") {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
            inner.state(key).await
        }
    }

    let server = EtcdServer::start();
    let proxy = Proxy::start(server.member.client_port).await;
    let lease = Duration::from_secs(2);
    let dying_store = EtcdStore::builder(format!("etcd://127.0.0.1:{}", proxy.port))
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let dying = node("paced", 8, dying_store, "dying", lease).await;
    let reads = Arc::new(MemberReads::default());
    let survivor_store =
        Layered::new(Arc::clone(&reads), EtcdStore::connect(&server.url()).await.unwrap());
    let survivor = node("paced", 8, survivor_store, "survivor", lease).await;
    eventually(Duration::from_secs(20), "the nodes own half each", || async {
        survivor.view().owned.len() == 4 && dying.view().owned.len() == 4
    })
    .await;
    proxy.set(Fault::BlackHole);
    let (before, started) = (reads.0.load(Ordering::Relaxed), Instant::now());
    eventually(2 * lease + Duration::from_secs(3), "the survivor alone", || async {
        survivor.view().members == 1
    })
    .await;
    let (made, took) = (reads.0.load(Ordering::Relaxed) - before, started.elapsed());
    println!("{made} reads of the members in the {took:?} until the dead node left them");
    // A read per renewal (a third of the lease) and a few around the expiry.
    let allowed = (took.as_millis() / (lease / 3).as_millis()) as usize + 4;
    assert!(made <= allowed, "{made} reads of the members in {took:?}, allowed {allowed}");
    survivor.stop().await.unwrap();
}

/// On etcd, 32 nodes started at once, each with a store of its own (as processes would),
/// all join: an announcement that loses every round of its transaction to the others'
/// (the store then answers "full" for a group with room) is retried, not reported as a
/// full set.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_started_at_once_all_join_on_etcd() {
    use leader::EtcdStore;
    use support::etcd::EtcdServer;
    let server = EtcdServer::start();
    let mut stores = Vec::new();
    for _ in 0..32 {
        stores.push(EtcdStore::connect(&server.url()).await.expect("connect"));
    }
    let lease = Duration::from_secs(4);
    let starts = stores.into_iter().enumerate().map(|(at, store)| async move {
        let options = PartitionOptions::new().lease_time(lease).holder_id(format!("node-{at}"));
        Partitions::start("crowd", 64, store, options).await
    });
    let mut nodes = Vec::new();
    for (at, started) in futures_util::future::join_all(starts).await.into_iter().enumerate() {
        nodes.push(started.unwrap_or_else(|error| panic!("node-{at} did not start: {error}")));
    }
    let all: Vec<&Partitions> = nodes.iter().collect();
    until_all_owned(&all, 64, Duration::from_secs(20), "32 nodes started at once").await;
    for node in nodes {
        node.stop().await.unwrap();
    }
}
