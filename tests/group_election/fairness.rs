//! Fair waiting: waiters that keep losing hand-overs are served in turn.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::{LeaderGroupElectionOptions, LeaderGroupElector, MemoryStore};

const WAITERS: usize = 8;
const HAND_OVERS: usize = 200;

/// `WAITERS` waiters, each its own elector, take one slot in turn `HAND_OVERS` times (a
/// winner holds it 2 ms, releases it and waits again at once): the most hand-overs any
/// waiter lost in a row, from its first attempt to its win.
async fn most_lost_in_a_row(fair: bool) -> usize {
    let store = MemoryStore::new();
    let winners = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for at in 0..WAITERS {
        let options = LeaderGroupElectionOptions::new(1)
            .lease_time(Duration::from_secs(10))
            .wait_time(Duration::from_secs(60))
            .fair_waiting(fair);
        let elector = LeaderGroupElector::new(store.clone(), options).expect("valid options");
        let winners = Arc::clone(&winners);
        waiters.push(tokio::spawn(async move {
            let mut worst = 0;
            loop {
                let since = winners.lock().unwrap().len();
                let guard = elector.acquire("turns").await.expect("the store answers");
                let guard = guard.expect("a slot within a minute");
                {
                    let mut winners = winners.lock().unwrap();
                    if winners.len() >= HAND_OVERS {
                        return worst;
                    }
                    worst = worst.max(winners.len() - since);
                    winners.push(at);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.release().await.expect("released");
            }
        }));
    }
    let mut worst = 0;
    for waiter in waiters {
        worst = worst.max(waiter.await.expect("a waiter ends"));
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_are_served_in_turn() {
    // Served in arrival order, a waiter loses WAITERS - 1 hand-overs between two wins; it
    // claims the next slot after 3, and a waiter that claims it first after a claimed slot
    // was taken goes first: 11-12 here, against 56-70 with fair waiting off.
    let fair = most_lost_in_a_row(true).await;
    assert!(fair <= 3 * WAITERS, "a fair waiter lost {fair} hand-overs in a row");
}

/// Which of two per-call waiters, `first` and `second` (each set up by its options, the
/// second waiting from a little later), takes a held slot once it is released, on a store
/// where the operator may prefer a holder (`prefer`).
async fn served_first(
    first: LeaderGroupElectionOptions,
    second: LeaderGroupElectionOptions,
    prefer: Option<&str>,
) -> String {
    let store = MemoryStore::new();
    let served = Arc::new(Mutex::new(Vec::new()));
    let waiting = |options: LeaderGroupElectionOptions| {
        let options = options.wait_time(Duration::from_secs(10));
        let elector = LeaderGroupElector::new(store.clone(), options).expect("valid options");
        let served = Arc::clone(&served);
        tokio::spawn(async move {
            let guard = elector.acquire("queue").await.expect("answers").expect("a slot");
            served.lock().unwrap().push(guard.lease().holder().to_owned());
            guard.release().await.expect("released");
        })
    };
    let holding = LeaderGroupElector::new(store.clone(), LeaderGroupElectionOptions::new(1))
        .expect("valid options");
    let held = holding.acquire("queue").await.unwrap().expect("a free group");
    if let Some(holder) = prefer {
        holding.prefer("queue", holder, Duration::from_secs(60)).await.unwrap();
    }
    let first = waiting(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = waiting(second);
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.unwrap();
    first.await.unwrap();
    second.await.unwrap();
    served.lock().unwrap()[0].clone()
}

/// A per-call waiter with a priority is served before an earlier one without, or of a
/// lower priority; the holder an operator prefers before every priority.
#[tokio::test(start_paused = true)]
async fn a_per_call_priority_and_a_preference_are_served_first() {
    let waiter = |id: &str| LeaderGroupElectionOptions::new(1).holder_id(id);
    for _ in 0..5 {
        assert_eq!(
            served_first(waiter("plain"), waiter("urgent").priority(5), None).await,
            "urgent"
        );
        let (low, high) = (waiter("low").priority(1), waiter("high").priority(2));
        assert_eq!(served_first(low.clone(), high.clone(), None).await, "high");
        assert_eq!(served_first(high, low, Some("low")).await, "low", "the preferred one");
    }
}
