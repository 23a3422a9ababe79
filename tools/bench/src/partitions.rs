//! `--partitions`: partition leases at fleet scale, on the bench's Redis server.
//!
//! - Batched renewal: 10,000 partitions over 10 nodes in this process: the round trips the
//!   nodes make per renewal period once balanced (the client commands the server counted
//!   over several periods), beside the same 10,000 slots renewed one call each, in the same
//!   run (A B A B: wall time, round trips and Redis CPU of one pass each way).
//! - One Redis core's load: 1,000,000 partition leases, each granted, then renewed in the
//!   batches a node sends (`renew_many`): the server's CPU for one pass (its share of a core
//!   at one pass every 10 s) and its memory per lease, both measured here.
//! - Rebalancing: 9 nodes hold 1,000 partitions, a tenth joins: how long until every node
//!   owns its 100 (the target: within two leases).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use leader::store::author::{HeldSlot, RENEW_BATCH_LEN};
use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{LeaseStore, LeaseToken, PartitionEvent, PartitionOptions, Partitions, RedisStore};
use tokio::time::Instant;

use crate::server::Server;

/// Only the one-core figures, for `leases` leases (`--partitions-core N`).
pub async fn core_only(server: &Server, leases: usize, say: &dyn Fn(String)) {
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    one_core(server, &store, leases, say).await;
}

/// Only the batched-renewal figures (`--partitions-renewal`).
pub async fn renewal_only(server: &Server, say: &dyn Fn(String)) {
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    batched_renewal(server, &store, say).await;
}

pub async fn run(server: &Server, quick: bool, say: &dyn Fn(String)) {
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    batched_renewal(server, &store, say).await;
    server.cli(&["FLUSHALL"]);
    let leases = if quick { 100_000 } else { 1_000_000 };
    one_core(server, &store, leases, say).await;
    server.cli(&["FLUSHALL"]);
    rebalance(&store, say).await;
    server.cli(&["FLUSHALL"]);
}

/// Only the rebalancing figures (`--partitions-rebalance`), twice.
pub async fn rebalance_only(server: &Server, say: &dyn Fn(String)) {
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    for _ in 0..2 {
        rebalance(&store, say).await;
        server.cli(&["FLUSHALL"]);
    }
}

/// A node of set `name` whose events a task consumes, dropping each partition once its
/// work must stop.
pub(crate) async fn node<S: LeaseStore + Clone + 'static>(
    store: &S,
    name: &str,
    count: u32,
    lease: Duration,
    holder: String,
) -> Partitions {
    let options = PartitionOptions::new().lease_time(lease).holder_id(holder);
    let mut node = Partitions::start(name, count, store.clone(), options).await.expect("start");
    let mut events = node.take_events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let PartitionEvent::Assigned(partition) = event {
                tokio::spawn(async move { partition.cancelled().await });
            }
        }
    });
    node
}

/// `nodes_count` nodes of set "fleet" of `count` partitions in this process, started one
/// after another and balanced (within `within`); says how long that took, led by `what`.
pub(crate) async fn balanced_fleet<S: LeaseStore + Clone + 'static>(
    store: &S,
    count: u32,
    nodes_count: u32,
    lease: Duration,
    within: Duration,
    what: &str,
    say: &dyn Fn(String),
) -> Vec<Partitions> {
    let started = Instant::now();
    let mut nodes = Vec::new();
    for i in 0..nodes_count {
        nodes.push(node(store, "fleet", count, lease, format!("node-{i}")).await);
    }
    let took = until_balanced(&nodes, count, within).await;
    say(format!(
        "{what}: {count} over {nodes_count} nodes in one process, lease {lease:?} (renewal every {:?}): balanced {took:.1?} after the first start ({:.1?} in all)",
        lease / 3,
        started.elapsed()
    ));
    nodes
}

