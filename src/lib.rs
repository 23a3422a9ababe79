#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[doc(inline)]
pub use leader_core::*;

#[cfg(feature = "macros")]
#[doc(inline)]
pub use leader_macros::{leader_election, leader_group_election};

/// The examples of the pages under `docs/`, compiled and run as doctests like the README's.
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../docs/configuration.md")]
    struct Configuration;
    #[doc = include_str!("../docs/redis-store.md")]
    struct RedisStore;
    #[doc = include_str!("../docs/postgres-store.md")]
    struct PostgresStore;
    #[doc = include_str!("../docs/observation.md")]
    struct Observation;
    #[doc = include_str!("../docs/etcd-store.md")]
    struct EtcdStore;
    #[doc = include_str!("../docs/guards.md")]
    struct Guards;
    #[doc = include_str!("../docs/partitions.md")]
    struct Partitions;
    #[doc = include_str!("../docs/leadership.md")]
    struct Leadership;
    #[cfg(feature = "macros")]
    #[doc = include_str!("../docs/macros.md")]
    struct Macros;
    // The macros' own pages (leader-macros runs no doctests: they need this crate, which
    // as its dev-dependency would build again, with its stores, for the compiler's host).
    #[cfg(feature = "macros")]
    #[doc = include_str!("../leader-macros/docs/leader_election.md")]
    struct LeaderElectionMacro;
    #[cfg(feature = "macros")]
    #[doc = include_str!("../leader-macros/docs/leader_group_election.md")]
    struct LeaderGroupElectionMacro;
}
