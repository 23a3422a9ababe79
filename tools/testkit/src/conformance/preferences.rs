//! An operator's preference: the preferred holder's claim goes before every priority, a
//! leader steps down for it once it waits, the preferred leader steps down for nobody, and
//! a preference for a holder that never comes moves nobody.

use std::time::Duration;

use leader_core::store::AcquireOutcome;
use leader_core::{Error, LeaseStore};
use tokio::time::sleep;

use super::priorities::{STEP_DOWN_DELAY, candidate, until_leading};
use super::{LIVE, granted, lease, live, past_expiry, token};

/// Asks for the claim on `key` as `id` at `priority`; whether the claim is its own after.
async fn claims(store: &dyn LeaseStore, key: &str, id: &str, priority: i32) -> bool {
    let mut ask = live(key, 1, token()).reserving_at(Duration::ZERO, LIVE, priority);
    ask.holder = id;
    let AcquireOutcome::Full { nearest_expiry } = store.acquire(ask).await.unwrap() else {
        panic!("a full group granted a slot to {id}")
    };
    nearest_expiry <= LIVE / 2
}

/// The rule: While an operator prefers a holder ([`LeaseStore::prefer`]), its claim on the
/// next free slot goes before every other whatever their priorities, [`LeaseStore::claim`]
/// and [`LeaseStore::preference`] name it, and once the preference is withdrawn or lapsed
/// the claims go by priority again, on `key` of `store`. A store that keeps no claims
/// refuses a preference as unsupported.
pub async fn a_preferred_holder_takes_the_claim_whatever_its_priority<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    if !store.keeps_reservations() {
        let refused = store.prefer(key, Some(("favourite", LIVE))).await;
        assert!(matches!(refused, Err(Error::Unsupported { .. })), "{refused:?}");
        assert_eq!(store.preference(key).await.unwrap(), None);
        return;
    }
    assert_eq!(store.preference(key).await.unwrap(), None, "no preference yet");
    store.prefer(key, Some(("favourite", LIVE))).await.unwrap();
    let preference = store.preference(key).await.unwrap().expect("the preference");
    assert_eq!(preference.holder, "favourite");
    assert!(preference.expires_in > LIVE / 2 && preference.expires_in <= LIVE, "{preference:?}");

    granted(store, live(key, 1, token())).await;
    assert!(claims(store, key, "high", 9).await, "the first claim");
    assert!(claims(store, key, "favourite", 0).await, "the preferred holder goes first");
    assert!(!claims(store, key, "higher", 99).await, "a priority beat the preference");
    let claim = store.claim(key).await.unwrap().expect("a live claim");
    assert_eq!(claim.holder, "favourite");
    assert_eq!(claim.preference.as_deref(), Some("favourite"));
    assert!(claim.is_preferred());

    store.prefer(key, None).await.unwrap();
    assert_eq!(store.preference(key).await.unwrap(), None, "withdrawn");
    assert!(claims(store, key, "higher", 99).await, "priorities again once withdrawn");
    let claim = store.claim(key).await.unwrap().expect("a live claim");
    assert_eq!((claim.holder.as_str(), claim.preference), ("higher", None));

    // A preference lapses by itself; a newer one replaces an older one.
    store.prefer(key, Some(("old", LIVE))).await.unwrap();
    store.prefer(key, Some(("brief", lease()))).await.unwrap();
    assert_eq!(store.preference(key).await.unwrap().map(|p| p.holder).as_deref(), Some("brief"));
    sleep(past_expiry(lease())).await;
    assert_eq!(store.preference(key).await.unwrap(), None, "a lapsed preference");
    assert!(!claims(store, key, "brief", 0).await, "a lapsed preference still counted");
}

/// The rule: A leader with a priority steps down for the holder an operator prefers once it
/// waits (whatever its priority), and it then leads under a higher fence; the preferred
/// leader steps down for no better priority while the preference lives, and for the best
/// one once it is withdrawn; a preference for a holder that never comes moves nobody, on
/// `key` of `store`. Over a store that keeps no claims, nobody moves.
pub async fn a_leader_steps_down_for_the_preferred_holder_and_for_no_absent_one<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let high = candidate(store, key, "high", 5).await;
    until_leading(&high, Duration::from_secs(5), "the only candidate").await;
    let first_fence = high.fence().expect("a leader's fence");
    let low = candidate(store, key, "low", 1).await;
    if !store.keeps_reservations() {
        assert!(store.prefer(key, Some(("low", LIVE))).await.is_err());
        sleep(STEP_DOWN_DELAY * 2).await;
        assert_eq!(high.fence(), Some(first_fence), "no claims, no preference");
        for leadership in [low, high] {
            leadership.stop().await.unwrap();
        }
        return;
    }
    store.prefer(key, Some(("absent", LIVE))).await.unwrap();
    // A third candidate holds the group's claim (the best priority of those waiting), so the
    // preferred one waits behind its claim: it must ask again within that claim's life, not
    // at the leader's slot's expiry (a lease: it took that long on Redis and PostgreSQL).
    let mid = candidate(store, key, "mid", 3).await;
    sleep(STEP_DOWN_DELAY * 2 + Duration::from_millis(500)).await;
    assert_eq!(high.fence(), Some(first_fence), "stepped down for a holder that never came");

    store.prefer(key, Some(("low", LIVE))).await.unwrap();
    until_leading(&low, STEP_DOWN_DELAY * 2 + Duration::from_secs(3), "the preferred one").await;
    let preferred_fence = low.fence().expect("a leader's fence");
    assert!(preferred_fence > first_fence);
    assert!(!high.is_leader());

    let higher = candidate(store, key, "higher", 9).await;
    sleep(STEP_DOWN_DELAY * 2 + Duration::from_millis(500)).await;
    assert_eq!(low.fence(), Some(preferred_fence), "the preferred leader stepped down");

    store.prefer(key, None).await.unwrap();
    until_leading(&higher, STEP_DOWN_DELAY * 3 + Duration::from_secs(3), "the best one").await;
    assert!(higher.fence().expect("a leader's fence") > preferred_fence);
    for leadership in [higher, mid, low, high] {
        leadership.stop().await.unwrap();
    }
}
