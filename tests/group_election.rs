//! `LeaderGroupElector` and `LeaderElector` over the in-memory store, as a user drives them.

mod support;

use std::time::Duration;

use leader::{
    Error, LeaderElectionOptions, LeaderElector, LeaderGroupElectionOptions, LeaderGroupElector,
    LeaderRunResult, Lease, LeaseStore, LeaseToken, LossReason, MemoryStore, store::AcquireRequest,
};
use support::{Faulty, FaultyStore, eventually};
use tokio::time::{Instant, sleep};

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

#[tokio::test(start_paused = true)]
async fn min_lease_time_keeps_the_slot_while_the_caller_returns_at_once() {
    let store = MemoryStore::new();
    let options =
        LeaderGroupElectionOptions::new(1).lease_time(10 * SECOND).min_lease_time(5 * SECOND);
    let first = group(store.clone(), options.clone());
    let second = group(store.clone(), options);
    let started = Instant::now();
    assert!(first.run_if_leader("nightly", |_| async {}).await.unwrap().is_elected());
    assert_eq!(started.elapsed(), Duration::ZERO, "the caller waited for the minimum lease");
    let state = first.state("nightly").await.unwrap();
    assert!(state.is_full());
    assert!(state.leaders[0].expires_in <= 5 * SECOND, "{state:?}");
    assert!(second.run_if_leader("nightly", |_| async {}).await.unwrap().is_skipped());
    sleep(5 * SECOND).await;
    assert!(second.run_if_leader("nightly", |_| async {}).await.unwrap().is_elected());
}

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

#[tokio::test(start_paused = true)]
async fn a_panicking_body_releases_its_slot_and_the_panic_propagates() {
    let store = MemoryStore::new();
    let elector =
        LeaderElector::new(store.clone(), LeaderElectionOptions::new().lease_time(60 * SECOND))
            .unwrap();
    let panicking = elector.clone();
    let joined = tokio::spawn(async move {
        panicking.run_if_leader("explodes", |_| async { panic!("body blew up") }).await
    })
    .await;
    let panic = joined.unwrap_err().into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"body blew up"));
    assert!(elector.state("explodes").await.unwrap().is_empty(), "released before propagating");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_releases_the_slot() {
    let store = MemoryStore::new();
    let elector =
        LeaderElector::new(store.clone(), LeaderElectionOptions::new().lease_time(60 * SECOND))
            .unwrap();
    let running = elector.clone();
    let task = tokio::spawn(async move {
        running.run_if_leader("abandoned", |_| std::future::pending::<()>()).await
    });
    eventually(SECOND, "the body holds the slot", || async {
        elector.state("abandoned").await.unwrap().is_full()
    })
    .await;
    let started = Instant::now();
    task.abort();
    eventually(SECOND, "the dropped future's slot is released", || async {
        elector.state("abandoned").await.unwrap().is_empty()
    })
    .await;
    assert!(started.elapsed() < SECOND, "freed by release, not by expiry");
}

#[tokio::test(start_paused = true)]
async fn a_lost_acquire_reply_is_an_error_and_the_slot_is_released() {
    let store = FaultyStore::default();
    let elector =
        LeaderElector::new(store.clone(), LeaderElectionOptions::new().lease_time(60 * SECOND))
            .unwrap();
    store.lose_acquire_replies(1);
    let err = elector.run_if_leader("lossy", |_| async {}).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    eventually(SECOND, "the granted-but-unreported slot is released", || async {
        elector.state("lossy").await.unwrap().is_empty()
    })
    .await;
    assert!(elector.run_if_leader("lossy", |_| async {}).await.unwrap().is_elected());
}

