//! Waiting for a slot: one attempt without a wait time, woken by a release or at the nearest
//! expiry, never polling, and giving up at the wait time.

use leader::{LeaderElectionOptions, LeaderElector, LeaderGroupElectionOptions, LeaderRunResult};
use tokio::time::{Instant, sleep};

use super::{SECOND, crashed_holder, group};
use crate::support::{Faulty, FaultyStore};

#[tokio::test(start_paused = true)]
async fn zero_wait_time_makes_exactly_one_attempt() {
    let store = FaultyStore::default();
    crashed_holder(&store, "leader:report", 1, 60 * SECOND).await;
    let elector = LeaderElector::new(store.clone(), LeaderElectionOptions::new()).unwrap();
    let before = store.acquires();
    let result = elector.run_if_leader("report", |_| async { unreachable!("group is full") }).await;
    assert_eq!(result.unwrap(), LeaderRunResult::Skipped);
    assert_eq!(store.acquires() - before, 1, "one attempt, no retry");
    assert_eq!(store.watches(), 0, "no subscription without waiting");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_wakes_on_release_without_polling() {
    let store = FaultyStore::default();
    let options = LeaderElectionOptions::new().wait_time(30 * SECOND).lease_time(60 * SECOND);
    let holder = LeaderElector::new(store.clone(), options.clone()).unwrap();
    let waiter = LeaderElector::new(store.clone(), options).unwrap();
    let started = Instant::now();
    let (in_body_tx, in_body_rx) = tokio::sync::oneshot::channel();
    let holding = tokio::spawn(async move {
        holder
            .run_if_leader("outbox", |_| async move {
                in_body_tx.send(()).unwrap();
                sleep(SECOND).await;
            })
            .await
    });
    in_body_rx.await.unwrap();
    let before = store.acquires();
    let result = waiter.run_if_leader("outbox", |_| async { Instant::now() }).await.unwrap();
    let LeaderRunResult::Elected(elected_at) = result else { panic!("waiter skipped") };
    assert_eq!(elected_at - started, SECOND, "elected the moment the holder released");
    assert_eq!(store.acquires() - before, 2, "one refused attempt, one after the release");
    assert!(holding.await.unwrap().unwrap().is_elected());
}

#[tokio::test(start_paused = true)]
async fn a_waiter_sleeps_exactly_until_the_nearest_expiry() {
    let store = FaultyStore::default();
    crashed_holder(&store, "leader:cleanup", 2, 5 * SECOND).await;
    crashed_holder(&store, "leader:cleanup", 2, 2 * SECOND).await;
    let waiter = group(store.clone(), LeaderGroupElectionOptions::new(2).wait_time(30 * SECOND));
    let started = Instant::now();
    let result = waiter.run_if_leader("cleanup", |_| async { Instant::now() }).await.unwrap();
    assert_eq!(result.elected().unwrap() - started, 2 * SECOND);
    assert_eq!(store.acquires(), 4, "two crashed holders, one refused attempt, one grant");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gives_up_at_wait_time() {
    let store = FaultyStore::default();
    crashed_holder(&store, "leader:full", 1, 60 * SECOND).await;
    let waiter =
        LeaderElector::new(store.clone(), LeaderElectionOptions::new().wait_time(3 * SECOND))
            .unwrap();
    let started = Instant::now();
    let result = waiter.run_if_leader("full", |_| async {}).await.unwrap();
    assert_eq!(result, LeaderRunResult::Skipped);
    assert_eq!(started.elapsed(), 3 * SECOND);
    assert_eq!(store.acquires(), 3, "crashed holder, first attempt, last attempt at the deadline");
}
