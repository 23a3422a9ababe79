//! What a reader sees: a group's state, and an observer's changes (grants, releases,
//! expiries), read once for many observers and never while the group is idle.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use leader_core::{
    KeyOptions, LeaderGroupElectionOptions, LeaderGroupElector, LeaderGroupState, LeaseStore,
};
use tokio::time::{sleep, timeout};

use super::{LIVE, counting, granted, lease, live, token};

/// The rule: State reports live slots, on `key` of `store`.
pub async fn state_reports_live_slots<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let empty = store.state(key).await.unwrap();
    assert_eq!((empty.max_leaders, empty.leaders.len()), (None, 0));
    for holder in ["a", "b"] {
        let mut request = live(key, 2, token());
        request.holder = holder;
        granted(store, request).await;
    }
    let state = store.state(key).await.unwrap();
    assert_eq!(state.max_leaders, Some(2));
    let holders: Vec<&str> = state.leaders.iter().map(|slot| slot.holder.as_str()).collect();
    assert_eq!(holders, ["a", "b"]);
    assert!(state.leaders[0].fence < state.leaders[1].fence);
    assert!(
        state
            .leaders
            .iter()
            .all(|slot| slot.expires_in <= LIVE && slot.expires_in > Duration::ZERO)
    );
}

/// The rule: A batch read answers each group as a read would, on `key` of `store` (three
/// groups numbered after it: two slots, none, one).
pub async fn a_batch_read_answers_each_group_as_a_read_would<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let keys = [format!("{key}-0"), format!("{key}-1"), format!("{key}-2")];
    for (group, holders) in [(&keys[0], &["a", "b"][..]), (&keys[2], &["c"][..])] {
        for holder in holders {
            let mut request = live(group, 2, token());
            request.holder = holder;
            granted(store, request).await;
        }
    }
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    let batch = store.state_many(&names).await.unwrap();
    assert_eq!(batch.len(), 3, "one answer per group: {batch:?}");
    for (group, read) in keys.iter().zip(&batch) {
        let alone = store.state(group).await.unwrap();
        let slots = |state: &leader_core::store::GroupSnapshot| -> Vec<(String, u64)> {
            state.leaders.iter().map(|slot| (slot.holder.clone(), slot.fence)).collect()
        };
        assert_eq!(slots(read), slots(&alone), "{group}");
        assert_eq!(read.max_leaders, alone.max_leaders, "{group}");
        assert!(read.leaders.iter().all(|slot| slot.expires_in <= LIVE), "{group}: {read:?}");
    }
    let holders: Vec<usize> = batch.iter().map(|state| state.leaders.len()).collect();
    assert_eq!(holders, [2, 0, 1]);
    assert!(store.state_many(&[]).await.unwrap().is_empty());
}

/// An elector over `store` whose every name is the store key `key`, for observers.
fn elector_on<S: LeaseStore + Clone + 'static>(store: &S, key: &str) -> LeaderGroupElector {
    let options = LeaderGroupElectionOptions::new(2).keys(KeyOptions::new().exact_key(key));
    LeaderGroupElector::new(store.clone(), options).unwrap()
}

/// The observer's next change, within 5 s.
async fn next_change(observer: &mut leader_core::GroupObserver) -> LeaderGroupState {
    timeout(Duration::from_secs(5), observer.changed()).await.expect("a change").unwrap()
}

fn holders(state: &LeaderGroupState) -> Vec<(&str, u64)> {
    state.leaders.iter().map(|slot| (slot.holder.as_str(), slot.fence)).collect()
}

/// The rule: An observer sees grants releases and expiries, on `key` of `store`.
pub async fn an_observer_sees_grants_releases_and_expiries<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let mut observer = elector_on(store, key).observe("observed").await.unwrap();
    let before = observer.current();
    assert!(before.is_empty() && before.max_leaders.is_none(), "an unknown group: {before:?}");
    let (first, second) = (token(), token());
    let mut grant = live(key, 2, first);
    grant.holder = "10.0.0.1:80";
    let fence = granted(store, grant).await.fence;
    let state = next_change(&mut observer).await;
    assert_eq!(holders(&state), [("10.0.0.1:80", fence)], "{state:?}");
    assert_eq!(holders(&observer.current()), [("10.0.0.1:80", fence)]);
    // A grant taken with a long lease and renewed shorter: the observer sees it expire at
    // the shorter time, long before the lease it was granted with.
    let mut long = live(key, 2, second);
    long.holder = "10.0.0.2:80";
    let later = granted(store, long).await.fence;
    let state = next_change(&mut observer).await;
    assert_eq!(holders(&state), [("10.0.0.1:80", fence), ("10.0.0.2:80", later)]);
    store.release(key, first, Duration::ZERO).await.unwrap();
    let state = next_change(&mut observer).await;
    assert_eq!(holders(&state), [("10.0.0.2:80", later)], "after the release");
    store.renew(key, second, lease()).await.unwrap();
    let renewed_at = tokio::time::Instant::now();
    let state = next_change(&mut observer).await;
    assert!(state.is_empty(), "the holder that stopped renewing expired: {state:?}");
    assert!(renewed_at.elapsed() >= lease() - Duration::from_millis(5), "seen before it expired");
}

/// The rule: An observer of an idle group reads nothing, on `key` of `store`.
pub async fn an_observer_of_an_idle_group_reads_nothing<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let counting = counting(store.clone());
    let elector = elector_on(&counting, key);
    let mut observers = Vec::new();
    for _ in 0..100 {
        observers.push(elector.observe("idle").await.unwrap());
    }
    assert_eq!(counting.layer().reads.load(SeqCst), 1, "100 observers of one store share one read");
    sleep(Duration::from_millis(500)).await;
    assert_eq!(counting.layer().reads.load(SeqCst), 1, "an idle group is never read again");
    // One change: one read, whatever the number of observers.
    granted(store, live(key, 2, token())).await;
    for observer in &mut observers {
        assert_eq!(next_change(observer).await.active_count, 1);
    }
    assert_eq!(counting.layer().reads.load(SeqCst), 2, "one read for the grant");
}
