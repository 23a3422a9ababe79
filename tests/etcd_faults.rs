//! `EtcdStore` on a three-member etcd cluster on loopback ports, under the faults a cluster
//! has: the Raft leader killed (SIGKILL) in the middle of grants and renewals, paused
//! (SIGSTOP) and resumed, cut off from its peers, and every member killed and restarted on its
//! data. Candidates on several stores (as separate processes would be) hold slots and renew
//! them throughout; at no moment do more than `max_leaders` bodies run, fences only grow, and
//! the group recovers within two leases plus an election.
#![cfg(feature = "etcd")]

#[path = "etcd_faults/handover.rs"]
mod handover;
#[path = "etcd_faults/member_faults.rs"]
mod member_faults;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::store::AcquireOutcome;
use leader::{EtcdStore, LeaderGroupElectionOptions, LeaderGroupElector, LeaseStore};
use support::etcd::{ELECTION_TIMEOUT_MS, EtcdCluster};
use support::{request_for, token};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

const SECOND: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(2);
const ELECTION: Duration = Duration::from_millis(ELECTION_TIMEOUT_MS);

/// `count` stores on the cluster, each its own clients (as processes would have).
async fn stores(cluster: &EtcdCluster, count: usize) -> Vec<EtcdStore> {
    let mut stores = Vec::new();
    for _ in 0..count {
        let store = EtcdStore::builder(cluster.url()).command_timeout(SECOND).connect().await;
        stores.push(store.expect("connect"));
    }
    stores
}

/// Candidates of one group calling `run_if_leader` in a loop until stopped; each elected body
/// holds its slot for `hold`, or until its lease is lost.
struct Fleet {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    /// Each elected body's fence, in the order the bodies started.
    fences: Arc<Mutex<Vec<u64>>>,
    errors: Arc<AtomicUsize>,
    /// Leases lost because a renewal was refused: the store ended them (an expiry, or etcd
    /// revoking them early).
    refused: Arc<AtomicUsize>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What a fleet saw.
#[derive(Debug)]
struct Seen {
    most_at_once: usize,
    fences: Vec<u64>,
    errors: usize,
    refused: usize,
}

impl Fleet {
    fn start(stores: &[EtcdStore], group: &str, max_leaders: u32, per_store: usize) -> Fleet {
        let fleet = Fleet {
            running: Arc::default(),
            most: Arc::default(),
            fences: Arc::default(),
            errors: Arc::default(),
            refused: Arc::default(),
            stop: CancellationToken::new(),
            tasks: Vec::new(),
        };
        let mut tasks = Vec::new();
        for store in stores {
            for _ in 0..per_store {
                let options = LeaderGroupElectionOptions::new(max_leaders)
                    .lease_time(LEASE)
                    .auto_extend(true)
                    .wait_time(5 * SECOND);
                let elector = LeaderGroupElector::new(store.clone(), options).unwrap();
                let (running, most, fences, errors, refused, stop) = (
                    fleet.running.clone(),
                    fleet.most.clone(),
                    fleet.fences.clone(),
                    fleet.errors.clone(),
                    fleet.refused.clone(),
                    fleet.stop.clone(),
                );
                let group = group.to_owned();
                tasks.push(tokio::spawn(async move {
                    while !stop.is_cancelled() {
                        let (running, most, fences, refused) = (&running, &most, &fences, &refused);
                        let body = |lease: leader::Lease| async move {
                            let now = running.fetch_add(1, SeqCst) + 1;
                            most.fetch_max(now, SeqCst);
                            fences.lock().unwrap().push(lease.fence());
                            // Three renewals' worth, unless the lease is lost first.
                            tokio::select! {
                                () = lease.lost() => {
                                    if lease.loss_reason() == Some(leader::LossReason::Refused) {
                                        refused.fetch_add(1, SeqCst);
                                    }
                                }
                                () = sleep(LEASE + LEASE / 2) => {}
                            }
                            running.fetch_sub(1, SeqCst);
                        };
                        let result = tokio::select! {
                            result = elector.run_if_leader(&group, body) => result,
                            () = stop.cancelled() => break,
                        };
                        if result.is_err() {
                            errors.fetch_add(1, SeqCst);
                            sleep(Duration::from_millis(50)).await;
                        }
                    }
                }));
            }
        }
        Fleet { tasks, ..fleet }
    }

    fn elected(&self) -> usize {
        self.fences.lock().unwrap().len()
    }

    async fn finish(self) -> Seen {
        self.stop.cancel();
        for task in self.tasks {
            task.await.unwrap();
        }
        let fences = std::mem::take(&mut *self.fences.lock().unwrap());
        Seen {
            most_at_once: self.most.load(SeqCst),
            fences,
            errors: self.errors.load(SeqCst),
            refused: self.refused.load(SeqCst),
        }
    }
}

/// A fleet of two groups on `stores`: a pool of 2, and a single leader whose fences, in the
/// order its bodies ran, must strictly increase.
struct Fleets {
    pool: Fleet,
    single: Fleet,
}

impl Fleets {
    fn start(stores: &[EtcdStore], name: &str) -> Fleets {
        Fleets {
            pool: Fleet::start(stores, &format!("{name}-pool"), 2, 2),
            single: Fleet::start(stores, &format!("{name}-single"), 1, 2),
        }
    }

