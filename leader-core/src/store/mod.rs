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
#[cfg(any(feature = "redis", feature = "postgres"))]
mod listener;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
mod resubscribe;
mod shared;
mod url;
mod watch;

use std::fmt::Debug;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

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
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, PostgresStoreBuilder};
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

/// A request for one slot of a group, made with [`AcquireRequest::new`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// The group's resolved store key.
    pub key: &'a str,
    /// How many slots the group has: at least one, by its type, so no store checks it.
    pub max_leaders: NonZeroU32,
    /// The token the slot is to be held under; the same token again returns the same grant.
    pub token: LeaseToken,
    /// Who asks, for state and logs.
    pub holder: &'a str,
    /// The slot's time to live on the store's clock.
    pub lease_time: Duration,
    /// The session the slot belongs to, if any (see [`in_session`](Self::in_session)).
    pub session: Option<LeaseToken>,
}

impl<'a> AcquireRequest<'a> {
    /// A request for a slot of group `key` (of `max_leaders` slots) under `token`, for
    /// `holder`, to live `lease_time` on the store's clock.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use leader_core::LeaseToken;
    /// use leader_core::store::AcquireRequest;
    ///
    /// let three = NonZeroU32::new(3).unwrap();
    /// let token = LeaseToken::generate().unwrap();
    /// let request = AcquireRequest::new("leader:workers", three, token, "host-a", Duration::from_secs(10));
    /// assert_eq!(request.max_leaders.get(), 3);
    /// ```
    pub fn new(
        key: &'a str,
        max_leaders: NonZeroU32,
        token: LeaseToken,
        holder: &'a str,
        lease_time: Duration,
    ) -> Self {
        AcquireRequest { key, max_leaders, token, holder, lease_time, session: None }
    }

    /// The same request, for a slot of session `session`: a caller that renews many slots
    /// together ([`LeaseStore::renew_many`], as a node of [partition
    /// leases](crate::Partitions) does) names them one session, and a store may keep them
    /// alive as one. The etcd store binds a session's slots of one TTL to one etcd lease, so
    /// a batch renewal is one keep-alive and a read per [`RENEW_BATCH_LEN`] slots; its
    /// slots then live while any of them is renewed, and end when released or when the
    /// session's renewals stop. Stores that keep each slot's expiry apart (memory, Redis,
    /// PostgreSQL) ignore it.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use leader_core::LeaseToken;
    /// use leader_core::store::AcquireRequest;
    ///
    /// let node = LeaseToken::generate().unwrap();
    /// let token = LeaseToken::generate().unwrap();
    /// let request = AcquireRequest::new("orders/7", NonZeroU32::MIN, token, "host-a", Duration::from_secs(10))
    ///     .in_session(node);
    /// assert_eq!(request.session, Some(node));
    /// ```
    pub fn in_session(self, session: LeaseToken) -> Self {
        AcquireRequest { session: Some(session), ..self }
    }
}

/// A slot the store granted, made with [`Grant::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The group's fencing token for this grant, strictly greater than every earlier grant's.
    pub fence: u64,
    /// When the slot was granted, on the store's clock.
    pub acquired_at: SystemTime,
    /// When the slot expires unless renewed, on the store's clock.
    pub expires_at: SystemTime,
    /// How long the slot lives at least, from the moment the store acted: never more than
    /// its true time to live, so a client that adds it to when its request was sent gets a
    /// local deadline that never falls after the store's expiry. A store whose clock is
    /// coarser than the truth rounds down (the Redis store counts off the millisecond its
    /// clock was floored to).
    pub expires_in: Duration,
}

impl Grant {
    /// A grant under `fence`, made at `acquired_at` and expiring at `expires_at` on the
    /// store's clock, living at least `expires_in` from the moment the store acted.
    pub fn new(
        fence: u64,
        acquired_at: SystemTime,
        expires_at: SystemTime,
        expires_in: Duration,
    ) -> Self {
        Grant { fence, acquired_at, expires_at, expires_in }
    }
}

/// What an acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireOutcome {
    /// A slot is held under the request's token (newly, or already by an earlier attempt).
    Granted(Grant),
    /// Every slot is held by someone else; the first of them expires in `nearest_expiry`
    /// unless it is renewed.
    Full {
        /// Time until the earliest live slot expires.
        nearest_expiry: Duration,
    },
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// The slot is held and now lives for `expires_in` from the store's answer.
    Renewed {
        /// When the slot now expires, on the store's clock.
        expires_at: SystemTime,
        /// The slot's new time to live, at least, from the moment the store acted (rounded
        /// down, as [`Grant::expires_in`]).
        expires_in: Duration,
    },
    /// The token holds no live slot: it expired or was released. Nothing was changed.
    NotHeld,
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The slot was freed.
    Released,
    /// The slot is kept until its minimum lease time has passed, then expires by itself.
    Kept {
        /// Time until the slot expires.
        expires_in: Duration,
    },
    /// The token holds no live slot; nothing was changed.
    NotHeld,
}

