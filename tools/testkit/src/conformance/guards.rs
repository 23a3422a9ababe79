//! Guards: a slot held by hand, renewed in the background, lost at its deadline, and given
//! back when the guard is dropped.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use leader_core::store::author::Layered;
use leader_core::store::{ReleaseOutcome, Revocation, SlotRef};
use leader_core::{KeyOptions, LeaderGroupElectionOptions, LeaderGroupElector, LeaseStore};
use tokio::time::{sleep, timeout};

use super::{Counts, LIVE, counting, granted, lease, live, tick, token};

/// An elector of one slot over `store` whose every name is the store key `key`, taking a
/// slot at once or not at all.
fn guard_elector<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
    options: LeaderGroupElectionOptions,
) -> LeaderGroupElector {
    let options = options.keys(KeyOptions::new().exact_key(key)).wait_time(Duration::ZERO);
    LeaderGroupElector::new(store.clone(), options).unwrap()
}

/// Waits up to 10 s for the group to have `leaders` live slots.
async fn until_leaders(store: &dyn LeaseStore, key: &str, leaders: usize) {
    timeout(Duration::from_secs(10), async {
        while store.state(key).await.unwrap().leaders.len() != leaders {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the group never had {leaders} live slot(s)"));
}

/// The rule: A guard holds its slot until released and renews by hand, on `key` of `store`.
pub async fn a_guard_holds_its_slot_until_released_and_renews_by_hand<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let base = lease().max(Duration::from_secs(2));
    let elector = guard_elector(store, key, LeaderGroupElectionOptions::new(1).lease_time(base));
    let guard = elector.acquire("held").await.unwrap().expect("a free slot");
    let fence = guard.live_fence().expect("live");
    assert!(elector.acquire("held").await.unwrap().is_none(), "a held slot was granted again");
    // Held across awaits in another task, renewed by hand there.
    let guard = tokio::spawn(async move {
        sleep(base / 2).await;
        let before = guard.remaining();
        assert!(guard.renew().await.unwrap(), "the holder's renewal");
        assert!(guard.remaining() > before, "the deadline moved on: {:?}", guard.remaining());
        guard
    })
    .await
    .unwrap();
    // Renewed at half the lease: a quarter of a lease past the first lease, a quarter within
    // the renewed one.
    sleep(base * 3 / 4).await;
    let state = store.state(key).await.unwrap();
    assert_eq!(state.leaders.iter().map(|slot| slot.fence).collect::<Vec<_>>(), [fence]);
    assert_eq!(guard.live_fence(), Some(fence));
    let lease = guard.lease().clone();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "released");
    assert_eq!(lease.live_fence(), None, "a clone of a released lease acts no more");
    assert_eq!(lease.loss_reason(), Some(leader_core::LossReason::SteppedDown));
    let next = elector.acquire("held").await.unwrap().expect("free again");
    assert!(next.fence() > fence);
}

/// The rule: A guard renews in the background until refused and its drop then does nothing, on `key` of `store`.
pub async fn a_guard_renews_in_the_background_until_refused_and_its_drop_then_does_nothing<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let counting = counting(store.clone());
    let options = LeaderGroupElectionOptions::new(1).lease_time(lease()).auto_extend(true);
    let guard = guard_elector(&counting, key, options).acquire("renewed").await.unwrap().unwrap();
    let fence = guard.fence();
    sleep(lease() * 5 / 2).await;
    assert_eq!(guard.live_fence(), Some(fence), "renewed in the background");
    assert!(
        counting.layer().renewals.load(SeqCst) >= 2,
        "{} renewals",
        counting.layer().renewals.load(SeqCst)
    );
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1);
    // An operator frees the slot; the next renewal is refused and the loss signalled.
    let freed = store.revoke(key, SlotRef::Fence(fence), Revocation::Now).await.unwrap();
    assert_eq!(freed, ReleaseOutcome::Released);
    timeout(lease() * 2, guard.lost()).await.expect("the loss is signalled");
    assert_eq!(guard.loss_reason(), Some(leader_core::LossReason::Refused));
    assert!(!guard.renew().await.unwrap(), "a lost slot is not renewed");
    // Another holder takes the slot; dropping the lost guard leaves it alone.
    let other = token();
    granted(store, live(key, 1, other)).await;
    drop(guard);
    leader_core::wait_for_releases().await;
    assert_eq!(counting.layer().releases.load(SeqCst), 0, "a lost guard's drop asked the store");
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1);
}

