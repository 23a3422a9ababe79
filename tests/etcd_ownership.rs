//! Whose lease a slot is on decides what the etcd store does with it; one test per owner,
//! against a real 3-member cluster:
//!
//! - **the slot's own** (granted by this store for this slot): released as its holder (the
//!   next taker waits no lock-delay) and the lease kept for the next grant (no new lease);
//! - **a session's** (shared by a node's slots): one slot released, the others renew on it,
//!   and it is never kept for another grant;
//! - **adopted** (the slot's token asked again through another store, after a restart):
//!   moved to a lease of its own, so the dead session's lease, which carries its other
//!   slot, is neither revoked nor kept alive, and runs out; released as its holder's;
//! - **found** (a release through a store that was never granted the slot): released as a
//!   takeover (the next taker waits the lock-delay), and the holder's renewal refused.
#![cfg(feature = "etcd")]

mod support;

use std::time::Duration;

use leader::store::ReleaseOutcome;
use leader::store::author::HeldSlot;
use leader::{EtcdStore, LeaseStore, LeaseToken};
use support::etcd::EtcdCluster;
use support::{granted_fence, request_for, token};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(3);

/// Leases granted by every member of `cluster`.
fn lease_grants(cluster: &EtcdCluster) -> f64 {
    let labels = "grpc_method=\"LeaseGrant\"";
    cluster
        .members
        .iter()
        .map(|member| member.metric_with("grpc_server_msg_received_total", labels).unwrap_or(0.0))
        .sum()
}

/// Acquires `key` under `token` (in `session` if given); how long the grant took.
async fn acquire(
    store: &EtcdStore,
    key: &str,
    token: LeaseToken,
    session: Option<LeaseToken>,
) -> Duration {
    let started = Instant::now();
    let request = request_for(key, 1, token, LEASE);
    let request = match session {
        Some(session) => request.in_session(session),
        None => request,
    };
    granted_fence(store.acquire(request).await.unwrap());
    started.elapsed()
}

