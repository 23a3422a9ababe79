//! The short run of every fault scenario (one fault each, 1 s leases), each judged by the
//! checker: real candidate processes, a real redis-server, real signals. They run one at
//! a time, since they measure recovery times on a small machine.
//!
//! Every scenario runs with `Leadership` candidates; one per kind of fault and store runs
//! with per-call candidates too (a `run_if_leader` closure, or `acquire`'s guard), and a set
//! with nodes of partition leases (`Partitions`, every partition judged). The whole table
//! in each mode is `cargo run -p leader-chaos --release -- --mode guard` (or `closure`,
//! `partitions`).

use std::sync::Mutex;

use leader_chaos::candidate::CandidateMode;
use leader_chaos::lab::run_scenario;
use leader_chaos::report;
use leader_chaos::scenario::{SCENARIOS, Timing};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(name: &str) {
    run_in(name, CandidateMode::Leadership);
}

fn run_in(name: &str, mode: CandidateMode) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let scenario = SCENARIOS.iter().find(|s| s.name == name).expect("a scenario of that name");
    let program = std::path::Path::new(env!("CARGO_BIN_EXE_leader-chaos"));
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let outcome = runtime.block_on(run_scenario(program, scenario, Timing::SHORT, mode));
    let outcome =
        outcome.unwrap_or_else(|error| panic!("{name} ({mode:?}) could not run: {error}"));
    println!("{}\n{}", report::HEADER, report::row(&outcome));
    assert!(
        outcome.verdict.violations.is_empty(),
        "{name} ({mode:?}): {:#?}\n{}",
        outcome.verdict.violations,
        report::row(&outcome)
    );
    assert!(outcome.verdict.terms >= 2, "{name} ({mode:?}): the slot never changed hands");
    if mode == CandidateMode::Partitions {
        // Every partition was granted (a fault need not move any: nodes never resign).
        let partitions = leader_chaos::partitioned::PARTITIONS as usize;
        assert!(outcome.verdict.terms >= partitions, "{name}: a partition was never granted");
    }
}

macro_rules! scenarios {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                run($name);
            }
        )*

        #[test]
        fn every_scenario_has_a_test() {
            let tested = [$($name),*];
            let all: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
            assert_eq!(tested.to_vec(), all);
        }
    };
}

scenarios! {
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
    pg_kill_holder => "pg-kill-holder",
    pg_pause_holder => "pg-pause-holder",
    pg_restart => "pg-restart",
    pg_pause => "pg-pause",
    pg_cut => "pg-cut",
    pg_black_hole => "pg-black-hole",
    etcd_kill_holder => "etcd-kill-holder",
    etcd_kill_holder_n2 => "etcd-kill-holder-n2",
    etcd_pause_holder => "etcd-pause-holder",
    etcd_kill_leader => "etcd-kill-leader",
    etcd_restart_all => "etcd-restart-all",
    etcd_pause_leader => "etcd-pause-leader",
    etcd_isolate_leader => "etcd-isolate-leader",
    etcd_cut => "etcd-cut",
    etcd_black_hole => "etcd-black-hole",
    etcd_latency => "etcd-latency",
}

/// Per-call candidates: a scenario of each kind of fault on each store, in one of the two
/// per-call modes.
macro_rules! per_call_scenarios {
    ($($test:ident => $name:literal in $mode:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                run_in($name, CandidateMode::$mode);
            }
        )*
    };
}

per_call_scenarios! {
    guard_kill_holder => "kill-holder" in Guard,
    guard_late_grant => "late-grant" in Guard,
    guard_pg_pause => "pg-pause" in Guard,
    guard_etcd_kill_holder_n2 => "etcd-kill-holder-n2" in Guard,
    closure_stall_before_write => "stall-before-write" in Closure,
    // Partitions mode: nodes of a set of partitions, each partition judged as a group.
    partitions_kill_holder => "kill-holder" in Partitions,
    partitions_pause_holder => "pause-holder" in Partitions,
    partitions_stall_before_write => "stall-before-write" in Partitions,
    partitions_pause_redis => "pause-redis" in Partitions,
    partitions_cut => "cut" in Partitions,
    partitions_pg_pause => "pg-pause" in Partitions,
    partitions_etcd_pause_leader => "etcd-pause-leader" in Partitions,
    partitions_etcd_cut => "etcd-cut" in Partitions,
    // Priority mode: the best live candidate leads after each fault.
    priority_pause_holder => "pause-holder" in Priority,
    priority_pg_kill_holder => "pg-kill-holder" in Priority,
    priority_etcd_pause_holder => "etcd-pause-holder" in Priority,
}
