//! [`MemoryStore`]: the embedded store, for one process, tests and local development.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::time::Instant;

use super::reserved::{self, Preferred, Reserved};
use super::watch::Watchers;
use super::{
    AcquireOutcome, AcquireRequest, ClaimInfo, Grant, GroupSnapshot, GroupWatch, LeaseStore,
    Preference, ReleaseOutcome, RenewOutcome, Revocation, SlotInfo, SlotRef,
};
use crate::error::Error;
use crate::token::LeaseToken;

/// An in-process store with the same semantics as the Redis store.
///
/// It elects within one process only: use it for a single instance, for tests and for local
/// development. Its clock is tokio's, so tests under `#[tokio::test(start_paused = true)]`
/// run leases of minutes in microseconds. Clones share the same groups.
///
/// Fences come from one counter per store, so they keep increasing for a group even after
/// it was forgotten: a group is forgotten once it has no live slot and no waiter, so a store
/// that sees ever new names (one group per tenant or per job) keeps only the live ones.
///
/// ```
/// use std::time::Duration;
/// use leader_core::{LeaderGroupElectionOptions, LeaderGroupElector, LeaderRunResult, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let store = MemoryStore::new();
/// let workers = LeaderGroupElector::new(store, LeaderGroupElectionOptions::new(3))?;
/// let result = workers.run_if_leader("thumbnails", |lease| async move { lease.fence() }).await?;
/// assert_eq!(result, LeaderRunResult::Elected(1));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    groups: Mutex<Groups>,
    /// The waiters and observers of each group, while it has some.
    watchers: Arc<Watchers>,
    origin: Instant,
    epoch: SystemTime,
}

/// The groups in use, and the store's fence counter.
#[derive(Default)]
struct Groups {
    by_key: HashMap<String, Group>,
    last_fence: u64,
    /// Operators' preferences, by group key (kept apart from the groups, which are
    /// forgotten while idle; a lapsed one is dropped by the next preference made).
    preferences: HashMap<String, Preferred>,
    /// When the last sweep was, and how many groups it kept.
    last_sweep: Option<(Instant, usize)>,
    /// How far the store's clock was stepped ahead and back (`__step_clock`).
    clock_steps: (Duration, Duration),
}

/// A new group sweeps the store (forgets every group without live slots) when
/// the store has doubled since the last sweep, or this long after it: O(1) per new group
/// amortised, and a group whose holder crashed (no release) is forgotten by the first new
/// group at least this long after the last sweep, once its slot has expired.
const SWEEP_AFTER: Duration = Duration::from_secs(10);

struct Group {
    max_leaders: u32,
    slots: Vec<Slot>,
    /// Who the next free slot is kept for (fair waiting), while someone claims it.
    reserved: Option<Reserved>,
}

struct Slot {
    /// `None` once revoked at expiry: held by nobody, it lapses at its expiry.
    token: Option<LeaseToken>,
    /// The token it was held under before a revocation at expiry: that token is granted no
    /// slot of the group until this one lapses (an acquire its holder sent before, answered
    /// late, must not give it a new term whose renewals keep the old one's lease alive).
    revoked: Option<LeaseToken>,
    holder: String,
    fence: u64,
    acquired_at: Instant,
    expires_at: Instant,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                groups: Mutex::new(Groups::default()),
                watchers: Arc::default(),
                origin: Instant::now(),
                epoch: SystemTime::now(),
            }),
        }
    }

    fn groups(&self) -> MutexGuard<'_, Groups> {
        // The lock is never held across a panic-prone call, but a poisoned map is still
        // consistent (every mutation is a single step), so recover it.
        self.inner.groups.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Steps the store's clock `by` ahead (`ahead`) or back, as an operator or NTP stepping
    /// a server's clock would: every expiry then falls that much sooner (or later) in real
    /// time. For the simulation (`tools/sim`); not a public API.
    #[doc(hidden)]
    pub fn __step_clock(&self, by: Duration, ahead: bool) {
        let steps = &mut self.groups().clock_steps;
        if ahead { steps.0 += by } else { steps.1 += by }
    }

    /// Loses every slot, as a server restarted without its data would; fences keep
    /// increasing (as the stores promise across a restart) unless `keep_fences` is false.
    /// For the simulation (`tools/sim`); not a public API.
    #[doc(hidden)]
    pub fn __lose_data(&self, keep_fences: bool) {
        let mut groups = self.groups();
        groups.by_key.clear();
        groups.preferences.clear();
        if !keep_fences {
            groups.last_fence = 0;
        }
    }

    /// The store's clock as wall time: the creation time plus tokio time elapsed since.
    fn wall_time(&self, at: Instant) -> SystemTime {
        self.inner.epoch + at.duration_since(self.inner.origin)
    }

    /// How many groups the store keeps now (live slots or waiters), for tests.
    #[cfg(test)]
    fn group_count(&self) -> usize {
        self.groups().by_key.len()
    }
}

