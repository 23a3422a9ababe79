//! The short run of every fault scenario on PostgreSQL and etcd (one fault each, 1 s
//! leases), each judged by the checker: real candidate processes (`Leadership` roles), a
//! real PostgreSQL server and real etcd members, real signals. See `scenarios_redis.rs`.

#[macro_use]
mod common;

scenarios! {
    common::ON_POSTGRES_AND_ETCD;
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
