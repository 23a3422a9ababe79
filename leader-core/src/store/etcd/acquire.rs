//! Acquire: read the group, and take a free index in one transaction.
//!
//! 1. Read the group's range (a linearizable read: no Raft write), and at the same time keep
//!    a reused lease alive. A full group, a mismatched `max_leaders` and a token that already
//!    holds a slot are answered from the read: one round trip, nothing written.
//! 2. Otherwise, with a lease (the reused one, or a new grant: etcd needs the lease before
//!    the transaction that binds keys to it), one transaction: *if* the chosen index, its
//!    `last` key and the group's `max` key are as the read saw them and the token holds no
//!    slot, *then* write the slot and token keys on the lease and mark the index held;
//!    *else* read the group again, and choose again from that.
//!
//! A grant is two round trips with a reused lease (the read and the keep-alive in
//! parallel, then the transaction) and three with a new one; one Raft write either way, two
//! with a new lease.

use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use tokio::time::Instant;

use super::EtcdStore;
use super::group::Group;
use super::layout::{self, GroupKeys, LastHolder, Slot};
use super::leases::{NewLease, secs};
use super::slots::Held;
use crate::Error;
use crate::store::bound::Bound;
use crate::store::{AcquireOutcome, AcquireRequest, Grant};

/// How many transactions one acquire makes before it reports the group full: each failed one
/// means another candidate took the index it chose.
const MAX_ROUNDS: usize = 16;

impl EtcdStore {
    pub(crate) async fn take_slot(
        &self,
        request: AcquireRequest<'_>,
        keys: &GroupKeys,
        ttl: i64,
    ) -> Result<AcquireOutcome, Error> {
        let started = Instant::now();
        let bound = self.bound("acquire");
        let (mut group, mut lease) = self.read_with_kept_lease(&bound, keys, ttl).await?;
        for _ in 0..MAX_ROUNDS {
            if let Some(slot) = group.slot_of(request.token) {
                // Held already: an earlier attempt's grant (its reply lost, say).
                self.put_back(lease);
                let held = self.held_slot(slot);
                return self.grant_again(&bound, &request, held, started).await;
            }
            if let Some(existing) = group.live_max()
                && existing != request.max_leaders.get()
            {
                self.put_back(lease);
                return Err(Error::MaxLeadersMismatch {
                    group: request.key.to_owned(),
                    requested: request.max_leaders.get(),
                    existing,
                });
            }
            let Some(index) = group.free_index(request.max_leaders.get(), request.token) else {
                self.put_back(lease);
                // The shortest TTL among the slots: an upper bound of the nearest expiry
                // (waiters wake at the true one from the watch's delete event).
                let nearest = group.slots.iter().map(|slot| slot.ttl).min().unwrap_or(1);
                return Ok(AcquireOutcome::Full { nearest_expiry: secs(nearest) });
            };
            let new = match lease {
                Some(lease) => lease,
                None => self.grant_lease(&bound, ttl, Some(request.lease_time)).await?,
            };
            lease = Some(new);
            let took_over = group.taken_over(index);
            // To the microsecond, as the slot's record keeps it.
            let acquired_at = layout::to_micros(SystemTime::now());
            let txn = grant_txn(keys, &request, new, index, &group, acquired_at, took_over);
            let reply = self.txn(&bound, txn).await?;
            if !reply.succeeded() {
                group = Group::read(keys, &first_get(&reply));
                continue;
            }
            let held = Held {
                index,
                fence: reply.header().map_or(0, |header| header.revision()).max(0) as u64,
                lease: new,
                acquired_at,
                delay_until: took_over.map(|ttl| Instant::now() + secs(ttl)),
            };
            self.remember(request.token, held);
            return self.grant_of(&request, held, started).await;
        }
        self.put_back(lease);
        Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) })
    }

    /// The group, read, and a kept lease of `ttl` seconds kept alive meanwhile (if the
    /// store has one).
    async fn read_with_kept_lease(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        ttl: i64,
    ) -> Result<(Group, Option<NewLease>), Error> {
        let Some(kept) = self.inner.leases.take(ttl) else {
            return Ok((self.read(bound, keys).await?, None));
        };
        let (group, alive) = tokio::join!(self.read(bound, keys), self.renew_kept(bound, kept));
        match (group, alive) {
            (Ok(group), Ok(alive)) => Ok((group, alive)),
            (Err(error), Ok(Some(alive))) => {
                self.unused(alive);
                Err(error)
            }
            (Err(error), _) | (_, Err(error)) => Err(error),
        }
    }

    /// The grant of a slot the token holds already, kept alive first (its time to live
    /// counts from now).
    async fn grant_again(
        &self,
        bound: &Bound,
        request: &AcquireRequest<'_>,
        held: Held,
        started: Instant,
    ) -> Result<AcquireOutcome, Error> {
        let Some(lease) = self.renew_kept(bound, held.lease).await? else {
            self.forget(request.token);
            return Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) });
        };
        let held = Held { lease, ..held };
        self.remember(request.token, held);
        self.grant_of(request, held, started).await
    }

    /// The grant to return for a slot, once any lock-delay it owes is over; `started` is
    /// when the acquire began (the caller sent its request before).
    async fn grant_of(
        &self,
        request: &AcquireRequest<'_>,
        held: Held,
        started: Instant,
    ) -> Result<AcquireOutcome, Error> {
        let mut lease = held.lease;
        if let Some(until) = held.delay_until
            && until > Instant::now()
        {
            tracing::info!(group = request.key, fence = held.fence, delay = ?until - Instant::now(), "took over a slot its holder never released; waiting out the lock-delay");
            match self.lock_delay(lease, until).await? {
                Some(alive) => lease = alive,
                None => {
                    self.forget(request.token);
                    return Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) });
                }
            }
            self.remember(request.token, Held { lease, ..held });
        }
        // The slot lives at least its TTL (at least lease_time) from `lease.sent_at`; the
        // caller counts from before `started`.
        let expires_in = lease.sent_at.saturating_duration_since(started) + request.lease_time;
        Ok(AcquireOutcome::Granted(Grant::new(
            held.fence,
            held.acquired_at,
            SystemTime::now() + request.lease_time,
            expires_in,
        )))
    }
}

