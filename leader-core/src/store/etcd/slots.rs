//! The slots this process holds ([`Held`], a cache by token), and what is done to a held
//! slot: renew, release, moving it to another lease.
//!
//! - **Renew** keeps the slot's lease alive and, in parallel, reads the slot key's revision:
//!   one round trip, no Raft write. A renewal under another TTL moves the slot to a new
//!   lease.
//! - **Release** deletes the slot and marks the index released, in one
//!   transaction (the hand-over happens there); the lease is kept for the store's next grant.
//!   A slot granted to another process (whose lease this one cannot reuse) has its lease
//!   revoked too. Within `min_lease_time`, the slot moves to a lease that ends then.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::EtcdStore;
use super::layout::{GroupKeys, LastHolder, Slot};
use super::leases::{NewLease, secs, wall_clock_of};
use crate::store::bound::Bound;
use crate::store::{ReleaseOutcome, RenewOutcome, Revocation, SlotRef};
use crate::{Error, LeaseToken};

/// A slot this process holds (or found by reading its group).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    pub index: u32,
    pub fence: u64,
    /// The slot's lease, as last kept alive.
    pub lease: NewLease,
    pub acquired_at: SystemTime,
    /// Until when its lock-delay runs, if it was taken over.
    pub delay_until: Option<Instant>,
    /// The TTL of the holder it was taken over from, if it was (kept in its record).
    pub delay_ttl: Option<i64>,
}

/// The slots this process was granted, by token: where their lease is, so a renewal needs no
/// read first. Only a cache: a miss reads the group.
#[derive(Default)]
pub(crate) struct HeldSlots {
    by_token: std::sync::Mutex<HashMap<LeaseToken, Held>>,
}

/// How many tokens the cache keeps before it starts again (tokens whose holders vanished
/// without a release or a refused renewal would otherwise stay).
const CACHED: usize = 4096;

/// A slot's move to a new lease: its TTL, what its index's `last` key then says (`None`:
/// left as it is), and the `lease_time` the holder counts on (`None`: a longer lease than
/// asked is fine).
#[derive(Debug, Clone, Copy)]
struct Relet {
    ttl: i64,
    last: Option<LastHolder>,
    lease_time: Option<Duration>,
}

