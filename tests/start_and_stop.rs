//! One shape for the long-lived ways in: `Leadership::start`, `LeadershipRegistry::start`
//! and `Partitions::start` are async and fail with what only a change of configuration
//! mends; `stop(&self)` returns `Result` with a release the store did not answer; over a
//! `DisabledStore` each follows `when_uncoordinated`.

mod support;

use std::time::Duration;

use leader::store::LeaseStore;
use leader::{
    DisabledStore, Leadership, LeadershipOptions, MemoryStore, PartitionEvent, PartitionOptions,
    Partitions, WhenUncoordinated,
};
use support::{Faulty, FaultyStore, eventually, start};
use tokio::time::{sleep, timeout};

const SECOND: Duration = Duration::from_secs(1);

fn options() -> LeadershipOptions {
    LeadershipOptions::new().lease_time(15 * SECOND)
}

/// A group of size 3 held in `store` by an old process, under the returned token.
async fn held_under_three(store: &MemoryStore) -> leader::LeaseToken {
    let held = leader::LeaseToken::generate().unwrap();
    let three = std::num::NonZeroU32::new(3).unwrap();
    let request =
        leader::store::AcquireRequest::new("leader:sized", three, held, "old", 60 * SECOND);
    assert!(matches!(
        store.acquire(request).await.unwrap(),
        leader::store::AcquireOutcome::Granted(_)
    ));
    held
}

/// A refusal only a change of configuration helps (a group held under another
/// `max_leaders`) fails `Leadership::start` and a registry's `start`; one that comes later
/// (the store was unreachable at start) reaches the application: the status and the health
/// carry it, `wait_for_leadership` ends with it, and it clears once the old slots are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_only_configuration_helps_fails_start_or_reaches_the_application() {
    let store = MemoryStore::new();
    let held = held_under_three(&store).await;
    let err = Leadership::start("sized", store.clone(), options()).await.expect_err("refused");
    assert!(
        matches!(err, leader::Error::MaxLeadersMismatch { requested: 1, existing: 3, .. }),
        "{err:?}"
    );
    let mut registry = leader::LeadershipRegistry::new(store.clone());
    registry.add_role("sized").unwrap();
    let err = registry.start().await.expect_err("the store refused the role");
    assert!(matches!(err, leader::Error::MaxLeadersMismatch { .. }), "{err:?}");

    // Started while the store was unreachable (waited out), refused once it answers.
    let flaky = FaultyStore::over(store.clone());
    flaky.cut_off(true);
    let leadership = start("sized", flaky.clone(), options()).await;
    flaky.cut_off(false);
    let refused = timeout(5 * SECOND, leadership.wait_for_leadership())
        .await
        .expect("ends with the refusal")
        .expect_err("a group of another size");
    assert!(matches!(refused, leader::Error::MaxLeadersMismatch { .. }), "{refused:?}");
    let status = leadership.status();
    assert!(!status.is_leader && status.failure.is_some(), "{status:?}");
    assert!(matches!(leadership.health(), leader::LeadershipHealth::Failing { .. }));

    // The old holder goes: the next attempt is taken, and the failure cleared.
    store.release("leader:sized", held, Duration::ZERO).await.unwrap();
    eventually(10 * SECOND, "the failure is cleared", || async {
        leadership.status().failure.is_none()
    })
    .await;
    timeout(10 * SECOND, leadership.wait_for_leadership())
        .await
        .expect("leads once the old slots are gone")
        .expect("no refusal any more");
    assert!(leadership.status().failure.is_none() && leadership.health().is_healthy());
    leadership.stop().await.expect("stopped");
}

/// `start` returns once the store answered: a second instance is standing by, not still
/// asking, and the first leads.
#[tokio::test(start_paused = true)]
async fn start_returns_once_the_store_answered_the_first_attempt() {
    let store = MemoryStore::new();
    let first = Leadership::start("answered", store.clone(), options()).await.unwrap();
    assert!(first.is_leader(), "the first instance's start returned with its grant");
    let second = Leadership::start("answered", store.clone(), options()).await.unwrap();
    assert!(!second.is_leader());
    first.stop().await.expect("stopped");
    second.stop().await.expect("stopped");
}

/// A start the store granted returns leading, on a runtime of several threads too: the
/// first answer is told once the term is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_start_returns_leading() {
    let store = MemoryStore::new();
    for role in 0..200 {
        let leadership =
            Leadership::start(&format!("granted-{role}"), store.clone(), options()).await.unwrap();
        assert!(leadership.is_leader() && leadership.fence().is_some(), "role {role}");
        leadership.stop().await.expect("stopped");
    }
}

/// A stop whose release the store did not answer says so (the release goes on in the
/// background); a second stop, and a stop on another handle, are `Ok` at once.
#[tokio::test(start_paused = true)]
async fn a_stop_whose_release_failed_says_so() {
    let shared = MemoryStore::new();
    let flaky = FaultyStore::over(shared.clone());
    let leadership = start("reports", flaky.clone(), options()).await;
    leadership.wait_for_leadership().await.expect("no refusal");
    flaky.cut_off(true);
    let err = leadership.stop().await.expect_err("the release was not answered");
    assert!(err.is_transient(), "{err:?}");
    leadership.stop().await.expect("a second stop has nothing to report");
    leadership.clone().stop().await.expect("nor has another handle's");
    flaky.cut_off(false);
}

/// Over a `DisabledStore` a partitions node follows `when_uncoordinated`, as a
/// `Leadership` does: by default it owns nothing; with `Lead` it owns every partition
/// under fence 0 until stopped, and its stop hands each over.
#[tokio::test(start_paused = true)]
async fn a_partitions_node_over_a_disabled_store_follows_when_uncoordinated() {
    let follower = Partitions::start("local", 4, DisabledStore, PartitionOptions::new())
        .await
        .expect("an uncoordinated node starts");
    sleep(SECOND).await;
    assert!(follower.owned().is_empty() && follower.view().share.is_empty());
    follower.stop().await.expect("stopped");

    let options = PartitionOptions::new().when_uncoordinated(WhenUncoordinated::Lead);
    let mut leader = Partitions::start("local", 4, DisabledStore, options).await.unwrap();
    let mut assigned = Vec::new();
    while assigned.len() < 4 {
        match leader.next_event().await {
            Some(PartitionEvent::Assigned(partition)) => assigned.push(partition),
            other => panic!("{other:?}"),
        }
    }
    assert!(assigned.iter().all(|partition| partition.live_fence() == Some(0)));
    assert_eq!(leader.view().owned, vec![0, 1, 2, 3]);
    let work: Vec<_> = assigned.iter().map(|partition| partition.cancel_token()).collect();
    drop(assigned);
    leader.stop().await.expect("stopped");
    assert!(work.iter().all(|token| token.is_cancelled()), "each partition's work told to stop");
    assert!(leader.owned().is_empty());
    let mut revoked = 0;
    while let Some(event) = leader.next_event().await {
        assert!(matches!(event, PartitionEvent::Revoked { .. }), "{event:?}");
        revoked += 1;
    }
    assert_eq!(revoked, 4);
}

/// `Partitions::stop` takes `&self`, like `Leadership::stop`: a second call, after the
/// first, is `Ok` at once (one made while the first waits: `tests/partitions.rs`).
#[tokio::test(start_paused = true)]
async fn a_partitions_node_stops_once() {
    let node =
        Partitions::start("twice", 2, MemoryStore::new(), PartitionOptions::new()).await.unwrap();
    node.stop().await.expect("stopped");
    node.stop().await.expect("a second stop has nothing to report");
    assert!(node.owned().is_empty());
}
