//! `EtcdStore` sessions ([`AcquireRequest::in_session`]) against a real `etcd` member: a
//! session's slots share one lease, so a batch renewal is one keep-alive and one read per
//! 128 slots; one slot's release or revocation leaves the others alone; the session ends
//! with its renewals, and a takeover after that still waits the lock-delay.
#![cfg(feature = "etcd")]

mod support;

use std::time::Duration;

use leader::store::author::HeldSlot;
use leader::store::{AcquireRequest, ReleaseOutcome, RenewOutcome, Revocation, SlotRef};
use leader::{EtcdStore, LeaseStore, LeaseToken};
use support::etcd::EtcdServer;
use support::etcd_store::solo;
use support::{granted_fence, request_for, token};
use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

/// Messages the member received for gRPC method `method`.
fn received(server: &EtcdServer, method: &str) -> f64 {
    let labels = format!("grpc_method=\"{method}\"");
    server.member.metric_with("grpc_server_msg_received_total", &labels).unwrap_or(0.0)
}

/// Acquires `keys` in session `session`, each under a new token; the tokens.
async fn acquire_all(
    store: &EtcdStore,
    keys: &[String],
    session: LeaseToken,
    lease: Duration,
) -> Vec<LeaseToken> {
    let mut tokens = Vec::new();
    for key in keys {
        let token = token();
        let request: AcquireRequest<'_> = request_for(key, 1, token, lease).in_session(session);
        granted_fence(store.acquire(request).await.unwrap());
        tokens.push(token);
    }
    tokens
}

/// The batch of `keys`, each held under its token of `tokens`.
fn held_slots<'a>(keys: &'a [String], tokens: &[LeaseToken]) -> Vec<HeldSlot<'a>> {
    keys.iter().zip(tokens).map(|(key, token)| HeldSlot::new(key, *token)).collect()
}

/// Takes `key` (whose holder never released it) under a new token: the grant comes no
/// sooner than one TTL, the lock-delay.
async fn taken_after_the_lock_delay(store: &EtcdStore, key: &str, lease: Duration) {
    let started = Instant::now();
    granted_fence(store.acquire(request_for(key, 1, token(), lease)).await.unwrap());
    assert!(started.elapsed() >= lease - Duration::from_millis(50), "{:?}", started.elapsed());
}

fn renewed(answer: &RenewOutcome) -> bool {
    matches!(answer, RenewOutcome::Renewed { .. })
}

#[tokio::test]
async fn a_sessions_slots_renew_with_one_keep_alive_and_one_read_per_128() {
    let (store, server) = solo().await;
    let lease = 2 * SECOND;
    let keys: Vec<String> = (0..200).map(|i| format!("orders/{i}")).collect();
    let tokens = acquire_all(&store, &keys, token(), lease).await;
    let slots = held_slots(&keys, &tokens);
    let before = ["LeaseKeepAlive", "Txn", "Range", "LeaseGrant"].map(|m| received(&server, m));
    let sent_at = Instant::now();
    let answers = store.renew_many(&slots, lease).await.unwrap();
    let after = ["LeaseKeepAlive", "Txn", "Range", "LeaseGrant"].map(|m| received(&server, m));
    assert!(answers.iter().all(renewed), "{answers:?}");
    let delta: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    assert_eq!(delta, [1.0, 2.0, 0.0, 0.0], "keep-alives, transactions, reads, grants");
    // Counted from when the keep-alive was sent: the whole lease, never more.
    for answer in &answers {
        let RenewOutcome::Renewed { expires_in, .. } = answer else { unreachable!() };
        assert!(*expires_in <= lease && *expires_in + sent_at.elapsed() >= lease, "{answer:?}");
    }
    // The same slots one by one: a keep-alive and a read each.
    let before = received(&server, "LeaseKeepAlive");
    for slot in &slots[..10] {
        assert!(renewed(&store.renew(slot.key, slot.token, lease).await.unwrap()));
    }
    assert_eq!(received(&server, "LeaseKeepAlive") - before, 10.0);
}

