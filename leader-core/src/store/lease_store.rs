//! The [`LeaseStore`] trait every store implements, its forwarding through an [`Arc`], and
//! the default batch renewal and batch read.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

#[cfg(doc)]
use super::DisabledStore;
#[cfg(doc)]
use super::batch::RENEW_BATCH_LEN;
use super::{
    AcquireOutcome, AcquireRequest, ClaimInfo, GroupSnapshot, GroupWatch, HeldSlot, Preference,
    ReleaseOutcome, RenewOutcome, Revocation, SlotRef,
};
use crate::error::Error;
use crate::token::LeaseToken;

/// How many calls the default [`LeaseStore::renew_many`] and [`LeaseStore::state_many`] keep
/// in flight at once.
const RENEW_MANY_IN_FLIGHT: usize = 32;

/// The default [`LeaseStore::state_many`]: each group read as [`LeaseStore::state`] does,
/// [`RENEW_MANY_IN_FLIGHT`] at a time, answers in order.
pub(crate) async fn state_each<S: LeaseStore + ?Sized>(
    store: &S,
    keys: &[&str],
) -> Result<Vec<GroupSnapshot>, Error> {
    let mut answers = Vec::with_capacity(keys.len());
    for part in keys.chunks(RENEW_MANY_IN_FLIGHT) {
        let reads: Vec<_> = part.iter().map(|key| store.state(key)).collect();
        answers.extend(futures_util::future::try_join_all(reads).await?);
    }
    Ok(answers)
}

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
/// - a store that [keeps reservations](Self::keeps_reservations) grants a group's last free
///   slot only to the token of its live reservation, hands the reservation to an earlier
///   arrival, and ends it at that token's grant or `hold_for` after its latest request
///   ([`AcquireRequest::reserving`]);
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

    /// Whether the store keeps a group's [`Reservation`](super::Reservation) of its next
    /// free slot, as [`AcquireRequest::reserving`] describes; a store that does not ignores
    /// the claims, and candidates that wait fairly do not send them. Default: `false`.
    fn keeps_reservations(&self) -> bool {
        false
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

    /// The group's live reservation of its next free slot (see
    /// [`AcquireRequest::reserving_at`]): the best waiting candidate that announced itself,
    /// its priority and how long it waited, or `None`. A holder that reads it can step down
    /// for a better candidate; tools show it (`leader state`). One read of the store.
    ///
    /// Default: `None`, for a store that [keeps no reservations](Self::keeps_reservations).
    async fn claim(&self, key: &str) -> Result<Option<ClaimInfo>, Error> {
        let _ = key;
        Ok(None)
    }

    /// Records an operator's preference for the holder that is to lead group `key`
    /// (`Some((holder, ttl))`, replacing any other, lapsing `ttl` from now), or withdraws it
    /// (`None`). While it lives, that holder's claim on the group's next free slot goes
    /// before every other ([`claim`](Self::claim) names the preference), so a leader that
    /// looks for better candidates steps down for it once it waits; a preference for a
    /// holder that never asks moves nobody. The caller checked `holder` (a holder id) and
    /// `ttl` (at least a millisecond).
    ///
    /// Default: [`Error::Unsupported`], for a store that [keeps no
    /// reservations](Self::keeps_reservations).
    async fn prefer(&self, key: &str, preferred: Option<(&str, Duration)>) -> Result<(), Error> {
        let _ = (key, preferred);
        Err(Error::Unsupported { store: self.kind(), operation: "record a preferred holder" })
    }

    /// The group's live preference ([`prefer`](Self::prefer)), or `None`. One read.
    ///
    /// Default: `None`.
    async fn preference(&self, key: &str) -> Result<Option<Preference>, Error> {
        let _ = key;
        Ok(None)
    }

    /// The live slots of every group of `keys`, as [`state`](Self::state) reads each, in as
    /// few round trips as the store allows; the answers come in the order of `keys`. For a
    /// partitions node that looks for the partitions nobody keeps. The groups may be read at
    /// different moments: the answer is no snapshot of them all.
    ///
    /// Default: each group read by [`state`](Self::state), a few at a time.
    async fn state_many(&self, keys: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        state_each(self, keys).await
    }

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

    fn keeps_reservations(&self) -> bool {
        (**self).keeps_reservations()
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

    async fn state_many(&self, keys: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        (**self).state_many(keys).await
    }

    async fn claim(&self, key: &str) -> Result<Option<ClaimInfo>, Error> {
        (**self).claim(key).await
    }

    async fn prefer(&self, key: &str, preferred: Option<(&str, Duration)>) -> Result<(), Error> {
        (**self).prefer(key, preferred).await
    }

    async fn preference(&self, key: &str) -> Result<Option<Preference>, Error> {
        (**self).preference(key).await
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
