//! `LeaderGroupElector` and `LeaderElector` over the in-memory store, as a user drives them.

#[path = "group_election/fairness.rs"]
mod fairness;
#[path = "group_election/releases.rs"]
mod releases;
#[path = "group_election/renewals.rs"]
mod renewals;
mod support;
#[path = "group_election/waiting.rs"]
mod waiting;

use std::time::Duration;

use leader::{
    Error, LeaderElectionOptions, LeaderElector, LeaderGroupElectionOptions, LeaderGroupElector,
    Lease, LeaseStore, LeaseToken, MemoryStore, store::AcquireRequest,
};
use support::{Faulty, FaultyStore};
use tokio::time::sleep;

const SECOND: Duration = Duration::from_secs(1);

fn group(
    store: impl LeaseStore + 'static,
    options: LeaderGroupElectionOptions,
) -> LeaderGroupElector {
    LeaderGroupElector::new(store, options).expect("valid options")
}

/// Takes a slot the way a crashed process leaves it: granted and never released.
async fn crashed_holder(store: &dyn LeaseStore, key: &str, max_leaders: u32, lease: Duration) {
    let request = AcquireRequest::new(
        key,
        std::num::NonZeroU32::new(max_leaders).expect("at least one slot"),
        LeaseToken::generate().unwrap(),
        "crashed",
        lease,
    );
    assert!(matches!(
        store.acquire(request).await.unwrap(),
        leader::store::AcquireOutcome::Granted(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_max_leaders_run_at_once() {
    let store = MemoryStore::new();
    let hold = Duration::from_micros(200);
    let contest = support::Contest {
        // Generous: a candidate skipped on a busy machine would count as no election.
        wait_time: 10 * SECOND,
        hold,
        until: support::Until::Rounds(20),
        ..support::Contest::new("bounded-pool", 3, 32)
    };
    let seen = contest.run(std::slice::from_ref(&store)).await;
    assert!(seen.errors.is_empty(), "{:?}", seen.errors);
    let (most, elected) = (seen.most_at_once, seen.elected);
    assert!(most <= 3, "{most} bodies ran at once in a group of 3");
    assert_eq!(most, 3, "32 candidates never filled the group");
    assert!(elected > 20, "only {elected} of 640 attempts elected");
    let state =
        group(store, LeaderGroupElectionOptions::new(3)).state("bounded-pool").await.unwrap();
    assert!(state.is_empty(), "slots left behind: {state:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_strictly_increase_in_grant_order() {
    let store = MemoryStore::new();
    let elector = group(store.clone(), LeaderGroupElectionOptions::new(3).wait_time(10 * SECOND));
    let mut sequential = Vec::new();
    for _ in 0..5 {
        sequential.push(
            elector
                .run_if_leader("fenced", |l| async move { l.fence() })
                .await
                .unwrap()
                .elected()
                .unwrap(),
        );
    }
    assert!(sequential.windows(2).all(|w| w[0] < w[1]), "{sequential:?}");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let elector = elector.clone();
        tasks.push(tokio::spawn(async move {
            elector
                .run_if_leader("fenced", |l| async move { l.fence() })
                .await
                .unwrap()
                .elected()
                .unwrap()
        }));
    }
    let mut concurrent = Vec::new();
    for task in tasks {
        concurrent.push(task.await.unwrap());
    }
    concurrent.sort_unstable();
    concurrent.dedup();
    assert_eq!(concurrent.len(), 16, "a fence was handed out twice");
    assert!(concurrent[0] > *sequential.last().unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_different_max_leaders_while_slots_are_held_is_an_error() {
    let store = MemoryStore::new();
    let three = group(store.clone(), LeaderGroupElectionOptions::new(3).lease_time(60 * SECOND));
    let five = group(store.clone(), LeaderGroupElectionOptions::new(5));
    let result = three
        .run_if_leader("workers", |_| async { five.run_if_leader("workers", |_| async {}).await })
        .await
        .unwrap();
    let err = result.elected().unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "max_leaders 5 requested but group `leader:workers` holds slots granted with \
         max_leaders 3; stop the old replicas or use the same value"
    );
}

#[tokio::test(start_paused = true)]
async fn state_counts_slots() {
    let store = MemoryStore::new();
    let options = LeaderGroupElectionOptions::new(3).lease_time(60 * SECOND).holder_id("worker-a");
    let elector = group(store.clone(), options);
    crashed_holder(&store, "leader:pool", 3, 60 * SECOND).await;
    let state = elector
        .run_if_leader("pool", |_| async { elector.state("pool").await.unwrap() })
        .await
        .unwrap()
        .elected()
        .unwrap();
    assert_eq!(
        (state.max_leaders, state.active_count, state.available_slots()),
        (Some(3), 2, Some(1))
    );
    assert!(!state.is_full() && !state.is_empty());
    let holders: Vec<_> = state.leaders.iter().map(|s| s.holder.as_str()).collect();
    assert_eq!(holders, ["crashed", "worker-a"]);
    assert_eq!(state.key, "leader:pool");
}

#[tokio::test(start_paused = true)]
async fn lease_current_is_set_only_inside_the_body() {
    let elector =
        LeaderElector::new(MemoryStore::new(), LeaderElectionOptions::new().holder_id("me"))
            .unwrap();
    assert!(Lease::current().is_none());
    let seen = elector
        .run_if_leader("ctx", |lease| async move {
            let nested =
                async { Lease::current().map(|l| (l.fence(), l.holder().to_owned())) }.await;
            (nested, lease.fence())
        })
        .await
        .unwrap()
        .elected()
        .unwrap();
    assert_eq!(seen, (Some((1, "me".to_owned())), 1));
    assert!(Lease::current().is_none());
}

#[tokio::test]
async fn invalid_names_are_errors_not_skips() {
    let store = FaultyStore::default();
    let elector = LeaderElector::new(store.clone(), LeaderElectionOptions::new()).unwrap();
    for bad in ["", "two words", "line\nbreak"] {
        let err = elector.run_if_leader(bad, |_| async {}).await.unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{bad:?}: {err}");
    }
    assert_eq!(store.acquires(), 0, "the store was never asked");
}

#[test]
fn bad_options_fail_at_construction() {
    let cases: Vec<(LeaderGroupElectionOptions, &str)> = vec![
        (LeaderGroupElectionOptions::new(0), "invalid `max_leaders` 0"),
        (LeaderGroupElectionOptions::new(2).lease_time(Duration::ZERO), "invalid `lease_time` 0ns"),
        (
            LeaderGroupElectionOptions::new(2).lease_time(SECOND).min_lease_time(2 * SECOND),
            "invalid `min_lease_time` 2s: must be at most lease_time (1s)",
        ),
        (
            LeaderGroupElectionOptions::new(2)
                .lease_time(SECOND)
                .auto_extend(true)
                .renew_interval(SECOND),
            "invalid `renew_interval` 1s",
        ),
        (LeaderGroupElectionOptions::new(2).wait_time(Duration::MAX), "invalid `wait_time`"),
        (LeaderGroupElectionOptions::new(2).holder_id("a\tb"), "invalid `holder_id`"),
        (
            LeaderGroupElectionOptions::new(2).keys(leader::KeyOptions::new().format("static")),
            "invalid `format` \"static\"",
        ),
    ];
    for (options, expected) in cases {
        let err = LeaderGroupElector::new(MemoryStore::new(), options).unwrap_err().to_string();
        assert!(err.starts_with(expected), "{err:?} does not start with {expected:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn every_store_call_has_a_span_with_group_holder_fence_and_outcome_and_no_token() {
    let (_guard, logs) = support::capture_logs();
    let options =
        LeaderElectionOptions::new().lease_time(3 * SECOND).auto_extend(true).holder_id("node-7");
    let elector = LeaderElector::new(MemoryStore::new(), options).unwrap();
    let token = elector
        .run_if_leader("traced", |lease| async move {
            sleep(Duration::from_millis(2_500)).await;
            lease.token()
        })
        .await
        .unwrap()
        .elected()
        .unwrap();
    elector.state("traced").await.unwrap();
    let closed = |span: &str| {
        logs.lines_with(&format!("{span}{{"))
            .into_iter()
            .filter(|l| l.contains("close"))
            .collect::<Vec<_>>()
    };
    let acquire = closed("leader.acquire");
    assert_eq!(acquire.len(), 1, "{acquire:?}");
    for field in ["group=\"leader:traced\"", "holder=\"node-7\"", "fence=1", "outcome=\"elected\""]
    {
        assert!(acquire[0].contains(field), "{field} missing from {}", acquire[0]);
    }
    let renew = closed("leader.renew");
    assert_eq!(renew.len(), 2, "renewed at 1 s and 2 s: {renew:?}");
    assert!(
        renew[0].contains("outcome=\"renewed\"") && renew[0].contains("fence=1"),
        "{}",
        renew[0]
    );
    assert!(closed("leader.release")[0].contains("outcome=\"released\""));
    assert!(closed("leader.state")[0].contains("active=0"));
    assert!(logs.lines_with(&token.to_string()).is_empty(), "a token reached the log");
}
