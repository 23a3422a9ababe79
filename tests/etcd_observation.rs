//! Observers of etcd groups, in stores of their own (as in processes of their own): a
//! takeover's lock-delay (a pending slot) and a size written are no change, so each report
//! differs from the one before it.
#![cfg(feature = "etcd")]

mod support;

use std::time::Duration;

use leader::store::SharedStore;
use leader::{GroupObserver, LeaseStore};
use support::observing::{KEY, holders, next, stores, take};
use support::{granted_fence, request_for, token};

const SECOND: Duration = Duration::from_secs(1);

/// On etcd a takeover waits out a lock-delay, shown as a pending slot: no change of the
/// holders, so observers are not woken by it. Through a crashed holder's expiry and a
/// takeover, each `changed()` reports other holders than the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeovers_lock_delay_is_no_change_to_observers_on_etcd() {
    let (holding, server) = support::etcd_store::solo().await;
    let observing = leader::store::connect(&server.url()).await.unwrap();
    let taking = leader::store::connect(&server.url()).await.unwrap();
    let keys = leader::KeyOptions::new().exact_key(KEY);
    let mut observer = GroupObserver::start_with_keys(&observing, "delayed", &keys).await.unwrap();
    let holding: SharedStore = std::sync::Arc::new(holding);
    let crashed = take(&holding, "crashed", token(), 2 * SECOND).await;
    let successor = tokio::spawn(async move {
        let held = token();
        loop {
            let mut request = request_for(KEY, 1, held, 2 * SECOND);
            request.holder = "successor";
            if let leader::store::AcquireOutcome::Granted(grant) =
                taking.acquire(request).await.unwrap()
            {
                return grant.fence;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut reported = vec![next(&mut observer).await];
    while reported.last().unwrap().first().is_none_or(|(holder, _)| holder != "successor") {
        reported.push(next(&mut observer).await);
    }
    let fence = successor.await.unwrap();
    let expected =
        [vec![("crashed".to_owned(), crashed)], vec![], vec![("successor".to_owned(), fence)]];
    assert_eq!(reported, expected, "each report a change of the holders");
}

/// A group of 3 slots on etcd through grants, a hand-over, a killed holder and its
/// takeover (which waits out a lock-delay), watched by two observers in stores of their
/// own: each report differs from the one before it (a renewal, a marker, a pending slot or
/// a size written is no change), and both end on the same holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_of_three_slots_on_etcd_report_only_changes() {
    let server = support::etcd::EtcdServer::start();
    let url = server.url();
    let keys = leader::KeyOptions::new().exact_key(KEY);
    let [first_observing, second_observing, holding] = stores(&url).await;
    // Each observer reports as the changes come, in a task of its own.
    let mut watching = Vec::new();
    for observing in [&first_observing, &second_observing] {
        let mut observer = GroupObserver::start_with_keys(observing, "three", &keys).await.unwrap();
        watching.push(tokio::spawn(async move {
            let mut reports = vec![holders(&observer.current())];
            let done = |names: &[(String, u64)]| {
                let mut names: Vec<&str> =
                    names.iter().map(|(holder, _)| holder.as_str()).collect();
                names.sort();
                names == ["handed", "stays", "taker"]
            };
            while !done(reports.last().unwrap()) {
                reports.push(next(&mut observer).await);
            }
            reports
        }));
    }
    let slot = |holder: &'static str, lease: Duration| {
        let mut request = request_for(KEY, 3, token(), lease);
        request.holder = holder;
        request
    };
    let released = token();
    let mut request = slot("released", 10 * SECOND);
    request.token = released;
    granted_fence(holding.acquire(request).await.unwrap());
    granted_fence(holding.acquire(slot("stays", 10 * SECOND)).await.unwrap());
    let killed = leader::store::connect(&url).await.unwrap();
    granted_fence(killed.acquire(slot("killed", 2 * SECOND)).await.unwrap());
    holding.release(KEY, released, Duration::ZERO).await.unwrap();
    granted_fence(holding.acquire(slot("handed", 10 * SECOND)).await.unwrap());
    drop(killed); // its slot runs out unrenewed, and a takeover waits the lock-delay
    let taking = leader::store::connect(&url).await.unwrap();
    loop {
        match taking.acquire(slot("taker", 10 * SECOND)).await.unwrap() {
            leader::store::AcquireOutcome::Granted(_) => break,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    for watched in watching {
        let reports = watched.await.unwrap();
        for pair in reports.windows(2) {
            assert_ne!(pair[0], pair[1], "a report without a change: {reports:?}");
        }
        // The first read, three grants, a release, a grant, an expiry, a takeover: changes
        // that come close together may be read as one.
        assert!(reports.len() >= 4, "{reports:?}");
    }
}