/// The transaction that takes index `index` for `request` on `lease`, if the group is still
/// as `group` saw it; its else branch reads the group.
fn grant_txn(
    keys: &GroupKeys,
    request: &AcquireRequest<'_>,
    lease: NewLease,
    index: u32,
    group: &Group,
    acquired_at: SystemTime,
    took_over: Option<i64>,
) -> Txn {
    let slot_key = keys.slot(index);
    let token_key = keys.token(request.token);
    let max = request.max_leaders.get();
    let mut when = vec![
        Compare::create_revision(slot_key.as_str(), CompareOp::Equal, 0),
        Compare::create_revision(token_key.as_str(), CompareOp::Equal, 0),
        Compare::mod_revision(keys.max(), CompareOp::Equal, group.max_revision),
        // What the read saw of the index's last holder decides the lock-delay.
        Compare::mod_revision(keys.last(index), CompareOp::Equal, group.last_revision(index)),
    ];
    let on_lease = PutOptions::new().with_lease(lease.id);
    // Whoever takes the index next must wait for the longer of the two holders' TTLs.
    let last = LastHolder::Held { ttl: lease.ttl.max(took_over.unwrap_or(0)) };
    let value =
        Slot::value(request.token, acquired_at, lease.ttl, took_over.is_some(), request.holder);
    let mut then = vec![
        TxnOp::put(slot_key.as_str(), value, Some(on_lease.clone())),
        TxnOp::put(token_key.as_str(), index.to_string(), Some(on_lease)),
        TxnOp::put(keys.last(index), last.value(), None),
    ];
    if group.max != Some(max) {
        // A new size is taken only while no slot is live.
        when.push(Compare::create_revision(keys.slots(), CompareOp::Equal, 0).with_prefix());
        then.push(TxnOp::put(keys.max(), max.to_string(), None));
    }
    Txn::new()
        .when(when)
        .and_then(then)
        .or_else([TxnOp::get(keys.range.as_str(), Some(GetOptions::new().with_prefix()))])
}

/// What a transaction's first `Get` answered.
pub(crate) fn first_get(reply: &etcd_client::TxnResponse) -> Vec<etcd_client::KeyValue> {
    reply
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .unwrap_or_default()
}
