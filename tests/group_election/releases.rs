//! Giving a slot back: kept for the minimum lease, released after a panic, a dropped future,
//! a lost reply or a guard dropped outside its runtime, and a late give-back never freeing the
//! next grant.

use std::time::Duration;

use leader::{
    Error, LeaderElectionOptions, LeaderElector, LeaderGroupElectionOptions, LeaderRunResult,
    LeaseStore, LeaseToken, MemoryStore, store::AcquireRequest,
};
use tokio::time::{Instant, sleep};

use super::{SECOND, group};
use crate::support::{Faulty, FaultyStore, eventually};

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