    /// Waits until both groups have elected `more` bodies beyond what they had.
    async fn progress(&self, more: usize, within: Duration, what: &str) {
        let (pool, single) = (self.pool.elected(), self.single.elected());
        let deadline = Instant::now() + within;
        while self.pool.elected() < pool + more || self.single.elected() < single + more {
            assert!(Instant::now() < deadline, "no progress within {within:?} {what}");
            sleep(Duration::from_millis(20)).await;
        }
    }

    async fn finish(self) {
        let (pool, single) = (self.pool.finish().await, self.single.finish().await);
        assert!(
            pool.most_at_once <= 2,
            "{} holders at once in a group of 2: {pool:?}",
            pool.most_at_once
        );
        assert!(single.most_at_once <= 1, "two leaders at once: {single:?}");
        assert!(
            single.fences.windows(2).all(|pair| pair[0] < pair[1]),
            "fences went back: {:?}",
            single.fences
        );
        let mut pool_fences = pool.fences.clone();
        pool_fences.sort_unstable();
        pool_fences.dedup();
        assert_eq!(
            pool_fences.len(),
            pool.fences.len(),
            "a fence granted twice: {:?}",
            pool.fences
        );
        eprintln!(
            "pool: {} elected, {} errors, {} renewals refused; single: {} elected, {} errors, {} renewals refused",
            pool.fences.len(),
            pool.errors,
            pool.refused,
            single.fences.len(),
            single.errors,
            single.refused
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_leader_killed_in_the_middle_of_grants_and_renewals() {
    let mut cluster = EtcdCluster::start(3).await;
    let stores = stores(&cluster, 3).await;
    let fleets = Fleets::start(&stores, "killed");
    fleets.progress(2, 20 * SECOND, "before the fault").await;
    for _ in 0..2 {
        let leader = cluster.wait_for_leader(10 * SECOND).await;
        cluster.members[leader].kill();
        // Holders renew through the next member; new grants go on after the election.
        sleep(LEASE).await;
        cluster.members[leader].start_again();
        fleets.progress(2, 2 * LEASE + ELECTION + 10 * SECOND, "after the leader was killed").await;
    }
    fleets.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_leader_paused_past_every_lease_and_resumed() {
    let cluster = EtcdCluster::start(3).await;
    let stores = stores(&cluster, 3).await;
    let fleets = Fleets::start(&stores, "paused");
    fleets.progress(2, 20 * SECOND, "before the fault").await;
    for _ in 0..2 {
        // Paused longer than a lease: on resuming, its lessor may find every lease it knew of
        // expired and have them revoked while their holders' TTLs still run (etcd 15247).
        let leader = cluster.wait_for_leader(10 * SECOND).await;
        cluster.members[leader].pause();
        sleep(LEASE + LEASE / 2).await;
        cluster.members[leader].resume();
        fleets.progress(2, 2 * LEASE + ELECTION + 10 * SECOND, "after the leader resumed").await;
    }
    fleets.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_leader_cut_off_from_its_peers() {
    let cluster = EtcdCluster::start(3).await;
    let stores = stores(&cluster, 3).await;
    let fleets = Fleets::start(&stores, "cut-off");
    fleets.progress(2, 20 * SECOND, "before the fault").await;
    for _ in 0..2 {
        let leader = cluster.wait_for_leader(10 * SECOND).await;
        cluster.isolate(leader).await;
        // Clients still reach it; it steps down within an election timeout, and answers
        // "no leader", so calls move to the majority.
        fleets.progress(2, 2 * LEASE + ELECTION + 10 * SECOND, "with the leader cut off").await;
        cluster.heal();
        fleets.progress(1, 2 * LEASE + ELECTION + 10 * SECOND, "after healing").await;
    }
    fleets.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_killed_and_restarted_on_its_data() {
    let mut cluster = EtcdCluster::start(3).await;
    let stores = stores(&cluster, 2).await;
    let key = "leader:whole-cluster";
    let before = match stores[0].acquire(request_for(key, 1, token(), LEASE)).await.unwrap() {
        AcquireOutcome::Granted(grant) => grant.fence,
        other => panic!("{other:?}"),
    };
    let fleets = Fleets::start(&stores, "restarted");
    fleets.progress(1, 20 * SECOND, "before the fault").await;
    for member in &mut cluster.members {
        member.kill();
    }
    // No quorum anywhere: a transient error, never a grant.
    let err = stores[1].acquire(request_for("leader:no-quorum", 1, token(), LEASE)).await;
    assert!(err.as_ref().is_err_and(leader::Error::is_transient), "{err:?}");
    for member in &mut cluster.members {
        member.start_again();
    }
    cluster.wait_for_leader(30 * SECOND).await;
    fleets.progress(2, 2 * LEASE + ELECTION + 20 * SECOND, "after the restart").await;
    fleets.finish().await;
    // The revision was kept on disk: a grant after the restart is fenced above every one
    // before it.
    let after = loop {
        match stores[1].acquire(request_for(key, 1, token(), LEASE)).await.unwrap() {
            AcquireOutcome::Granted(grant) => break grant.fence,
            AcquireOutcome::Full { .. } => sleep(Duration::from_millis(100)).await,
            other => panic!("{other:?}"),
        }
    };
    assert!(after > before, "fence {after} after the restart, {before} before");
}
