//! One member's faults seen by the store's calls: a transaction run late takes no slot, a
//! release whose reply was lost answers that it released, and a renewal moves off a member
//! that stops answering.

use std::time::Duration;

use leader::store::AcquireOutcome;
use leader::{EtcdStore, LeaseStore};
use tokio::time::sleep;

use super::SECOND;
use crate::support;
use crate::support::etcd::EtcdCluster;
use crate::support::{request_for, token};

/// A cluster of three, and a store whose first member (member 1) is reached through a
/// proxy that injects faults, with a command timeout of 3 s.
async fn behind_a_proxy_on_member_one() -> (EtcdCluster, support::proxy::Proxy, EtcdStore) {
    let cluster = EtcdCluster::start(3).await;
    let proxy = support::proxy::Proxy::start(cluster.members[0].client_port).await;
    let endpoints = [
        format!("127.0.0.1:{}", proxy.port),
        cluster.members[1].endpoint(),
        cluster.members[2].endpoint(),
    ];
    let url = format!("etcd://{}", endpoints.join(","));
    let store = EtcdStore::builder(url).command_timeout(3 * SECOND).connect().await.unwrap();
    (cluster, proxy, store)
}

/// A transaction a member held back and ran late (its link stalled, the client's cancel
/// lost) never gives a token a second slot, nor a slot on a lease in use elsewhere: the
/// store does not send it again to the next member, and revokes its lease (and waits for
/// the answer) before the token tries again, so the late copy finds no lease to bind to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_a_member_runs_late_takes_no_slot() {
    use leader::store::ReleaseOutcome;
    use support::proxy::Fault;

    let (cluster, proxy, store) = behind_a_proxy_on_member_one().await;
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
    use support::proxy::Fault;

    let (cluster, proxy, store) = behind_a_proxy_on_member_one().await;
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

/// An acquire in a session that a member held back and ran late, after its token gave the
/// slot back (a candidacy withdrawn while the store did not answer, as a partitions node's
/// claim is), takes no slot: a session's lease carries the session's other slots and lives
/// as long as they do, so a slot granted late on it would be held for good by a token
/// nobody holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_acquire_run_late_after_its_give_back_takes_no_slot() {
    use leader::store::ReleaseOutcome;
    use support::proxy::Fault;

    let (cluster, proxy, store) = behind_a_proxy_on_member_one().await;
    let key = "leader:session-held-back";
    let lease = 10 * SECOND;
    let session = token();
    // A grant in the session and its release: the store's next acquire of the group guesses
    // the freed index, straight to a transaction, on member 1.
    let first = token();
    let granted = store.acquire(request_for(key, 1, first, lease).in_session(session)).await;
    assert!(matches!(granted.unwrap(), AcquireOutcome::Granted(_)));
    assert_eq!(store.release(key, first, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    proxy.set(Fault::HoldRequests);
    let held = token();
    let attempt = store.acquire(request_for(key, 1, held, lease).in_session(session)).await;
    // The candidacy is withdrawn: its token gives back whatever the attempt may have taken.
    let given_back = store.release(key, held, Duration::ZERO).await.unwrap();
    // Member 1 now runs what it held back.
    proxy.set(Fault::None);
    sleep(2 * SECOND).await;
    let observer = EtcdStore::builder(cluster.url()).connect().await.unwrap();
    let state = observer.state(key).await.unwrap();
    assert!(
        state.leaders.is_empty() && state.pending.is_empty(),
        "a slot granted late to a token that gave it back ({attempt:?}, then {given_back:?}): {state:?}"
    );
    let outcome = observer.acquire(request_for(key, 1, token(), lease)).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Granted(_)), "{outcome:?}");
}
