//! Priorities: the group's claim goes to the highest priority, then the earliest arrival,
//! and says who waits; a leader with a priority steps down for a strictly better candidate
//! that kept waiting, and for nothing else.

use std::time::Duration;

use leader_core::store::AcquireOutcome;
use leader_core::{KeyOptions, Leadership, LeadershipOptions, LeaseStore};
use tokio::time::{sleep, timeout};

use super::{LIVE, granted, lease, live, tick, token};

/// The rule: A higher priority takes the group's reservation whatever its arrival, equal
/// priorities keep their arrival order, and [`LeaseStore::claim`] names the candidate it
/// keeps the next free slot for, on `key` of `store`. A store that keeps no reservations
/// shows none.
pub async fn a_higher_priority_takes_the_reservation_and_the_claim_names_it<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let (holder, early_low, late_high, later_high) = (token(), token(), token(), token());
    granted(store, live(key, 1, holder)).await;
    let keeps = store.keeps_reservations();
    // (candidate, its holder id, waited, priority, whether it holds the claim after asking)
    let asks = [
        (early_low, "early-low", Duration::from_secs(20), 0, true),
        (late_high, "late-high", Duration::from_secs(5), 5, true),
        (later_high, "later-high", Duration::ZERO, 5, false),
        (early_low, "early-low", Duration::from_secs(20), 0, false),
    ];
    for (candidate, id, waited, priority, holds) in asks {
        let mut ask = live(key, 1, candidate).reserving_at(waited, LIVE, priority);
        ask.holder = id;
        let AcquireOutcome::Full { nearest_expiry } = store.acquire(ask).await.unwrap() else {
            panic!("a full group granted a slot to {id}")
        };
        assert_eq!(nearest_expiry <= LIVE / 2, holds && keeps, "{id}: {nearest_expiry:?}");
    }
    let claim = store.claim(key).await.unwrap();
    if !keeps {
        assert_eq!(claim, None);
        return;
    }
    let claim = claim.expect("a live claim");
    assert_eq!((claim.holder.as_str(), claim.priority), ("late-high", 5), "{claim:?}");
    assert!(claim.waited >= Duration::from_secs(4) && claim.waited < Duration::from_secs(19));
    assert!(claim.expires_in > Duration::ZERO && claim.expires_in <= LIVE + Duration::from_secs(1));
    store.release(key, holder, Duration::ZERO).await.unwrap();
    for other in [early_low, later_high, token()] {
        let outcome = store.acquire(live(key, 1, other)).await.unwrap();
        assert!(matches!(outcome, AcquireOutcome::Full { .. }), "kept for another: {outcome:?}");
    }
    granted(store, live(key, 1, late_high)).await;
    assert_eq!(store.claim(key).await.unwrap(), None, "a claim ends with its grant");
}

/// The rule: A waiter that claims behind another's claim is told to ask again once that
/// claim would lapse, not at the group's nearest expiry, so a better candidate behind one
/// that stopped asking announces itself within the claim's life, on `key` of `store`.
pub async fn a_waiter_behind_another_claim_asks_again_when_it_would_lapse<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    granted(store, live(key, 1, token())).await;
    let first = live(key, 1, token()).reserving_at(Duration::ZERO, lease(), 9);
    assert!(matches!(store.acquire(first).await.unwrap(), AcquireOutcome::Full { .. }));
    let behind = live(key, 1, token()).reserving_at(Duration::ZERO, lease(), 5);
    let AcquireOutcome::Full { nearest_expiry } = store.acquire(behind).await.unwrap() else {
        panic!("a full group granted a slot")
    };
    // The claim's life, as the store keeps it (on etcd, its lease of whole seconds, at least
    // the cluster's minimum TTL), against the held slot's minute.
    let bound =
        if store.keeps_reservations() { lease() + tick() + Duration::from_secs(2) } else { LIVE };
    assert!(nearest_expiry <= bound, "told to ask again in {nearest_expiry:?}");
}

/// How long a better candidate must have waited before the leader steps down for it, in
/// [`a_leader_steps_down_only_for_a_strictly_higher_priority`]: twice the life of an
/// announcement (1 s), so a candidate that died at once is never stepped down for.
pub(super) const STEP_DOWN_DELAY: Duration = Duration::from_secs(2);

/// A role on group `key` of `store`, held by `id` with `priority`.
pub(super) async fn candidate<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
    id: &str,
    priority: i32,
) -> Leadership {
    let options = LeadershipOptions::new()
        .keys(KeyOptions::new().exact_key(key))
        .holder_id(id)
        .lease_time(Duration::from_secs(10))
        .priority(priority)
        .step_down_delay(STEP_DOWN_DELAY);
    Leadership::start("priorities", store.clone(), options).await.unwrap()
}

/// Waits up to `within` for `leadership` to lead.
pub(super) async fn until_leading(leadership: &Leadership, within: Duration, what: &str) {
    timeout(within, async {
        while !leadership.is_leader() {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} did not lead within {within:?}"));
}

/// The rule: A leader steps down for a candidate of a strictly higher priority that kept
/// waiting for its `step_down_delay`, which then leads under a higher fence; never for an
/// equal priority, a lower one, or a candidate that announced itself and died at once, on
/// `key` of `store`. Over a store that keeps no reservations, nobody steps down.
pub async fn a_leader_steps_down_only_for_a_strictly_higher_priority<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let low = candidate(store, key, "low", 1).await;
    until_leading(&low, Duration::from_secs(5), "the only candidate").await;
    let first_fence = low.fence().expect("a leader's fence");
    let equal = candidate(store, key, "equal", 1).await;
    let ghost = candidate(store, key, "ghost", 9).await;
    ghost.stop().await.unwrap();
    sleep(STEP_DOWN_DELAY * 2 + Duration::from_millis(500)).await;
    assert_eq!(low.fence(), Some(first_fence), "stepped down for an equal or a dead candidate");
    assert!(!equal.is_leader() && !ghost.is_leader());

    let high = candidate(store, key, "high", 5).await;
    if !store.keeps_reservations() {
        sleep(STEP_DOWN_DELAY * 2).await;
        assert_eq!(low.fence(), Some(first_fence), "no claims, no preemption");
    } else {
        until_leading(&high, STEP_DOWN_DELAY * 3 + Duration::from_secs(3), "the better one").await;
        assert!(high.fence().expect("a leader's fence") > first_fence);
        assert!(!low.is_leader() && !equal.is_leader());
        // The next free slot is kept for the best of the rest, the earlier of the two equals,
        // once both asked again (at the latest when the leader's slot could have expired).
        let mut last = None;
        let found = timeout(Duration::from_secs(12), async {
            loop {
                last = store.claim(key).await.unwrap();
                if last.as_ref().is_some_and(|claim| claim.holder == "equal") {
                    break;
                }
                sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(found.is_ok(), "the earlier equal never held the claim; the last read: {last:?}");
        assert_eq!(last.map(|claim| claim.priority), Some(1));
        // Lower priorities never take it back.
        let fence = high.fence();
        sleep(STEP_DOWN_DELAY * 2).await;
        assert_eq!(high.fence(), fence, "a lower priority preempted a higher one");
    }
    for leadership in [high, equal, low] {
        leadership.stop().await.unwrap();
    }
}
