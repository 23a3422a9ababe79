//! [`MemoryStore`]: the embedded store, for one process, tests and local development.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    AcquireOutcome, AcquireRequest, Grant, GroupSnapshot, LeaseStore, ReleaseOutcome, ReleaseWatch,
    RenewOutcome, SlotInfo,
};
use crate::{Error, LeaseToken};

/// An in-process store with the same semantics as the Redis store.
///
/// It elects within one process only: use it for a single instance, for tests and for local
/// development. Its clock is tokio's, so tests under `#[tokio::test(start_paused = true)]`
/// run leases of minutes in microseconds. Clones share the same groups.
///
/// A group's fence counter is kept for the life of the store, so fences never repeat even
/// after every slot is gone; that is a few dozen bytes per group name ever used.
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
    groups: Mutex<HashMap<String, Group>>,
    origin: Instant,
    epoch: SystemTime,
}

struct Group {
    max_leaders: u32,
    last_fence: u64,
    slots: Vec<Slot>,
    releases: watch::Sender<u64>,
}

struct Slot {
    token: LeaseToken,
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
                groups: Mutex::new(HashMap::new()),
                origin: Instant::now(),
                epoch: SystemTime::now(),
            }),
        }
    }

    fn groups(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        // The lock is never held across a panic-prone call, but a poisoned map is still
        // consistent (every mutation is a single step), so recover it.
        self.inner.groups.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The store's clock as wall time: the creation time plus tokio time elapsed since.
    fn wall_time(&self, at: Instant) -> SystemTime {
        self.inner.epoch + at.duration_since(self.inner.origin)
    }

    /// The group at `key` with its expired slots dropped, if it was ever used.
    fn live_group<'a>(
        groups: &'a mut HashMap<String, Group>,
        key: &str,
        now: Instant,
    ) -> Option<&'a mut Group> {
        let group = groups.get_mut(key)?;
        group.slots.retain(|slot| slot.expires_at > now);
        Some(group)
    }
}

impl Group {
    fn new(max_leaders: u32) -> Self {
        Group { max_leaders, last_fence: 0, slots: Vec::new(), releases: watch::Sender::new(0) }
    }

    fn slot_mut(&mut self, token: LeaseToken) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|slot| slot.token == token)
    }

    fn wake_waiters(&self) {
        self.releases.send_modify(|count| *count = count.wrapping_add(1));
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        let now = Instant::now();
        if request.max_leaders == 0 {
            return Err(Error::invalid_option("max_leaders", 0, "must be at least 1"));
        }
        let mut groups = self.groups();
        let group =
            groups.entry(request.key.to_owned()).or_insert_with(|| Group::new(request.max_leaders));
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
        if group.slots.is_empty() {
            group.max_leaders = request.max_leaders;
        } else if group.max_leaders != request.max_leaders {
            return Err(Error::MaxLeadersMismatch {
                group: request.key.to_owned(),
                requested: request.max_leaders,
                existing: group.max_leaders,
            });
        }
        if group.slots.len() >= group.max_leaders as usize {
            let nearest = group.slots.iter().map(|slot| slot.expires_at).min().unwrap_or(now);
            return Ok(AcquireOutcome::Full { nearest_expiry: nearest - now });
        }
        group.last_fence += 1;
        group.slots.push(Slot {
            token: request.token,
            holder: request.holder.to_owned(),
            fence: group.last_fence,
            acquired_at: now,
            expires_at: now + request.lease_time,
        });
        Ok(AcquireOutcome::Granted(Grant {
            fence: group.last_fence,
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
        let now = Instant::now();
        let mut groups = self.groups();
        let Some(slot) = Self::live_group(&mut groups, key, now).and_then(|g| g.slot_mut(token))
        else {
            return Ok(RenewOutcome::NotHeld);
        };
        slot.expires_at = now + lease_time;
        Ok(RenewOutcome::Renewed {
            expires_at: self.wall_time(slot.expires_at),
            expires_in: lease_time,
        })
    }

    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        let now = Instant::now();
        let mut groups = self.groups();
        let Some(group) = Self::live_group(&mut groups, key, now) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let Some(index) = group.slots.iter().position(|slot| slot.token == token) else {
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
        group.wake_waiters();
        Ok(outcome)
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        let now = Instant::now();
        let mut groups = self.groups();
        let Some(group) = Self::live_group(&mut groups, key, now) else {
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
        Ok(GroupSnapshot { max_leaders, slots })
    }

    async fn watch_releases(&self, key: &str) -> Result<ReleaseWatch, Error> {
        let mut groups = self.groups();
        let group = groups.entry(key.to_owned()).or_insert_with(|| Group::new(1));
        Ok(ReleaseWatch::new(group.releases.subscribe(), None))
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").field("groups", &self.groups().len()).finish()
    }
}
