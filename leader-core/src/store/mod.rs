//! The [`LeaseStore`] trait every store implements, and the values it exchanges.
//!
//! Stores keep a group's slots atomically: a slot is granted under a client-made
//! [`LeaseToken`], renewed and released only with that token, and expires on the store's
//! clock. The electors build everything else on these five operations.

#[cfg(any(feature = "redis", feature = "postgres"))]
mod answer;
mod batch;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
mod bound;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
mod class;
mod connect;
mod disabled;
#[cfg(feature = "etcd")]
mod etcd;
mod layer;
mod lease_store;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod listener;
mod memory;
mod outcomes;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
mod requests;
mod reserved;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
mod resubscribe;
mod shared;
mod url;
mod watch;

use std::time::Duration;

#[cfg(feature = "redis")]
pub use self::redis::{DEFAULT_IDLE_GROUP_TTL, RedisGroupLayout, RedisStore, RedisStoreBuilder};
pub(crate) use batch::HeldSlot;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
pub(crate) use batch::RENEW_BATCH_LEN;
pub use connect::{StoreBuilder, builder, connect, redact_url};
/// The deadpool-postgres version the PostgreSQL store is built on (with
/// `deadpool_postgres::tokio_postgres`, the client): the pool and configuration that
/// [`PostgresStore::pool_builder`] takes are its types.
#[cfg(feature = "postgres")]
pub use deadpool_postgres;
/// The deadpool-redis version the Redis store is built on (with `deadpool_redis::redis`,
/// redis-rs): the Sentinel and Cluster configurations and the pools that
/// [`RedisStore`]'s builders take are its types.
#[cfg(feature = "redis")]
pub use deadpool_redis;
pub use disabled::DisabledStore;
#[cfg(feature = "etcd")]
pub use etcd::{EtcdStore, EtcdStoreBuilder};
/// The etcd-client version the etcd store is built on, for reading the store's keys with
/// the same client (an operator's tool, a test): no API of the store takes its types, and a
/// second copy of the client (with its own protoc build) is what depending on it directly
/// at another version would cost.
#[cfg(feature = "etcd")]
pub use etcd_client;
pub use lease_store::LeaseStore;
#[cfg(any(feature = "redis", feature = "etcd"))]
pub(crate) use lease_store::renew_each;
#[cfg(feature = "redis")]
pub(crate) use lease_store::state_each;
pub use memory::MemoryStore;
pub use outcomes::{
    AcquireOutcome, ClaimInfo, Grant, GroupSnapshot, Preference, ReleaseOutcome, RenewOutcome,
    SlotInfo,
};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, PostgresStoreBuilder};
pub use requests::{AcquireRequest, Reservation, Revocation, SlotRef};
pub use shared::{IntoSharedStore, SharedStore};
pub use url::store_kind_of;
pub(crate) use watch::{GroupSignal, GroupWatch};

/// For those who write a store, or a layer over one (a fault injector, a call counter), not
/// for those who use one: the layer trait and its forwarding wrapper, the change signal a
/// store hands its waiters, and the slots of a batch renewal.
pub mod author {
    pub use super::batch::{HeldSlot, RENEW_BATCH_LEN};
    pub use super::layer::{Layered, StoreLayer};
    #[cfg(feature = "unstable-script-calls")]
    #[doc(hidden)]
    pub use super::redis::ScriptCall;
    pub use super::watch::{GroupSignal, GroupWatch};
}

use crate::error::Error;
#[cfg(doc)]
use crate::token::LeaseToken;

/// `call`'s result, a store error in it located at `endpoint` (each store's trait methods
/// run through here, so every error names where the store is).
///
/// A combinator, not an `async fn`: an `async fn` keeps its future argument beside the
/// future it awaits, doubling the size of every call's future (and the bytes moved when the
/// trait boxes it).
#[cfg_attr(not(any(feature = "redis", feature = "postgres", feature = "etcd")), allow(dead_code))]
pub(crate) fn located<'a, T>(
    endpoint: &'a str,
    call: impl Future<Output = Result<T, Error>> + 'a,
) -> impl Future<Output = Result<T, Error>> + 'a {
    futures_util::TryFutureExt::map_err(call, move |error| error.at(endpoint))
}

/// How long one store operation may take before it fails with [`Error::Timeout`], for every
/// store with a server (Redis, PostgreSQL), unless its builder's `command_timeout` says
/// otherwise.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