impl Groups {
    /// The store's clock: tokio's, as stepped by `__step_clock` (read under the lock).
    fn now(&self) -> Instant {
        let (ahead, behind) = self.clock_steps;
        let now = Instant::now() + ahead;
        now.checked_sub(behind).unwrap_or(now)
    }

    /// The group at `key` with its expired slots dropped, if it is in use.
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Group> {
        let group = self.by_key.get_mut(key)?;
        group.slots.retain(|slot| slot.expires_at > now);
        Some(group)
    }

    /// The group at `key`, made if new; now and then, first forgets the groups nobody uses.
    /// (A function of the fields it needs, so the fence counter stays borrowable.)
    fn entry<'a>(
        by_key: &'a mut HashMap<String, Group>,
        last_sweep: &mut Option<(Instant, usize)>,
        key: &str,
        max_leaders: u32,
        now: Instant,
    ) -> &'a mut Group {
        let (swept, kept) = last_sweep.unwrap_or((now, 0));
        let due =
            by_key.len() >= 2 * kept.max(32) || (by_key.len() >= 64 && now >= swept + SWEEP_AFTER);
        if due && !by_key.contains_key(key) {
            by_key.retain(|_, group| {
                group.slots.retain(|slot| slot.expires_at > now);
                !group.is_unused(now)
            });
            *last_sweep = Some((now, by_key.len()));
        }
        by_key.entry(key.to_owned()).or_insert_with(|| Group::new(max_leaders))
    }

    /// Forgets the group at `key` if it has no live slot and no live reservation.
    fn forget_if_unused(&mut self, key: &str, now: Instant) {
        if self.by_key.get(key).is_some_and(|group| group.is_unused(now)) {
            self.by_key.remove(key);
        }
    }
}

impl Group {
    fn new(max_leaders: u32) -> Self {
        Group { max_leaders, slots: Vec::new(), reserved: None }
    }

    /// No live slot (expired ones already dropped) and no live reservation.
    fn is_unused(&self, now: Instant) -> bool {
        self.slots.is_empty() && !reserved::lives_at(self.reserved.as_ref(), now)
    }

