//! Acquire: take a free index in one transaction, reading the group first unless a slot
//! was just freed (see `hints.rs`).
//!
//! - **Guess** (a slot of the group was just freed): one transaction, *if* the guessed
//!   index is free, a release freed it and the group's `max_leaders` is the request's,
//!   *then* write the slot key on the lease and mark the index held; *else* read the group,
//!   and go on as below. With a lease the store kept from a released slot (kept alive
//!   within the last third of its TTL), a grant is **one round trip** and one Raft write.
//! - **Read first** (otherwise): read the group's range (a linearizable read: no Raft
//!   write) and answer a full group, a mismatched `max_leaders` and a token that already
//!   holds a slot from it: one round trip, nothing written. Otherwise one transaction that
//!   takes a free index if the group is still as read (the index, its `last` key and the
//!   `max` key unchanged); a released index before one taken over, whose grant records the
//!   previous holder's TTL and waits it out (the lock-delay).
//!
//! etcd needs the lease before the transaction that binds keys to it: without a kept lease,
//! a grant is a lease grant (a Raft write too) and then the transaction.

use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use tokio::time::Instant;

use super::EtcdStore;
use super::group::Group;
use super::hints::FirstStep;
use super::layout::{self, GroupKeys, LastHolder, Slot};
use super::leases::{NewLease, secs, wall_clock_of};
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
        // A token that holds a slot, or whose last acquire may have been granted unseen (an
        // error, or a call dropped mid-way), reads first: a guess could give it a second.
        let read_first =
            self.held_token(request.token) || self.inner.hints.uncertain(request.token);
        // Until this acquire answers, it may be granted unseen: a retry must read first.
        self.inner.hints.attempting(request.token);
        let taken = self.try_slot(request, keys, ttl, read_first).await;
        if taken.is_ok() {
            self.inner.hints.answered(request.token);
        }
        taken
    }

    async fn try_slot(
        &self,
        request: AcquireRequest<'_>,
        keys: &GroupKeys,
        ttl: i64,
        read_first: bool,
    ) -> Result<AcquireOutcome, Error> {
        let started = Instant::now();
        let bound = self.bound("acquire");
        let hints = &self.inner.hints;
        let first_step = match read_first {
            true => FirstStep::Read,
            false => hints.first_step(&keys.range),
        };
        let (group, lease) = match first_step {
            FirstStep::Guess(index) if index < request.max_leaders.get() => {
                let lease = self.lease(&bound, ttl, Some(request.lease_time), true).await?;
                let acquired_at = layout::to_micros(SystemTime::now());
                let txn = guess_txn(keys, &request, lease, index, acquired_at);
                let reply = match self.txn(&bound, txn).await {
                    Ok(reply) => reply,
                    // A kept lease that is gone (revoked early, say): read, then a new one.
                    Err(error) if lease_gone(&error) => {
                        let group = self.read(&bound, keys).await?;
                        return self.choose(request, keys, ttl, group, None, started, bound).await;
                    }
                    // The lease may be bound to a slot granted unseen: neither kept nor
                    // revoked (the retry finds the slot, or the lease expires by itself).
                    Err(error) => return Err(error),
                };
                if reply.succeeded() {
                    let fence = reply.header().map_or(0, |header| header.revision());
                    return self
                        .granted(&request, keys, lease, index, fence, acquired_at, None, started)
                        .await;
                }
                (Group::read(keys, &first_get(&reply)), Some(lease))
            }
            _ => self.read_with_kept_lease(&bound, keys, ttl).await?,
        };
        self.choose(request, keys, ttl, group, lease, started, bound).await
    }

    /// Takes a free index of `group` (as last read) in a transaction, reading again after
    /// each one that finds the group changed.
    #[allow(clippy::too_many_arguments)]
    async fn choose(
        &self,
        request: AcquireRequest<'_>,
        keys: &GroupKeys,
        ttl: i64,
        mut group: Group,
        mut lease: Option<NewLease>,
        started: Instant,
        bound: Bound,
    ) -> Result<AcquireOutcome, Error> {
        let hints = &self.inner.hints;
        for _ in 0..MAX_ROUNDS {
            if let Some(slot) = group.slot_of(request.token) {
                // Held already: an earlier attempt's grant (its reply lost, say), perhaps
                // on the very lease this one took.
                if lease.is_some_and(|lease| lease.id != slot.lease) {
                    self.put_back(lease);
                }
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
                hints.full(&keys.range);
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
            let reply = match self.txn(&bound, txn).await {
                Ok(reply) => reply,
                Err(error) if lease_gone(&error) => {
                    lease = None; // a kept lease that is gone: a new one next round
                    continue;
                }
                // Perhaps granted unseen: the lease is neither kept nor revoked.
                Err(error) => return Err(error),
            };
            if !reply.succeeded() {
                group = Group::read(keys, &first_get(&reply));
                continue;
            }
            let fence = reply.header().map_or(0, |header| header.revision());
            return self
                .granted(&request, keys, new, index, fence, acquired_at, took_over, started)
                .await;
        }
        self.put_back(lease);
        Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) })
    }

    /// A grant made: remembered, and returned once any lock-delay is over.
    #[allow(clippy::too_many_arguments)]
    async fn granted(
        &self,
        request: &AcquireRequest<'_>,
        keys: &GroupKeys,
        lease: NewLease,
        index: u32,
        fence: i64,
        acquired_at: SystemTime,
        took_over: Option<i64>,
        started: Instant,
    ) -> Result<AcquireOutcome, Error> {
        self.inner.hints.full(&keys.range);
        let held = Held {
            index,
            fence: u64::try_from(fence).unwrap_or(0),
            lease,
            acquired_at,
            delay_until: took_over.map(|ttl| Instant::now() + secs(ttl)),
            delay_ttl: took_over,
        };
        self.remember(request.token, held);
        self.grant_of(request, held, started).await
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
        if kept.sent_at.elapsed() < secs(ttl) / 3 {
            return match self.read(bound, keys).await {
                Ok(group) => Ok((group, Some(kept))),
                Err(error) => {
                    self.unused(kept);
                    Err(error)
                }
            };
        }
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
        // caller counts from before `started`, which may be after `sent_at` (a kept lease).
        // The slot's TTL may be another than this request's (a retry with another
        // lease_time): the shorter of the two.
        let lives = request.lease_time.min(secs(lease.ttl));
        let expires_in = if lease.sent_at >= started {
            lives + (lease.sent_at - started)
        } else {
            lives.saturating_sub(started - lease.sent_at)
        };
        // On the wall clock, from when the lease was kept alive or granted (not from the
        // reply, which a stalled process may read much later).
        Ok(AcquireOutcome::Granted(Grant::new(
            held.fence,
            held.acquired_at,
            wall_clock_of(lease.sent_at) + lives,
            expires_in,
        )))
    }
}

