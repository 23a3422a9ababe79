//! A lease while its body runs: auto-extension keeps it, and without it, or once renewals are
//! refused or keep failing, the loss signal fires.

use std::time::Duration;

use leader::{
    LeaderElectionOptions, LeaderElector, LeaderGroupElectionOptions, LeaderRunResult, LeaseStore,
    LossReason, MemoryStore,
};
use tokio::time::{Instant, sleep};

use super::{SECOND, group};
use crate::support::{Faulty, FaultyStore};

#[tokio::test(start_paused = true)]
async fn auto_extend_keeps_a_long_body_past_the_lease() {
    let store = FaultyStore::default();
    let options = LeaderGroupElectionOptions::new(2).lease_time(3 * SECOND).auto_extend(true);
    let elector = group(store.clone(), options);
    let observer = group(store.clone(), LeaderGroupElectionOptions::new(2));
    let result = elector
        .run_if_leader("reindex", |lease| async move {
            for _ in 0..10 {
                sleep(SECOND).await;
                let state = observer.state("reindex").await.unwrap();
                assert_eq!(state.active_count, 1, "slot lost while the body ran");
                assert!(!lease.is_lost());
                // A renewal due now may not have run yet: 2 s left, less the 0.1% of the
                // lease by which a local deadline comes early.
                assert!(lease.remaining() > 2 * SECOND - Duration::from_millis(4));
            }
            lease.loss_reason()
        })
        .await
        .unwrap();
    assert_eq!(result, LeaderRunResult::Elected(None));
    // Renewed at t = 1 s, 2 s, … 9 s; at 10 s the body ends first.
    assert_eq!(store.renewals(), 9, "renewed every lease_time / 3 while the body ran");
}

#[tokio::test(start_paused = true)]
async fn without_auto_extend_the_loss_signal_fires_at_the_lease_end() {
    let elector =
        LeaderElector::new(MemoryStore::new(), LeaderElectionOptions::new().lease_time(3 * SECOND))
            .unwrap();
    let started = Instant::now();
    let result = elector
        .run_if_leader("slow", |lease| async move {
            lease.lost().await;
            (started.elapsed(), lease.loss_reason(), lease.loss_token().is_cancelled())
        })
        .await
        .unwrap();
    // At the lease's end on the local clock, 0.1% early (for a clock slower than the store's).
    let end = 3 * SECOND - 3 * SECOND / 1000;
    assert_eq!(result.elected(), Some((end, Some(LossReason::Expired), true)));
}

#[tokio::test(start_paused = true)]
async fn a_refused_renewal_fires_the_loss_signal() {
    let store = MemoryStore::new();
    let options = LeaderElectionOptions::new().lease_time(30 * SECOND).auto_extend(true);
    let elector = LeaderElector::new(store.clone(), options).unwrap();
    let result = elector
        .run_if_leader("evicted", |lease| async move {
            // An operator frees the slot with its token; the next renewal is refused.
            store.release(lease.key(), lease.token(), Duration::ZERO).await.unwrap();
            let freed_at = Instant::now();
            lease.lost().await;
            (freed_at.elapsed(), lease.loss_reason())
        })
        .await
        .unwrap();
    let (noticed_after, reason) = result.elected().unwrap();
    assert_eq!(reason, Some(LossReason::Refused));
    assert_eq!(noticed_after, 10 * SECOND, "noticed at the first renewal");
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_is_retried_before_the_lease_ends() {
    let store = FaultyStore::default();
    let options = LeaderElectionOptions::new().lease_time(9 * SECOND).auto_extend(true);
    let elector = LeaderElector::new(store.clone(), options).unwrap();
    store.fail_renewals(2);
    let result = elector
        .run_if_leader("flaky", |lease| async move {
            sleep(20 * SECOND).await;
            lease.loss_reason()
        })
        .await
        .unwrap();
    assert_eq!(result, LeaderRunResult::Elected(None), "the lease survived two failed renewals");
    // t=3 fails, retried at t=6 (the cadence: half of the remaining 6 s is 3 s); t=6 fails,
    // retried at t=7.5 (half of the remaining 3 s); then every 3 s: 10.5, 13.5, 16.5, 19.5.
    assert_eq!(store.renewals(), 7);
}

#[tokio::test(start_paused = true)]
async fn renewals_failing_until_the_deadline_lose_the_lease() {
    let store = FaultyStore::default();
    let options = LeaderElectionOptions::new().lease_time(9 * SECOND).auto_extend(true);
    let elector = LeaderElector::new(store.clone(), options).unwrap();
    store.fail_renewals(usize::MAX);
    let started = Instant::now();
    let result = elector
        .run_if_leader("unreachable", |lease| async move {
            lease.lost().await;
            (started.elapsed(), lease.loss_reason())
        })
        .await
        .unwrap();
    let end = 9 * SECOND - 9 * SECOND / 1000; // the local deadline, 0.1% early
    assert_eq!(result.elected(), Some((end, Some(LossReason::Expired))));
}
