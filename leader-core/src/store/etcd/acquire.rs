//! Acquire: take a free index in one transaction, reading the group first unless a slot
//! was just freed (see `hints.rs`).
//!
//! - **Guess** (a slot of the group was just freed, at revision R): one transaction that
//!   takes the freed index *if* nothing happened in the group since R, *then* writes the
//!   slot key on the lease and the index's marker; *else* it reads the group, and goes on as
//!   below. With a lease the store kept from a released slot (kept alive within the last
//!   third of its TTL), a grant is **one round trip** and one Raft write.
//! - **Read first** (otherwise): read the group's range (a linearizable read: no Raft
//!   write) and answer a full group, a mismatched `max_leaders` and a token that already
//!   holds a slot from it: one round trip, nothing written. Otherwise one transaction that
//!   takes a free index if nothing happened in the group since the read; an index whose
//!   holder never released it (or a size that leaves such an index out) makes the grant
//!   wait out that holder's TTL before it is acted on (the lock-delay).
//!
//! **Why a late commit is safe.** Every granting transaction is decided on the group as it
//! was at one revision R (the read's, or the release's that freed the guessed index) and
//! commits only if, since R, no slot was created and no marker written in the group (two
//! range compares), and the index's slot is absent. So a transaction that commits late,
//! after a member held it back, finds the group as it was at R, minus slots that went
//! since: never a slot too many, never a size beside another, never a lock-delay skipped.
//! And a lease named by a transaction that did not answer is revoked, the answer awaited,
//! before the token tries again (see `hints.rs`), so a late commit never gives a token a
//! second slot, nor a slot on a lease in use elsewhere.
//!
//! etcd needs the lease before the transaction that binds keys to it: without a kept lease,
//! a grant is a lease grant (a Raft write too) and then the transaction.

use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::claim::{self, ClaimStep};
use super::grant_txn::{first_get, grant_txn, guess_txn};
use super::group::Group;
use super::hints::FirstStep;
use super::layout::{self, GroupKeys, Slot};
use super::leases::{EtcdLease, secs, wall_clock_of};
use super::ownership::LeaseOwner;
use super::release::Relet;
use super::slots::KnownSlot;
use super::{EtcdStore, OnLease};
use crate::error::Error;
use crate::store::bound::Bound;
use crate::store::{AcquireOutcome, AcquireRequest, Grant};

/// How many transactions one acquire makes before it reports the group full: each failed one
/// means another candidate changed the group first.
const MAX_ROUNDS: usize = 16;

/// What a guess came to.
enum Guessed {
    Granted(AcquireOutcome),
    /// Not taken: the group as the transaction's else branch read it, and the lease, for
    /// the next step.
    Read(Group, Option<EtcdLease>),
}

/// A grant made, before it is returned.
struct Made {
    lease: EtcdLease,
    marker: EtcdLease,
    index: u32,
    fence: i64,
    acquired_at: SystemTime,
    delay: Option<i64>,
    /// The markers beyond the group's size its lock-delay waits out, deleted once it is
    /// over.
    outgrown: Vec<u32>,
}

impl EtcdStore {
    pub(crate) async fn take_slot(
        &self,
        request: AcquireRequest<'_>,
        keys: &GroupKeys,
        ttl: i64,
    ) -> Result<AcquireOutcome, Error> {
        let started = Instant::now();
        let bound = self.bound("acquire");
        // Whatever an unanswered attempt of this token bound is gone first.
        self.settle(&bound, keys, request.token).await?;
        let first_step = match self.held_token(request.token) {
            true => FirstStep::Read,
            false => self.inner.hints.first_step(&keys.range),
        };
        let (group, lease) = match first_step {
            FirstStep::Guess { index, revision } if index < request.max_leaders.get() => {
                match self.guess(&bound, &request, keys, ttl, index, revision, started).await? {
                    Guessed::Granted(outcome) => return Ok(outcome),
                    Guessed::Read(group, lease) => (group, lease),
                }
            }
            // A session's slots take the session's lease, never a kept one.
            _ if request.session.is_some() => (self.read(&bound, keys).await?, None),
            _ => self.read_with_kept_lease(&bound, keys, ttl).await?,
        };
        self.choose(&request, keys, ttl, group, lease, started, bound).await
    }

