//! Ending a held slot, and moving it to another lease:
//!
//! - **Release** deletes the slot and its marker in one transaction that writes nothing (so
//!   it also works past etcd's space quota): the hand-over happens there, and the lease is
//!   kept for the store's next grant if it was the slot's alone. A slot this store found by
//!   reading (another process's, released with its token) is ended as a revocation at
//!   expiry instead. Within `min_lease_time`, the slot moves to a lease that ends then.
//! - **Revoke** (a caller that was not granted the slot) deletes the slot and marks its
//!   index held, then revokes its lease as its owner allows: the holder's next renewal is
//!   refused, and the next taker waits the lock-delay. `Revocation::Now` marks nothing.
//! - **Relet** moves a slot to a new lease of its own (a renewal under another TTL, a
//!   release kept for its minimum lease); the old lease is revoked as its owner allows.

use std::time::{Duration, SystemTime};

use etcd_client::{GetOptions, PutOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::EtcdStore;
use super::layout::{GroupKeys, held_marker};
use super::leases::secs;
use super::ownership::LeaseOwner;
use super::slots::KnownSlot;
use crate::error::Error;
use crate::store::bound::Bound;
use crate::store::{ReleaseOutcome, Revocation, SlotRef};
use crate::token::LeaseToken;

/// A slot's move to a new lease: its TTL, whether its marker is deleted (a release kept for
/// its minimum lease: the holder acts no more), and the `lease_time` the holder counts on
/// (`None`: a longer lease than asked is fine).
#[derive(Debug, Clone, Copy)]
pub(super) struct Relet {
    pub ttl: i64,
    pub released: bool,
    pub lease_time: Option<Duration>,
}

impl EtcdStore {
    pub(crate) async fn release_slot(
        &self,
        keys: &GroupKeys,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        let bound = self.bound("release");
        self.settle(&bound, keys, token).await?;
        let Some(held) = self.find(&bound, keys, token).await? else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        if !held.owner.releases_as_holder() {
            // Released by a process that was not granted it (an operator's tool, another
            // service with the token): its holder may still act, so it goes as a takeover
            // would (the next taker waits the lock-delay).
            return self.end_slot(&bound, keys, &held, Revocation::AtExpiry).await;
        }
        // A slot still in its lock-delay was never acted on, but the holder it was taken
        // from may still act: its marker stays.
        let delayed = held.delay_until.is_some_and(|until| until > Instant::now());
        let keep = (held.slot.acquired_at + min_lease_time)
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        if !keep.is_zero() {
            let min = self.min_ttl();
            // Below the cluster's minimum TTL the lease is the minimum (a little longer than
            // asked, which is safe); beyond etcd's longest, the error says so.
            let ttl = match self.ttl_for(keep) {
                Ok(ttl) => ttl.max(min),
                Err(_) if keep < secs(super::MAX_TTL_SECS) => min,
                Err(error) => return Err(error),
            };
            let relet = Relet { ttl, released: !delayed, lease_time: None };
            let moved = self.relet(&bound, keys, &held, relet).await?;
            self.forget_in(keys, token);
            return Ok(match moved {
                Some(_) => ReleaseOutcome::Kept { expires_in: keep },
                None => ReleaseOutcome::NotHeld,
            });
        }
        let slot_key = keys.slot(held.slot.index);
        let mut then = vec![TxnOp::delete(slot_key.as_str(), None)];
        if !delayed {
            then.push(TxnOp::delete(keys.last(held.slot.index), None));
        }
        let txn = Txn::new()
            .when(held.still_this_grant(&slot_key))
            .and_then(then)
            .or_else([TxnOp::get(slot_key.as_str(), Some(GetOptions::new().with_keys_only()))]);
        // On a lease that is not the slot's alone (a session's, or one adopted), a release
        // that got no answer is the caller's to ask again: the lease is not revoked to
        // settle it.
        let settles = held.owner.settles_lost_replies();
        let reply = match self.send(&bound, token, held.lease.id, held.owner, txn).await {
            Ok(reply) => reply,
            Err(error) if !settles => return Err(error),
            Err(error) if error.is_transient() => {
                // No answer: its lease revoked, so the slot is gone whether the transaction
                // committed or not (its index keeps its marker if it had not: one lock-delay
                // too many, never one too few).
                self.settle(&bound, keys, token).await?;
                self.forget_in(keys, token);
                return Ok(ReleaseOutcome::Released);
            }
            Err(error) => return Err(error),
        };
        self.forget_in(keys, token);
        if !reply.succeeded() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let revision = reply.header().map_or(0, |header| header.revision());
        self.inner.hints.freed(&keys.range, held.slot.index, revision);
        self.unused(held.lease, held.owner);
        Ok(ReleaseOutcome::Released)
    }

    /// [`LeaseStore::revoke`](crate::LeaseStore::revoke): the slot named by its token or its
    /// fence, read from the group.
    pub(crate) async fn revoke_slot(
        &self,
        keys: &GroupKeys,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        let bound = self.bound("revoke");
        let group = self.read(&bound, keys).await?;
        let found = group.slots.iter().find(|held| match slot {
            SlotRef::Token(token) => held.token == token,
            SlotRef::Fence(fence) => held.fence == fence,
        });
        let Some(found) = found else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let marker = group.markers.get(&found.index).map(|marker| marker.lease);
        let held = self.known_slot(keys, found, marker);
        let outcome = self.end_slot(&bound, keys, &held, how).await?;
        if outcome != ReleaseOutcome::NotHeld {
            self.forget_in(keys, found.token);
        }
        Ok(outcome)
    }

    /// Deletes `held`'s slot for a caller that was not granted it, in one transaction that
    /// checks it is still that grant on its lease, then revokes the lease (so the holder's
    /// next renewal is refused). At expiry its index is marked held by the slot's TTL, so the
    /// next taker waits that long after its grant (the lock-delay), by when the holder's
    /// deadline has passed; now, its marker goes and the index is taken at once.
    async fn end_slot(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        held: &KnownSlot,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        let slot_key = keys.slot(held.slot.index);
        let ttl = held.slot.ttl.max(held.slot.delay_ttl.unwrap_or(0));
        let marker = match how {
            Revocation::Now => TxnOp::delete(keys.last(held.slot.index), None),
            _ => {
                let lease = self.marker_lease(bound, ttl).await?;
                let on_marker = PutOptions::new().with_lease(lease.id);
                let marked = held_marker(ttl, held.slot.max_leaders);
                TxnOp::put(keys.last(held.slot.index), marked, Some(on_marker))
            }
        };
        let txn = Txn::new()
            .when(held.still_this_grant(&slot_key))
            .and_then([TxnOp::delete(slot_key.as_str(), None), marker]);
        let reply = self.txn(bound, txn).await?;
        if !reply.succeeded() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        if let Err(error) = self.revoke_as(bound, held.lease.id, held.owner).await {
            // Its key is gone already; the holder's next renewal finds it so.
            tracing::warn!(group = %keys.range.trim_end(), %error, "ended a slot, but could not revoke its etcd lease; it expires by itself");
        }
        Ok(match how {
            Revocation::Now => {
                let revision = reply.header().map_or(0, |header| header.revision());
                self.inner.hints.freed(&keys.range, held.slot.index, revision);
                ReleaseOutcome::Released
            }
            _ => ReleaseOutcome::Kept { expires_in: secs(ttl) },
        })
    }

    /// Moves `held`'s slot to a new lease as `relet` says, in one transaction that checks the
    /// slot is still this grant on its lease; the slot as moved, or `None` when it was not.
    pub(super) async fn relet(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        held: &KnownSlot,
        relet: Relet,
    ) -> Result<Option<KnownSlot>, Error> {
        let Relet { ttl, released, lease_time } = relet;
        let token = held.slot.token;
        let slot_key = keys.slot(held.slot.index);
        // Kept alive now: the holder counts its time to live from this call.
        let lease = self.lease(bound, ttl, lease_time, false).await?;
        let mut moved = held.slot.clone();
        moved.ttl = ttl;
        moved.lease = lease.id;
        let on_lease = PutOptions::new().with_lease(lease.id);
        let mut then = vec![TxnOp::put(slot_key.as_str(), moved.value().encode(), Some(on_lease))];
        let mut marker = held.marker;
        if released {
            then.push(TxnOp::delete(keys.last(held.slot.index), None));
        } else if ttl > held.slot.ttl.max(held.slot.delay_ttl.unwrap_or(0)) {
            // Whoever takes the index next waits for the longer TTL.
            marker = self.marker_lease(bound, ttl).await?;
            let on_marker = PutOptions::new().with_lease(marker.id);
            let marked = held_marker(ttl, held.slot.max_leaders);
            then.push(TxnOp::put(keys.last(held.slot.index), marked, Some(on_marker)));
        }
        let txn = Txn::new().when(held.still_this_grant(&slot_key)).and_then(then);
        let reply = match self.send(bound, token, lease.id, LeaseOwner::Slot, txn).await {
            Ok(reply) => reply,
            Err(error) => {
                // Perhaps moved unseen: revoked with the rest at the next attempt.
                self.forget_in(keys, token);
                return Err(error);
            }
        };
        if !reply.succeeded() {
            self.unused(lease, LeaseOwner::Slot);
            self.forget_in(keys, token);
            return Ok(None);
        }
        // The old lease may carry other slots (a session's, of this process or another).
        self.revoke_behind_as(held.lease.id, held.owner);
        moved.fence = held.slot.fence;
        // A lease of its own now (a session's slot moved off its session included).
        let owner = held.owner.moved();
        let moved = KnownSlot { slot: moved, lease, marker, owner, ..held.clone() };
        self.remember(moved.clone());
        Ok(Some(moved))
    }
}