impl EtcdStore {
    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseToken, Held>> {
        self.inner.held.by_token.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn remember(&self, token: LeaseToken, held: Held) {
        let mut cache = self.cache();
        if cache.len() >= CACHED && !cache.contains_key(&token) {
            cache.clear();
        }
        cache.insert(token, held);
    }

    pub(crate) fn forget(&self, token: LeaseToken) {
        self.cache().remove(&token);
    }

    /// Whether this store holds a slot under `token`, as far as it knows.
    pub(crate) fn held_token(&self, token: LeaseToken) -> bool {
        self.cache().contains_key(&token)
    }

    /// What this process knows of `slot`: its cache entry, or what the slot's record says
    /// (a taken-over slot then waits a whole TTL from now, as its delay may still run).
    pub(crate) fn held_slot(&self, slot: &Slot) -> Held {
        if let Some(held) = self.cache().get(&slot.token) {
            return *held;
        }
        let now = Instant::now();
        Held {
            index: slot.index,
            fence: slot.fence,
            // When it was last kept alive is not known here: as if a TTL ago.
            lease: NewLease { id: slot.lease, ttl: slot.ttl, sent_at: now - secs(slot.ttl) },
            acquired_at: slot.acquired_at,
            delay_until: slot.delay_ttl.map(|ttl| now + secs(ttl)),
            delay_ttl: slot.delay_ttl,
        }
    }

    /// The slot `token` holds in the group, and whether this process granted it: from the
    /// cache, or a read.
    async fn find(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        token: LeaseToken,
    ) -> Result<Option<(Held, bool)>, Error> {
        if let Some(held) = self.cache().get(&token) {
            return Ok(Some((*held, true)));
        }
        let group = self.read(bound, keys).await?;
        Ok(group.slot_of(token).map(|slot| (self.held_slot(slot), false)))
    }

    pub(crate) async fn renew_slot(
        &self,
        keys: &GroupKeys,
        token: LeaseToken,
        ttl: i64,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        let bound = self.bound("renew");
        let Some((held, _)) = self.find(&bound, keys, token).await? else {
            return Ok(RenewOutcome::NotHeld);
        };
        let lease = if held.lease.ttl == ttl {
            // The lease kept alive, and the slot still the token's (an operator's release
            // from another process deletes it).
            let slot_key = keys.slot(held.index);
            let (alive, key) = tokio::join!(
                self.renew_kept(&bound, held.lease),
                self.still_held(&bound, &slot_key, held)
            );
            let (Some(lease), true) = (alive?, key?) else {
                self.forget(token);
                return Ok(RenewOutcome::NotHeld);
            };
            self.remember(token, Held { lease, ..held });
            lease
        } else {
            // Another TTL: a new lease. The holder may count on the longer of the two.
            let last = Some(LastHolder::Held { ttl: ttl.max(held.lease.ttl) });
            let relet = Relet { ttl, last, lease_time: Some(lease_time) };
            match self.relet(&bound, keys, token, held, relet).await? {
                Some(lease) => lease,
                None => return Ok(RenewOutcome::NotHeld),
            }
        };
        // Counted from when the keep-alive (or grant) was sent, not from its reply, which a
        // stalled process may read much later.
        Ok(RenewOutcome::Renewed {
            expires_at: wall_clock_of(lease.sent_at) + lease_time,
            expires_in: lease_time,
        })
    }

    pub(crate) async fn release_slot(
        &self,
        keys: &GroupKeys,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        let bound = self.bound("release");
        let Some((held, ours)) = self.find(&bound, keys, token).await? else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        if !ours {
            // Released by a process that was not granted it (an operator's tool, another
            // service with the token): its holder may still act, so it goes as a takeover
            // would (the next taker waits the lock-delay).
            return self.end_slot(&bound, keys, held, Revocation::AtExpiry).await;
        }
        // A slot still in its lock-delay was never acted on, but the holder it was taken
        // from may still act: its index stays marked held.
        let delayed = held.delay_until.is_some_and(|until| until > Instant::now());
        let keep = (held.acquired_at + min_lease_time)
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        if !keep.is_zero() {
            let min = self.min_ttl();
            let ttl = self.ttl_for(keep).unwrap_or(min).max(min);
            // Within the lock-delay, the index keeps the TTL its grant recorded.
            let last = (!delayed).then_some(LastHolder::Released);
            let relet = Relet { ttl, last, lease_time: None };
            let moved = self.relet(&bound, keys, token, held, relet).await?;
            self.forget(token);
            return Ok(match moved {
                Some(_) => ReleaseOutcome::Kept { expires_in: keep },
                None => ReleaseOutcome::NotHeld,
            });
        }
        let slot_key = keys.slot(held.index);
        let mut then = vec![TxnOp::delete(slot_key.as_str(), None)];
        if !delayed {
            then.push(TxnOp::put(keys.last(held.index), LastHolder::Released.value(), None));
        }
        let txn = Txn::new()
            .when([Compare::create_revision(slot_key.as_str(), CompareOp::Equal, fence(held))])
            .and_then(then);
        let reply = self.txn(&bound, txn).await?;
        self.forget(token);
        if !reply.succeeded() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        self.inner.hints.freed(&keys.range, held.index);
        if ours {
            self.unused(held.lease);
        } else if let Err(error) = self.revoke(&bound, held.lease.id).await {
            // Freed already; the holder's next renewal finds its slot key gone anyway.
            tracing::warn!(group = %keys.range.trim_end(), %error, "released, but could not revoke the slot's etcd lease; it expires by itself");
        }
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
        let held = self.held_slot(found);
        let outcome = self.end_slot(&bound, keys, held, how).await?;
        if outcome != ReleaseOutcome::NotHeld {
            self.forget(found.token);
        }
        Ok(outcome)
    }

    /// Deletes `held`'s slot for a caller that was not granted it, in one transaction that
    /// checks it is still that grant on its lease, then revokes the lease (so the holder's
    /// next renewal is refused). At expiry its index is marked held by the slot's TTL, so the
    /// next taker waits that long after its grant (the lock-delay), by when the holder's
    /// deadline has passed; now, the index is marked released and taken at once.
    async fn end_slot(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        held: Held,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        let slot_key = keys.slot(held.index);
        let ttl = held.lease.ttl.max(held.delay_ttl.unwrap_or(0));
        let last = match how {
            Revocation::Now => LastHolder::Released,
            _ => LastHolder::Held { ttl },
        };
        let txn = Txn::new()
            .when([
                Compare::create_revision(slot_key.as_str(), CompareOp::Equal, fence(held)),
                Compare::lease(slot_key.as_str(), CompareOp::Equal, held.lease.id),
            ])
            .and_then([
                TxnOp::delete(slot_key.as_str(), None),
                TxnOp::put(keys.last(held.index), last.value(), None),
            ]);
        if !self.txn(bound, txn).await?.succeeded() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        if let Err(error) = self.revoke(bound, held.lease.id).await {
            // Its key is gone already; the holder's next renewal finds it so.
            tracing::warn!(group = %keys.range.trim_end(), %error, "ended a slot, but could not revoke its etcd lease; it expires by itself");
        }
        Ok(match how {
            Revocation::Now => {
                self.inner.hints.freed(&keys.range, held.index);
                ReleaseOutcome::Released
            }
            _ => ReleaseOutcome::Kept { expires_in: secs(ttl) },
        })
    }

    /// Moves `held`'s slot to a new lease as `relet` says, in one transaction that checks the
    /// slot is still the token's on its lease; `None` when it was not.
    async fn relet(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        token: LeaseToken,
        held: Held,
        relet: Relet,
    ) -> Result<Option<NewLease>, Error> {
        let Relet { ttl, last, lease_time } = relet;
        let slot_key = keys.slot(held.index);
        let Some(holder) = self.holder_of(bound, &slot_key, held.index).await? else {
            self.forget(token);
            return Ok(None);
        };
        // Kept alive now: the holder counts its time to live from this call.
        let lease = self.lease(bound, ttl, lease_time, false).await?;
        let on_lease = PutOptions::new().with_lease(lease.id);
        let value = Slot::value(token, held.acquired_at, ttl, held.delay_ttl, &holder);
        let mut then = vec![TxnOp::put(slot_key.as_str(), value, Some(on_lease))];
        if let Some(last) = last {
            then.push(TxnOp::put(keys.last(held.index), last.value(), None));
        }
        let txn = Txn::new()
            .when([
                Compare::create_revision(slot_key.as_str(), CompareOp::Equal, fence(held)),
                Compare::lease(slot_key.as_str(), CompareOp::Equal, held.lease.id),
            ])
            .and_then(then);
        let moved = match self.txn(bound, txn).await {
            Ok(reply) if reply.succeeded() => true,
            // Sent again after a lost reply, the transaction finds its own work done.
            Ok(_) => self.on_lease(bound, &slot_key, held, lease.id).await?,
            Err(error) => {
                self.forget(token);
                return Err(error);
            }
        };
        if !moved {
            self.revoke_behind(lease.id);
            self.forget(token);
            return Ok(None);
        }
        self.revoke_behind(held.lease.id);
        self.remember(token, Held { lease, ..held });
        Ok(Some(lease))
    }

    /// Whether `held`'s slot is bound to lease `lease` now.
    async fn on_lease(
        &self,
        bound: &Bound,
        slot_key: &str,
        held: Held,
        lease: i64,
    ) -> Result<bool, Error> {
        let get = self.inner.members.call(bound, |client| {
            let key = slot_key.to_owned();
            let options = etcd_client::GetOptions::new().with_keys_only();
            async move { client.kv_client().get(key, Some(options)).await }
        });
        let reply = get.await?;
        Ok(reply
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == fence(held) && kv.lease() == lease))
    }

