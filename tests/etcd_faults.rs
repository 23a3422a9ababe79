//! `EtcdStore` on a three-member etcd cluster on loopback ports, under the faults a cluster
//! has: the Raft leader killed (SIGKILL) in the middle of grants and renewals, paused
//! (SIGSTOP) and resumed, cut off from its peers, and every member killed and restarted on its
//! data. Candidates on several stores (as separate processes would be) hold slots and renew
//! them throughout; at no moment do more than `max_leaders` bodies run, fences only grow, and
//! the group recovers within two leases plus an election.
#![cfg(feature = "etcd")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::store::AcquireOutcome;
use leader::{
    EtcdStore, LeaderElectionOptions, LeaderElector, LeaderGroupElectionOptions,
    LeaderGroupElector, LeaseStore,
};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_is_replaced_once_its_lease_and_the_lock_delay_have_passed() {
    let mut cluster = EtcdCluster::start(3).await;
    let stores = stores(&cluster, 2).await;
    let key = "leader:crashed";
    // The holder takes the slot and is never heard from again (its process died).
    let AcquireOutcome::Granted(_) =
        stores[0].acquire(request_for(key, 1, token(), LEASE)).await.unwrap()
    else {
        panic!("free")
    };
    let crashed = Instant::now();
    // And the Raft leader dies with it.
    let leader = cluster.wait_for_leader(10 * SECOND).await;
    cluster.members[leader].kill();
    let options = LeaderElectionOptions::new()
        .lease_time(LEASE)
        .wait_time(30 * SECOND)
        .keys(leader::KeyOptions::new().exact_key(key));
    let waiter = LeaderElector::new(stores[1].clone(), options).unwrap();
    // It tries again after a store error, as a scheduled job would at its next run, for a
    // minute at most; the errors it met are shown if it never wins.
    let mut errors = Vec::new();
    let took = tokio::time::timeout(60 * SECOND, async {
        loop {
            match waiter.run_if_leader("crashed", |_| async { crashed.elapsed() }).await {
                Ok(won) => break won.elected().expect("elected"),
                Err(error) => {
                    assert!(error.is_transient(), "{error:?}");
                    errors.push(format!("{:?} {error}", crashed.elapsed()));
                }
            }
        }
    })
    .await;
    let took = took.unwrap_or_else(|_| panic!("no takeover within a minute; errors: {errors:#?}"));
    // The new Raft leader gives every lease its whole TTL again when it takes office (etcd's
    // lessor promotion), the lease then runs out (2 s, and up to half a second until etcd
    // deletes its keys), and the takeover waits its lock-delay (2 s): about 5-6 s on an idle
    // machine. The bound is generous, for an election drawn out by a busy one; the order is
    // what is checked: nobody acts before the lease and the lock-delay have passed.
    let bound = 2 * LEASE + 2 * ELECTION + 10 * SECOND;
    assert!(took >= 2 * LEASE, "acted on a taken-over slot after only {took:?}");
    assert!(took <= bound, "took {took:?} (bound {bound:?}); errors: {errors:#?}");
    eprintln!("a crashed holder's slot was acted on after {took:?} ({} errors)", errors.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_over_with_no_lock_delay() {
    let cluster = EtcdCluster::start(3).await;
    let stores = stores(&cluster, 2).await;
    let options = LeaderElectionOptions::new().lease_time(10 * SECOND).wait_time(30 * SECOND);
    let holder = LeaderElector::new(stores[0].clone(), options.clone()).unwrap();
    let waiter = LeaderElector::new(stores[1].clone(), options).unwrap();
    let (held, release) =
        (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let (signal, go) = (held.clone(), release.clone());
    let holding = tokio::spawn(async move {
        holder
            .run_if_leader("hand-over", |_| async move {
                signal.notify_one();
                go.notified().await;
                Instant::now()
            })
            .await
    });
    held.notified().await;
    let waiting = tokio::spawn(async move {
        waiter.run_if_leader("hand-over", |_| async { Instant::now() }).await
    });
    sleep(SECOND / 2).await; // the waiter is refused and waits on the group's watch
    release.notify_one();
    let released_at = holding.await.unwrap().unwrap().elected().unwrap();
    let won_at = waiting.await.unwrap().unwrap().elected().unwrap();
    let hand_over = won_at - released_at;
    // Two commits (a release and a grant) and a watch event: nowhere near a TTL.
    assert!(hand_over < 5 * SECOND, "hand-over took {hand_over:?}");
    eprintln!("hand-over after a release: {hand_over:?}");
    // And the store is the only one used: the stores' types are what users get.
    let _: &dyn LeaseStore = &stores[0];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_revoked_early_never_lets_a_second_holder_act_while_the_first_believes() {
    // What a resumed Raft leader does to leases it found expired on its stale clock (etcd
    // 12528, 15247): the lease is gone while its holder's TTL still runs, and the holder
    // learns of it only at its next keep-alive. Here a client revokes it.
    let cluster = EtcdCluster::start(3).await;
    let stores = stores(&cluster, 2).await;
    let options =
        LeaderElectionOptions::new().lease_time(LEASE).auto_extend(true).wait_time(30 * SECOND);
    let (holder, waiter) = (
        LeaderElector::new(stores[0].clone(), options.clone()).unwrap(),
        LeaderElector::new(stores[1].clone(), options).unwrap(),
    );
    let believed_until = Arc::new(Mutex::new(None::<Instant>));
    let (held, until) = (Arc::new(tokio::sync::Notify::new()), believed_until.clone());
    let signal = held.clone();
    let holding = tokio::spawn(async move {
        holder
            .run_if_leader("revoked", |lease| async move {
                signal.notify_one();
                // Believes it holds for as long as its lease is live, checked every 5 ms.
                while lease.live_fence().is_some() {
                    *until.lock().unwrap() = Some(Instant::now());
                    sleep(Duration::from_millis(5)).await;
                }
                lease.loss_reason()
            })
            .await
    });
    held.notified().await;
    let waiting =
        tokio::spawn(
            async move { waiter.run_if_leader("revoked", |_| async { Instant::now() }).await },
        );
    sleep(SECOND / 2).await;
    // Revoke the holder's lease, as the old Raft leader would.
    let mut client =
        leader::store::etcd_client::Client::connect([cluster.members[0].endpoint()], None)
            .await
            .unwrap();
    let slots = client
        .get(
            "leader:revoked slot ",
            Some(leader::store::etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let lease = slots.kvs().first().expect("the holder's slot").lease();
    client.lease_revoke(lease).await.unwrap();
    let acted_at = waiting.await.unwrap().unwrap().elected().expect("elected");
    let reason = holding.await.unwrap().unwrap().elected().expect("elected");
    assert_eq!(reason, Some(leader::LossReason::Refused), "the holder learnt at its keep-alive");
    let last_believed = believed_until.lock().unwrap().expect("believed");
    assert!(
        acted_at > last_believed,
        "the new holder acted {:?} before the old one stopped believing",
        last_believed - acted_at
    );
}

/// A transaction a member held back and ran late (its link stalled, the client's cancel
/// lost) never gives a token a second slot, nor a slot on a lease in use elsewhere: the
/// store does not send it again to the next member, and revokes its lease (and waits for
/// the answer) before the token tries again, so the late copy finds no lease to bind to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_a_member_runs_late_takes_no_slot() {
    use leader::store::ReleaseOutcome;
    use support::proxy::{Fault, Proxy};

    let cluster = EtcdCluster::start(3).await;
    let proxy = Proxy::start(cluster.members[0].client_port).await;
    let endpoints = [
        format!("127.0.0.1:{}", proxy.port),
        cluster.members[1].endpoint(),
        cluster.members[2].endpoint(),
    ];
    let url = format!("etcd://{}", endpoints.join(","));
    let store = EtcdStore::builder(url).command_timeout(3 * SECOND).connect().await.unwrap();
    let key = "leader:held-back";
    let lease = 10 * SECOND;
    // A grant and its release: the store keeps the lease, and its next acquire of the group
    // guesses the freed index, straight to a transaction, on member 1.
    let first = token();
    assert!(matches!(
        store.acquire(request_for(key, 3, first, lease)).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    assert_eq!(store.release(key, first, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    proxy.set(Fault::HoldRequests);
    let held = token();
    let attempt = store.acquire(request_for(key, 3, held, lease)).await;
    // Whatever the first attempt answered, the token takes one slot at most, and gives it
    // back.
    let granted = match attempt {
        Ok(AcquireOutcome::Granted(_)) => true,
        Ok(other) => panic!("{other:?}"),
        Err(error) => {
            assert!(error.is_transient(), "{error:?}");
            let again = store.acquire(request_for(key, 3, held, lease)).await.unwrap();
            matches!(again, AcquireOutcome::Granted(_))
        }
    };
    assert!(granted, "granted on the other members");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    // Member 1 now runs what it held back.
    proxy.set(Fault::None);
    sleep(2 * SECOND).await;
    let observer = EtcdStore::builder(cluster.url()).connect().await.unwrap();
    let state = observer.state(key).await.unwrap();
    assert!(state.leaders.is_empty() && state.pending.is_empty(), "a late slot: {state:?}");
    // And the group takes its whole size from others.
    for _ in 0..3 {
        let outcome = observer.acquire(request_for(key, 3, token(), lease)).await.unwrap();
        assert!(matches!(outcome, AcquireOutcome::Granted(_)), "{outcome:?}");
    }
}

/// A release whose reply was lost (the member ran it, the answer never came back) still
/// answers that it released: the store revokes the slot's lease rather than sending the
/// transaction again and reading its own work as "not held".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_answers_released() {
    use leader::store::ReleaseOutcome;
    use support::proxy::{Fault, Proxy};

    let cluster = EtcdCluster::start(3).await;
    let proxy = Proxy::start(cluster.members[0].client_port).await;
    let endpoints = [
        format!("127.0.0.1:{}", proxy.port),
        cluster.members[1].endpoint(),
        cluster.members[2].endpoint(),
    ];
    let url = format!("etcd://{}", endpoints.join(","));
    let store = EtcdStore::builder(url).command_timeout(3 * SECOND).connect().await.unwrap();
    let key = "leader:lost-reply";
    let held = token();
    assert!(matches!(
        store.acquire(request_for(key, 1, held, 10 * SECOND)).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    proxy.set(Fault::DropReplies);
    let released = store.release(key, held, Duration::ZERO).await.unwrap();
    proxy.set(Fault::None);
    assert_eq!(released, ReleaseOutcome::Released);
    let observer = EtcdStore::builder(cluster.url()).connect().await.unwrap();
    assert!(observer.state(key).await.unwrap().leaders.is_empty());
}

/// The member a lease's keep-alive stream is open on stops answering: the renewal moves to
/// another member within the command timeout, instead of failing once. The store's first
/// member is a follower, so the pause needs no election (which a busy machine can draw out
/// past the command timeout, a different fault: see the Raft leader's tests above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_moves_off_the_member_its_stream_is_on_when_it_stops() {
    let cluster = EtcdCluster::start(3).await;
    let raft_leader = cluster.wait_for_leader(10 * SECOND).await;
    let mut order: Vec<usize> = (0..3).filter(|&member| member != raft_leader).collect();
    order.push(raft_leader);
    let endpoints: Vec<String> = order.iter().map(|&m| cluster.members[m].endpoint()).collect();
    let url = format!("etcd://{}", endpoints.join(","));
    let store = EtcdStore::builder(url).command_timeout(3 * SECOND).connect().await.unwrap();
    let key = "leader:stream-member";
    let held = token();
    let lease = 10 * SECOND;
    assert!(matches!(
        store.acquire(request_for(key, 1, held, lease)).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    store.renew(key, held, lease).await.unwrap();
    let streams = |member: &support::etcd::EtcdMember| {
        member
            .metric_with("grpc_server_started_total", "grpc_method=\"LeaseKeepAlive\"")
            .unwrap_or(0.0)
    };
    let on = cluster.members.iter().position(|member| streams(member) > 0.0).expect("a stream");
    assert_ne!(on, raft_leader, "the stream opened on the member listed last");
    cluster.members[on].pause();
    let renewed = store.renew(key, held, lease).await;
    cluster.members[on].resume();
    assert!(matches!(renewed, Ok(leader::store::RenewOutcome::Renewed { .. })), "{renewed:?}");
}
