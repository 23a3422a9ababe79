//! A `Leadership`'s resignation and stop, under paused time on `MemoryStore`: a resigner
//! stands again when nobody took its slot, a stopped leadership says so, and standbys that
//! wait fairly claim the role as its leaders resign.

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

/// Counts the acquires that claim the group's next free slot.
#[derive(Debug, Clone, Default)]
struct Claims(std::sync::Arc<std::sync::atomic::AtomicUsize>);

#[async_trait::async_trait]
impl leader::store::author::StoreLayer for Claims {
    async fn acquire(
        &self,
        inner: &dyn leader::LeaseStore,
        request: leader::store::AcquireRequest<'_>,
    ) -> Result<leader::store::AcquireOutcome, leader::Error> {
        if request.reservation.is_some() {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        inner.acquire(request).await
    }
}

/// Standbys that wait fairly (an option of `Leadership`, off by default) claim the role's
/// next free slot once they lost 3 hand-overs in a row, as the leaders resign in turn;
/// standbys that do not, never claim.
#[tokio::test(start_paused = true)]
async fn fair_standbys_claim_the_role_after_three_lost_hand_overs() {
    for fair in [false, true] {
        let claims = Claims::default();
        let store = leader::store::author::Layered::new(claims.clone(), MemoryStore::new());
        let mut instances: Vec<Leadership> = Vec::new();
        for _ in 0..6 {
            let options = options().retry_interval(2 * SECOND).fair_waiting(fair);
            instances.push(start("reporter", store.clone(), options).await);
        }
        for _ in 0..24 {
            settle(&instances, 1).await;
            let leader = instances.iter().position(Leadership::is_leader).expect("one leads");
            instances[leader].resign().await;
        }
        let claimed = claims.0.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(claimed > 0, fair, "fair_waiting({fair}): {claimed} claims");
        for instance in &instances {
            instance.stop().await.expect("stopped");
        }
    }
}

/// A leader with a priority steps down for a better waiting candidate, but not for a claim
/// that says it lives longer than any candidate's (an operator's write into the store:
/// before, it made the leader step down for a candidate that never came, and the role went
/// unled for as long as the claim said).
#[tokio::test(start_paused = true)]
async fn a_leader_steps_down_for_a_better_candidate_not_for_a_claim_nobody_keeps() {
    use leader::LeaseStore;
    use leader::store::AcquireRequest;
    let store = MemoryStore::new();
    let delay = SECOND;
    let prioritized = |priority| options().priority(priority).step_down_delay(delay);
    let low = start("reporter", store.clone(), prioritized(1)).await;
    settle(std::slice::from_ref(&low), 1).await;
    let fence = low.fence();
    let fake = AcquireRequest::new(
        "leader:reporter",
        std::num::NonZeroU32::MIN,
        leader::LeaseToken::generate().unwrap(),
        "nobody",
        30 * SECOND,
    )
    .reserving_at(Duration::ZERO, 120 * SECOND, 100);
    store.acquire(fake).await.unwrap();
    assert_eq!(store.claim("leader:reporter").await.unwrap().unwrap().priority, 100);
    sleep(5 * delay).await;
    assert_eq!(low.fence(), fence, "stepped down for a claim no candidate keeps");
    // Once that claim lapsed, a better candidate that waits is stepped down for.
    sleep(120 * SECOND).await;
    assert_eq!(low.fence(), fence);
    let high = start("reporter", store.clone(), prioritized(5)).await;
    let began = Instant::now();
    while !high.is_leader() {
        assert!(began.elapsed() < 3 * delay, "the better candidate never led");
        sleep(Duration::from_millis(10)).await;
    }
    assert!(!low.is_leader());
    for instance in [high, low] {
        instance.stop().await.expect("stopped");
    }
}

/// Holds back every reply to a claim read but the first by 1.5 s: the read reached the
/// store, its answer is late (a stalled task, a slow network).
#[derive(Debug, Default)]
struct LateClaimReads(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl leader::store::author::StoreLayer for LateClaimReads {
    async fn claim(
        &self,
        inner: &dyn leader::LeaseStore,
        key: &str,
    ) -> Result<Option<leader::ClaimInfo>, leader::Error> {
        let claim = inner.claim(key).await;
        if self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) > 0 {
            sleep(Duration::from_millis(1500)).await;
        }
        claim
    }
}

/// A leader counted a claim's end from when the reply arrived, so a late reply made a claim
/// nobody keeps alive look renewed, and the leader stepped down for it. It counts from when
/// the read was sent now.
#[tokio::test(start_paused = true)]
async fn a_late_claim_read_makes_no_dead_claim_look_alive() {
    use leader::LeaseStore;
    use leader::store::AcquireRequest;
    use leader::store::author::Layered;
    let memory = MemoryStore::new();
    let store = Layered::new(LateClaimReads::default(), memory.clone());
    let low = start("reporter", store, options().priority(1).step_down_delay(SECOND)).await;
    settle(std::slice::from_ref(&low), 1).await;
    let fence = low.fence();
    let once = AcquireRequest::new(
        "leader:reporter",
        std::num::NonZeroU32::MIN,
        leader::LeaseToken::generate().unwrap(),
        "gone",
        30 * SECOND,
    )
    .reserving_at(Duration::ZERO, 120 * SECOND, 100);
    memory.acquire(once).await.unwrap();
    sleep(10 * SECOND).await;
    assert_eq!(low.fence(), fence, "stepped down for a claim nobody keeps, read late");
    low.stop().await.expect("stopped");
}