/// The reply of a grant is lost and the store stays unreachable for a moment: the slot
/// is given back once the store answers again (retried with backoff), not left held by
/// nobody until its lease ends.
#[tokio::test(start_paused = true)]
async fn a_lost_grant_is_given_back_once_the_store_answers_again() {
    let store = FaultyStore::default();
    let elector =
        LeaderElector::new(store.clone(), LeaderElectionOptions::new().lease_time(60 * SECOND))
            .unwrap();
    store.lose_acquire_replies(1);
    let err = elector.run_if_leader("unreachable", |_| async {}).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    store.cut_off(true); // before the give-back runs
    sleep(Duration::from_millis(500)).await;
    assert!(store.releases() >= 2, "the give-back is tried again: {}", store.releases());
    assert_eq!(store.inner().state("leader:unreachable").await.unwrap().leaders.len(), 1);
    store.cut_off(false);
    eventually(5 * SECOND, "the granted-but-unreported slot is released", || async {
        elector.state("unreachable").await.unwrap().is_empty()
    })
    .await;
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

/// A guard dropped on a plain thread (a struct dropped outside any runtime) still gives
/// its slot back, on the runtime that acquired it.
#[test]
fn a_guard_dropped_outside_a_runtime_is_released_on_the_acquiring_one() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let store = leader::MemoryStore::new();
    let elector = leader::LeaderElector::new(
        store.clone(),
        leader::LeaderElectionOptions::new().lease_time(std::time::Duration::from_secs(60)),
    )
    .unwrap();
    let guard = runtime.block_on(elector.acquire("outside")).unwrap().expect("free");
    std::thread::spawn(move || drop(guard)).join().unwrap();
    runtime.block_on(async {
        leader::wait_for_releases().await;
        assert_eq!(elector.state("outside").await.unwrap().active_count, 0, "still held");
    });
}

/// A guard that outlives the runtime that acquired it (its renewal task gone with it) still
/// signals its loss at the deadline to a task waiting on `lost()` on another runtime.
#[test]
fn a_guard_outliving_its_runtime_still_signals_its_loss() {
    let first = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let elector = leader::LeaderElector::new(
        leader::MemoryStore::new(),
        leader::LeaderElectionOptions::new()
            .lease_time(std::time::Duration::from_secs(1))
            .auto_extend(true),
    )
    .unwrap();
    let guard = first.block_on(elector.acquire("moved")).unwrap().expect("free");
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    second.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(5), guard.lost())
            .await
            .expect("the loss is signalled at the deadline");
        assert_eq!(guard.loss_reason(), Some(leader::LossReason::Expired));
    });
}

/// A grant answered after its local deadline is given back, and the give-back gets no
/// answer (the store runs it later). The candidate's next grant must not be the one that
/// late release frees: it stands again under a new token.
#[tokio::test(start_paused = true)]
async fn a_late_give_back_never_frees_the_next_grant() {
    let memory = MemoryStore::new();
    let store = leader::store::author::Layered::new(
        LateGiveBack { store: memory.clone(), calls: Default::default() },
        memory.clone(),
    );
    let lease = Duration::from_millis(100);
    let options = LeaderElectionOptions::new().lease_time(lease).wait_time(SECOND);
    let elector = LeaderElector::new(store, options).unwrap();
    let result = elector
        .run_if_leader("late", |lease| async move {
            // The late release has landed by now.
            sleep(Duration::from_millis(60)).await;
            let held = memory.state("leader:late").await.unwrap();
            assert!(
                held.leaders.iter().any(|slot| slot.fence == lease.fence()),
                "the slot of fence {} was freed under its holder: {held:?}",
                lease.fence()
            );
            lease.live_fence()
        })
        .await
        .unwrap();
    assert!(matches!(result, LeaderRunResult::Elected(Some(_))), "{result:?}");
}

/// The first acquire's reply arrives after the lease; the first release is answered with a
/// timeout and run by the store 30 ms later.
#[derive(Debug)]
struct LateGiveBack {
    store: MemoryStore,
    calls: std::sync::Mutex<(u32, u32)>,
}

#[async_trait::async_trait]
impl leader::store::author::StoreLayer for LateGiveBack {
    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<leader::store::AcquireOutcome, Error> {
        let first = std::mem::replace(&mut self.calls.lock().unwrap().0, 1) == 0;
        let outcome = inner.acquire(request).await;
        if first {
            sleep(Duration::from_millis(150)).await;
        }
        outcome
    }

    async fn release(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<leader::store::ReleaseOutcome, Error> {
        if std::mem::replace(&mut self.calls.lock().unwrap().1, 1) == 0 {
            let (store, key) = (self.store.clone(), key.to_owned());
            tokio::spawn(async move {
                sleep(Duration::from_millis(30)).await;
                let _ = store.release(&key, token, min_lease_time).await;
            });
            return Err(Error::Timeout {
                store: "memory",
                endpoint: String::new(),
                operation: "release",
                after: Duration::from_millis(10),
            });
        }
        inner.release(key, token, min_lease_time).await
    }
}
