//! etcd leases for slots: granting one (learning the cluster's minimum TTL), keeping one
//! alive, revoking one, reusing the ones released slots leave ([`LeasePool`]), the marker
//! leases ([`MarkerLeases`]), and waiting out a takeover's lock-delay.
//!
//! A lease grant is a Raft write; a keep-alive is not (the leader's lessor answers it). So a
//! store keeps the leases of the slots it released, kept alive on reuse, and a warm grant
//! costs one write, the transaction. Why that is safe: a lease enters the pool only when
//! no key is bound to it and none can be: after a release transaction whose answer said it
//! deleted the lease's one slot, or an acquire whose transactions on it all answered
//! without committing. A lease named by a transaction that did not answer is never pooled
//! or used again: it is revoked (see `hints.rs`).
//!
//! A slot's marker (`last {i}`, see `layout.rs`) must outlive its holder's deadline even
//! when etcd revokes the slot's lease early: a lessor revokes a lease early only against a
//! keep-alive it missed, so markers are bound to leases nobody keeps alive, granted with a
//! long TTL and shared by the store's slots. A holder's deadline never passes its marker's
//! lease: its renewals move the marker to a fresher one before they would.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::EtcdStore;
use super::failures::lease_not_found;
use super::hints::Settling;
use super::layout::GroupKeys;
use super::ownership::{LeaseOwner, Revoking};
use crate::error::Error;
use crate::store::bound::Bound;
use crate::token::LeaseToken;

/// How many unused leases a store keeps per TTL.
const POOLED_PER_TTL: usize = 64;

/// A marker lease lives this many slot TTLs (at least [`MIN_MARKER_SECS`]): a slot moves its
/// marker to a fresher lease about every eight of its TTLs, and a group whose holder died
/// leaves nothing once that long has passed.
const MARKER_TTLS: i64 = 10;

/// The shortest marker lease, in seconds.
const MIN_MARKER_SECS: i64 = 10;

/// A lease for a slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EtcdLease {
    pub id: i64,
    /// Its TTL in seconds, as granted.
    pub ttl: i64,
    /// When its grant (or its last keep-alive) was sent: it expires no earlier than this
    /// plus its TTL.
    pub sent_at: Instant,
}

/// The leases of released slots, by TTL, to be used again.
#[derive(Default)]
pub(crate) struct LeasePool {
    by_ttl: Mutex<HashMap<i64, Vec<EtcdLease>>>,
}

impl LeasePool {
    /// A kept lease of `ttl` seconds with more than a third of it left, if there is one; the
    /// ones it let go (too close to their end) in `dropped`.
    pub(crate) fn take(&self, ttl: i64, dropped: &mut Vec<i64>) -> Option<EtcdLease> {
        let mut by_ttl = self.by_ttl.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let leases = by_ttl.get_mut(&ttl)?;
        while let Some(lease) = leases.pop() {
            if lease.sent_at.elapsed() < secs(ttl) * 2 / 3 {
                return Some(lease);
            }
            dropped.push(lease.id);
        }
        None
    }

    /// Keeps `lease` for reuse; `false` if the pool is full (the caller revokes it). The
    /// leases it let go (expired) go to `dropped`.
    fn give(&self, lease: EtcdLease, dropped: &mut Vec<i64>) -> bool {
        let mut by_ttl = self.by_ttl.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let leases = by_ttl.entry(lease.ttl).or_default();
        leases.retain(|kept| {
            let alive = kept.sent_at.elapsed() < secs(kept.ttl);
            if !alive {
                dropped.push(kept.id);
            }
            alive
        });
        if leases.len() >= POOLED_PER_TTL {
            return false;
        }
        leases.push(lease);
        true
    }
}

impl EtcdLease {
    /// When it expires at the earliest, if nobody keeps it alive.
    pub(crate) fn expires_at(&self) -> Instant {
        self.sent_at + secs(self.ttl)
    }
}