    /// Takes index `index`, freed at `revision`, without a read first.
    #[allow(clippy::too_many_arguments)]
    async fn guess(
        &self,
        bound: &Bound,
        request: &AcquireRequest<'_>,
        keys: &GroupKeys,
        ttl: i64,
        index: u32,
        revision: i64,
        started: Instant,
    ) -> Result<Guessed, Error> {
        let owner = LeaseOwner::for_acquire(request.session.is_some());
        let lease = match request.session {
            Some(session) => self.session_lease(bound, session, ttl, request.lease_time).await?,
            None => self.lease(bound, ttl, Some(request.lease_time), true).await?,
        };
        let marker = match self.marker_lease(bound, ttl).await {
            Ok(marker) => marker,
            Err(error) => {
                self.unused(lease, owner);
                return Err(error);
            }
        };
        let acquired_at = layout::to_micros(SystemTime::now());
        let txn = guess_txn(keys, request, lease, marker, index, revision, acquired_at);
        let reply = match self.send_on_lease(bound, request.token, lease.id, owner, txn).await? {
            OnLease::Reply(reply) => reply,
            // A kept lease that is gone (revoked early, say): read, then a new one.
            OnLease::LeaseGone => {
                self.session_lease_gone(lease.id);
                return Ok(Guessed::Read(self.read(bound, keys).await?, None));
            }
        };
        let at = reply.header().map_or(0, |header| header.revision());
        if reply.succeeded() {
            let made = Made {
                lease,
                marker,
                index,
                fence: at,
                acquired_at,
                delay: None,
                outgrown: Vec::new(),
            };
            return self.granted(request, keys, made, started).await.map(Guessed::Granted);
        }
        Ok(Guessed::Read(Group::read(keys, &first_get(&reply), at)?, Some(lease)))
    }

