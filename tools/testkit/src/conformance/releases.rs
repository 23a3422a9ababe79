//! Releases, revocations and expiry: who may release a slot, when a revoked or released slot
//! is handed on, and that an expired slot never comes back.

use std::time::Duration;

use leader_core::LeaseStore;
use leader_core::store::{AcquireOutcome, ReleaseOutcome, RenewOutcome, Revocation, SlotRef};
use tokio::time::{sleep, timeout};

use super::{LIVE, granted, lease, live, past_expiry, request, request_for, tick, token};
#[cfg(doc)]
use crate::with_every_rule;

/// The rule: Release is token checked, on `key` of `store`.
pub async fn release_is_token_checked<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let held = token();
    granted(store, live(key, 1, held)).await;
    assert_eq!(store.release(key, token(), Duration::ZERO).await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1, "a stranger released the slot");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert!(store.state(key).await.unwrap().leaders.is_empty());
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::NotHeld);
}

/// The rule: Release and renew never revive an expired slot, on `key` of `store`.
pub async fn release_and_renew_never_revive_an_expired_slot<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let held = token();
    granted(store, request(key, 1, held)).await;
    sleep(past_expiry(lease())).await;
    assert_eq!(store.release(key, held, lease()).await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(store.renew(key, held, lease()).await.unwrap(), RenewOutcome::NotHeld);
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "an expired slot came back");
    granted(store, request(key, 1, token())).await;
}

/// A slot ended by a caller that was not granted it (an operator's `leader release`): its
/// holder's next renewal is refused, and nobody gets the slot before the holder's deadline
/// can have passed; `Revocation::Now` frees it at once.
pub async fn a_revocation_ends_renewals_and_hands_the_slot_on_only_at_its_expiry<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let lease = lease().max(Duration::from_secs(2));
    let held = token();
    let sent_at = tokio::time::Instant::now();
    granted(store, request_for(key, 1, held, lease)).await;
    match store.revoke(key, SlotRef::Token(held), Revocation::AtExpiry).await.unwrap() {
        ReleaseOutcome::Kept { expires_in } => {
            assert!(expires_in <= lease + tick(), "{expires_in:?}")
        }
        other => panic!("a revocation at expiry got {other:?}"),
    }
    assert_eq!(store.renew(key, held, lease).await.unwrap(), RenewOutcome::NotHeld);
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::NotHeld);
    // Nobody is granted it before the holder's deadline (at most a lease after its request).
    let next = token();
    let taken = timeout(lease * 3 + tick(), async {
        loop {
            match store.acquire(live(key, 1, next)).await.unwrap() {
                AcquireOutcome::Granted(grant) => return grant,
                _ => sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("granted once the revoked slot's holder can no longer act");
    assert!(sent_at.elapsed() >= lease, "handed on {:?} after its grant", sent_at.elapsed());
    // By its fence, now: free at once.
    let freed = store.revoke(key, SlotRef::Fence(taken.fence), Revocation::Now).await.unwrap();
    assert_eq!(freed, ReleaseOutcome::Released);
    assert_eq!(store.renew(key, next, LIVE).await.unwrap(), RenewOutcome::NotHeld);
    let started = tokio::time::Instant::now();
    granted(store, live(key, 1, token())).await;
    assert!(started.elapsed() < lease, "a slot freed now waited {:?}", started.elapsed());
    let unknown = store.revoke(key, SlotRef::Fence(1), Revocation::Now).await.unwrap();
    assert_eq!(unknown, ReleaseOutcome::NotHeld);
}

/// A revoked holder's token is granted no slot of the group until the revoked slot lapses,
/// though the group has room: an acquire its holder sent before the revocation, answered
/// late, would otherwise give it a new term, and its renewals (by token) would keep the
/// revoked term's lease alive under a fence the store no longer holds. Not yet in
/// [`with_every_rule`]: the memory store keeps it; Redis, PostgreSQL and etcd do not yet.
pub async fn a_revoked_token_gets_no_new_slot_until_the_revoked_one_lapses<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let lease = lease().max(Duration::from_secs(2));
    let held = token();
    let first = granted(store, request_for(key, 2, held, lease)).await;
    let revoked = store.revoke(key, SlotRef::Token(held), Revocation::AtExpiry).await.unwrap();
    assert!(matches!(revoked, ReleaseOutcome::Kept { .. }), "{revoked:?}");
    match store.acquire(request_for(key, 2, held, lease)).await.unwrap() {
        AcquireOutcome::Full { nearest_expiry } => {
            assert!(nearest_expiry <= lease + tick(), "{nearest_expiry:?}")
        }
        AcquireOutcome::Granted(grant) => panic!(
            "the revoked token was granted fence {} after fence {} was revoked",
            grant.fence, first.fence
        ),
        other => panic!("an acquire answered {other:?}"),
    }
    assert_eq!(store.renew(key, held, lease).await.unwrap(), RenewOutcome::NotHeld);
    // Another candidate takes the free slot at once.
    granted(store, request_for(key, 2, token(), lease)).await;
    sleep(past_expiry(lease)).await;
    granted(store, request_for(key, 2, held, lease)).await;
}

/// The rule: Min lease time keeps a released slot, on `key` of `store`.
pub async fn min_lease_time_keeps_a_released_slot<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let held = token();
    granted(store, live(key, 1, held)).await;
    // Long enough that the release and the next attempt come well within it.
    let min_lease = lease().max(Duration::from_secs(2)) / 2;
    match store.release(key, held, min_lease).await.unwrap() {
        ReleaseOutcome::Kept { expires_in } => assert!(expires_in <= min_lease, "{expires_in:?}"),
        other => panic!("release within the minimum lease got {other:?}"),
    }
    match store.acquire(request(key, 1, token())).await.unwrap() {
        AcquireOutcome::Full { nearest_expiry } => assert!(nearest_expiry <= min_lease),
        other => panic!("the kept slot was free: {other:?}"),
    }
    sleep(past_expiry(min_lease)).await;
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "kept past the minimum lease");
    granted(store, request(key, 1, token())).await;
}

/// The rule: Expiry frees a slot, on `key` of `store`.
pub async fn expiry_frees_a_slot<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    // Long enough that the refusal comes well within it.
    let expiring = lease().max(Duration::from_secs(2));
    granted(store, request_for(key, 1, token(), expiring)).await;
    assert!(matches!(
        store.acquire(request(key, 1, token())).await.unwrap(),
        AcquireOutcome::Full { .. }
    ));
    sleep(past_expiry(expiring)).await;
    granted(store, request(key, 1, token())).await;
}
