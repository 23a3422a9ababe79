//! `leader-chaos`: a fault-injection harness for `leader`.
//!
//! It runs several candidate processes (this crate's binary, in `candidate` mode) against a
//! real `redis-server` it starts itself, optionally through a TCP fault proxy. Every leader
//! writes to a [fenced register](register) with its fence, every candidate reports when it
//! believes it leads, a [monitor] samples the store's own view, and after the
//! faults the [checker] verifies that no stale write was accepted, that fences rose
//! in grant order, that at most N slots were live and at most N candidates believed they
//! led at any instant, that the group recovered within one lease plus one retry, and that
//! no slot leaked.
//!
//! `cargo run -p leader-chaos --release` prints the table; `--soak` repeats every fault 20
//! times; `--only NAME` picks scenarios.

#![warn(missing_docs)]

pub mod backend;
pub mod candidate;
pub mod checker;
pub mod events;
pub mod fleet;
pub mod lab;
pub mod monitor;
pub mod partitioned;
pub mod per_call;
pub mod register;
pub mod report;
pub mod scenario;
pub mod stalling;
pub mod store_spec;
