//! `--partitions-cpu`: what one node costs this process as it takes many partitions on the
//! bench's Redis server: for 5,000, 10,000 and 20,000 partitions, the time until it owns
//! them all and the process's CPU seconds until then (the node's loop, the client and the
//! runtime; Redis runs in its own process).

use std::time::Duration;

use leader::{PartitionEvent, PartitionOptions, Partitions, RedisStore};
use tokio::time::Instant;

use crate::server::Server;

/// The partition counts measured.
const COUNTS: [u32; 3] = [5_000, 10_000, 20_000];

pub async fn run(server: &Server, say: &dyn Fn(String)) {
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    for count in COUNTS {
        server.cli(&["FLUSHALL"]);
        let (cpu_before, started) = (crate::stats::own_cpu_seconds(), Instant::now());
        let options = PartitionOptions::new().lease_time(Duration::from_secs(30));
        let name = format!("cpu{count}");
        let mut node =
            Partitions::start(&name, count, store.clone(), options).await.expect("start");
        let mut assigned = 0;
        let mut handles = Vec::with_capacity(count as usize);
        while assigned < count {
            match node.next_event().await {
                Some(PartitionEvent::Assigned(partition)) => {
                    assigned += 1;
                    handles.push(partition);
                }
                Some(_) => {}
                None => panic!("the node's events ended after {assigned} of {count}"),
            }
        }
        let (took, cpu) = (started.elapsed(), crate::stats::own_cpu_seconds() - cpu_before);
        say(format!(
            "one node taking {count} partitions on Redis: all owned after {took:.1?}, {cpu:.2} s of this process's CPU"
        ));
        drop(handles);
        node.stop().await.expect("stop");
    }
}