    /// The holder slot `index`'s key names, or `None` if the key is gone.
    async fn holder_of(
        &self,
        bound: &Bound,
        slot_key: &str,
        index: u32,
    ) -> Result<Option<String>, Error> {
        let get = self.inner.members.call(bound, |client| {
            let slot_key = slot_key.to_owned();
            async move { client.kv_client().get(slot_key, None).await }
        });
        let reply = get.await?;
        Ok(reply.kvs().first().and_then(|kv| Slot::read(index, kv)).map(|slot| slot.holder))
    }

    /// Whether slot key `slot_key` is still `held`'s grant (a linearizable read of its
    /// revision; no value is sent back).
    async fn still_held(&self, bound: &Bound, slot_key: &str, held: Held) -> Result<bool, Error> {
        let get = self.inner.members.call(bound, |client| {
            let key = slot_key.to_owned();
            let options = etcd_client::GetOptions::new().with_keys_only();
            async move { client.kv_client().get(key, Some(options)).await }
        });
        let reply = get.await?;
        Ok(reply.kvs().first().is_some_and(|kv| kv.create_revision() == fence(held)))
    }
}

/// A slot's fence as etcd's revision.
fn fence(held: Held) -> i64 {
    i64::try_from(held.fence).unwrap_or(i64::MAX)
}
