//! The slots this store knows ([`KnownSlot`], a cache by token: those it was granted, and
//! those it found by reading), and their renewal; ending one and moving it to another lease
//! are in `release.rs`.
//!
//! **Renew** keeps the slot's lease alive on its stream and, in parallel, reads the slot key
//! (one round trip, no Raft write), which must still be the grant on that lease. When the
//! holder's new deadline would come near the end of its marker's lease, the marker moves to
//! a fresher one first (one transaction every few TTLs); if it cannot, the renewal's time to
//! live stops at the marker's end. A renewal under another TTL moves the slot to a new lease.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use lru::LruCache;
use tokio::time::Instant;

use super::bounded::{Bounded, MOST};
use super::layout::{GroupKeys, Slot, held_marker};
use super::leases::{EtcdLease, secs, wall_clock_of};
use super::ownership::LeaseOwner;
use super::release::Relet;
use super::{EtcdStore, OnLease};
use crate::error::Error;
use crate::store::RenewOutcome;
use crate::store::bound::Bound;
use crate::token::LeaseToken;

/// What this store knows of a slot: one it was granted, or found by reading its group.
#[derive(Debug, Clone)]
pub(crate) struct KnownSlot {
    /// The group's range (`GroupKeys::range`): the cache is by token, and a call may name
    /// another group under the same token.
    pub group: std::sync::Arc<str>,
    /// The slot as its key holds it (its lease's TTL and its lock-delay included).
    pub slot: Slot,
    /// The slot's lease, as last kept alive.
    pub lease: EtcdLease,
    /// The lease its marker is bound to (never kept alive).
    pub marker: EtcdLease,
    /// Until when its lock-delay runs, if it waits one.
    pub delay_until: Option<Instant>,
    /// Whose its lease is: what may be done with it (see `ownership.rs`).
    pub owner: LeaseOwner,
}

impl KnownSlot {
    fn fence(&self) -> i64 {
        i64::try_from(self.slot.fence).unwrap_or(i64::MAX)
    }

    /// The compares that the slot is still this grant, on its lease.
    pub(super) fn still_this_grant(&self, slot_key: &str) -> [Compare; 2] {
        [
            Compare::create_revision(slot_key, CompareOp::Equal, self.fence()),
            Compare::lease(slot_key, CompareOp::Equal, self.lease.id),
        ]
    }
}

/// The slots this process knows, by token: where their lease is, so a renewal needs no read
/// first. Only a cache: a miss reads the group.
pub(crate) struct KnownSlots {
    by_token: Bounded<LeaseToken, KnownSlot>,
    /// The size at which the next insert lets go of dead entries (twice the live ones).
    sweep_at: std::sync::atomic::AtomicUsize,
}

