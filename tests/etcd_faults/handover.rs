//! A slot handed from one holder to the next on the cluster: a crashed holder's once its lease
//! and the lock-delay have passed, a released one at once, and one whose lease was revoked
//! early never while its holder still believes it leads.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::store::AcquireOutcome;
use leader::{LeaderElectionOptions, LeaderElector, LeaseStore};
use tokio::time::{Instant, sleep};

use super::{ELECTION, LEASE, SECOND, stores};
use crate::support::etcd::EtcdCluster;
use crate::support::{request_for, token};

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
