//! The short run of every fault scenario on Redis (one fault each, 1 s leases), each judged
//! by the checker: real candidate processes (`Leadership` roles), a real redis-server
//! (Sentinel and Cluster for theirs), real signals. The other stores' scenarios are in
//! `scenarios_pg_etcd.rs`, the per-call and partitions modes in `scenarios_modes.rs`; the
//! whole table in each mode is `cargo run -p leader-chaos --release -- --mode guard` (or
//! `closure`, `partitions`).

#[macro_use]
mod common;

scenarios! {
    common::ON_REDIS;
    kill_holder => "kill-holder",
    kill_holder_n2 => "kill-holder-n2",
    pause_holder => "pause-holder",
    stall_before_write => "stall-before-write",
    restart_redis => "restart-redis",
    restart_redis_at_once => "restart-redis-at-once",
    stall_renewal_500 => "stall-renewal-500",
    stall_renewal_800 => "stall-renewal-800",
    stall_renewal_1200 => "stall-renewal-1200",
    late_grant => "late-grant",
    pause_redis => "pause-redis",
    pause_redis_n2 => "pause-redis-n2",
    cut => "cut",
    black_hole => "black-hole",
    latency => "latency",
    latency_l6 => "latency-l6",
    latency_l4 => "latency-l4",
    drop_replies => "drop-replies",
    script_flush => "script-flush",
    sentinel_failover => "sentinel-failover",
    cluster_node_restart => "cluster-node-restart",
}

/// Every scenario of the table runs in one of the two `Leadership` binaries.
#[test]
fn every_scenario_has_a_test() {
    let tested: Vec<&str> =
        common::ON_REDIS.iter().chain(common::ON_POSTGRES_AND_ETCD).copied().collect();
    let all: Vec<&str> = leader_chaos::scenario::SCENARIOS.iter().map(|s| s.name).collect();
    assert_eq!(tested, all);
}
