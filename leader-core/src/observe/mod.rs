//! Observation: who holds a group's slots now, and each change as it happens, from any
//! process, without competing. A [`GroupObserver`] never takes, writes or holds a slot.
//!
//! The holder id is what observers learn of a holder: make it what a follower needs to
//! reach the leader (for instance `host:port` with
//! [`LeaderElectionOptions::holder_id`](crate::LeaderElectionOptions::holder_id)), unique
//! per instance.

mod observer;
mod reader;

pub use observer::GroupObserver;
