//! Session leases: the slots whose acquires name one session
//! ([`AcquireRequest::in_session`](crate::store::AcquireRequest::in_session)) and one TTL
//! share one etcd lease, so renewing them all is one keep-alive and one read per
//! [`RENEW_BATCH_LEN`](crate::store::author::RENEW_BATCH_LEN) slot keys (see
//! [`renew_session_slots`](EtcdStore::renew_session_slots)).
//!
//! A session lease is never pooled, and never revoked by this store: it carries the other
//! slots of its session. What the store does to one slot's lease otherwise, it does to the
//! slot's key instead: an abandoned lock-delay or a failed grant deletes the key (if it is
//! still that grant), and a release whose answer was lost is reported as the error it is
//! (its caller asks again) rather than settled by a revocation.
//!
//! A grant on a session's lease that got no answer is fenced off instead, before its
//! token's next call ([`fence_off`](EtcdStore::fence_off)): otherwise a member that held it
//! back could commit it after the token gave the slot back (a claim withdrawn while the
//! store did not answer), and the slot would be held for as long as the session lives, by
//! a token nobody holds. A late commit before the fence gives the token no second slot:
//! a grant commits only if no slot was created in the group since its decision (see
//! `acquire.rs`), and the token's next call finds the slot it holds.
//!
//! Markers stay on the store's marker leases, which nobody keeps alive (see `leases.rs`):
//! the lock-delay after a session's end holds as it does after one slot's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

use super::EtcdStore;
use super::bounded::Bounded;
use super::layout::{GroupKeys, held_marker};
use super::leases::{EtcdLease, secs, wall_clock_of};
use super::ownership::LeaseOwner;
use super::slots::KnownSlot;
use crate::error::Error;
use crate::store::bound::Bound;
use crate::store::{HeldSlot, RENEW_BATCH_LEN, RenewOutcome};
use crate::token::LeaseToken;

/// How many markers one transaction moves: three compares each, within etcd's default
/// `--max-txn-ops` of 128.
const MARKERS_PER_MOVE: usize = 42;

/// One session's lease of one TTL, once granted.
type Entry = Arc<tokio::sync::Mutex<Option<EtcdLease>>>;

/// The session leases of one store; the sessions used most recently are kept ([`Bounded`]:
/// a session forgotten is granted a new lease at its next acquire; its slots keep theirs).
#[derive(Default)]
pub(crate) struct Sessions {
    by_session: Bounded<(LeaseToken, i64), Entry>,
    /// Every session lease's id: leases this store must neither pool nor revoke.
    ids: Mutex<HashSet<i64>>,
}

impl Sessions {
    fn entry(&self, session: LeaseToken, ttl: i64) -> Entry {
        self.by_session.lock().get_or_insert((session, ttl), Entry::default).clone()
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many session leases the store knows of.
    pub(crate) fn lease_count(&self) -> usize {
        self.ids().len()
    }

    /// Every session lease's id, as a copy.
    pub(crate) fn lease_ids(&self) -> HashSet<i64> {
        self.ids().clone()
    }
}

/// A session slot of a batch renewal: where its answer goes, its group and what the store
/// holds of it.
pub(crate) struct SessionSlot {
    pub position: usize,
    pub keys: GroupKeys,
    pub held: KnownSlot,
}

impl EtcdStore {
    /// Makes every grant of the group `keys` decided so far unable to commit, for a grant
    /// on session lease `lease` that got no answer: writes the group's
    /// [`unanswered`](GroupKeys::unanswered) key on that lease. Every grant commits only if
    /// no marker was written in the group since the revision it was decided at, and this key
    /// is under the markers' range; it lives as long as the session lease, after which a
    /// late grant on that lease fails anyway (its lease is gone). A lease found gone is
    /// fenced off already.
    pub(crate) async fn fence_off(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        lease: i64,
    ) -> Result<(), Error> {
        let on_lease = PutOptions::new().with_lease(lease);
        let txn = Txn::new().and_then([TxnOp::put(keys.unanswered(lease), "", Some(on_lease))]);
        match self.txn_on_lease(bound, txn).await? {
            super::OnLease::Reply(_) | super::OnLease::LeaseGone => Ok(()),
        }
    }

