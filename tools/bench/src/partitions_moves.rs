//! `--partitions-moves`: how many partitions change hands when a node joins, leaves, and
//! when every node restarts one after another, beside the minimum, on the memory store
//! (the assignment is the same on every store; nodes in this process, real hand-overs).
//!
//! A move is a grant of a partition to another node than the one granted it last (an
//! `Assigned` event; a grant again to the same node, after a lapse, is none) once the set
//! was balanced: the minimum for a join is the joiner's share, for a leave the leaver's, and
//! for a rolling restart (each node stopped gracefully and started again under its holder
//! id once the others are balanced, before the next goes) two per partition: off its node
//! and back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::{MemoryStore, PartitionEvent, PartitionOptions, Partitions};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(2);
const WITHIN: Duration = Duration::from_secs(60);

/// By partition: how many times it moved, and the node granted it last.
type Grants = Arc<Mutex<Vec<(u32, Option<usize>)>>>;

pub async fn run(say: &dyn Fn(String)) {
    for (count, nodes) in [(64, 4), (1_000, 9), (1_000, 19), (4_096, 9)] {
        moves(count, nodes, say).await;
    }
}

async fn moves(count: u32, nodes_count: usize, say: &dyn Fn(String)) {
    let store = MemoryStore::new();
    let grants: Grants = Arc::new(Mutex::new(vec![(0, None); count as usize]));
    let name = format!("moves-{count}-{nodes_count}");
    let start = |i: usize| node(&store, &name, count, i, Arc::clone(&grants));
    let mut nodes = Vec::new();
    for i in 0..nodes_count {
        nodes.push(start(i).await);
    }
    balanced(&nodes, count).await;

    let before = total(&grants);
    nodes.push(start(nodes_count).await);
    balanced(&nodes, count).await;
    let share = nodes[nodes_count].view().owned.len();
    let join = total(&grants) - before;

    let before = total(&grants);
    let leaver = nodes.pop().expect("the joiner");
    leaver.stop().await.expect("stopped");
    balanced(&nodes, count).await;
    let leave = total(&grants) - before;

    let per_partition_before = moves_by_partition(&grants);
    let rolling_started = Instant::now();
    for i in 0..nodes.len() {
        nodes[i].stop().await.expect("stopped");
        let others: Vec<&Partitions> =
            nodes.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, node)| node).collect();
        balanced_refs(&others, count).await;
        nodes[i] = start(i).await;
        balanced(&nodes, count).await;
    }
    let per_partition: Vec<u32> = moves_by_partition(&grants)
        .iter()
        .zip(&per_partition_before)
        .map(|(after, before)| after - before)
        .collect();
    let rolling: u32 = per_partition.iter().sum();
    let most = per_partition.iter().max().copied().unwrap_or(0);
    let beyond_two = per_partition.iter().filter(|&&moves| moves > 2).count();
    say(format!(
        "partition moves, {count} partitions: a join of 1 to {nodes_count}: {join} (minimum {share}, bound share + members {}); a leave: {leave} (minimum {share}); a rolling restart of {nodes_count}: {rolling} (minimum {}), at most {most} for one partition, {beyond_two} partitions moved more than twice ({:.1?})",
        share + nodes_count + 1,
        2 * count,
        rolling_started.elapsed()
    ));
    for node in &nodes {
        node.stop().await.expect("stopped");
    }
}

/// A node whose events a task consumes, counting each grant and dropping each partition
/// once its work must stop.
async fn node(
    store: &MemoryStore,
    name: &str,
    count: u32,
    id: usize,
    grants: Grants,
) -> Partitions {
    let options = PartitionOptions::new().lease_time(LEASE).holder_id(format!("node-{id}"));
    let mut node = Partitions::start(name, count, store.clone(), options).await.expect("start");
    let mut events = node.take_events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let PartitionEvent::Assigned(partition) = event {
                let (moves, last) = &mut grants.lock().unwrap()[partition.index() as usize];
                if *last != Some(id) {
                    *moves += 1;
                    *last = Some(id);
                }
                tokio::spawn(async move { partition.cancelled().await });
            }
        }
    });
    node
}

fn moves_by_partition(grants: &Grants) -> Vec<u32> {
    grants.lock().unwrap().iter().map(|(moves, _)| *moves).collect()
}

fn total(grants: &Grants) -> u32 {
    moves_by_partition(grants).iter().sum()
}

async fn balanced(nodes: &[Partitions], count: u32) {
    balanced_refs(&nodes.iter().collect::<Vec<_>>(), count).await;
}

/// Waits until the nodes own every partition once, each its floor or ceiling of the count,
/// and agree on the members.
async fn balanced_refs(nodes: &[&Partitions], count: u32) {
    let started = Instant::now();
    let n = nodes.len();
    loop {
        let views: Vec<_> = nodes.iter().map(|node| node.view()).collect();
        let owned: Vec<usize> = views.iter().map(|view| view.owned.len()).collect();
        let (floor, ceil) = (count as usize / n, (count as usize).div_ceil(n));
        if views.iter().all(|view| view.members == n)
            && owned.iter().sum::<usize>() == count as usize
            && owned.iter().all(|o| (floor..=ceil).contains(o))
        {
            return;
        }
        assert!(started.elapsed() < WITHIN, "not balanced within {WITHIN:?}: {owned:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