/// How many renewals the default [`LeaseStore::renew_many`] keeps in flight at once.
const RENEW_MANY_IN_FLIGHT: usize = 32;

/// The default [`LeaseStore::renew_many`]: each slot renewed as [`LeaseStore::renew`] does,
/// [`RENEW_MANY_IN_FLIGHT`] at a time, answers in order.
pub(crate) async fn renew_each<S: LeaseStore + ?Sized>(
    store: &S,
    slots: &[HeldSlot<'_>],
    lease_time: Duration,
) -> Result<Vec<RenewOutcome>, Error> {
    let mut answers = Vec::with_capacity(slots.len());
    for part in slots.chunks(RENEW_MANY_IN_FLIGHT) {
        // The futures made before the await: a closure held across it would tie the
        // future's `Send` to a lifetime the compiler cannot prove general.
        let renewals: Vec<_> =
            part.iter().map(|slot| store.renew(slot.key, slot.token, lease_time)).collect();
        answers.extend(futures_util::future::try_join_all(renewals).await?);
    }
    Ok(answers)
}

/// Which slot of a group a tool names, for [`LeaseStore::revoke`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotRef {
    /// The slot held under this token.
    Token(LeaseToken),
    /// The slot granted with this fence (unique within a group; `state()` shows it).
    Fence(u64),
}

/// How [`LeaseStore::revoke`] ends a slot its caller was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// Keeps the guarantee: the holder's renewals are refused from now on (so it steps
    /// down at its next renewal), and the slot goes to someone else only once the holder's
    /// local deadline can have passed: at the slot's expiry (memory, Redis, PostgreSQL), or
    /// one TTL after the next grant (etcd's lock-delay).
    AtExpiry,
    /// Frees the slot at once, as the holder's own release would. Risky: the holder still
    /// believes it leads until its next renewal is refused (up to a renewal interval, or a
    /// whole lease without auto-extension), so two holders may act at once meanwhile; only
    /// a downstream store that checks fences stays safe.
    Now,
}

/// A group as the store sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupSnapshot {
    /// The `max_leaders` the live slots were granted under; `None` when no slot is live.
    pub max_leaders: Option<u32>,
    /// The live slots whose holders may act, earliest grant first.
    pub leaders: Vec<SlotInfo>,
    /// Slots granted to candidates that may not act on them yet (etcd's lock-delay after a
    /// takeover): they count against `max_leaders`, but their holders do not lead yet.
    /// Empty on every other store.
    pub pending: Vec<SlotInfo>,
}

/// One live slot, as state reports it (without its token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// The candidate that holds it.
    pub holder: String,
    /// The fencing token it was granted with.
    pub fence: u64,
    /// When it was granted, on the store's clock.
    pub acquired_at: SystemTime,
    /// Time until it expires unless renewed.
    pub expires_in: Duration,
}

/// Atomic storage of leader-group slots.
///
/// Implementations must keep these rules, which the conformance suite checks:
/// - at most `max_leaders` live slots per key; an acquire while slots granted under another
///   `max_leaders` are live fails with [`Error::MaxLeadersMismatch`];
/// - acquire with a token that already holds a live slot returns that slot's grant unchanged;
/// - fences strictly increase over every grant of a key;
/// - renew and release act only on a live slot held under the given token; neither revives
///   an expired slot;
/// - a grant's or renewal's `expires_in` never exceeds the slot's true time to live when the
///   store acted (round down);
/// - release keeps the slot until `acquired_at + min_lease_time` when that is still ahead,
///   and wakes the key's [`GroupWatch`]es whenever it frees or shortens a slot;
/// - a revocation at expiry refuses the holder's renewals at once and grants the slot to
///   nobody before the holder's deadline can have passed;
/// - a grant, a release and a shortening renewal each wake the key's change watches
///   ([`watch_changes`](Self::watch_changes)); while nothing changes, a change watch
///   makes the store send no notification and read nothing.
// A method added here must be forwarded by `Layered` (layer.rs, with a `StoreLayer` method
// of its own) and by both `Arc` impls, or a wrapped store silently answers the default.
#[async_trait]
pub trait LeaseStore: Debug + Send + Sync {
    /// A short name of the store's kind, such as `memory` or `redis`, for errors and logs.
    fn kind(&self) -> &'static str;