/// The store's marker leases (never kept alive), by when they expire.
#[derive(Default)]
pub(crate) struct MarkerLeases {
    current: Mutex<Vec<EtcdLease>>,
}

impl MarkerLeases {
    /// A marker lease that lives at least `needed` more, if the store has one.
    fn living(&self, needed: Duration) -> Option<EtcdLease> {
        let mut current = self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        current.retain(|lease| lease.expires_at() > now);
        current
            .iter()
            .copied()
            .filter(|lease| lease.expires_at() >= now + needed)
            .max_by_key(EtcdLease::expires_at)
    }

    fn add(&self, lease: EtcdLease) {
        let mut current = self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        current.push(lease);
    }
}

/// The TTL of a marker lease for slots of `ttl` seconds.
fn marker_ttl(ttl: i64) -> i64 {
    ttl.saturating_mul(MARKER_TTLS).clamp(MIN_MARKER_SECS, super::MAX_TTL_SECS)
}

impl EtcdStore {
    /// A marker lease for a slot of `ttl` seconds that lives at least five of its TTLs more
    /// (past a deadline one TTL ahead, by more than the three a renewal keeps before it
    /// moves the marker): one the store has, or a new one.
    pub(crate) async fn marker_lease(&self, bound: &Bound, ttl: i64) -> Result<EtcdLease, Error> {
        let needed = secs(ttl.saturating_mul(5));
        if let Some(lease) = self.inner.markers.living(needed) {
            return Ok(lease);
        }
        let lease = self.grant_lease(bound, marker_ttl(ttl), None).await?;
        self.inner.markers.add(lease);
        Ok(lease)
    }

    /// Settles the leases `token`'s unanswered transactions in group `keys` named, waiting
    /// for each answer: a lease of the slot's alone is revoked, so whatever they bound is
    /// gone and nothing more can be bound to it; on a session's lease, the group's grants
    /// decided so far are fenced off ([`fence_off`](Self::fence_off)). An error if that did
    /// not answer (the token's next call tries again).
    pub(crate) async fn settle(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        token: LeaseToken,
    ) -> Result<(), Error> {
        for (lease, settling) in self.inner.hints.unanswered_leases(token) {
            match settling {
                Settling::Revoke => self.revoke(bound, lease).await?,
                Settling::FenceOff => self.fence_off(bound, keys, lease).await?,
            }
            self.inner.hints.settled(token, lease);
        }
        Ok(())
    }

    /// A lease of `ttl` seconds: a kept one, kept alive now (no Raft write), or a new grant.
    /// With `reuse_fresh`, a kept lease kept alive within the last third of its TTL is used
    /// as it is (two thirds of it are left; the caller counts from its `sent_at`); without,
    /// the lease's TTL counts from this call. See [`grant_lease`](Self::grant_lease) for
    /// `lease_time`.
    pub(crate) async fn lease(
        &self,
        bound: &Bound,
        ttl: i64,
        lease_time: Option<Duration>,
        reuse_fresh: bool,
    ) -> Result<EtcdLease, Error> {
        while let Some(kept) = self.take_kept(ttl) {
            if reuse_fresh && kept.sent_at.elapsed() < secs(ttl) / 3 {
                return Ok(kept);
            }
            if let Some(alive) = self.renew_kept(bound, kept).await? {
                return Ok(alive);
            }
        }
        self.grant_lease(bound, ttl, lease_time).await
    }

    /// Keeps `kept` alive: the lease with its new `sent_at`, or `None` if it is gone.
    pub(crate) async fn renew_kept(
        &self,
        bound: &Bound,
        kept: EtcdLease,
    ) -> Result<Option<EtcdLease>, Error> {
        let sent_at = Instant::now();
        let alive = self.keep_alive(bound, kept.id, kept.ttl).await?;
        Ok(alive.then_some(EtcdLease { sent_at, ..kept }))
    }

