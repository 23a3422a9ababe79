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