    /// Whether the store coordinates candidates at all. A [`DisabledStore`] does not: it
    /// grants every request, so long-lived leadership over it follows
    /// `when_uncoordinated` instead of asking it. Default: `true`.
    fn coordinates(&self) -> bool {
        true
    }

    /// The unit in which [`state`](Self::state) reports a slot's `expires_in` (rounded
    /// down): a slot read with less than this left may live up to this long yet. A reader
    /// that looks again at a slot's expiry looks no sooner than this after its read. Default:
    /// 1 ms; etcd's times to live are whole seconds.
    fn expiry_resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    /// Grants a slot if one is free, or reports when the earliest one expires.
    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error>;

    /// Extends the slot held under `token` to live `lease_time` from now.
    async fn renew(
        &self,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error>;

    /// Renews every slot of `slots` as [`renew`](Self::renew) would, each to live
    /// `lease_time` from now, in as few round trips as the store allows; the answers come in
    /// the order of `slots`. For a node holding many slots (partition leases): the Redis
    /// store renews up to [`RENEW_BATCH_LEN`] slots in one script call (outside a Cluster,
    /// whose slots live on different servers), the PostgreSQL store in one statement.
    ///
    /// An error is the whole batch's: some of its slots may have been renewed, and renewing
    /// them again is harmless.
    ///
    /// Default: each slot renewed by [`renew`](Self::renew), a few at a time.
    async fn renew_many(
        &self,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        renew_each(self, slots, lease_time).await
    }

    /// Frees the slot held under `token`, or keeps it until `min_lease_time` after it was
    /// granted if that moment is still ahead.
    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error>;

    /// Ends a slot of `key` for a caller that was not granted it: an operator's tool
    /// (`leader release`), another service that learnt the slot's token. [`release`] is the
    /// holder's own, after it stopped acting; a revocation cannot know whether the holder
    /// still acts, so by default ([`Revocation::AtExpiry`]) it ends the holder's renewals and
    /// hands the slot on only when the holder's deadline can have passed, answering
    /// [`ReleaseOutcome::Kept`] with that time. [`Revocation::Now`] frees it at once
    /// ([`ReleaseOutcome::Released`]). [`ReleaseOutcome::NotHeld`]: no such live slot.
    ///
    /// Default: [`Error::Unsupported`], for a store that cannot revoke.
    ///
    /// [`release`]: Self::release
    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        let _ = (key, slot, how);
        Err(Error::Unsupported { store: self.kind(), operation: "revoke" })
    }

    /// The group's live slots.
    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error>;

    /// A watch that wakes when a slot of `key` is released or shortened. Subscribe before
    /// the acquire whose failure you will wait on, so no release falls in between.
    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error>;

    /// A watch that wakes on every change of `key`'s holders this store learns of, in any
    /// process: a grant, a release, a renewal that shortens a slot (an expiry is seen by
    /// the observer's own timer). While the watch lives, the store announces that the group
    /// is observed, so that its grants are published (Redis) or notified (PostgreSQL); a
    /// store that learns of a gap in its notifications (a lost connection) wakes every
    /// watch once it is back, so the observer reads the state again. Made before the read
    /// it will be compared with, so no change falls in between.
    ///
    /// Default: [`Error::Unsupported`]; a [`GroupObserver`](crate::GroupObserver) over such a
    /// store reads its state once a second instead.
    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        let _ = key;
        Err(Error::Unsupported { store: self.kind(), operation: "watch changes" })
    }

    /// The keys of the groups the store holds whose key starts with `prefix` and ends with
    /// `suffix`, sorted, for tools (`leader groups`). What "holds" means is the store's: a
    /// group with live slots is always listed; an idle one while the store keeps it.
    /// Default: [`Error::Unsupported`], for a store that cannot list its groups.
    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        let _ = (prefix, suffix);
        Err(Error::Unsupported { store: self.kind(), operation: "list groups" })
    }
}

#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for Arc<S> {
    fn kind(&self) -> &'static str {
        (**self).kind()
    }

    fn coordinates(&self) -> bool {
        (**self).coordinates()
    }

    fn expiry_resolution(&self) -> Duration {
        (**self).expiry_resolution()
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        (**self).acquire(request).await
    }

    async fn renew(
        &self,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        (**self).renew(key, token, lease_time).await
    }

    async fn renew_many(
        &self,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        (**self).renew_many(slots, lease_time).await
    }

    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        (**self).release(key, token, min_lease_time).await
    }

    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        (**self).revoke(key, slot, how).await
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        (**self).state(key).await
    }

    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        (**self).watch_releases(key).await
    }

    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        (**self).watch_changes(key).await
    }

    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        (**self).list_groups(prefix, suffix).await
    }
}
