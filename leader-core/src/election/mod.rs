//! Per-call election: [`LeaderGroupElector`] and [`LeaderElector`] run a body while they
//! hold one slot of a group, or hand the slot over in a [`LeaseGuard`], and the parts they
//! are made of: the options, waiting for a slot, the [`Lease`] and its renewal, and the
//! release however the holder ends.
//!
//! Long-lived leadership (`crate::leadership`) keeps its terms with the same [`Lease`] and
//! renewal loop.

mod background;
pub(crate) mod candidate;
mod elector;
mod group;
pub(crate) mod guard;
pub(crate) mod lease;
mod lease_guard;
pub(crate) mod options;
mod overrun;
mod preference;
pub(crate) mod renewal;
mod run_result;
mod state;

pub use background::wait_for_releases;
pub use elector::LeaderElector;
pub use group::LeaderGroupElector;
pub use lease::{Lease, LossReason};
pub use lease_guard::LeaseGuard;
pub use options::{LeaderElectionOptions, LeaderGroupElectionOptions};
pub use run_result::LeaderRunResult;
pub use state::LeaderGroupState;