/// Waits until each node owns its share of `count` (and every partition is owned); how long
/// it took.
async fn until_balanced(nodes: &[Partitions], count: u32, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let owned: Vec<usize> = nodes.iter().map(|node| node.view().owned.len()).collect();
        let n = nodes.len() as u32;
        let (floor, ceil) = ((count / n) as usize, count.div_ceil(n) as usize);
        if owned.iter().sum::<usize>() == count as usize
            && owned.iter().all(|o| (floor..=ceil).contains(o))
        {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "not balanced within {within:?}: {owned:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn batched_renewal(server: &Server, store: &RedisStore, say: &dyn Fn(String)) {
    let (count, nodes_count) = (10_000u32, 10);
    let lease = Duration::from_secs(6);
    let renew_interval = lease / 3;
    let within = Duration::from_secs(120);
    let nodes = balanced_fleet(store, count, nodes_count, lease, within, "partitions", say).await;
    // Whole renewal periods once every hand-over of the start is done (two periods on),
    // counted by the server: every client command the nodes sent.
    tokio::time::sleep(renew_interval * 2).await;
    let periods = 3;
    server.reset_stats();
    let (cpu_before, client_before) = (server.cpu_seconds(), crate::stats::own_cpu_seconds());
    tokio::time::sleep(renew_interval * periods).await;
    let commands = server.client_commands_by_name();
    let (cpu, client_cpu) =
        (server.cpu_seconds() - cpu_before, crate::stats::own_cpu_seconds() - client_before);
    let per_period = |name: &str| *commands.get(name).unwrap_or(&0) as f64 / periods as f64;
    let all: u64 = commands.values().sum();
    say(format!(
        "  round trips per renewal period: {:.0} in all ({:.0} EVALSHA: renewals and member reads), i.e. {:.2} per 100 partitions; Redis CPU {:.0} ms, nodes' CPU {:.0} ms per period",
        all as f64 / periods as f64,
        per_period("evalsha"),
        all as f64 / periods as f64 / (count as f64 / 100.0),
        cpu * 1e3 / periods as f64,
        client_cpu * 1e3 / periods as f64,
    ));
    for node in nodes {
        node.stop().await.expect("stop");
    }

    // The same number of slots, renewed in batches and one call each, A B A B.
    let slots = granted_slots(store, "single", count as usize, lease).await;
    let held: Vec<HeldSlot<'_>> =
        slots.iter().map(|(key, token)| HeldSlot::new(key, *token)).collect();
    for round in 0..2 {
        for batched in [true, false] {
            server.reset_stats();
            let (cpu_before, started) = (server.cpu_seconds(), Instant::now());
            let answers = if batched {
                store.renew_many(&held, lease).await.expect("renew_many")
            } else {
                let mut answers = Vec::new();
                for part in held.chunks(64) {
                    let calls: Vec<_> =
                        part.iter().map(|slot| store.renew(slot.key, slot.token, lease)).collect();
                    answers.extend(futures_util::future::try_join_all(calls).await.expect("renew"));
                }
                answers
            };
            let (took, cpu) = (started.elapsed(), server.cpu_seconds() - cpu_before);
            assert_eq!(answers.len(), held.len());
            say(format!(
                "  round {round}: {count} slots renewed {}: {:.1?}, {} round trips, Redis CPU {:.0} ms",
                if batched {
                    format!("in batches of {RENEW_BATCH_LEN}")
                } else {
                    "one call each (64 in flight)".to_owned()
                },
                took,
                server.client_commands(),
                cpu * 1e3
            ));
        }
    }
}

/// `count` slots of groups `{prefix}/{i}`, granted for `lease`: their keys and tokens.
async fn granted_slots(
    store: &RedisStore,
    prefix: &str,
    count: usize,
    lease: Duration,
) -> Vec<(String, LeaseToken)> {
    let slots: Vec<(String, LeaseToken)> = (0..count)
        .map(|i| (format!("leader:{prefix}/{i}"), LeaseToken::generate().unwrap()))
        .collect();
    for part in slots.chunks(256) {
        let grants: Vec<_> = part
            .iter()
            .map(|(key, token)| {
                store.acquire(AcquireRequest::new(key, NonZeroU32::MIN, *token, "bench", lease))
            })
            .collect();
        for outcome in futures_util::future::try_join_all(grants).await.expect("acquire") {
            assert!(matches!(outcome, AcquireOutcome::Granted(_)), "{outcome:?}");
        }
    }
    slots
}

async fn one_core(server: &Server, store: &RedisStore, leases: usize, say: &dyn Fn(String)) {
    let memory = || -> f64 {
        server
            .cli(&["INFO", "memory"])
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let before = memory();
    let lease = Duration::from_secs(60);
    let started = Instant::now();
    let slots = granted_slots(store, "core", leases, lease).await;
    let granted_in = started.elapsed();
    let per_lease = (memory() - before) / leases as f64;
    let slots = Arc::new(slots);
    // One pass of renewals as nodes send them, 8 batches in flight (several nodes at once).
    for round in 0..2 {
        let (cpu_before, started) = (server.cpu_seconds(), Instant::now());
        let mut tasks = Vec::new();
        for lane in 0..8 {
            let (store, slots) = (store.clone(), Arc::clone(&slots));
            tasks.push(tokio::spawn(async move {
                let lane_slots: Vec<HeldSlot<'_>> = slots
                    .iter()
                    .skip(lane * RENEW_BATCH_LEN)
                    .collect::<Vec<_>>()
                    .chunks(RENEW_BATCH_LEN)
                    .step_by(8)
                    .flatten()
                    .map(|(key, token)| HeldSlot::new(key, *token))
                    .collect();
                store.renew_many(&lane_slots, lease).await.expect("renew_many").len()
            }));
        }
        let mut renewed = 0;
        for task in tasks {
            renewed += task.await.unwrap();
        }
        assert_eq!(renewed, leases);
        let (took, cpu) = (started.elapsed(), server.cpu_seconds() - cpu_before);
        say(format!(
            "partitions: {leases} leases on one Redis core (granted in {granted_in:.1?}), pass {round}: renewed in {took:.2?}, Redis CPU {:.2} s per pass = {:.1}% of a core renewing every 10 s; memory {per_lease:.0} bytes per lease",
            cpu,
            cpu / 10.0 * 100.0
        ));
    }
}

/// 9 nodes hold 1,000 partitions, a tenth joins: how long until every node owns its 100.
pub(crate) async fn rebalance<S: LeaseStore + Clone + 'static>(store: &S, say: &dyn Fn(String)) {
    let count = 1_000;
    let lease = Duration::from_secs(6);
    let mut nodes = Vec::new();
    for i in 0..9 {
        nodes.push(node(store, "rebalance", count, lease, format!("node-{i}")).await);
    }
    until_balanced(&nodes, count, Duration::from_secs(60)).await;
    let joined = Instant::now();
    nodes.push(node(store, "rebalance", count, lease, "node-9".to_owned()).await);
    let took = until_balanced(&nodes, count, 2 * lease).await;
    say(format!(
        "partitions on {}: rebalancing {count} partitions over 9 nodes after a tenth joins: {took:.1?} (start included: {:.1?}; target: within two leases, {:?})",
        store.kind(),
        joined.elapsed(),
        2 * lease
    ));
    for node in nodes {
        node.stop().await.expect("stop");
    }
}
