//! A partitions node's events when nobody reads them: a grant handed over before its
//! `Assigned` event was read leaves nothing queued (its event held a handle of the
//! partition, which held the hand-over back), so what waits to be read stays bounded by
//! the partitions however often the set changes.

mod support;

use std::time::Duration;

use leader::{MemoryStore, PartitionEvent, PartitionOptions, Partitions};
use support::eventually;

/// Node `holder` of set `jobs` (64 partitions) whose hand-over grace is as long as its
/// lease (10 s): a hand-over that waits for the grace is plain to see.
async fn node(store: &MemoryStore, holder: &str) -> Partitions {
    let options = PartitionOptions::new()
        .lease_time(Duration::from_secs(10))
        .handover_grace(Duration::from_secs(10))
        .holder_id(holder);
    Partitions::start("jobs", 64, store.clone(), options).await.expect("start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_events_hold_no_hand_over_back_and_stay_bounded() {
    let store = MemoryStore::new();
    // Nobody reads this node's events.
    let mut unread = node(&store, "unread").await;
    eventually(Duration::from_secs(5), "the node owns all 64", || async {
        unread.view().owned.len() == 64
    })
    .await;
    for round in 0..5 {
        let joiner = node(&store, &format!("joiner-{round}")).await;
        // The unread node hands 32 partitions over at once: their unread events held the
        // only handles.
        eventually(Duration::from_secs(3), "the joiner owns its share", || async {
            joiner.view().owned.len() == 32
        })
        .await;
        joiner.stop().await.expect("stop");
        eventually(Duration::from_secs(5), "the node owns all 64 again", || async {
            unread.view().owned.len() == 64
        })
        .await;
        // One `Assigned` per partition it owns: the grants handed over left nothing.
        assert_eq!(unread.pending_events(), 64, "events waiting after round {round}");
    }
    // Read now, they are this node's 64 grants, each live.
    for _ in 0..64 {
        match unread.next_event().await {
            Some(PartitionEvent::Assigned(partition)) => {
                assert!(partition.live_fence().is_some(), "{partition:?} is live")
            }
            other => panic!("expected a live grant, got {other:?}"),
        }
    }
    assert_eq!(unread.pending_events(), 0);
    unread.stop().await.expect("stop");
}

/// A grant whose `Assigned` event was read and then revoked is told as a `Revoked` event;
/// once the node stopped and every event was read, the stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_grant_is_revoked_by_an_event_and_the_stream_ends_after_stop() {
    let store = MemoryStore::new();
    let mut node = node(&store, "reader").await;
    let mut events = node.take_events();
    assert!(node.next_event().await.is_none(), "events taken: the node's own end");
    let mut held = Vec::new();
    while held.len() < 64 {
        match events.next().await {
            Some(PartitionEvent::Assigned(partition)) => held.push(partition.index()),
            other => panic!("expected a grant, got {other:?}"),
        }
    }
    let stopping = tokio::spawn(async move { node.stop().await });
    let mut revoked = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            PartitionEvent::Revoked { index, .. } => revoked.push(index),
            other => panic!("expected a revocation, got {other:?}"),
        }
    }
    stopping.await.expect("join").expect("stop");
    revoked.sort_unstable();
    held.sort_unstable();
    assert_eq!(revoked, held, "each grant read is revoked by an event");
}
