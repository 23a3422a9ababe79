//! Grants, fences and renewals: a full group, an idempotent acquire, strictly increasing fences,
//! a mismatched `max_leaders`, and renewals one by one or in a batch.

use std::time::Duration;

use leader_core::store::author::{HeldSlot, RENEW_BATCH_LEN};
use leader_core::store::{AcquireOutcome, RenewOutcome};
use leader_core::{Error, LeaseStore, LeaseToken};
use tokio::time::{sleep, timeout};

use super::{LIVE, granted, lease, live, past_expiry, refused, request, request_for, token};

/// The rule: Grants up to max leaders then reports full, on `key` of `store`.
pub async fn grants_up_to_max_leaders_then_reports_full<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    for _ in 0..3 {
        granted(store, live(key, 3, token())).await;
    }
    match store.acquire(live(key, 3, token())).await.unwrap() {
        AcquireOutcome::Full { nearest_expiry } => {
            assert!(
                nearest_expiry > Duration::ZERO && nearest_expiry <= LIVE,
                "{nearest_expiry:?}"
            );
        }
        other => panic!("a fourth candidate of three slots got {other:?}"),
    }
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 3);
}

/// The rule: Acquire is idempotent for the same token, on `key` of `store`.
pub async fn acquire_is_idempotent_for_the_same_token<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let retried = token();
    let first = granted(store, live(key, 2, retried)).await;
    let second = granted(store, live(key, 2, retried)).await;
    assert_eq!((first.fence, first.acquired_at), (second.fence, second.acquired_at));
    assert_eq!(
        store.state(key).await.unwrap().leaders.len(),
        1,
        "a retry must not take a second slot"
    );
    granted(store, live(key, 2, token())).await;
    // The group is now full, but the holder's retry still gets its own grant back.
    assert_eq!(granted(store, live(key, 2, retried)).await.fence, first.fence);
}

/// The rule: Fences strictly increase, on `key` of `store`.
pub async fn fences_strictly_increase<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let mut last = 0;
    for round in 0..6 {
        let held = token();
        let grant = granted(store, request(key, 1, held)).await;
        assert!(grant.fence > last, "round {round}: fence {} after {last}", grant.fence);
        last = grant.fence;
        if round % 2 == 0 {
            store.release(key, held, Duration::ZERO).await.unwrap();
        } else {
            sleep(past_expiry(lease())).await; // let it expire instead
        }
    }
}

/// The rule: Max leaders mismatch names both values, on `key` of `store`.
pub async fn max_leaders_mismatch_names_both_values<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let held = token();
    granted(store, live(key, 3, held)).await;
    let err = store.acquire(live(key, 5, token())).await.unwrap_err();
    assert!(matches!(err, Error::MaxLeadersMismatch { requested: 5, existing: 3, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("max_leaders 5") && message.contains("max_leaders 3"), "{message}");
    // A smaller size, for which the group is already full: still the mismatch, not "full".
    let err = store.acquire(live(key, 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::MaxLeadersMismatch { requested: 1, existing: 3, .. }), "{err:?}");
    // Once the old slots are gone the group takes the new size.
    store.release(key, held, Duration::ZERO).await.unwrap();
    granted(store, live(key, 5, token())).await;
    assert_eq!(store.state(key).await.unwrap().max_leaders, Some(5));
}

/// The rule: Renew extends only a held slot, on `key` of `store`.
pub async fn renew_extends_only_a_held_slot<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let held = token();
    // Long enough that the renewal comes well within it on a busy machine.
    let base = lease().max(Duration::from_secs(2));
    granted(store, request_for(key, 1, held, base)).await;
    assert_eq!(store.renew(key, token(), base).await.unwrap(), RenewOutcome::NotHeld);
    sleep(base / 4).await;
    let longer = base * 3;
    match store.renew(key, held, longer).await.unwrap() {
        RenewOutcome::Renewed { expires_in, .. } => {
            assert!(expires_in > base && expires_in <= longer, "{expires_in:?}")
        }
        other => panic!("the holder's renewal got {other:?}"),
    }
    sleep(base + base / 2).await; // past the original lease, well within the renewed one
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1, "renewal did not hold");
}