    /// A lease of `owner`'s taken for a grant that did not happen, or left by a release:
    /// kept for the next grant if it is the slot's alone (a session's lease stays the
    /// session's).
    pub(crate) fn unused(&self, lease: EtcdLease, owner: LeaseOwner) {
        if !owner.pooled_once_unbound() {
            return;
        }
        let mut dropped = Vec::new();
        if !self.inner.leases.give(lease, &mut dropped) {
            self.revoke_behind(lease.id);
        }
        self.streams_gone(&dropped);
    }

    /// A kept lease of `ttl` seconds from the pool (see [`LeasePool::take`]).
    pub(crate) fn take_kept(&self, ttl: i64) -> Option<EtcdLease> {
        let mut dropped = Vec::new();
        let kept = self.inner.leases.take(ttl, &mut dropped);
        self.streams_gone(&dropped);
        kept
    }

    /// The keep-alive streams of leases the pool let go are closed.
    fn streams_gone(&self, dropped: &[i64]) {
        for lease in dropped {
            self.inner.keep_alives.forget(*lease);
        }
    }

    /// [`unused`](Self::unused), for a lease an acquire may have taken.
    pub(crate) fn put_back(&self, lease: Option<EtcdLease>, owner: LeaseOwner) {
        if let Some(lease) = lease {
            self.unused(lease, owner);
        }
    }

    /// Grants a lease of `ttl` seconds. If the cluster raised it to its minimum, the minimum
    /// is remembered and, for a `lease_time` the holder counts on, refused (and the lease
    /// revoked); `None` takes a longer lease (a release kept for its minimum lease).
    pub(crate) async fn grant_lease(
        &self,
        bound: &Bound,
        ttl: i64,
        lease_time: Option<Duration>,
    ) -> Result<EtcdLease, Error> {
        let sent_at = Instant::now();
        let reply = self
            .inner
            .members
            .call(bound, |client| async move { client.lease_client().grant(ttl, None).await })
            .await?;
        let lease = EtcdLease { id: reply.id(), ttl: reply.ttl(), sent_at };
        if lease.ttl > ttl {
            self.inner.min_ttl.fetch_max(lease.ttl, Ordering::Relaxed);
            if let Some(lease_time) = lease_time {
                self.revoke_behind(lease.id);
                return Err(too_short(lease_time, lease.ttl));
            }
        }
        Ok(lease)
    }

    /// Revokes a lease no key uses, without waiting (it would expire by itself anyway).
    pub(crate) fn revoke_behind(&self, lease: i64) {
        self.inner.keep_alives.forget(lease);
        let members = self.inner.members.clone();
        tokio::spawn(async move {
            let bound = members.bound("revoke");
            let revoke = members
                .call(&bound, |client| async move { client.lease_client().revoke(lease).await });
            if let Err(error) = revoke.await {
                tracing::debug!(lease, %error, "could not revoke an unused etcd lease; it expires by itself");
            }
        });
    }

    /// Revokes `lease` of `owner`'s, which a slot moved off, in the background, as its
    /// owner allows ([`LeaseOwner::revoking`]).
    pub(crate) fn revoke_behind_as(&self, lease: i64, owner: LeaseOwner) {
        match owner.revoking() {
            Revoking::Never => {}
            Revoking::Always => self.revoke_behind(lease),
            Revoking::IfUnshared => {
                let store = self.clone();
                tokio::spawn(async move {
                    let bound = store.inner.members.bound("revoke");
                    if let Err(error) = store.revoke_as(&bound, lease, owner).await {
                        tracing::debug!(lease, %error, "could not revoke an etcd lease a slot moved off; it expires by itself");
                    }
                });
            }
        }
    }

