//! What the scenario binaries share: the run of one scenario, judged, and which binary
//! runs which scenario. The scenarios are split over three binaries so the test command
//! runs them beside each other; within a binary they run one at a time, since they
//! measure recovery times on a small machine. (Each binary uses a part of this module.)
#![allow(dead_code)]

use std::sync::Mutex;

use leader_chaos::candidate::CandidateMode;
use leader_chaos::lab::run_scenario;
use leader_chaos::report;
use leader_chaos::scenario::{SCENARIOS, Timing};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The scenarios on Redis (standalone, Sentinel, Cluster), with `Leadership` candidates
/// (`scenarios_redis.rs`).
pub const ON_REDIS: &[&str] = &[
    "kill-holder",
    "kill-holder-n2",
    "pause-holder",
    "stall-before-write",
    "restart-redis",
    "restart-redis-at-once",
    "stall-renewal-500",
    "stall-renewal-800",
    "stall-renewal-1200",
    "late-grant",
    "pause-redis",
    "pause-redis-n2",
    "cut",
    "black-hole",
    "latency",
    "latency-l6",
    "latency-l4",
    "drop-replies",
    "script-flush",
    "sentinel-failover",
    "cluster-node-restart",
];

/// The scenarios on PostgreSQL and etcd, with `Leadership` candidates
/// (`scenarios_pg_etcd.rs`).
pub const ON_POSTGRES_AND_ETCD: &[&str] = &[
    "pg-kill-holder",
    "pg-pause-holder",
    "pg-restart",
    "pg-pause",
    "pg-cut",
    "pg-black-hole",
    "etcd-kill-holder",
    "etcd-kill-holder-n2",
    "etcd-pause-holder",
    "etcd-kill-leader",
    "etcd-restart-all",
    "etcd-pause-leader",
    "etcd-isolate-leader",
    "etcd-cut",
    "etcd-black-hole",
    "etcd-latency",
];

/// Runs scenario `name` with `Leadership` candidates and judges it.
pub fn run(name: &str) {
    run_in(name, CandidateMode::Leadership);
}

/// Runs scenario `name` with candidates in `mode` and judges it.
pub fn run_in(name: &str, mode: CandidateMode) {
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

/// A test per scenario of `$list`, each running it with `Leadership` candidates, and a
/// test that they are the whole list.
#[allow(unused_macros)]
macro_rules! scenarios {
    ($list:path; $($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                common::run($name);
            }
        )*

        #[test]
        fn every_scenario_of_the_list_has_a_test() {
            assert_eq!([$($name),*].to_vec(), $list.to_vec());
        }
    };
}