async fn released(store: &EtcdStore, key: &str, token: LeaseToken) {
    let outcome = store.release(key, token, Duration::ZERO).await.unwrap();
    assert_eq!(outcome, ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slots_own_lease_is_released_as_the_holders_and_kept_for_the_next_grant() {
    let cluster = EtcdCluster::start(3).await;
    let store = EtcdStore::connect(&cluster.url()).await.unwrap();
    let holder = token();
    acquire(&store, "own/a", holder, None).await;
    released(&store, "own/a", holder).await;
    let grants = lease_grants(&cluster);
    let took = acquire(&store, "own/a", token(), None).await;
    assert!(took < LEASE / 3, "the next taker waited {took:?}");
    assert_eq!(lease_grants(&cluster) - grants, 0.0, "the released lease was used again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_lease_stays_with_its_other_slots_and_is_never_pooled() {
    let cluster = EtcdCluster::start(3).await;
    let store = EtcdStore::connect(&cluster.url()).await.unwrap();
    let session = token();
    let (first, second) = (token(), token());
    acquire(&store, "session/a", first, Some(session)).await;
    acquire(&store, "session/b", second, Some(session)).await;
    released(&store, "session/a", first).await;
    let grants = lease_grants(&cluster);
    let took = acquire(&store, "session/a", token(), None).await;
    assert!(took < LEASE / 3, "the next taker waited {took:?}");
    assert!(lease_grants(&cluster) - grants >= 1.0, "the session's lease was pooled");
    // The session's other slot outlives two of its TTLs on the session's lease.
    let until = Instant::now() + 2 * LEASE;
    while Instant::now() < until {
        let answers = store.renew_many(&[HeldSlot::new("session/b", second)], LEASE).await;
        assert!(matches!(answers.unwrap()[0], leader::store::RenewOutcome::Renewed { .. }));
        tokio::time::sleep(LEASE / 4).await;
    }
    assert_eq!(store.state("session/b").await.unwrap().leaders.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_lease_is_released_as_the_holders_and_neither_revoked_nor_reused() {
    let cluster = EtcdCluster::start(3).await;
    let first = EtcdStore::connect(&cluster.url()).await.unwrap();
    let session = token();
    let (adopted, orphan) = (token(), token());
    acquire(&first, "adopted/a", adopted, Some(session)).await;
    acquire(&first, "adopted/b", orphan, Some(session)).await;
    drop(first); // restarted: the same token asks again through a new store
    let second = EtcdStore::connect(&cluster.url()).await.unwrap();
    // A slot of its own, held: the store has a marker lease, and nothing in its pool.
    acquire(&second, "adopted/held", token(), None).await;
    acquire(&second, "adopted/a", adopted, None).await;
    // The dead session's other slot is still on its lease (not revoked by the adoption)...
    assert_eq!(second.state("adopted/b").await.unwrap().leaders.len(), 1);
    // ...and runs out by itself while the adopted slot is renewed (on a lease of its own).
    let until = Instant::now() + LEASE + Duration::from_millis(1500);
    while Instant::now() < until {
        let answers = second.renew_many(&[HeldSlot::new("adopted/a", adopted)], LEASE).await;
        assert!(matches!(answers.unwrap()[0], leader::store::RenewOutcome::Renewed { .. }));
        tokio::time::sleep(LEASE / 4).await;
    }
    let left = second.state("adopted/b").await.unwrap();
    assert!(left.leaders.is_empty(), "the dead session's lease was kept alive: {left:?}");
    released(&second, "adopted/a", adopted).await;
    let took = acquire(&second, "adopted/a", token(), None).await;
    assert!(took < LEASE / 3, "the next taker waited {took:?}: released as a takeover");
}

/// The same token asked again in a new session after a restart: the adopted slot leaves
/// the dead session's lease, whose other slot runs out while the new session renews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_adopted_into_a_new_session_lets_the_dead_sessions_slots_run_out() {
    let cluster = EtcdCluster::start(3).await;
    let first = EtcdStore::connect(&cluster.url()).await.unwrap();
    let session = token();
    let (adopted, orphan) = (token(), token());
    acquire(&first, "session-adopted/a", adopted, Some(session)).await;
    acquire(&first, "session-adopted/b", orphan, Some(session)).await;
    drop(first);
    let second = EtcdStore::connect(&cluster.url()).await.unwrap();
    acquire(&second, "session-adopted/a", adopted, Some(token())).await;
    let until = Instant::now() + LEASE + Duration::from_millis(1500);
    while Instant::now() < until {
        let renewal = second.renew("session-adopted/a", adopted, LEASE).await.unwrap();
        assert!(matches!(renewal, leader::store::RenewOutcome::Renewed { .. }), "{renewal:?}");
        tokio::time::sleep(LEASE / 4).await;
    }
    let left = second.state("session-adopted/b").await.unwrap();
    assert!(left.leaders.is_empty(), "the dead session's lease was kept alive: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_found_slot_is_released_as_a_takeover() {
    let cluster = EtcdCluster::start(3).await;
    let holder_store = EtcdStore::connect(&cluster.url()).await.unwrap();
    let other = EtcdStore::connect(&cluster.url()).await.unwrap();
    let holder = token();
    acquire(&holder_store, "found/a", holder, None).await;
    // Another process with the token (an operator's tool) releases it.
    let outcome = other.release("found/a", holder, Duration::ZERO).await.unwrap();
    assert_ne!(outcome, ReleaseOutcome::NotHeld);
    let renewal = holder_store.renew("found/a", holder, LEASE).await.unwrap();
    assert!(
        !matches!(renewal, leader::store::RenewOutcome::Renewed { .. }),
        "the holder renewed a slot released under it: {renewal:?}"
    );
    let took = acquire(&other, "found/a", token(), None).await;
    assert!(took >= LEASE - Duration::from_millis(50), "the next taker waited only {took:?}");
}