    /// Takes a free index of `group` (as last read) in a transaction, reading again after
    /// each one that finds the group changed.
    #[allow(clippy::too_many_arguments)]
    async fn choose(
        &self,
        request: &AcquireRequest<'_>,
        keys: &GroupKeys,
        ttl: i64,
        mut group: Group,
        mut lease: Option<EtcdLease>,
        started: Instant,
        bound: Bound,
    ) -> Result<AcquireOutcome, Error> {
        let max = request.max_leaders.get();
        let owner = LeaseOwner::for_acquire(request.session.is_some());
        for _ in 0..MAX_ROUNDS {
            if let Some(slot) = group.slot_of(request.token) {
                // Held already: an earlier attempt's grant (answered, its reply then given
                // up on by the caller), perhaps on the very lease this one took.
                if lease.is_some_and(|lease| lease.id != slot.lease) {
                    self.put_back(lease, owner);
                }
                let marker = group.markers.get(&slot.index).map(|marker| marker.lease);
                // An acquire through this store: the candidate's own from here on.
                let known = self.known_slot(keys, slot, marker);
                let owner = match lease {
                    // On the lease this acquire took: this store's, as the acquire's.
                    Some(lease) if lease.id == slot.lease => owner,
                    _ => known.owner.granted_again(),
                };
                let held = KnownSlot { owner, ..known };
                return self.grant_again(&bound, request, keys, ttl, held, started).await;
            }
            if let Some(existing) = group.size()
                && existing != max
            {
                self.put_back(lease, owner);
                return Err(Error::MaxLeadersMismatch {
                    group: request.key.to_owned(),
                    requested: max,
                    existing,
                });
            }
            let claim = claim::step(&group, request, max, SystemTime::now());
            let free = group.free_index(max, request.token);
            let Some(index) = free.filter(|_| !matches!(claim, ClaimStep::HeldBack { .. })) else {
                self.put_back(lease, owner);
                self.inner.hints.full(&keys.range);
                // The shortest TTL among the slots: an upper bound of the nearest expiry
                // (waiters wake at the true one from the watch's delete event).
                let nearest = secs(group.slots.iter().map(|slot| slot.ttl).min().unwrap_or(1));
                let nearest_expiry = match (claim, request.reservation) {
                    // Until the claim's lease can have lapsed (its end wakes the group's
                    // waiters sooner): never sooner, whatever hold its value says.
                    (ClaimStep::HeldBack { hold }, _) => secs(self.claim_ttl(hold)),
                    (ClaimStep::Holds { write }, Some(reservation)) => {
                        if !self.hold_claim(&bound, keys, &group, write, request.holder).await? {
                            group = self.read(&bound, keys).await?;
                            continue;
                        }
                        claim::holder_wait(nearest, reservation.hold_for)
                    }
                    _ => nearest,
                };
                return Ok(AcquireOutcome::Full { nearest_expiry });
            };
            let delay = group.delay_for(index, max);
            let new = match (lease, request.session) {
                (Some(lease), _) => lease,
                (None, Some(session)) => {
                    self.session_lease(&bound, session, ttl, request.lease_time).await?
                }
                (None, None) => self.grant_lease(&bound, ttl, Some(request.lease_time)).await?,
            };
            lease = Some(new);
            let marker = match self.marker_lease(&bound, ttl.max(delay.unwrap_or(0))).await {
                Ok(marker) => marker,
                Err(error) => {
                    self.put_back(lease, owner);
                    return Err(error);
                }
            };
            // To the microsecond, as the slot's record keeps it.
            let acquired_at = layout::to_micros(SystemTime::now());
            let end_claim = group.claim.is_some() && matches!(claim, ClaimStep::Holds { .. });
            let txn =
                grant_txn(keys, request, new, marker, index, &group, acquired_at, delay, end_claim);
            // An error: perhaps granted unseen; the lease is revoked at the token's next
            // attempt.
            let reply = match self.send_on_lease(&bound, request.token, new.id, owner, txn).await? {
                OnLease::Reply(reply) => reply,
                OnLease::LeaseGone => {
                    // A kept (or session) lease that is gone: a new one next round.
                    self.session_lease_gone(new.id);
                    lease = None;
                    continue;
                }
            };
            let at = reply.header().map_or(0, |header| header.revision());
            if !reply.succeeded() {
                group = Group::read(keys, &first_get(&reply), at)?;
                continue;
            }
            let outgrown = match delay {
                Some(_) => group.outgrown_markers(max),
                None => Vec::new(),
            };
            let made = Made { lease: new, marker, index, fence: at, acquired_at, delay, outgrown };
            return self.granted(request, keys, made, started).await;
        }
        self.put_back(lease, owner);
        Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) })
    }

    /// A grant made: remembered, and returned once any lock-delay it owes is over.
    async fn granted(
        &self,
        request: &AcquireRequest<'_>,
        keys: &GroupKeys,
        made: Made,
        started: Instant,
    ) -> Result<AcquireOutcome, Error> {
        self.inner.hints.full(&keys.range);
        let Made { lease, marker, index, fence, acquired_at, delay, outgrown } = made;
        let slot = Slot {
            index,
            token: request.token,
            fence: u64::try_from(fence).unwrap_or(0),
            lease: lease.id,
            ttl: lease.ttl,
            max_leaders: request.max_leaders.get(),
            acquired_at,
            delay_ttl: delay,
            holder: request.holder.to_owned(),
        };
        let delay_until = delay.map(|ttl| Instant::now() + secs(ttl));
        let group = keys.range.as_str().into();
        let owner = LeaseOwner::for_acquire(request.session.is_some());
        let held = KnownSlot { group, slot, lease, marker, delay_until, owner };
        self.remember(held.clone());
        self.grant_of(request, keys, held, &outgrown, started).await
    }

    /// The group, read, and a kept lease of `ttl` seconds kept alive meanwhile (if the
    /// store has one).
    async fn read_with_kept_lease(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        ttl: i64,
    ) -> Result<(Group, Option<EtcdLease>), Error> {
        let Some(kept) = self.take_kept(ttl) else {
            return Ok((self.read(bound, keys).await?, None));
        };
        if kept.sent_at.elapsed() < secs(ttl) / 3 {
            return match self.read(bound, keys).await {
                Ok(group) => Ok((group, Some(kept))),
                Err(error) => {
                    self.unused(kept, LeaseOwner::Slot);
                    Err(error)
                }
            };
        }
        let (group, alive) = tokio::join!(self.read(bound, keys), self.renew_kept(bound, kept));
        match (group, alive) {
            (Ok(group), Ok(alive)) => Ok((group, alive)),
            (Err(error), Ok(Some(alive))) => {
                self.unused(alive, LeaseOwner::Slot);
                Err(error)
            }
            (Err(error), _) | (_, Err(error)) => Err(error),
        }
    }

    /// The grant of a slot the token holds already, kept alive first (its time to live
    /// counts from now); an adopted one moved to a lease of `ttl` seconds of its own
    /// instead ([`LeaseOwner::moved_when_granted_again`]).
    async fn grant_again(
        &self,
        bound: &Bound,
        request: &AcquireRequest<'_>,
        keys: &GroupKeys,
        ttl: i64,
        mut held: KnownSlot,
        started: Instant,
    ) -> Result<AcquireOutcome, Error> {
        if held.owner.moved_when_granted_again() {
            let relet = Relet { ttl, released: false, lease_time: Some(request.lease_time) };
            return match self.relet(bound, keys, &held, relet).await? {
                Some(moved) => self.grant_of(request, keys, moved, &[], started).await,
                // Gone meanwhile (its lease ran out): the next attempt reads again.
                None => Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) }),
            };
        }
        let Some(lease) = self.renew_kept(bound, held.lease).await? else {
            self.forget(request.token);
            return Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) });
        };
        held.lease = lease;
        self.remember(held.clone());
        self.grant_of(request, keys, held, &[], started).await
    }

    /// The grant to return for a slot, once any lock-delay it owes is over and the slot is
    /// written as no longer pending; `started` is when the acquire began (the caller sent
    /// its request before).
    async fn grant_of(
        &self,
        request: &AcquireRequest<'_>,
        keys: &GroupKeys,
        mut held: KnownSlot,
        outgrown: &[u32],
        started: Instant,
    ) -> Result<AcquireOutcome, Error> {
        let pending = held.slot.is_pending();
        if pending {
            if let Some(until) = held.delay_until
                && until > Instant::now()
            {
                tracing::info!(group = request.key, fence = held.slot.fence, delay = ?until - Instant::now(), "took over a slot whose holder may still act; waiting out the lock-delay");
                // Dropped before it is over (a candidate that stops): the slot goes with its
                // lease, never acted on; the index keeps its marker.
                let mut abandoned = RevokeOnDrop { store: Some(self), keys, held: held.clone() };
                let alive = self.lock_delay(held.lease, until).await;
                abandoned.store = None;
                match alive {
                    Ok(Some(alive)) => held.lease = alive,
                    Ok(None) => {
                        self.forget(request.token);
                        return Ok(AcquireOutcome::Full {
                            nearest_expiry: Duration::from_millis(1),
                        });
                    }
                    Err(error) => {
                        self.abandon(keys, &held);
                        self.forget(request.token);
                        return Err(error);
                    }
                }
            }
            if !self.confirm(&self.bound("acquire"), keys, &mut held, outgrown).await? {
                self.forget(request.token);
                return Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) });
            }
        }
        self.remember(held.clone());
        let lease = held.lease;
        // The slot lives at least its TTL from `lease.sent_at` (the grant, or the last
        // keep-alive), and never past its marker's lease; the shorter of its TTL and this
        // request's (a retry with another lease_time). The caller counts from before
        // `started`: a grant that waited out a lock-delay adds the wait (the lease was kept
        // alive at its end); any other counts at most the TTL.
        let until_marker = held.marker.expires_at().saturating_duration_since(lease.sent_at);
        let lives = request.lease_time.min(secs(lease.ttl)).min(until_marker);
        let expires_in = if lease.sent_at < started {
            lives.saturating_sub(started - lease.sent_at)
        } else if pending {
            lives + (lease.sent_at - started)
        } else {
            lives
        };
        // On the wall clock, from when the lease was kept alive or granted (not from the
        // reply, which a stalled process may read much later).
        Ok(AcquireOutcome::Granted(Grant::new(
            held.slot.fence,
            held.slot.acquired_at,
            wall_clock_of(lease.sent_at) + lives,
            expires_in,
        )))
    }

    /// Writes a pending slot again without its lock-delay (observers see its holder lead
    /// from then on), and deletes the markers beyond the group's size the delay waited out,
    /// in one transaction that checks the slot is still this grant; `false` if it is not.
    /// The index's marker keeps the longer TTL for whoever takes it next.
    async fn confirm(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        held: &mut KnownSlot,
        outgrown: &[u32],
    ) -> Result<bool, Error> {
        let slot_key = keys.slot(held.slot.index);
        let mut confirmed = held.slot.clone();
        confirmed.delay_ttl = None;
        let on_lease = PutOptions::new().with_lease(held.lease.id);
        let mut then =
            vec![TxnOp::put(slot_key.as_str(), confirmed.value().encode(), Some(on_lease))];
        then.extend(outgrown.iter().map(|index| TxnOp::delete(keys.last(*index), None)));
        let fence = i64::try_from(held.slot.fence).unwrap_or(i64::MAX);
        let txn = Txn::new()
            .when([
                Compare::create_revision(slot_key.as_str(), CompareOp::Equal, fence),
                Compare::lease(slot_key.as_str(), CompareOp::Equal, held.lease.id),
            ])
            .and_then(then);
        let reply = self.send(bound, held.slot.token, held.lease.id, held.owner, txn).await?;
        if reply.succeeded() {
            held.slot = confirmed;
            held.delay_until = None;
        }
        Ok(reply.succeeded())
    }
}

/// Abandons a slot in the background when dropped while armed: a lock-delay abandoned.
struct RevokeOnDrop<'a> {
    store: Option<&'a EtcdStore>,
    keys: &'a GroupKeys,
    held: KnownSlot,
}

impl Drop for RevokeOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(store) = self.store
            && tokio::runtime::Handle::try_current().is_ok()
        {
            store.abandon(self.keys, &self.held);
        }
    }
}

impl EtcdStore {
    /// Ends a slot nobody will act on, in the background: its lease revoked, or, on a lease
    /// that is not the slot's alone (a session's, or one adopted), its key deleted.
    fn abandon(&self, keys: &GroupKeys, held: &KnownSlot) {
        match held.owner.abandoned_by_revoking() {
            true => self.revoke_behind(held.lease.id),
            false => self.delete_behind(keys, held),
        }
    }
}
