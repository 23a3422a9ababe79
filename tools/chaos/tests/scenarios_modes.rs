//! Fault scenarios with the other kinds of candidate: per-call ones (a `run_if_leader`
//! closure, or `acquire`'s guard), a scenario of each kind of fault and store, and nodes of
//! partition leases (`Partitions`, every partition judged as a group of one slot). See
//! `scenarios_redis.rs`.

#[macro_use]
mod common;

use leader_chaos::candidate::CandidateMode;

macro_rules! scenarios_in {
    ($($test:ident => $name:literal in $mode:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                common::run_in($name, CandidateMode::$mode);
            }
        )*
    };
}

scenarios_in! {
    guard_kill_holder => "kill-holder" in Guard,
    guard_late_grant => "late-grant" in Guard,
    guard_pg_pause => "pg-pause" in Guard,
    guard_etcd_kill_holder_n2 => "etcd-kill-holder-n2" in Guard,
    closure_stall_before_write => "stall-before-write" in Closure,
    partitions_kill_holder => "kill-holder" in Partitions,
    partitions_pause_holder => "pause-holder" in Partitions,
    partitions_stall_before_write => "stall-before-write" in Partitions,
    partitions_pause_redis => "pause-redis" in Partitions,
    partitions_cut => "cut" in Partitions,
    partitions_pg_pause => "pg-pause" in Partitions,
    partitions_etcd_pause_leader => "etcd-pause-leader" in Partitions,
    partitions_etcd_cut => "etcd-cut" in Partitions,
}