/// The rule: A guard without renewal is lost at its deadline, on `key` of `store`.
pub async fn a_guard_without_renewal_is_lost_at_its_deadline<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let counting = counting(store.clone());
    let options = LeaderGroupElectionOptions::new(1).lease_time(lease());
    let asked_at = tokio::time::Instant::now();
    let guard = guard_elector(&counting, key, options).acquire("expiring").await.unwrap().unwrap();
    // Nothing polls the guard: its own task fires the loss at the local deadline (at most a
    // lease after the request), not a lease later.
    timeout(lease() * 2, guard.lost()).await.expect("the loss is signalled at the deadline");
    let signalled = asked_at.elapsed();
    assert!(signalled < lease() + lease() / 2, "signalled {signalled:?} after the request");
    assert_eq!(guard.loss_reason(), Some(leader_core::LossReason::Expired));
    assert_eq!(guard.live_fence(), None);
    assert!(!guard.renew().await.unwrap(), "a lease past its deadline is not renewed");
    assert_eq!(
        counting.layer().renewals.load(SeqCst),
        0,
        "renewal past the deadline asked the store"
    );
    // Dropped after a loss by the deadline, it still gives back once: a renewal the deadline
    // cut off could have extended the slot at the store.
    drop(guard);
    leader_core::wait_for_releases().await;
    assert_eq!(
        counting.layer().releases.load(SeqCst),
        1,
        "an expired guard's drop gave nothing back"
    );
    assert!(store.state(key).await.unwrap().leaders.is_empty());
}

/// The rule: A dropped guard gives its slot back after its minimum lease, on `key` of `store`.
pub async fn a_dropped_guard_gives_its_slot_back_after_its_minimum_lease<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let min_lease = lease().max(Duration::from_secs(2)) / 2;
    let options = LeaderGroupElectionOptions::new(1).lease_time(LIVE).min_lease_time(min_lease);
    let elector = guard_elector(store, key, options);
    let asked_at = tokio::time::Instant::now();
    let guard = elector.acquire("dropped").await.unwrap().unwrap();
    let lease = guard.lease().clone();
    drop(guard);
    assert_eq!(lease.loss_reason(), Some(leader_core::LossReason::SteppedDown), "dropped: ended");
    leader_core::wait_for_releases().await;
    // Kept until the minimum lease, then free: far sooner than the minute it was granted.
    if asked_at.elapsed() < min_lease / 2 {
        assert!(elector.acquire("dropped").await.unwrap().is_none(), "free before its minimum");
    }
    until_leaders(store, key, 0).await;
    // The minimum counts from the grant, which came after the request (a coarse clock may
    // free it up to a tick early).
    let freed = asked_at.elapsed();
    assert!(freed + tick() >= min_lease, "freed {freed:?} after the request");
    // Without a minimum lease, a drop frees the slot at once.
    let elector = guard_elector(store, key, LeaderGroupElectionOptions::new(1).lease_time(LIVE));
    drop(elector.acquire("dropped").await.unwrap().expect("free after the minimum"));
    leader_core::wait_for_releases().await;
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "a dropped guard kept its slot");
}

/// The rule: A guard dropped during a renewal gives its slot back, on `key` of `store`.
pub async fn a_guard_dropped_during_a_renewal_gives_its_slot_back<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    // Renewals reach the store and their replies come a second late.
    let counts = Counts { renewal_reply_delay: Duration::from_secs(1), ..Counts::default() };
    let counting = Layered::new(counts, store.clone());
    let base = lease().max(Duration::from_secs(3));
    let options = LeaderGroupElectionOptions::new(1)
        .lease_time(base)
        .auto_extend(true)
        .renew_interval(base / 3);
    let guard = guard_elector(&counting, key, options).acquire("renewing").await.unwrap().unwrap();
    timeout(base, async {
        while counting.layer().renewals.load(SeqCst) == 0 {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a renewal reached the store");
    drop(guard); // its reply still on its way
    leader_core::wait_for_releases().await;
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "kept after the drop");
    sleep(Duration::from_secs(1) + Duration::from_millis(200)).await; // past the late reply
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "the late renewal revived it");
    assert_eq!(counting.layer().releases.load(SeqCst), 1);
}
