//! [`StoreLayer`] and [`Layered`]: a store wrapped in code of one's own (counting, injected
//! faults, a delay, telemetry) without forwarding its calls by hand.
//!
//! A wrapper that implements [`LeaseStore`] itself must forward every method, and the trait's
//! defaults make a forgotten one compile: a wrapped [`DisabledStore`](super::DisabledStore)
//! would claim to coordinate, a wrapped store's groups could not be listed. A layer writes
//! only the calls it changes; [`Layered`] forwards every method of the trait, each through
//! the layer, whose defaults call the store it wraps (tower's `Layer` is the model).

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    AcquireOutcome, AcquireRequest, ClaimInfo, GroupSnapshot, GroupWatch, HeldSlot, LeaseStore,
    Preference, ReleaseOutcome, RenewOutcome, Revocation, SlotRef,
};
use crate::error::Error;
use crate::token::LeaseToken;

/// What a layer does around each call of the store it wraps (`inner`). Every method
/// forwards by default; override the ones to change, and wrap the store with
/// [`Layered::new`].
///
/// The trait's async methods are written with the `async-trait` crate, as
/// [`LeaseStore`]'s are: an implementation that overrides one puts `#[async_trait]` on its
/// `impl` (add `async-trait` to your dependencies); a layer that overrides nothing, or only
/// [`kind`](Self::kind) and [`coordinates`](Self::coordinates), needs none. An `Arc` of a
/// layer is a layer, so a test can keep a handle on the layer it wrapped a store in.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// use leader_core::store::GroupSnapshot;
/// use leader_core::store::author::{Layered, StoreLayer};
/// use leader_core::{Error, LeaseStore, MemoryStore};
///
/// /// Counts the state reads made through it.
/// #[derive(Debug, Default)]
/// struct CountReads(AtomicUsize);
///
/// #[async_trait::async_trait]
/// impl StoreLayer for CountReads {
///     async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
///         self.0.fetch_add(1, Ordering::Relaxed);
///         inner.state(key).await
///     }
/// }
///
/// # tokio_test_block_on(async {
/// let store = Layered::new(CountReads::default(), MemoryStore::new());
/// store.state("leader:reports").await?;
/// assert_eq!(store.layer().0.load(Ordering::Relaxed), 1);
/// assert_eq!(store.kind(), "memory"); // what the layer leaves alone is the store's
/// # Ok::<(), Error>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
#[async_trait]
pub trait StoreLayer: Debug + Send + Sync {
    /// [`LeaseStore::kind`]. Default: the wrapped store's.
    fn kind(&self, inner: &dyn LeaseStore) -> &'static str {
        inner.kind()
    }

    /// [`LeaseStore::coordinates`]. Default: the wrapped store's.
    fn coordinates(&self, inner: &dyn LeaseStore) -> bool {
        inner.coordinates()
    }

    /// [`LeaseStore::expiry_resolution`]. Default: the wrapped store's.
    fn expiry_resolution(&self, inner: &dyn LeaseStore) -> Duration {
        inner.expiry_resolution()
    }

    /// [`LeaseStore::keeps_reservations`]. Default: the wrapped store's.
    fn keeps_reservations(&self, inner: &dyn LeaseStore) -> bool {
        inner.keeps_reservations()
    }

    /// [`LeaseStore::acquire`]. Default: the wrapped store's.
    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        inner.acquire(request).await
    }

    /// [`LeaseStore::renew`]. Default: the wrapped store's.
    async fn renew(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        inner.renew(key, token, lease_time).await
    }

    /// [`LeaseStore::renew_many`]. Default: the wrapped store's (which does not pass through
    /// this layer's [`renew`](Self::renew): a layer that changes renewals overrides both).
    async fn renew_many(
        &self,
        inner: &dyn LeaseStore,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        inner.renew_many(slots, lease_time).await
    }

    /// [`LeaseStore::release`]. Default: the wrapped store's.
    async fn release(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        inner.release(key, token, min_lease_time).await
    }

    /// [`LeaseStore::revoke`]. Default: the wrapped store's.
    async fn revoke(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        inner.revoke(key, slot, how).await
    }

    /// [`LeaseStore::state`]. Default: the wrapped store's.
    async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
        inner.state(key).await
    }

    /// [`LeaseStore::claim`]. Default: the wrapped store's.
    async fn claim(&self, inner: &dyn LeaseStore, key: &str) -> Result<Option<ClaimInfo>, Error> {
        inner.claim(key).await
    }

    /// [`LeaseStore::prefer`]. Default: the wrapped store's.
    async fn prefer(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        preferred: Option<(&str, Duration)>,
    ) -> Result<(), Error> {
        inner.prefer(key, preferred).await
    }

    /// [`LeaseStore::preference`]. Default: the wrapped store's.
    async fn preference(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
    ) -> Result<Option<Preference>, Error> {
        inner.preference(key).await
    }

    /// [`LeaseStore::state_many`]. Default: the wrapped store's (which does not pass through
    /// this layer's [`state`](Self::state): a layer that changes reads overrides both).
    async fn state_many(
        &self,
        inner: &dyn LeaseStore,
        keys: &[&str],
    ) -> Result<Vec<GroupSnapshot>, Error> {
        inner.state_many(keys).await
    }

    /// [`LeaseStore::watch_releases`]. Default: the wrapped store's.
    async fn watch_releases(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupWatch, Error> {
        inner.watch_releases(key).await
    }

    /// [`LeaseStore::watch_changes`]. Default: the wrapped store's.
    async fn watch_changes(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupWatch, Error> {
        inner.watch_changes(key).await
    }

    /// [`LeaseStore::list_groups`]. Default: the wrapped store's.
    async fn list_groups(
        &self,
        inner: &dyn LeaseStore,
        prefix: &str,
        suffix: &str,
    ) -> Result<Vec<String>, Error> {
        inner.list_groups(prefix, suffix).await
    }
}

#[async_trait]
impl<L: StoreLayer + ?Sized> StoreLayer for Arc<L> {
    fn kind(&self, inner: &dyn LeaseStore) -> &'static str {
        (**self).kind(inner)
    }

    fn coordinates(&self, inner: &dyn LeaseStore) -> bool {
        (**self).coordinates(inner)
    }

    fn expiry_resolution(&self, inner: &dyn LeaseStore) -> Duration {
        (**self).expiry_resolution(inner)
    }

    fn keeps_reservations(&self, inner: &dyn LeaseStore) -> bool {
        (**self).keeps_reservations(inner)
    }

    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        (**self).acquire(inner, request).await
    }

    async fn renew(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        (**self).renew(inner, key, token, lease_time).await
    }

    async fn renew_many(
        &self,
        inner: &dyn LeaseStore,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        (**self).renew_many(inner, slots, lease_time).await
    }

    async fn release(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        (**self).release(inner, key, token, min_lease_time).await
    }

    async fn revoke(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        (**self).revoke(inner, key, slot, how).await
    }

    async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
        (**self).state(inner, key).await
    }

    async fn claim(&self, inner: &dyn LeaseStore, key: &str) -> Result<Option<ClaimInfo>, Error> {
        (**self).claim(inner, key).await
    }

    async fn prefer(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        preferred: Option<(&str, Duration)>,
    ) -> Result<(), Error> {
        (**self).prefer(inner, key, preferred).await
    }

    async fn preference(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
    ) -> Result<Option<Preference>, Error> {
        (**self).preference(inner, key).await
    }

    async fn state_many(
        &self,
        inner: &dyn LeaseStore,
        keys: &[&str],
    ) -> Result<Vec<GroupSnapshot>, Error> {
        (**self).state_many(inner, keys).await
    }

    async fn watch_releases(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupWatch, Error> {
        (**self).watch_releases(inner, key).await
    }

    async fn watch_changes(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupWatch, Error> {
        (**self).watch_changes(inner, key).await
    }

    async fn list_groups(
        &self,
        inner: &dyn LeaseStore,
        prefix: &str,
        suffix: &str,
    ) -> Result<Vec<String>, Error> {
        (**self).list_groups(inner, prefix, suffix).await
    }
}

/// A store whose every call goes through a [`StoreLayer`]: a [`LeaseStore`] that forwards
/// each method of the trait (those with defaults too) to the layer, and so, by the layer's
/// defaults, to the wrapped store. Layers stack: `Layered::new(a, Layered::new(b, store))`.
/// It is `Clone` when the layer and the store are (wrap a layer that is not in an `Arc`).
#[derive(Debug, Clone, Default)]
pub struct Layered<L, S> {
    layer: L,
    inner: S,
}

impl<L, S> Layered<L, S> {
    /// `inner`, with every call going through `layer`.
    pub fn new(layer: L, inner: S) -> Self {
        Layered { layer, inner }
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.layer
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<L: StoreLayer, S: LeaseStore> LeaseStore for Layered<L, S> {
    fn kind(&self) -> &'static str {
        self.layer.kind(&self.inner)
    }

    fn coordinates(&self) -> bool {
        self.layer.coordinates(&self.inner)
    }

    fn expiry_resolution(&self) -> Duration {
        self.layer.expiry_resolution(&self.inner)
    }

    fn keeps_reservations(&self) -> bool {
        self.layer.keeps_reservations(&self.inner)
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        self.layer.acquire(&self.inner, request).await
    }

    async fn renew(
        &self,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        self.layer.renew(&self.inner, key, token, lease_time).await
    }

    async fn renew_many(
        &self,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        self.layer.renew_many(&self.inner, slots, lease_time).await
    }

    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        self.layer.release(&self.inner, key, token, min_lease_time).await
    }

    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        self.layer.revoke(&self.inner, key, slot, how).await
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        self.layer.state(&self.inner, key).await
    }

    async fn claim(&self, key: &str) -> Result<Option<ClaimInfo>, Error> {
        self.layer.claim(&self.inner, key).await
    }

    async fn prefer(&self, key: &str, preferred: Option<(&str, Duration)>) -> Result<(), Error> {
        self.layer.prefer(&self.inner, key, preferred).await
    }

    async fn preference(&self, key: &str) -> Result<Option<Preference>, Error> {
        self.layer.preference(&self.inner, key).await
    }

    async fn state_many(&self, keys: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        self.layer.state_many(&self.inner, keys).await
    }

    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        self.layer.watch_releases(&self.inner, key).await
    }

    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        self.layer.watch_changes(&self.inner, key).await
    }

    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        self.layer.list_groups(&self.inner, prefix, suffix).await
    }
}

#[cfg(test)]
mod tests;
