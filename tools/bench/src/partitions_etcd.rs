//! `--partitions-etcd`: partition leases on a three-member etcd cluster (loopback, 50 ms
//! heartbeat), where a node's slots share one session lease.
//!
//! - Rebalancing, twice: 9 nodes hold 1,000 partitions, a tenth joins: how long until every
//!   node owns its 100 (each node off its cap reads the 1,000 holders first).
//! - Nodes: 10,000 partitions over 10 nodes in this process: the gRPC messages the members
//!   received per renewal period once balanced (every call the nodes made: keep-alives,
//!   reads of slot keys, member reads), per 100 partitions.
//! - Batched renewal beside one renewal per lease, in the same run (A B A B): 10,000 slots
//!   granted in one session and renewed with `renew_many`, and 10,000 granted alone (a lease
//!   each) renewed one call each: wall time and messages per pass.

use std::num::NonZeroU32;
use std::time::Duration;

use leader::store::author::HeldSlot;
use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{EtcdStore, LeaseStore, LeaseToken};
use leader_testkit::etcd::EtcdCluster;
use tokio::time::Instant;

use crate::partitions::balanced_fleet;

/// gRPC messages the members received, in all.
fn messages(cluster: &EtcdCluster) -> f64 {
    cluster.members.iter().map(|m| m.metric("grpc_server_msg_received_total").unwrap_or(0.0)).sum()
}

pub async fn run(say: &dyn Fn(String)) {
    let cluster = EtcdCluster::start(3).await;
    let store = EtcdStore::connect(&cluster.url()).await.expect("connect");
    for _ in 0..2 {
        crate::partitions::rebalance(&store, say).await;
    }
    let (count, nodes_count) = (10_000u32, 10);
    let lease = Duration::from_secs(6);
    let renew_interval = lease / 3;
    let within = Duration::from_secs(180);
    let what = "partitions on etcd";
    let nodes = balanced_fleet(&store, count, nodes_count, lease, within, what, say).await;
    tokio::time::sleep(renew_interval * 2).await;
    let periods = 3;
    let before = messages(&cluster);
    tokio::time::sleep(renew_interval * periods).await;
    let per_period = (messages(&cluster) - before) / periods as f64;
    say(format!(
        "  gRPC messages per renewal period: {per_period:.0} in all, i.e. {:.2} per 100 partitions",
        per_period / (count as f64 / 100.0)
    ));
    for node in nodes {
        node.stop().await.expect("stop");
    }

    // The same number of slots in one session and each on its own lease, A B A B (a lease
    // long enough for every grant to be made before the first renewal).
    let lease = Duration::from_secs(60);
    let session = LeaseToken::generate().unwrap();
    let shared = granted(&store, "shared", count as usize, lease, Some(session)).await;
    let alone = granted(&store, "alone", count as usize, lease, None).await;
    for round in 0..2 {
        for in_session in [true, false] {
            let slots = if in_session { &shared } else { &alone };
            let held: Vec<HeldSlot<'_>> =
                slots.iter().map(|(key, token)| HeldSlot::new(key, *token)).collect();
            let (before, started) = (messages(&cluster), Instant::now());
            let answers = store.renew_many(&held, lease).await.expect("renew_many");
            let took = started.elapsed();
            assert_eq!(answers.len(), held.len());
            say(format!(
                "  round {round}: {count} slots renewed {}: {took:.1?}, {:.0} gRPC messages",
                if in_session {
                    "on one session lease (renew_many)"
                } else {
                    "on a lease each (renew_many: one renewal per lease)"
                },
                messages(&cluster) - before
            ));
        }
    }
}

/// `count` slots of groups `{prefix}/{i}`, granted for `lease` (in `session`, if given):
/// their keys and tokens.
async fn granted(
    store: &EtcdStore,
    prefix: &str,
    count: usize,
    lease: Duration,
    session: Option<LeaseToken>,
) -> Vec<(String, LeaseToken)> {
    let slots: Vec<(String, LeaseToken)> =
        (0..count).map(|i| (format!("{prefix}/{i}"), LeaseToken::generate().unwrap())).collect();
    for part in slots.chunks(64) {
        let grants: Vec<_> = part
            .iter()
            .map(|(key, token)| {
                let request = AcquireRequest::new(key, NonZeroU32::MIN, *token, "bench", lease);
                store.acquire(match session {
                    Some(session) => request.in_session(session),
                    None => request,
                })
            })
            .collect();
        for outcome in futures_util::future::try_join_all(grants).await.expect("acquire") {
            assert!(matches!(outcome, AcquireOutcome::Granted(_)), "{outcome:?}");
        }
    }
    slots
}