    /// [`LeaseStore::renew_many`](crate::LeaseStore::renew_many): the slots this store
    /// holds on a session lease (kept alive at `ttl` seconds) by lease, each lease's as one
    /// batch; the others one by one, as `renew` does.
    pub(crate) async fn renew_batch(
        &self,
        slots: &[HeldSlot<'_>],
        ttl: i64,
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        let bound = self.bound("renew_many");
        let mut answers: Vec<Option<RenewOutcome>> = vec![None; slots.len()];
        let mut by_lease: HashMap<i64, (EtcdLease, Vec<SessionSlot>)> = HashMap::new();
        let mut singles = Vec::new();
        for (position, slot) in slots.iter().enumerate() {
            let keys = self.keys(slot.key)?;
            match self.cached(slot.token) {
                Some(held)
                    if *held.group == *keys.range
                        && held.lease.ttl == ttl
                        && held.delay_until.is_none()
                        && held.owner.renews_with_session() =>
                {
                    let (_, batch) =
                        by_lease.entry(held.lease.id).or_insert((held.lease, Vec::new()));
                    batch.push(SessionSlot { position, keys, held });
                }
                _ => singles.push((position, *slot)),
            }
        }
        for (lease, batch) in by_lease.into_values() {
            self.renew_session_slots(&bound, lease, batch, lease_time, &mut answers).await?;
        }
        let alone: Vec<HeldSlot<'_>> = singles.iter().map(|(_, slot)| *slot).collect();
        let renewed = crate::store::renew_each(self, &alone, lease_time).await?;
        for ((position, _), answer) in singles.into_iter().zip(renewed) {
            answers[position] = Some(answer);
        }
        answers
            .into_iter()
            .map(|answer| {
                answer.ok_or_else(|| Error::Store {
                    store: "etcd",
                    endpoint: String::new(),
                    operation: "renew_many",
                    message: "a slot of the batch got no answer".to_owned(),
                })
            })
            .collect()
    }

    /// The owner of `lease`, found bound to a slot by reading its group: one of this
    /// store's session leases (only this store binds keys to those, for acquires through
    /// it), or someone else's.
    pub(crate) fn owner_found(&self, lease: i64) -> LeaseOwner {
        match self.inner.sessions.ids().contains(&lease) {
            true => LeaseOwner::Session,
            false => LeaseOwner::Found,
        }
    }

    /// The lease of `session`'s slots of `ttl` seconds: the one it has (kept alive now if a
    /// third of its TTL has passed since), or a new one.
    pub(crate) async fn session_lease(
        &self,
        bound: &Bound,
        session: LeaseToken,
        ttl: i64,
        lease_time: Duration,
    ) -> Result<EtcdLease, Error> {
        let entry = self.inner.sessions.entry(session, ttl);
        // One grant per session, however many acquires start together.
        let mut current = bound.run(entry.lock()).await?;
        if let Some(lease) = *current {
            if lease.sent_at.elapsed() < secs(ttl) / 3 {
                return Ok(lease);
            }
            if let Some(alive) = self.renew_kept(bound, lease).await? {
                *current = Some(alive);
                return Ok(alive);
            }
            // Gone (every slot on it with it): a new one.
            *current = None;
        }
        let lease = self.grant_lease(bound, ttl, Some(lease_time)).await?;
        self.inner.sessions.ids().insert(lease.id);
        *current = Some(lease);
        Ok(lease)
    }

    /// Forgets session lease `lease` (a transaction found it gone): the session's next
    /// acquire is granted a new one.
    pub(crate) fn session_lease_gone(&self, lease: i64) {
        self.inner.sessions.ids().remove(&lease);
        let by_session = self.inner.sessions.by_session.lock();
        for (_, entry) in by_session.iter() {
            if let Ok(mut current) = entry.try_lock()
                && current.is_some_and(|kept| kept.id == lease)
            {
                *current = None;
            }
        }
    }

    /// Ends session `session` here once the slot whose token is the session itself (its
    /// anchor, as a partitions node's announcement is) was released: its keep-alive stream
    /// is closed and its lease forgotten, so nothing in this store keeps the lease alive any
    /// more (each node stopped would otherwise leave a stream open for the life of the
    /// process), nor records it (the store's records do not grow with churn). A slot of the
    /// session still renewed opens a stream again; the others end with the lease. Such a
    /// slot keeps what it was granted as (a session's lease is not its own to revoke); if the
    /// lease is revoked all the same (an acquire in flight at the release settling its
    /// unanswered transaction), its slots' markers still hold their lock-delay.
    pub(crate) fn session_released(&self, session: LeaseToken) {
        let mut ended = Vec::new();
        let mut by_session = self.inner.sessions.by_session.lock();
        let of_session: Vec<(LeaseToken, i64)> =
            by_session.iter().map(|(key, _)| *key).filter(|(token, _)| *token == session).collect();
        for key in of_session {
            let Some(entry) = by_session.pop(&key) else { continue };
            // An acquire in the session holds its lock: its stream, if any, closes with the
            // store (this is rare: a session released while it acquires).
            if let Ok(current) = entry.try_lock()
                && let Some(lease) = *current
            {
                ended.push(lease.id);
            }
        }
        drop(by_session);
        let mut ids = self.inner.sessions.ids();
        for lease in &ended {
            ids.remove(lease);
        }
        drop(ids);
        for lease in ended {
            self.inner.keep_alives.forget(lease);
        }
    }

    /// Deletes `held`'s slot key in the background if it is still that grant (a session
    /// slot abandoned: its lease carries other slots, so it is not revoked).
    pub(crate) fn delete_behind(&self, keys: &GroupKeys, held: &KnownSlot) {
        let slot_key = keys.slot(held.slot.index);
        let fence = i64::try_from(held.slot.fence).unwrap_or(i64::MAX);
        let txn = Txn::new()
            .when([
                Compare::create_revision(slot_key.as_str(), CompareOp::Equal, fence),
                Compare::lease(slot_key.as_str(), CompareOp::Equal, held.lease.id),
            ])
            .and_then([TxnOp::delete(slot_key.as_str(), None)]);
        let members = self.inner.members.clone();
        tokio::spawn(async move {
            let bound = members.bound("release");
            let deleted = members.call_write(&bound, |client| {
                let txn = txn.clone();
                async move { client.kv_client().txn(txn).await }
            });
            if let Err(error) = deleted.await {
                tracing::warn!(key = %slot_key.trim_end(), %error, "could not delete an abandoned session slot; it ends with its session");
            }
        });
    }

    /// Renews session slots that share one lease, all of them kept alive at `lease` (as
    /// this store last kept it alive): one keep-alive, and beside it one read-only
    /// transaction per [`RENEW_BATCH_LEN`] slot keys that each is still its grant on that
    /// lease. Each answer goes to its slot's position in `answers`.
    pub(crate) async fn renew_session_slots(
        &self,
        bound: &Bound,
        lease: EtcdLease,
        slots: Vec<SessionSlot>,
        lease_time: Duration,
        answers: &mut [Option<RenewOutcome>],
    ) -> Result<(), Error> {
        let reads = slots.chunks(RENEW_BATCH_LEN).map(|part| self.still_held_all(bound, part));
        let (alive, held) =
            tokio::join!(self.renew_kept(bound, lease), futures_util::future::try_join_all(reads));
        let (alive, held) = (alive?, held?);
        let Some(alive) = alive else {
            // The session's lease is gone, and every slot on it.
            self.session_lease_gone(lease.id);
            for slot in slots {
                self.forget(slot.held.slot.token);
                answers[slot.position] = Some(RenewOutcome::NotHeld);
            }
            return Ok(());
        };
        let mut live = Vec::with_capacity(slots.len());
        for (mut slot, still) in slots.into_iter().zip(held.into_iter().flatten()) {
            if !still {
                self.forget_in(&slot.keys, slot.held.slot.token);
                answers[slot.position] = Some(RenewOutcome::NotHeld);
                continue;
            }
            slot.held.lease = alive;
            live.push(slot);
        }
        if let Err(error) = self.move_markers(bound, &mut live, alive, lease_time).await {
            tracing::debug!(%error, "could not move a session's markers together; each renewal moves its own");
        }
        for mut slot in live {
            self.remember(slot.held.clone());
            // Counted from when the keep-alive was sent; never past the marker's lease.
            let lives =
                self.within_marker(bound, &slot.keys, &mut slot.held, alive, lease_time).await;
            answers[slot.position] = Some(RenewOutcome::Renewed {
                expires_at: wall_clock_of(alive.sent_at) + lives,
                expires_in: lives,
            });
        }
        Ok(())
    }

    /// Moves the markers of `slots` (kept alive at `alive`) that a renewal would move (see
    /// [`within_marker`](Self::within_marker)), and with them every other one not on the
    /// newest marker lease, so a session's markers share one lease and move together: one
    /// transaction per [`MARKERS_PER_MOVE`] slots, each checking that every slot is still
    /// its grant and its marker still on the lease this store put it on. A transaction whose
    /// check fails moves nothing; its slots' renewals move their own markers.
    async fn move_markers(
        &self,
        bound: &Bound,
        slots: &mut [SessionSlot],
        alive: EtcdLease,
        lease_time: Duration,
    ) -> Result<(), Error> {
        let due = alive.sent_at + lease_time + secs(alive.ttl.saturating_mul(3));
        if !slots.iter().any(|slot| slot.held.marker.expires_at() < due) {
            return Ok(());
        }
        let marker = self.marker_lease(bound, alive.ttl).await?;
        let mut moving: Vec<&mut SessionSlot> = slots
            .iter_mut()
            .filter(|slot| {
                slot.held.marker.id != marker.id
                    && slot.held.marker.expires_at() < marker.expires_at()
            })
            .collect();
        for part in moving.chunks_mut(MARKERS_PER_MOVE) {
            let mut when = Vec::with_capacity(part.len() * 3);
            let mut then = Vec::with_capacity(part.len());
            for slot in part.iter() {
                let held = &slot.held;
                let (slot_key, marker_key) =
                    (slot.keys.slot(held.slot.index), slot.keys.last(held.slot.index));
                let fence = i64::try_from(held.slot.fence).unwrap_or(i64::MAX);
                when.push(Compare::create_revision(slot_key.as_str(), CompareOp::Equal, fence));
                when.push(Compare::lease(slot_key.as_str(), CompareOp::Equal, held.lease.id));
                when.push(Compare::lease(marker_key.as_str(), CompareOp::Equal, held.marker.id));
                let recorded = held.slot.ttl.max(held.slot.delay_ttl.unwrap_or(0));
                then.push(TxnOp::put(
                    marker_key.as_str(),
                    held_marker(recorded, held.slot.max_leaders),
                    Some(PutOptions::new().with_lease(marker.id)),
                ));
            }
            let txn = Txn::new().when(when).and_then(then);
            if self.txn(bound, txn).await?.succeeded() {
                for slot in part.iter_mut() {
                    slot.held.marker = marker;
                }
            }
        }
        Ok(())
    }

    /// Whether each of `slots` is still its grant on its lease: one read-only transaction
    /// (a linearizable read, no Raft write) of their keys, without values.
    async fn still_held_all(
        &self,
        bound: &Bound,
        slots: &[SessionSlot],
    ) -> Result<Vec<bool>, Error> {
        let gets: Vec<TxnOp> = slots
            .iter()
            .map(|slot| {
                let key = slot.keys.slot(slot.held.slot.index);
                TxnOp::get(key, Some(GetOptions::new().with_keys_only()))
            })
            .collect();
        let read = self.inner.members.call(bound, |client| {
            let txn = Txn::new().and_then(gets.clone());
            async move { client.kv_client().txn(txn).await }
        });
        let reply = read.await?;
        let found: Vec<Option<(i64, i64)>> = reply
            .op_responses()
            .into_iter()
            .map(|op| match op {
                TxnOpResponse::Get(get) => {
                    get.kvs().first().map(|kv| (kv.create_revision(), kv.lease()))
                }
                _ => None,
            })
            .collect();
        if found.len() != slots.len() {
            return Err(Error::Store {
                store: "etcd",
                endpoint: String::new(),
                operation: "renew_many",
                message: format!("{} answers to a read of {} keys", found.len(), slots.len()),
            });
        }
        Ok(slots
            .iter()
            .zip(found)
            .map(|(slot, kv)| {
                let fence = i64::try_from(slot.held.slot.fence).unwrap_or(i64::MAX);
                kv == Some((fence, slot.held.lease.id))
            })
            .collect())
    }
}