    /// Revokes `lease` of `owner`'s, whose slot is gone, as its owner allows
    /// ([`LeaseOwner::revoking`]): a lease that may be shared is revoked only if a read of
    /// its time to live lists no key (a session's lease of another process is not known
    /// here).
    pub(crate) async fn revoke_as(
        &self,
        bound: &Bound,
        lease: i64,
        owner: LeaseOwner,
    ) -> Result<(), Error> {
        match owner.revoking() {
            Revoking::Never => Ok(()),
            Revoking::Always => self.revoke(bound, lease).await,
            Revoking::IfUnshared => {
                let life = self.inner.members.call(bound, |client| async move {
                    let keys = etcd_client::LeaseTimeToLiveOptions::new().with_keys();
                    client.lease_client().time_to_live(lease, Some(keys)).await
                });
                if life.await?.keys().is_empty() {
                    self.revoke(bound, lease).await?;
                }
                Ok(())
            }
        }
    }

    /// Revokes `lease`, waiting for the answer (a renewal under it fails from then on).
    pub(crate) async fn revoke(&self, bound: &Bound, lease: i64) -> Result<(), Error> {
        self.inner.keep_alives.forget(lease);
        let members = &self.inner.members;
        // A lease already gone (expired, or revoked before) is revoked.
        let revoke = members.call(bound, |client| async move {
            match client.lease_client().revoke(lease).await {
                Err(error) if !lease_not_found(&error) => Err(error),
                _ => Ok(()),
            }
        });
        revoke.await
    }

    /// Waits out a takeover's lock-delay until `until`, keeping `lease` alive (every third of
    /// its TTL, and once at the end); returns the lease as last kept alive, or `None` if it
    /// was lost meanwhile.
    pub(crate) async fn lock_delay(
        &self,
        lease: EtcdLease,
        until: Instant,
    ) -> Result<Option<EtcdLease>, Error> {
        let every = secs(lease.ttl) / 3;
        let mut lease = lease;
        loop {
            let next = (lease.sent_at + every).min(until);
            tokio::time::sleep_until(next).await;
            match self.renew_kept(&self.bound("acquire"), lease).await? {
                Some(alive) => lease = alive,
                None => return Ok(None),
            }
            if next >= until {
                return Ok(Some(lease));
            }
        }
    }
}

/// The wall-clock time of `at`: when a call was sent, for an expiry reported on the wall
/// clock (etcd has no clock of its own to report).
pub(crate) fn wall_clock_of(at: Instant) -> std::time::SystemTime {
    let now = std::time::SystemTime::now();
    now.checked_sub(at.elapsed()).unwrap_or(now)
}

/// `ttl` seconds.
pub(crate) fn secs(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}

/// The error for a `lease_time` below the cluster's minimum TTL (`min` seconds).
pub(crate) fn too_short(lease_time: Duration, min: i64) -> Error {
    Error::invalid_option(
        "lease_time",
        lease_time,
        format!(
            "must be more than {}s with this etcd cluster: rounded up to whole seconds, at \
             least its minimum lease TTL of {min}s (one and a half election timeouts, rounded \
             up to a second)",
            min - 1
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn kept_leases_are_reused_only_while_most_of_their_ttl_is_left() {
        let pool = LeasePool::default();
        let lease = |id| EtcdLease { id, ttl: 3, sent_at: Instant::now() };
        let mut dropped = Vec::new();
        assert!(pool.give(lease(1), &mut dropped));
        assert_eq!(pool.take(3, &mut dropped).map(|lease| lease.id), Some(1));
        assert!(pool.take(3, &mut dropped).is_none() && pool.take(5, &mut dropped).is_none());
        assert!(pool.give(lease(2), &mut dropped));
        tokio::time::advance(Duration::from_millis(2_100)).await;
        assert!(pool.take(3, &mut dropped).is_none(), "less than a third of its TTL left");
        assert_eq!(dropped, [2], "let go, its stream with it");
        for id in 0..POOLED_PER_TTL as i64 {
            assert!(pool.give(lease(id), &mut dropped));
        }
        assert!(!pool.give(lease(99), &mut dropped), "full");
    }
}
