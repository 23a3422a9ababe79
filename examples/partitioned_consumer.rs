//! Four consumers share 64 partitions (think of a topic's partitions, or tenants): each owns
//! 16, works on each under its fence, and stops when told. One consumer is killed (its
//! runtime shut down under it: its tasks are gone, nothing is handed over or released, as
//! in a crash): once its leases end, the others own all 64. Restarted, it gets 16 back from
//! them, handed over gracefully.
//!
//! ```text
//! cargo run --example partitioned_consumer                          # in-memory store
//! cargo run --example partitioned_consumer -- redis://127.0.0.1:6379
//! cargo run --example partitioned_consumer -- postgres://postgres@127.0.0.1:5432/test
//! ```

mod common;

use std::time::Duration;

use leader::store::SharedStore;
use leader::{Partition, PartitionEvent, PartitionOptions, Partitions};
use tokio::runtime::Runtime;
use tokio::time::Instant;

const PARTITIONS: u32 = 64;
const LEASE: Duration = Duration::from_secs(3);

/// The work on one partition: a record every 100 ms, each under the partition's fence,
/// until the partition is handed over or lost; then the handle is dropped, which lets a
/// hand-over complete at once.
async fn consume(partition: Partition) {
    let mut records = 0u64;
    loop {
        tokio::select! {
            () = partition.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        // The check right before each write: the fence while the partition is ours.
        let Some(_fence) = partition.live_fence() else { break };
        records += 1; // a write to a downstream store would carry `_fence`
    }
    let _ = records;
}

/// A consumer: a node of the set, whose events start and end the work on each partition.
async fn consumer(store: SharedStore, name: &str) -> Partitions {
    let options = PartitionOptions::new().lease_time(LEASE).holder_id(name);
    let mut node = Partitions::start("orders", PARTITIONS, store, options).await.expect("start");
    let mut events = node.take_events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let PartitionEvent::Assigned(partition) = event {
                tokio::spawn(consume(partition));
            }
        }
    });
    node
}

/// A consumer on a runtime of its own, so that dropping the runtime kills it like a crash.
fn start_in_own_runtime(store: &SharedStore, name: &'static str) -> (Runtime, Partitions) {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let node = runtime.block_on(consumer(store.clone(), name));
    (runtime, node)
}

/// Prints how many partitions each consumer owns once `nodes` own all of them, evenly.
async fn until_balanced(nodes: &[(&str, &Partitions)], since: Instant, what: &str) {
    loop {
        let owned: Vec<usize> = nodes.iter().map(|(_, node)| node.view().owned.len()).collect();
        let even = PARTITIONS as usize / nodes.len();
        if owned.iter().all(|&n| n == even || n == even + 1)
            && owned.iter().sum::<usize>() == PARTITIONS as usize
        {
            let table: Vec<String> =
                nodes.iter().zip(&owned).map(|((name, _), n)| format!("{name} {n}")).collect();
            println!("{what}: {} ({:.2?})", table.join(", "), since.elapsed());
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn main() {
    let main = Runtime::new().unwrap();
    let url = common::Args::parse("partitioned_consumer", &[]).url;
    let store = main.block_on(common::connect(&url));
    println!("{PARTITIONS} partitions on {}, lease {LEASE:?}", leader::store::redact_url(&url));

    let started = Instant::now();
    let a = main.block_on(consumer(store.clone(), "a"));
    let b = main.block_on(consumer(store.clone(), "b"));
    let d = main.block_on(consumer(store.clone(), "d"));
    let (c_runtime, c) = start_in_own_runtime(&store, "c");
    main.block_on(until_balanced(
        &[("a", &a), ("b", &b), ("c", &c), ("d", &d)],
        started,
        "four started",
    ));

    let killed = Instant::now();
    // Its runtime first: its tasks are dropped, never run again; then the handle, whose
    // drop would start a graceful stop, finds no task to stop.
    c_runtime.shutdown_background();
    drop(c);
    main.block_on(until_balanced(
        &[("a", &a), ("b", &b), ("d", &d)],
        killed,
        "c killed, its leases ran out",
    ));

    let restarted = Instant::now();
    let (_c_runtime, c) = start_in_own_runtime(&store, "c");
    main.block_on(until_balanced(
        &[("a", &a), ("b", &b), ("c", &c), ("d", &d)],
        restarted,
        "c restarted",
    ));

    main.block_on(async {
        for node in [a, b, c, d] {
            node.stop().await.expect("a graceful stop");
        }
    });
    println!("all stopped: every partition handed back");
}