#[tokio::test]
async fn one_slot_released_or_revoked_leaves_the_sessions_others_renewing() {
    let (store, server) = solo().await;
    let lease = 2 * SECOND;
    let keys: Vec<String> = (0..3).map(|i| format!("jobs/{i}")).collect();
    let tokens = acquire_all(&store, &keys, token(), lease).await;
    let slots = held_slots(&keys, &tokens);
    // Released by its holder.
    let released = store.release(&keys[0], tokens[0], Duration::ZERO).await.unwrap();
    assert_eq!(released, ReleaseOutcome::Released);
    // Revoked by an operator's tool: another process, which knows nothing of the session.
    let tool = EtcdStore::connect(&server.url()).await.unwrap();
    let revoked =
        tool.revoke(&keys[1], SlotRef::Token(tokens[1]), Revocation::AtExpiry).await.unwrap();
    assert!(matches!(revoked, ReleaseOutcome::Kept { .. }), "{revoked:?}");
    let answers = store.renew_many(&slots, lease).await.unwrap();
    assert!(
        matches!(answers[..], [RenewOutcome::NotHeld, RenewOutcome::NotHeld, _]),
        "{answers:?}"
    );
    assert!(renewed(&answers[2]), "the third slot lives on: {answers:?}");
    // And keeps living, renewed, past the lease the first two had.
    let until = Instant::now() + lease + SECOND;
    while Instant::now() < until {
        tokio::time::sleep(lease / 4).await;
        let answers = store.renew_many(&slots[2..], lease).await.unwrap();
        assert!(renewed(&answers[0]), "{answers:?}");
    }
    assert_eq!(store.state(&keys[2]).await.unwrap().leaders.len(), 1);
    assert!(store.state(&keys[1]).await.unwrap().leaders.is_empty());
}

#[tokio::test]
async fn a_session_ends_with_its_renewals_and_a_takeover_waits_the_lock_delay() {
    let (store, _server) = solo().await;
    let lease = SECOND;
    let keys: Vec<String> = (0..2).map(|i| format!("shards/{i}")).collect();
    acquire_all(&store, &keys, token(), lease).await;
    // Nobody renews: the session's lease runs out, and its keys go within half a second.
    tokio::time::sleep(lease + Duration::from_millis(1500)).await;
    for key in &keys {
        assert!(store.state(key).await.unwrap().leaders.is_empty(), "{key} outlived its session");
    }
    // The holder never released: the next one waits its TTL before it acts.
    taken_after_the_lock_delay(&store, &keys[0], lease).await;
}

/// A session's markers (which make a takeover wait the lock-delay) move to fresher marker
/// leases together: one transaction per 42 slots, not one per slot; and after the moves, a
/// takeover still waits.
#[tokio::test]
async fn a_sessions_markers_move_together_and_keep_the_lock_delay() {
    let (store, server) = solo().await;
    // A 1 s TTL: markers live 10 s and move when fewer than 4 s would be left after the
    // renewal's deadline, so within the 9 s below every marker moves once.
    let lease = SECOND;
    let keys: Vec<String> = (0..100).map(|i| format!("tiles/{i}")).collect();
    let tokens = acquire_all(&store, &keys, token(), lease).await;
    let slots = held_slots(&keys, &tokens);
    let (before, mut renewals) = (received(&server, "Txn"), 0.0);
    let until = Instant::now() + 9 * SECOND;
    while Instant::now() < until {
        let answers = store.renew_many(&slots, lease).await.unwrap();
        assert!(answers.iter().all(renewed), "{answers:?}");
        renewals += 1.0;
        tokio::time::sleep(lease / 4).await;
    }
    // One read per renewal (100 slots), and the moves: 3 transactions each time.
    let moves = received(&server, "Txn") - before - renewals;
    assert!((3.0..=6.0).contains(&moves), "{moves} marker-moving transactions");
    tokio::time::sleep(lease + Duration::from_millis(1500)).await;
    taken_after_the_lock_delay(&store, &keys[99], lease).await;
}

/// A process may hold more slots than the store caches by default (a node of many
/// partitions): they stay known, so a batch renewal still takes one keep-alive and one read
/// per 128 slots, and a hand-over of one is its holder's release.
#[tokio::test]
async fn ten_thousand_slots_of_a_session_renew_as_one_batch() {
    let (store, server) = solo().await;
    let lease = 30 * SECOND;
    let session = token();
    // Above every cap the store's caches had (4,096): slots, streams, sessions, hints.
    let keys: Vec<String> = (0..10_000).map(|i| format!("many/{i}")).collect();
    let tokens: Vec<LeaseToken> = keys.iter().map(|_| token()).collect();
    for (keys, tokens) in keys.chunks(64).zip(tokens.chunks(64)) {
        let grants = keys.iter().zip(tokens).map(|(key, token)| {
            store.acquire(request_for(key, 1, *token, lease).in_session(session))
        });
        for outcome in futures_util::future::try_join_all(grants).await.unwrap() {
            granted_fence(outcome);
        }
    }
    let slots = held_slots(&keys, &tokens);
    let methods = ["LeaseKeepAlive", "Txn", "Range", "LeaseGrant"];
    for round in 0..2 {
        let before = methods.map(|m| received(&server, m));
        let answers = store.renew_many(&slots, lease).await.unwrap();
        let after = methods.map(|m| received(&server, m));
        assert!(answers.iter().all(renewed), "round {round}");
        let delta: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        // One keep-alive for the session, one transaction per 128 slots (79), no read
        // and no lease granted again.
        assert_eq!(
            delta,
            [1.0, 79.0, 0.0, 0.0],
            "round {round}: keep-alives, transactions, reads, grants"
        );
    }
    let debug = format!("{store:?}");
    assert!(debug.contains("keep_alive_streams: 1"), "{debug}");
    // The first slot's release is its holder's: the next taker waits no lock-delay.
    store.release(&keys[0], tokens[0], Duration::ZERO).await.unwrap();
    let started = Instant::now();
    granted_fence(store.acquire(request_for(&keys[0], 1, token(), lease)).await.unwrap());
    assert!(started.elapsed() < SECOND, "{:?}", started.elapsed());
}