    fn slot_mut(&mut self, token: LeaseToken) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|slot| slot.token == Some(token))
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn keeps_reservations(&self) -> bool {
        true
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        request.check_times()?;
        let max_leaders = request.max_leaders.get();
        let mut groups = self.groups();
        // The store's clock is read under the lock, as a script reads TIME: operations
        // are ordered by the lock, and so are the times they see.
        let now = groups.now();
        let Groups { by_key, last_fence, last_sweep, preferences, .. } = &mut *groups;
        let preferred = Preferred::live(preferences.get(request.key), now);
        let group = Groups::entry(by_key, last_sweep, request.key, max_leaders, now);
        group.slots.retain(|slot| slot.expires_at > now);
        if let Some(slot) = group.slot_mut(request.token) {
            let (fence, acquired_at, expires_at) = (slot.fence, slot.acquired_at, slot.expires_at);
            return Ok(AcquireOutcome::Granted(Grant {
                fence,
                acquired_at: self.wall_time(acquired_at),
                expires_at: self.wall_time(expires_at),
                expires_in: expires_at - now,
            }));
        }
        if let Some(revoked) = group.slots.iter().find(|slot| slot.revoked == Some(request.token)) {
            return Ok(AcquireOutcome::Full { nearest_expiry: revoked.expires_at - now });
        }
        if group.slots.is_empty() {
            group.max_leaders = max_leaders;
        } else if group.max_leaders != max_leaders {
            return Err(Error::MaxLeadersMismatch {
                group: request.key.to_owned(),
                requested: max_leaders,
                existing: group.max_leaders,
            });
        }
        // A claim is made (or taken over by an earlier arrival) before the free slots are
        // counted, so a waiter that takes the claim over takes the slot it was kept for.
        reserved::claim(&mut group.reserved, &request, now, preferred);
        let free = (group.max_leaders as usize).saturating_sub(group.slots.len());
        let refused_until = match free {
            0 => group.slots.iter().map(|slot| slot.expires_at).min(),
            _ => reserved::held_back_until(&mut group.reserved, request.token, free, now),
        };
        if let Some(until) = refused_until {
            let until = reserved::renewed_by(group.reserved.as_ref(), &request, now, until);
            return Ok(AcquireOutcome::Full { nearest_expiry: until - now });
        }
        reserved::granted(&mut group.reserved, request.token);
        *last_fence += 1;
        let fence = *last_fence;
        group.slots.push(Slot {
            token: Some(request.token),
            revoked: None,
            holder: request.holder.to_owned(),
            fence,
            acquired_at: now,
            expires_at: now + request.lease_time,
        });
        self.inner.watchers.wake_observers(request.key);
        Ok(AcquireOutcome::Granted(Grant {
            fence,
            acquired_at: self.wall_time(now),
            expires_at: self.wall_time(now + request.lease_time),
            expires_in: request.lease_time,
        }))
    }

    async fn renew(
        &self,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        crate::duration::positive("lease_time", lease_time)?;
        let mut groups = self.groups();
        let now = groups.now();
        let Some(group) = groups.live(key, now) else {
            return Ok(RenewOutcome::NotHeld);
        };
        let Some(slot) = group.slot_mut(token) else {
            return Ok(RenewOutcome::NotHeld);
        };
        let (before, renewed) = (slot.expires_at, now + lease_time);
        slot.expires_at = renewed;
        if renewed < before {
            // Waiters sleep until the nearest expiry they were told; this one is sooner.
            self.inner.watchers.wake(key);
        }
        Ok(RenewOutcome::Renewed { expires_at: self.wall_time(renewed), expires_in: lease_time })
    }

    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        crate::duration::within_limit("min_lease_time", min_lease_time)?;
        let mut groups = self.groups();
        let now = groups.now();
        let Some(group) = groups.live(key, now) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let Some(index) = group.slots.iter().position(|slot| slot.token == Some(token)) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let slot = &mut group.slots[index];
        let keep_until = slot.acquired_at + min_lease_time;
        let outcome = if keep_until > now {
            slot.expires_at = slot.expires_at.min(keep_until);
            ReleaseOutcome::Kept { expires_in: slot.expires_at - now }
        } else {
            group.slots.remove(index);
            ReleaseOutcome::Released
        };
        self.inner.watchers.wake(key);
        groups.forget_if_unused(key, now);
        Ok(outcome)
    }

    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        let mut groups = self.groups();
        let now = groups.now();
        let Some(group) = groups.live(key, now) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let named = |held: &Slot| match slot {
            SlotRef::Token(token) => held.token == Some(token),
            SlotRef::Fence(fence) => held.fence == fence,
        };
        let Some(index) = group.slots.iter().position(named) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let outcome = match how {
            Revocation::Now => {
                group.slots.remove(index);
                self.inner.watchers.wake(key);
                ReleaseOutcome::Released
            }
            _ => {
                // Held by nobody from now on: it lapses at its expiry.
                let held = &mut group.slots[index];
                held.revoked = held.token.take().or(held.revoked);
                ReleaseOutcome::Kept { expires_in: held.expires_at - now }
            }
        };
        groups.forget_if_unused(key, now);
        Ok(outcome)
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        let mut groups = self.groups();
        let now = groups.now();
        let Some(group) = groups.live(key, now) else {
            return Ok(GroupSnapshot::default());
        };
        let mut slots: Vec<SlotInfo> = group
            .slots
            .iter()
            .map(|slot| SlotInfo {
                holder: slot.holder.clone(),
                fence: slot.fence,
                acquired_at: self.wall_time(slot.acquired_at),
                expires_in: slot.expires_at - now,
            })
            .collect();
        slots.sort_by_key(|slot| slot.fence);
        let max_leaders = (!slots.is_empty()).then_some(group.max_leaders);
        groups.forget_if_unused(key, now);
        Ok(GroupSnapshot { max_leaders, leaders: slots, pending: Vec::new() })
    }

    async fn claim(&self, key: &str) -> Result<Option<ClaimInfo>, Error> {
        let mut groups = self.groups();
        let now = groups.now();
        let Groups { by_key, preferences, .. } = &mut *groups;
        let preferred = Preferred::live(preferences.get(key), now);
        let reserved = by_key.get(key).and_then(|group| group.reserved.as_ref());
        Ok(reserved::info(reserved, now, preferred))
    }

    async fn prefer(&self, key: &str, preferred: Option<(&str, Duration)>) -> Result<(), Error> {
        let mut groups = self.groups();
        let now = groups.now();
        groups.preferences.retain(|_, preference| preference.until > now);
        match preferred {
            Some((holder, ttl)) => {
                let until = now.checked_add(ttl).unwrap_or(now + Duration::from_secs(86_400 * 365));
                let preference = Preferred { holder: holder.to_owned(), until };
                groups.preferences.insert(key.to_owned(), preference);
            }
            None => {
                groups.preferences.remove(key);
            }
        }
        Ok(())
    }

    async fn preference(&self, key: &str) -> Result<Option<Preference>, Error> {
        let groups = self.groups();
        let now = groups.now();
        let live = groups.preferences.get(key).filter(|preference| preference.until > now);
        Ok(live.map(|p| Preference::new(p.holder.clone(), p.until - now)))
    }

    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        Ok(self.inner.watchers.watch(key))
    }

    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        Ok(self.inner.watchers.watch_changes(key))
    }

    /// The groups with a live slot (an idle group is forgotten).
    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        let groups = self.groups();
        let now = groups.now();
        let mut keys: Vec<String> = groups
            .by_key
            .iter()
            .filter(|(key, group)| {
                key.len() >= prefix.len() + suffix.len()
                    && key.starts_with(prefix)
                    && key.ends_with(suffix)
                    && group.slots.iter().any(|slot| slot.expires_at > now)
            })
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort();
        Ok(keys)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").field("groups", &self.groups().by_key.len()).finish()
    }
}

#[cfg(test)]
mod tests;
