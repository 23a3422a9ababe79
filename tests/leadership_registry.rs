//! `LeadershipRegistry`: roles started together, checked before any starts, stopped together.

mod support;

use std::time::Duration;

use leader::{
    Error, KeyOptions, LeaderGroupElectionOptions, LeaderGroupElector, LeadershipOptions,
    LeadershipRegistry, MemoryStore,
};
use support::{Faulty, FaultyStore};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn roles_start_together_are_found_by_name_and_stop_releasing_their_slots() {
    let store = MemoryStore::new();
    let mut registry = LeadershipRegistry::new(store.clone());
    registry.add_role("scheduler").unwrap().add_role("outbox").unwrap();
    registry.add_role_with("workers", LeadershipOptions::new().max_leaders(3)).unwrap();
    let roles = registry.start().await.unwrap();
    for role in ["scheduler", "outbox", "workers"] {
        let leadership = roles.get(role).expect("looked up by name");
        assert_eq!(leadership.role(), role);
        leadership.wait_for_leadership().await.expect("no refusal");
    }
    assert!(roles.get("unknown").is_none());
    assert_eq!(roles.iter().count(), 3);
    assert_eq!(roles.get("workers").unwrap().describe().max_leaders, 3);

    let observer =
        LeaderGroupElector::new(store.clone(), LeaderGroupElectionOptions::new(1)).unwrap();
    assert!(observer.state("scheduler").await.unwrap().is_full());
    let stopped_at = tokio::time::Instant::now();
    roles.stop().await.expect("stopped");
    for role in ["scheduler", "outbox", "workers"] {
        assert!(observer.state(role).await.unwrap().is_empty(), "{role} released its slot");
    }
    assert!(stopped_at.elapsed() < SECOND);
}

#[test]
fn a_repeated_role_is_refused() {
    let mut registry = LeadershipRegistry::new(MemoryStore::new());
    registry.add_role("scheduler").unwrap();
    let err = registry.add_role_with("scheduler", LeadershipOptions::new()).err().unwrap();
    assert!(matches!(err, Error::RoleAlreadyAdded { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "role `scheduler` is already in the registry; each role can be added once"
    );
    assert!(matches!(registry.add_role("two words").err().unwrap(), Error::InvalidName { .. }));
}

#[tokio::test]
async fn every_role_is_checked_before_any_starts() {
    let store = FaultyStore::default();
    let mut registry = LeadershipRegistry::new(store.clone());
    registry.add_role("fine").unwrap();
    registry
        .add_role_with(
            "broken",
            LeadershipOptions::new().lease_time(10 * SECOND).renew_interval(9 * SECOND),
        )
        .unwrap();
    let err = registry.start().await.err().unwrap();
    assert!(err.to_string().starts_with("invalid `renew_interval` 9s"), "{err}");
    assert!(err.to_string().ends_with(" (role `broken`)"), "{err}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(store.acquires() + store.watches(), 0, "no role started");
}

#[test]
fn roles_that_share_a_key_are_refused() {
    let mut registry = LeadershipRegistry::new(MemoryStore::new());
    registry.add_role("a").unwrap();
    registry
        .add_role_with("b", LeadershipOptions::new().keys(KeyOptions::new().exact_key("leader:a")))
        .unwrap();
    let err = registry.validate().unwrap_err();
    assert!(matches!(err, Error::RolesShareKey { .. }), "{err:?}");
    assert!(
        err.to_string().contains("roles `a` and `b` both resolve to key \"leader:a\""),
        "{err}"
    );
}