/// The rule: A batch renewal answers each slot as a renewal would, in order, also past one
/// round trip's worth of slots, on groups named after `key` of `store`.
pub async fn a_batch_renewal_answers_each_slot_as_a_renewal_would<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let base = lease().max(Duration::from_secs(2));
    // More slots than one round trip carries, so the store's parts meet.
    let count = RENEW_BATCH_LEN + 3;
    let keys: Vec<String> = (0..count).map(|i| format!("{key}-{i}")).collect();
    let tokens: Vec<LeaseToken> = (0..count).map(|_| token()).collect();
    // Granted live, a few at a time (a store whose grants are slow still grants them all
    // well within a lease), then brought down to `base` by a first batch: a renewal may
    // shorten a slot.
    for part in keys.iter().zip(&tokens).collect::<Vec<_>>().chunks(16) {
        let grants = part.iter().map(|(key, held)| granted(store, live(key, 1, **held)));
        futures_util::future::join_all(grants).await;
    }
    let all: Vec<HeldSlot<'_>> =
        keys.iter().zip(&tokens).map(|(key, held)| HeldSlot::new(key, *held)).collect();
    for (i, answer) in store.renew_many(&all, base).await.unwrap().iter().enumerate() {
        match answer {
            RenewOutcome::Renewed { expires_in, .. } => {
                assert!(*expires_in <= base, "slot {i} shortened to {expires_in:?}")
            }
            other => panic!("slot {i}, held, got {other:?}"),
        }
    }
    // Slot 1 released, slot 2 asked under a stranger's token: neither is held.
    store.release(&keys[1], tokens[1], Duration::ZERO).await.unwrap();
    let mut slots: Vec<HeldSlot<'_>> =
        keys.iter().zip(&tokens).map(|(key, held)| HeldSlot::new(key, *held)).collect();
    slots[2] = HeldSlot::new(&keys[2], token());
    assert_eq!(store.renew_many(&[], base).await.unwrap(), Vec::new(), "an empty batch");
    sleep(base / 4).await;
    let longer = base * 3;
    let answers = store.renew_many(&slots, longer).await.unwrap();
    assert_eq!(answers.len(), count, "one answer per slot");
    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (1 | 2, RenewOutcome::NotHeld) => {}
            (1 | 2, other) => panic!("slot {i}, not held, got {other:?}"),
            (_, RenewOutcome::Renewed { expires_in, .. }) => {
                assert!(*expires_in > base && *expires_in <= longer, "slot {i}: {expires_in:?}")
            }
            (_, other) => panic!("slot {i}, held, got {other:?}"),
        }
    }
    sleep(base + base / 2).await; // past the original lease, well within the renewed one
    for i in [0, 3, count - 1] {
        assert_eq!(store.state(&keys[i]).await.unwrap().leaders.len(), 1, "slot {i} lapsed");
    }
    assert!(store.state(&keys[2]).await.unwrap().leaders.is_empty(), "a stranger renewed slot 2");

    // A batch that shortens a slot wakes its refused waiter, as `renew` does, and leaves
    // nothing that refuses the next candidate once the shortened slot has expired.
    let shortened = format!("{key}-shortened");
    let held = token();
    granted(store, live(&shortened, 1, held)).await;
    let mut watch = store.watch_releases(&shortened).await.unwrap();
    refused(store, &shortened, 1).await;
    let renewed = store.renew_many(&[HeldSlot::new(&shortened, held)], lease()).await.unwrap();
    assert!(matches!(renewed[..], [RenewOutcome::Renewed { .. }]), "{renewed:?}");
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a shorter lease");
    sleep(past_expiry(lease())).await;
    granted(store, live(&shortened, 1, token())).await;
}