impl Default for KnownSlots {
    fn default() -> Self {
        KnownSlots {
            by_token: Bounded::new(MOST),
            sweep_at: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

/// How many tokens the cache keeps before it first lets go of the ones not kept alive for two
/// TTLs (tokens whose holders vanished without a release or a refused renewal would
/// otherwise stay; a session's slots are kept alive by its lease, and go when released or
/// refused); then again each time it has doubled. Above [`MOST`] live slots, the one used
/// least recently goes (its next renewal reads its group).
const SWEPT_FROM: usize = 4096;

impl EtcdStore {
    fn cache(&self) -> std::sync::MutexGuard<'_, LruCache<LeaseToken, KnownSlot>> {
        self.inner.held.by_token.lock()
    }

    pub(crate) fn remember(&self, held: KnownSlot) {
        use std::sync::atomic::Ordering::Relaxed;
        let sweep_at = self.inner.held.sweep_at.load(Relaxed).max(SWEPT_FROM);
        let sessions = match self.cache().len() >= sweep_at {
            true => Some(self.inner.sessions.lease_ids()),
            false => None,
        };
        let mut cache = self.cache();
        if let Some(sessions) = sessions
            && !cache.contains(&held.slot.token)
        {
            Bounded::retain(&mut cache, |_, kept| {
                sessions.contains(&kept.lease.id)
                    || kept.lease.sent_at.elapsed() < secs(kept.lease.ttl.saturating_mul(2))
            });
            self.inner.held.sweep_at.store(cache.len().saturating_mul(2).max(SWEPT_FROM), Relaxed);
        }
        cache.put(held.slot.token, held);
    }

    pub(crate) fn forget(&self, token: LeaseToken) {
        self.cache().pop(&token);
    }

    /// Forgets `token`'s slot if it is of group `keys` (a call that named another group
    /// under the token says nothing of the slot the token holds).
    pub(crate) fn forget_in(&self, keys: &GroupKeys, token: LeaseToken) {
        let mut cache = self.cache();
        if cache.get(&token).is_some_and(|held| *held.group == *keys.range) {
            cache.pop(&token);
        }
    }

    /// What this store holds under `token`, if it knows.
    pub(crate) fn cached(&self, token: LeaseToken) -> Option<KnownSlot> {
        self.cache().get(&token).cloned()
    }

    /// Whether this store holds a slot under `token`, as far as it knows.
    pub(crate) fn held_token(&self, token: LeaseToken) -> bool {
        self.cache().contains(&token)
    }

    /// What this process knows of `slot` (whose index's marker lives on `marker_lease`): its
    /// cache entry, or what the slot's record says (its lease as if kept alive a TTL ago;
    /// its marker's lease as if it ended now, so the first renewal moves the marker; a
    /// pending slot waits a whole delay from now; its owner as a read tells it: see
    /// [`owner_found`](Self::owner_found)).
    pub(crate) fn known_slot(
        &self,
        keys: &GroupKeys,
        slot: &Slot,
        marker_lease: Option<i64>,
    ) -> KnownSlot {
        if let Some(held) = self.cache().get(&slot.token)
            && held.slot.fence == slot.fence
            && *held.group == *keys.range
        {
            return held.clone();
        }
        let now = Instant::now();
        KnownSlot {
            group: keys.range.as_str().into(),
            slot: slot.clone(),
            // Only a starting point: every use keeps the lease alive first, which sets it.
            lease: EtcdLease {
                id: slot.lease,
                ttl: slot.ttl,
                sent_at: now.checked_sub(secs(slot.ttl)).unwrap_or(now),
            },
            marker: EtcdLease { id: marker_lease.unwrap_or(0), ttl: 0, sent_at: now },
            delay_until: slot.delay_ttl.map(|ttl| now + secs(ttl)),
            owner: self.owner_found(slot.lease),
        }
    }

    /// The slot `token` holds in the group: from the cache, or a read.
    pub(super) async fn find(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        token: LeaseToken,
    ) -> Result<Option<KnownSlot>, Error> {
        if let Some(held) = self.cached(token).filter(|held| *held.group == *keys.range) {
            return Ok(Some(held));
        }
        let group = self.read(bound, keys).await?;
        Ok(group.slot_of(token).map(|slot| {
            let marker = group.markers.get(&slot.index).map(|marker| marker.lease);
            self.known_slot(keys, slot, marker)
        }))
    }

    pub(crate) async fn renew_slot(
        &self,
        keys: &GroupKeys,
        token: LeaseToken,
        ttl: i64,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        let bound = self.bound("renew");
        self.settle(&bound, keys, token).await?;
        let Some(mut held) = self.find(&bound, keys, token).await? else {
            return Ok(RenewOutcome::NotHeld);
        };
        let lease = if held.lease.ttl == ttl {
            // The lease kept alive, and the slot still this grant on it (a revocation by
            // another process deletes it).
            let slot_key = keys.slot(held.slot.index);
            let (alive, key) = tokio::join!(
                self.renew_kept(&bound, held.lease),
                self.still_held(&bound, &slot_key, &held)
            );
            let (Some(lease), true) = (alive?, key?) else {
                self.forget_in(keys, token);
                return Ok(RenewOutcome::NotHeld);
            };
            held.lease = lease;
            self.remember(held.clone());
            lease
        } else {
            // Another TTL: a new lease. The holder may count on the longer of the two.
            let relet = Relet { ttl, released: false, lease_time: Some(lease_time) };
            match self.relet(&bound, keys, &held, relet).await? {
                Some(moved) => {
                    held = moved;
                    held.lease
                }
                None => return Ok(RenewOutcome::NotHeld),
            }
        };
        // Counted from when the keep-alive (or grant) was sent, not from its reply, which a
        // stalled process may read much later; never past the marker's lease.
        let lives = self.within_marker(&bound, keys, &mut held, lease, lease_time).await;
        Ok(RenewOutcome::Renewed {
            expires_at: wall_clock_of(lease.sent_at) + lives,
            expires_in: lives,
        })
    }

    /// How long a slot kept alive at `lease.sent_at` may be counted on: `lease_time`, unless
    /// its marker's lease ends sooner. A marker whose lease ends within three TTLs of the
    /// slot's new deadline moves to a fresher one first; if that fails, the time is cut to
    /// the marker's end.
    pub(crate) async fn within_marker(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        held: &mut KnownSlot,
        lease: EtcdLease,
        lease_time: Duration,
    ) -> Duration {
        let deadline = lease.sent_at + lease_time;
        if held.marker.expires_at() < deadline + secs(lease.ttl.saturating_mul(3)) {
            match self.move_marker(bound, keys, held).await {
                Ok(true) => self.remember(held.clone()),
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(group = %keys.range.trim_end(), %error, "could not move a slot's marker to a fresher lease; the renewal counts up to the marker's end");
                }
            }
        }
        let until_marker = held.marker.expires_at().saturating_duration_since(lease.sent_at);
        lease_time.min(until_marker)
    }

    /// Moves `held`'s marker to a marker lease that lives three TTLs more (and longer than
    /// the one it is on), in one transaction that checks the slot is still this grant and
    /// the marker still on the lease this store put it on (so a move that commits late never
    /// takes it back to a lease that ends sooner); `false` if not.
    async fn move_marker(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        held: &mut KnownSlot,
    ) -> Result<bool, Error> {
        let marker = self.marker_lease(bound, held.slot.ttl).await?;
        if marker.id == held.marker.id {
            // On that lease already (a slot found by a read knows its marker's lease by id
            // only, as if it ended now): its end is the one this store granted it with.
            held.marker = marker;
            return Ok(true);
        }
        if marker.expires_at() <= held.marker.expires_at() {
            return Ok(false);
        }
        let slot_key = keys.slot(held.slot.index);
        let marker_key = keys.last(held.slot.index);
        let recorded = held.slot.ttl.max(held.slot.delay_ttl.unwrap_or(0));
        let mut when = held.still_this_grant(&slot_key).to_vec();
        when.push(Compare::lease(marker_key.as_str(), CompareOp::Equal, held.marker.id));
        let txn = Txn::new().when(when).and_then([TxnOp::put(
            marker_key.as_str(),
            held_marker(recorded, held.slot.max_leaders),
            Some(PutOptions::new().with_lease(marker.id)),
        )]);
        let moved = self.txn(bound, txn).await?.succeeded();
        if moved {
            held.marker = marker;
        }
        Ok(moved)
    }

    /// Whether slot key `slot_key` is still `held`'s grant on its lease (a linearizable read
    /// of its revision and lease; no value is sent back).
    async fn still_held(
        &self,
        bound: &Bound,
        slot_key: &str,
        held: &KnownSlot,
    ) -> Result<bool, Error> {
        let get = self.inner.members.call(bound, |client| {
            let key = slot_key.to_owned();
            let options = GetOptions::new().with_keys_only();
            async move { client.kv_client().get(key, Some(options)).await }
        });
        let reply = get.await?;
        Ok(reply
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == held.fence() && kv.lease() == held.lease.id))
    }

