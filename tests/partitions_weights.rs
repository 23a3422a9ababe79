//! Node weights: a node announces its capacity, and shares follow it.

use std::time::Duration;

use leader::{LeaseStore, MemoryStore, PartitionOptions, Partitions};
use tokio::time::{Instant, sleep};

const SECOND: Duration = Duration::from_secs(1);

async fn node(store: &MemoryStore, holder: &str, weight: u32) -> Partitions {
    let options = PartitionOptions::new().lease_time(3 * SECOND).holder_id(holder).weight(weight);
    Partitions::start("weighted", 100, store.clone(), options).await.expect("start")
}

/// Waits (paused time) until the nodes own `expected` partitions each.
async fn until_owned(nodes: &[&Partitions], expected: &[usize]) {
    let deadline = Instant::now() + 30 * SECOND;
    loop {
        let owned: Vec<usize> = nodes.iter().map(|node| node.owned().len()).collect();
        if owned == expected {
            return;
        }
        assert!(Instant::now() < deadline, "owned {owned:?}, expected {expected:?}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// A node of weight 3 beside one of weight 1 owns three quarters of the partitions; a
/// third node of weight 1 joins and the shares become 20, 60, 20. The announcement says
/// the weight (an unweighted node's says what it always did).
#[tokio::test(start_paused = true)]
async fn shares_follow_the_weights_the_nodes_announce() {
    let store = MemoryStore::new();
    let light = node(&store, "light", 1).await;
    let heavy = node(&store, "heavy", 3).await;
    until_owned(&[&light, &heavy], &[25, 75]).await;
    let members = store.state("leader:weighted/members").await.unwrap();
    let mut holders: Vec<&str> = members.leaders.iter().map(|slot| &*slot.holder).collect();
    holders.sort_unstable();
    assert_eq!(holders, ["heavy [100 partitions, weight 3]", "light [100 partitions]"]);

    let other = node(&store, "other", 1).await;
    until_owned(&[&light, &heavy, &other], &[20, 60, 20]).await;
    for node in [&light, &heavy, &other] {
        node.stop().await.expect("stopped");
    }
}

/// A weight out of range is refused at start and by `validate`, naming the value and what
/// is allowed.
#[tokio::test]
async fn a_weight_out_of_range_is_refused() {
    for weight in [0, leader::MAX_WEIGHT + 1] {
        let options = PartitionOptions::new().weight(weight);
        let error = options.validate().unwrap_err().to_string();
        assert_eq!(error, format!("invalid `weight` {weight}: must be between 1 and 1000"));
        let refused = Partitions::start("weighted", 4, MemoryStore::new(), options).await;
        assert_eq!(refused.unwrap_err().to_string(), error);
    }
}
