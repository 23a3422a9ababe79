//! The runtime of [`leader`](https://docs.rs/leader): leader election and bounded leader
//! groups for tokio services.
//!
//! Most users depend on the `leader` facade crate, which re-exports everything here.
//!
//! - [`LeaderGroupElector`] runs a body on at most `max_leaders` candidates at a time;
//!   [`LeaderElector`] on one.
//! - A winner's [`Lease`] carries a secret token, a fencing token, its holder and a loss
//!   signal.
//! - [`LeaseStore`] is the storage contract; [`MemoryStore`] implements it in-process.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[doc(hidden)]
pub mod __private {
    //! Used by the code the attribute macros generate; not a public API.
    pub use crate::private::*;

    /// For a deterministic simulation (`tools/sim`): seeds the library's randomness on the
    /// calling thread. Not a public API.
    pub use crate::random::seed_thread as seed_thread_randomness;
}

mod backoff;
mod channel;
mod default_store;
mod duration;
mod election;
mod error;
mod holder;
mod key;
mod leadership;
mod observe;
mod outage;
mod partitions;
mod private;
mod random;
mod serde_support;
mod share;
pub mod store;
mod telemetry;
mod timing;
mod token;

pub use channel::{
    Delivery, DropCounts, DropReason, FullMode, LeaderChannel, LeaderChannelOptions,
    LeaderChannelReader, LeaderChannelWriter,
};
pub use default_store::{default_store, install_default_store};
pub use duration::MAX_DURATION;
pub use election::{
    LeaderElectionOptions, LeaderElector, LeaderGroupElectionOptions, LeaderGroupElector,
    LeaderGroupState, LeaderRunResult, Lease, LeaseGuard, LossReason, wait_for_releases,
};
pub use error::{BoxError, Error, error_chain};
pub use holder::{MAX_HOLDER_LEN, default_holder_id};
pub use key::{DEFAULT_KEY_FORMAT, DEFAULT_MAX_KEY_LEN, KeyOptions, ROLE_PLACEHOLDER};
pub use leadership::{
    Leadership, LeadershipDescription, LeadershipEvent, LeadershipEvents, LeadershipHealth,
    LeadershipOptions, LeadershipRegistry, LeadershipStatus, Roles, WhenUncoordinated,
};
pub use observe::GroupObserver;
pub use partitions::{
    MAX_PARTITIONS, MAX_WEIGHT, Partition, PartitionEvent, PartitionEvents, PartitionOptions,
    Partitions, PartitionsView,
};
pub use store::{ClaimInfo, DisabledStore, LeaseStore, MemoryStore, Preference, SlotInfo};
#[cfg(feature = "etcd")]
pub use store::{EtcdStore, EtcdStoreBuilder};
#[cfg(feature = "postgres")]
pub use store::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "redis")]
pub use store::{RedisStore, RedisStoreBuilder};
pub use timing::{DEFAULT_LEASE_TIME, DEFAULT_RETRY_CEILING, LeaseTiming};
pub use token::LeaseToken;
