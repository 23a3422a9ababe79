//! A node whose announcement lapsed (its process paused, its network cut) announces itself
//! again when it comes back. If a node it disagrees with joined meanwhile (one under its
//! holder id, or of another partition count), it would have been refused at start: it
//! stands aside (withdraws its announcement and owns nothing, logging the error) until that
//! node is gone, then takes its place. So does a node whose first announcement, made in its
//! loop after start found the store unreachable, meets its own previous process, dead but
//! not yet expired. Memory store, paused clock; a node reaches the store through a layer
//! that cuts it off.

mod support;

use std::time::Duration;

use leader::{LeaseStore, MemoryStore, PartitionOptions, Partitions};
use support::{Faulty, FaultyStore, eventually};

const LEASE: Duration = Duration::from_secs(3);

fn options(holder: &str) -> PartitionOptions {
    PartitionOptions::new().lease_time(LEASE).holder_id(holder)
}

/// The announcements in the members' group of set `orders`.
async fn announcements(store: &MemoryStore) -> Vec<String> {
    let group = store.state("leader:orders/members").await.unwrap();
    let mut holders: Vec<String> = group.leaders.iter().map(|slot| slot.holder.clone()).collect();
    holders.sort();
    holders
}

/// Starts node `holder` of `count` partitions over `store`, cuts it off for two leases and
/// starts `newcomer` (holder and count) directly on the store meanwhile; then lets the first
/// node back. Both nodes, once the first had time to announce itself again.
async fn come_back_after(
    inner: &MemoryStore,
    (holder, count): (&str, u32),
    (newcomer, newcomer_count): (&str, u32),
) -> (Partitions, Partitions) {
    come_back_failing_reads(inner, (holder, count), (newcomer, newcomer_count), 0).await
}

/// [`come_back_after`], the first `failed_reads` reads of the members after the first node
/// is back failing.
async fn come_back_failing_reads(
    inner: &MemoryStore,
    (holder, count): (&str, u32),
    (newcomer, newcomer_count): (&str, u32),
    failed_reads: usize,
) -> (Partitions, Partitions) {
    let cut = FaultyStore::over(inner.clone());
    let first = Partitions::start("orders", count, cut.clone(), options(holder)).await.unwrap();
    eventually(LEASE, "the first node owns every partition", || async {
        first.view().owned.len() == count as usize
    })
    .await;
    cut.cut_off(true);
    tokio::time::sleep(2 * LEASE).await;
    let left = inner.state("leader:orders/members").await.unwrap();
    assert!(left.leaders.is_empty(), "the cut-off node's announcement lapsed: {left:?}");
    let second = Partitions::start("orders", newcomer_count, inner.clone(), options(newcomer))
        .await
        .expect("the newcomer joins: the first node's announcement had lapsed");
    cut.fail_states(failed_reads);
    cut.cut_off(false);
    tokio::time::sleep(2 * LEASE).await;
    (first, second)
}

#[tokio::test(start_paused = true)]
async fn a_node_back_after_another_took_its_holder_id_stands_aside_until_it_is_gone() {
    let inner = MemoryStore::new();
    let (first, second) = come_back_after(&inner, ("dup", 8), ("dup", 8)).await;
    assert_eq!(announcements(&inner).await, ["dup [8 partitions]"], "one node announces `dup`");
    assert!(first.view().owned.is_empty(), "{:?}", first.view());
    assert_eq!(second.view().owned.len(), 8, "{:?}", second.view());
    // The one that stood aside takes over once the other is gone.
    second.stop().await.unwrap();
    eventually(3 * LEASE, "the node that stood aside owns every partition", || async {
        first.view().owned.len() == 8
    })
    .await;
    first.stop().await.unwrap();
    assert!(announcements(&inner).await.is_empty());
}

/// The read right after the node announced itself again fails: the next read checks.
#[tokio::test(start_paused = true)]
async fn the_check_waits_for_a_read_that_succeeds() {
    let inner = MemoryStore::new();
    let (first, second) = come_back_failing_reads(&inner, ("dup", 8), ("dup", 8), 1).await;
    assert_eq!(announcements(&inner).await, ["dup [8 partitions]"], "one node announces `dup`");
    assert!(first.view().owned.is_empty(), "{:?}", first.view());
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_node_back_after_a_node_of_another_count_joined_stands_aside() {
    let inner = MemoryStore::new();
    let (first, second) = come_back_after(&inner, ("a", 8), ("b", 16)).await;
    assert_eq!(announcements(&inner).await, ["b [16 partitions]"]);
    assert_eq!(second.view().owned.len(), 16, "{:?}", second.view());
    assert!(first.view().owned.is_empty(), "{:?}", first.view());
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}

/// A node restarted under its holder id right after a crash, whose start found the store
/// unreachable (its first announcement's reply lost), announces itself from its loop and
/// meets its dead predecessor's announcement: it waits for it to expire, then owns it all.
#[tokio::test(start_paused = true)]
async fn a_restarted_node_announced_from_its_loop_waits_for_its_dead_predecessor() {
    let inner = MemoryStore::new();
    let crashed = FaultyStore::over(inner.clone());
    let before = Partitions::start("orders", 4, crashed.clone(), options("a")).await.unwrap();
    eventually(LEASE, "the first process owns every partition", || async {
        before.view().owned.len() == 4
    })
    .await;
    crashed.cut_off(true); // a crash, as far as the store can tell
    let restarted = FaultyStore::over(inner.clone());
    restarted.lose_acquire_replies(1);
    let after = Partitions::start("orders", 4, restarted.clone(), options("a"))
        .await
        .expect("a lost reply is no refusal: the node announces itself from its loop");
    eventually(3 * LEASE, "the restarted node owns every partition", || async {
        after.view().owned.len() == 4
    })
    .await;
    assert_eq!(announcements(&inner).await, ["a [4 partitions]"]);
    after.stop().await.unwrap();
    drop(before);
}

/// A node cut off and back with nobody else around announces itself again and goes on.
#[tokio::test(start_paused = true)]
async fn a_node_back_alone_goes_on() {
    let inner = MemoryStore::new();
    let cut = FaultyStore::over(inner.clone());
    let node = Partitions::start("orders", 4, cut.clone(), options("a")).await.unwrap();
    cut.cut_off(true);
    tokio::time::sleep(2 * LEASE).await;
    cut.cut_off(false);
    eventually(2 * LEASE, "the node owns every partition again", || async {
        node.view().owned.len() == 4
    })
    .await;
    assert_eq!(announcements(&inner).await, ["a [4 partitions]"]);
    node.stop().await.unwrap();
}
