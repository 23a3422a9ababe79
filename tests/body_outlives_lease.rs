//! A `run_if_leader` body that outlives its lease without `auto_extend` runs on unprotected:
//! that is said once per group, with what to change, not left silent.

mod support;

use std::time::Duration;

use leader::{LeaderElectionOptions, LeaderElector, MemoryStore};
use tokio::time::sleep;

const WARNING: &str = "outlived its lease";

#[tokio::test(start_paused = true)]
async fn a_body_that_outlives_its_lease_is_warned_of_once_per_group() {
    let (_guard, logs) = support::capture_logs();
    let options = LeaderElectionOptions::new().lease_time(Duration::from_secs(1));
    let elector = LeaderElector::new(MemoryStore::new(), options).unwrap();
    for group in ["slow-report", "slow-report", "slow-export"] {
        let ran = elector
            .run_if_leader(group, |lease| async move {
                sleep(Duration::from_secs(3)).await;
                lease.live_fence()
            })
            .await
            .unwrap();
        assert_eq!(ran.elected(), Some(None), "the body ran past its lease");
    }
    let warnings: Vec<String> =
        logs.lines_with(WARNING).into_iter().filter(|line| line.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "once per group: {warnings:#?}");
    for (warning, group) in warnings.iter().zip(["leader:slow-report", "leader:slow-export"]) {
        assert!(warning.contains("WARN") && warning.contains(group), "{warning}");
        assert!(warning.contains("auto_extend"), "says what to change: {warning}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_within_its_lease_or_renewed_is_not_warned_of() {
    let (_guard, logs) = support::capture_logs();
    let options = LeaderElectionOptions::new().lease_time(Duration::from_secs(5));
    let elector = LeaderElector::new(MemoryStore::new(), options).unwrap();
    let ran = elector.run_if_leader("quiet", |_| sleep(Duration::from_secs(4))).await.unwrap();
    assert!(ran.is_elected());
    // Renewed: a body three leases long.
    let renewed = LeaderElectionOptions::new().lease_time(Duration::from_secs(1)).auto_extend(true);
    let elector = LeaderElector::new(MemoryStore::new(), renewed).unwrap();
    let ran = elector.run_if_leader("renewed", |_| sleep(Duration::from_secs(3))).await.unwrap();
    assert!(ran.is_elected());
    assert_eq!(logs.lines_with("outlived"), Vec::<String>::new());
}

/// A body that blocks its thread past the deadline (it never yields, so nothing watches the
/// deadline while it runs) is told of once it returns.
#[tokio::test]
async fn a_body_that_blocks_past_its_lease_is_warned_of_when_it_returns() {
    let (_guard, logs) = support::capture_logs();
    let options = LeaderElectionOptions::new().lease_time(Duration::from_millis(200));
    let elector = LeaderElector::new(MemoryStore::new(), options).unwrap();
    let ran = elector
        .run_if_leader("blocking-body", |lease| async move {
            std::thread::sleep(Duration::from_millis(400));
            lease.live_fence()
        })
        .await
        .unwrap();
    assert_eq!(ran.elected(), Some(None), "the body ran past its lease");
    let warnings = logs.lines_with(WARNING);
    assert!(
        warnings.iter().any(|line| line.contains("WARN") && line.contains("leader:blocking-body")),
        "{warnings:#?}"
    );
}