/// Another process renewing one slot of a session under another lease time moves that slot
/// to a lease of its own, and leaves the session's lease (and its other slots) alone.
#[tokio::test]
async fn a_slot_moved_off_its_session_by_another_process_leaves_the_others() {
    let (store, server) = solo().await;
    let lease = 3 * SECOND;
    let keys: Vec<String> = (0..2).map(|i| format!("moved/{i}")).collect();
    let tokens = acquire_all(&store, &keys, token(), lease).await;
    let other = EtcdStore::connect(&server.url()).await.unwrap();
    let moved = other.renew(&keys[0], tokens[0], 2 * lease).await.unwrap();
    assert!(renewed(&moved), "{moved:?}");
    tokio::time::sleep(Duration::from_millis(500)).await; // its old lease's revocation, if any
    let answers = store.renew_many(&[HeldSlot::new(&keys[1], tokens[1])], lease).await.unwrap();
    assert!(renewed(&answers[0]), "the session's other slot: {answers:?}");
    assert_eq!(store.state(&keys[1]).await.unwrap().leaders.len(), 1);
}

/// A renewal that names another group under a slot's token says nothing of the slot: the
/// holder's release is still its own (the next taker waits no lock-delay).
#[tokio::test]
async fn a_renewal_naming_another_group_leaves_the_holders_release_its_own() {
    let (store, _server) = solo().await;
    let lease = 3 * SECOND;
    let key = "own/0".to_owned();
    let tokens = acquire_all(&store, std::slice::from_ref(&key), token(), lease).await;
    let token = tokens[0];
    let wrong = store.renew_many(&[HeldSlot::new("own/elsewhere", token)], lease).await.unwrap();
    assert_eq!(wrong, [RenewOutcome::NotHeld]);
    assert_eq!(store.renew("own/elsewhere", token, lease).await.unwrap(), RenewOutcome::NotHeld);
    let right = store.renew_many(&[HeldSlot::new(&key, token)], lease).await.unwrap();
    assert!(renewed(&right[0]), "{right:?}");
    let released = store.release(&key, token, Duration::ZERO).await.unwrap();
    assert_eq!(released, ReleaseOutcome::Released);
    let started = Instant::now();
    granted_fence(store.acquire(request_for(&key, 1, support::token(), lease)).await.unwrap());
    assert!(started.elapsed() < SECOND, "{:?}", started.elapsed());
}

/// A session slot taken up by another store (the same token asked again after a restart)
/// and released there leaves the session's lease alone: the other store never reuses it,
/// so the dead session's other slots still expire.
#[tokio::test]
async fn a_dead_sessions_lease_is_never_reused_by_another_store() {
    let (first, server) = solo().await;
    let lease = 2 * SECOND;
    let keys: Vec<String> = (0..3).map(|i| format!("adopted/{i}")).collect();
    let tokens = acquire_all(&first, &keys[..2], token(), lease).await;
    drop(first); // the holder dies
    let second = EtcdStore::connect(&server.url()).await.unwrap();
    granted_fence(second.acquire(request_for(&keys[0], 1, tokens[0], lease)).await.unwrap());
    assert_eq!(
        second.release(&keys[0], tokens[0], Duration::ZERO).await.unwrap(),
        ReleaseOutcome::Released
    );
    // A slot of its own, renewed throughout.
    let own = token();
    granted_fence(second.acquire(request_for(&keys[2], 1, own, lease)).await.unwrap());
    let until = Instant::now() + lease + Duration::from_millis(1500);
    while Instant::now() < until {
        assert!(renewed(&second.renew(&keys[2], own, lease).await.unwrap()));
        tokio::time::sleep(lease / 4).await;
    }
    let orphan = second.state(&keys[1]).await.unwrap();
    assert!(orphan.leaders.is_empty(), "the dead session's slot outlived it: {orphan:?}");
}
