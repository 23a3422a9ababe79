//! The memory store's own rules: forgetting idle groups, waking waiters.

use super::*;

fn request(key: &str, token: LeaseToken, lease_time: Duration) -> AcquireRequest<'_> {
    AcquireRequest::new(key, std::num::NonZeroU32::MIN, token, "test", lease_time)
}

#[tokio::test(start_paused = true)]
async fn groups_nobody_uses_are_forgotten_and_fences_keep_increasing() {
    let store = MemoryStore::new();
    let mut last_fence = 0;
    for i in 0..100_000 {
        let key = format!("report-tenant-{i}");
        let token = LeaseToken::generate().unwrap();
        let AcquireOutcome::Granted(grant) =
            store.acquire(request(&key, token, Duration::from_secs(10))).await.unwrap()
        else {
            panic!("a new group is free");
        };
        assert!(grant.fence > last_fence, "fences keep increasing");
        last_fence = grant.fence;
        let waiter = store.watch_releases(&key).await.unwrap();
        store.release(&key, token, Duration::ZERO).await.unwrap();
        drop(waiter);
    }
    assert_eq!(store.group_count(), 0, "released groups without waiters are forgotten");

    // The same name again: a higher fence than it had.
    let token = LeaseToken::generate().unwrap();
    let again = store.acquire(request("report-tenant-0", token, Duration::from_secs(1))).await;
    let AcquireOutcome::Granted(grant) = again.unwrap() else { panic!("free") };
    assert!(grant.fence > last_fence);

    // Holders that crash (never release) are forgotten once their slots expired and the
    // store sees new names.
    for i in 0..10_000 {
        let key = format!("crashed-{i}");
        let token = LeaseToken::generate().unwrap();
        store.acquire(request(&key, token, Duration::from_millis(100))).await.unwrap();
    }
    tokio::time::advance(SWEEP_AFTER).await;
    for i in 0..1_000 {
        let key = format!("fresh-{i}");
        let token = LeaseToken::generate().unwrap();
        store.acquire(request(&key, token, Duration::from_secs(60))).await.unwrap();
    }
    assert!(store.group_count() <= 2_000, "{} groups kept", store.group_count());
    assert!(store.group_count() >= 1_000, "live groups are kept");
}

#[tokio::test(start_paused = true)]
async fn a_release_that_empties_the_group_forgets_it_and_still_wakes_its_waiters() {
    let store = MemoryStore::new();
    let token = LeaseToken::generate().unwrap();
    store.acquire(request("busy", token, Duration::from_secs(10))).await.unwrap();
    let mut waiter = store.watch_releases("busy").await.unwrap();
    let mut observer = store.watch_changes("busy").await.unwrap();
    store.release("busy", token, Duration::ZERO).await.unwrap();
    assert_eq!(store.group_count(), 0, "the waiters' signals are kept apart from the slots");
    tokio::time::timeout(Duration::from_secs(1), waiter.woken()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), observer.woken()).await.unwrap();
    // A grant in the forgotten group wakes the observer too.
    store.acquire(request("busy", token, Duration::from_secs(10))).await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), observer.woken()).await.unwrap();
}
