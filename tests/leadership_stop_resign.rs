//! A `Leadership`'s resignation and stop, under paused time on `MemoryStore`: a resigner
//! stands again when nobody took its slot, and a stopped leadership says so.

mod support;

use std::time::Duration;

use leader::{Leadership, LeadershipOptions, MemoryStore};
use support::{Faulty, FaultyStore, start};
use tokio::time::{Instant, sleep};

const SECOND: Duration = Duration::from_secs(1);

fn options() -> LeadershipOptions {
    LeadershipOptions::new().lease_time(15 * SECOND)
}

/// Waits (in paused time, so instantly) until exactly `n` instances lead.
async fn settle(instances: &[Leadership], n: usize) {
    let deadline = Instant::now() + 60 * SECOND;
    while instances.iter().filter(|l| l.is_leader()).count() != n {
        assert!(Instant::now() < deadline, "never {n} leaders");
        sleep(Duration::from_millis(10)).await;
    }
}

/// Others get the first chance at a resigned slot, but a slot nobody else wants does not
/// stay empty for the whole retry interval: the resigner stands again once those waiting
/// (woken by the release at once) had their chance.
#[tokio::test(start_paused = true)]
async fn a_resigner_stands_again_soon_when_nobody_else_takes_its_slot() {
    let store = MemoryStore::new();
    let options = || options().max_leaders(3).retry_interval(2 * SECOND);
    let mut instances: Vec<Leadership> = Vec::new();
    for _ in 0..3 {
        instances.push(start("sweeper", store.clone(), options()).await);
    }
    settle(&instances, 3).await;
    let resigned_at = Instant::now();
    for instance in &instances {
        instance.resign().await;
    }
    settle(&instances, 3).await;
    let took = resigned_at.elapsed();
    assert!(took <= Duration::from_millis(200), "three free slots stayed empty {took:?}");
}

/// A stopped leadership says it is stopped, even if the store had refused it before.
#[tokio::test(start_paused = true)]
async fn a_stopped_leadership_says_stopped_even_after_a_refusal() {
    let store = MemoryStore::new();
    let held = start("refused", store.clone(), options().max_leaders(2)).await;
    held.wait_for_leadership().await.expect("no refusal");
    // Started while the store was unreachable (a refusal at start fails `start` itself).
    let flaky = FaultyStore::over(store.clone());
    flaky.cut_off(true);
    let refused = start("refused", flaky.clone(), options()).await;
    flaky.cut_off(false);
    let error = refused.wait_for_leadership().await.expect_err("another max_leaders");
    assert!(matches!(error, leader::Error::MaxLeadersMismatch { .. }), "{error}");
    refused.stop().await.expect("stopped");
    let error = refused.wait_for_leadership().await.expect_err("stopped");
    assert!(matches!(error, leader::Error::Stopped { .. }), "{error}");
    held.stop().await.expect("stopped");
}