    /// Sends `txn`, which binds keys to `lease` (of `owner`'s) for `token`: a lease whose
    /// owner settles lost replies ([`LeaseOwner::settling`]) is recorded as named by an
    /// unanswered transaction until the answer comes (see `hints.rs`).
    pub(crate) async fn send(
        &self,
        bound: &Bound,
        token: LeaseToken,
        lease: i64,
        owner: LeaseOwner,
        txn: Txn,
    ) -> Result<etcd_client::TxnResponse, Error> {
        self.send_on_lease(bound, token, lease, owner, txn).await?.reply()
    }

    /// [`send`](Self::send), telling a lease found gone apart (etcd refuses a transaction
    /// that puts a key on a lease it does not have).
    pub(crate) async fn send_on_lease(
        &self,
        bound: &Bound,
        token: LeaseToken,
        lease: i64,
        owner: LeaseOwner,
        txn: Txn,
    ) -> Result<OnLease, Error> {
        // A lease an adopted or found slot is on carries another process's slots: an
        // unanswered transaction on it is not settled, and a late commit on it gives the
        // token no second slot (see `sessions.rs`).
        let Some(settling) = owner.settling() else {
            return self.txn_on_lease(bound, txn).await;
        };
        self.inner.hints.sending(token, lease, settling);
        let reply = self.txn_on_lease(bound, txn).await;
        if reply.is_ok() || reply.as_ref().is_err_and(|error| !error.is_transient()) {
            // Answered: committed or not, nothing more comes of it.
            self.inner.hints.answered(token, lease);
        }
        reply
    }
}
