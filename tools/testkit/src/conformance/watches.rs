//! Watches: a release, a shortening renewal and a grant wake the group's watches.

use std::time::Duration;

use leader_core::LeaseStore;
use leader_core::store::RenewOutcome;
use tokio::time::timeout;

use super::{granted, lease, live, refused, token};

/// The rule: Release wakes watchers, on `key` of `store`.
pub async fn release_wakes_watchers<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let (first, second) = (token(), token());
    granted(store, live(key, 2, first)).await;
    granted(store, live(key, 2, second)).await;
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(store.watch_releases(key).await.unwrap());
    }
    // Candidates wait only after a refusal: a store may leave the releases nobody can be
    // waiting for unpublished.
    refused(store, key, 2).await;
    store.release(key, first, Duration::ZERO).await.unwrap();
    for watch in &mut watches {
        timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a release");
    }
    // A release kept for the minimum lease shortens the slot, which also wakes waiters.
    granted(store, live(key, 2, token())).await;
    refused(store, key, 2).await;
    store.release(key, second, lease() * 2).await.unwrap();
    timeout(Duration::from_secs(5), watches[0].woken()).await.expect("woken by a kept release");
}

/// The rule: Shortening renewal wakes watchers, on `key` of `store`.
pub async fn shortening_renewal_wakes_watchers<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let held = token();
    granted(store, live(key, 1, held)).await;
    let mut watch = store.watch_releases(key).await.unwrap();
    refused(store, key, 1).await;
    // The refused candidate waits for the nearest expiry it was told; a renewal with a
    // shorter lease brings it forward, so the candidate must look again.
    let renewed = store.renew(key, held, lease() / 10).await.unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed { .. }), "{renewed:?}");
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a shorter lease");
}

/// The rule: Grants releases and shortening renewals wake change watches, on `key` of `store`.
pub async fn grants_releases_and_shortening_renewals_wake_change_watches<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let mut watch = store.watch_changes(key).await.unwrap();
    let (held, other) = (token(), token());
    granted(store, live(key, 2, held)).await;
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a grant");
    granted(store, live(key, 2, other)).await;
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a second grant");
    store.release(key, other, Duration::ZERO).await.unwrap();
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a release");
    let renewed = store.renew(key, held, lease() / 10).await.unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed { .. }), "{renewed:?}");
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a shorter lease");
}
