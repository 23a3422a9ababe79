//! Test support for `leader`, shared by the workspace's integration tests and its chaos
//! harness: the store conformance suite ([`conformance`]: the rules every `LeaseStore`
//! keeps, for a store of one's own too), real `redis-server` processes that tests start themselves (standalone, a
//! Sentinel set-up, a Cluster), PostgreSQL servers and etcd members, which can be killed,
//! restarted and paused, and TCP proxies that inject network faults between a client and a
//! server, or between etcd's peers.
//!
//! These helpers panic on a broken environment (no `redis-server` on the path): they are
//! for tests, not for production code.

#![warn(missing_docs)]

pub mod certificates;
pub mod conformance;
pub mod etcd;
pub mod postgres_server;
pub mod proxy;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
