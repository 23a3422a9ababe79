//! What moves when a node joins or leaves: only the share that must change hands.

use std::collections::BTreeSet;

use leader::MemoryStore;
use tokio::time::Instant;

use super::{Log, Partitions, Seen, balanced, node};
use crate::support::eventually;
use std::time::Duration;

/// The partitions granted since `since`, by node.
fn granted_since(log: &Log, since: Instant) -> Vec<(String, u32)> {
    let log = log.lock().unwrap();
    let granted = log.iter().filter(|(at, _, _)| *at >= since);
    granted
        .filter_map(|(_, holder, seen)| match seen {
            Seen::Assigned { index, .. } => Some((holder.clone(), *index)),
            Seen::Revoked { .. } => None,
        })
        .collect()
}

/// A join moves the joiner's share to it and nothing else; a leave moves the leaver's
/// partitions and nothing else (64 partitions over 4 nodes, then 5, then 4 again).
#[tokio::test(start_paused = true)]
async fn a_join_and_a_leave_move_only_the_share_that_changes_hands() {
    let (store, log, lease) = (MemoryStore::new(), Log::default(), Duration::from_secs(3));
    let mut nodes = Vec::new();
    for holder in ["a", "b", "c", "d"] {
        nodes.push(node("moves", 64, store.clone(), holder, lease, &log).await);
    }
    let all_balanced = |nodes: &[Partitions]| {
        let refs: Vec<&Partitions> = nodes.iter().collect();
        balanced(&refs, 64) && nodes.iter().all(|node| node.view().members == nodes.len())
    };
    eventually(10 * lease, "four balanced", || async { all_balanced(&nodes) }).await;
    sleep_a_lease(lease).await;

    let joined = Instant::now();
    nodes.push(node("moves", 64, store.clone(), "e", lease, &log).await);
    eventually(10 * lease, "five balanced", || async { all_balanced(&nodes) }).await;
    sleep_a_lease(lease).await;
    let moved = granted_since(&log, joined);
    let share: BTreeSet<u32> = nodes[4].view().owned.into_iter().collect();
    assert!(moved.iter().all(|(holder, _)| holder == "e"), "a join moved to others: {moved:?}");
    assert_eq!(moved.len(), share.len(), "a join moved more than the joiner's share: {moved:?}");

    let left = Instant::now();
    let leaver: BTreeSet<u32> = nodes[0].view().owned.into_iter().collect();
    nodes.remove(0).stop().await.unwrap();
    eventually(10 * lease, "four balanced again", || async { all_balanced(&nodes) }).await;
    sleep_a_lease(lease).await;
    let moved = granted_since(&log, left);
    let indexes: BTreeSet<u32> = moved.iter().map(|(_, index)| *index).collect();
    assert_eq!(indexes, leaver, "a leave moved others than the leaver's partitions: {moved:?}");
    assert_eq!(moved.len(), leaver.len(), "a partition of the leaver moved twice: {moved:?}");
    for node in nodes {
        node.stop().await.unwrap();
    }
}

/// Long enough for a late move to show.
async fn sleep_a_lease(lease: Duration) {
    tokio::time::sleep(lease).await;
}