/// The transaction that takes index `index` for `request` on `lease` without a read first,
/// if the index is free, a release freed it (a takeover, which waits a lock-delay, goes
/// through a read) and the group's `max_leaders` is the request's; its else branch reads
/// the group. A guess is never made for a token that holds a slot or whose last acquire may
/// have been granted unseen, so it cannot give a token a second slot.
fn guess_txn(
    keys: &GroupKeys,
    request: &AcquireRequest<'_>,
    lease: NewLease,
    index: u32,
    acquired_at: SystemTime,
) -> Txn {
    let slot_key = keys.slot(index);
    let on_lease = PutOptions::new().with_lease(lease.id);
    let value = Slot::value(request.token, acquired_at, lease.ttl, None, request.holder);
    Txn::new()
        .when([
            Compare::create_revision(slot_key.as_str(), CompareOp::Equal, 0),
            Compare::value(keys.max(), CompareOp::Equal, request.max_leaders.get().to_string()),
            // Only an index a release freed: a takeover goes through a read.
            Compare::value(keys.last(index), CompareOp::Equal, LastHolder::Released.value()),
        ])
        .and_then([
            TxnOp::put(slot_key.as_str(), value, Some(on_lease)),
            TxnOp::put(keys.last(index), LastHolder::Held { ttl: lease.ttl }.value(), None),
        ])
        .or_else([TxnOp::get(keys.range.as_str(), Some(GetOptions::new().with_prefix()))])
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
    let max = request.max_leaders.get();
    let mut when = vec![
        Compare::create_revision(slot_key.as_str(), CompareOp::Equal, 0),
        Compare::mod_revision(keys.max(), CompareOp::Equal, group.max_revision),
        // What the read saw of the index's last holder decides the lock-delay.
        Compare::mod_revision(keys.last(index), CompareOp::Equal, group.last_revision(index)),
    ];
    let on_lease = PutOptions::new().with_lease(lease.id);
    // Whoever takes the index next must wait for the longer of the two holders' TTLs.
    let last = LastHolder::Held { ttl: lease.ttl.max(took_over.unwrap_or(0)) };
    let value = Slot::value(request.token, acquired_at, lease.ttl, took_over, request.holder);
    let mut then = vec![
        TxnOp::put(slot_key.as_str(), value, Some(on_lease)),
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

/// Whether a transaction failed because its lease is gone (etcd: "requested lease not
/// found").
fn lease_gone(error: &Error) -> bool {
    matches!(error, Error::Store { message, .. } if message.contains("lease not found"))
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
