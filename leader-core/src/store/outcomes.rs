//! What a store answers: a grant, the outcome of an acquire, a renewal or a release, and a
//! group's live slots.

use std::time::{Duration, SystemTime};

/// A slot the store granted, made with [`Grant::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The group's fencing token for this grant, strictly greater than every earlier grant's.
    pub fence: u64,
    /// When the slot was granted, on the store's clock.
    pub acquired_at: SystemTime,
    /// When the slot expires unless renewed, on the store's clock.
    pub expires_at: SystemTime,
    /// How long the slot lives at least, from the moment the store acted: never more than
    /// its true time to live, so a client that adds it to when its request was sent gets a
    /// local deadline that never falls after the store's expiry. A store whose clock is
    /// coarser than the truth rounds down (the Redis store counts off the millisecond its
    /// clock was floored to).
    pub expires_in: Duration,
}

impl Grant {
    /// A grant under `fence`, made at `acquired_at` and expiring at `expires_at` on the
    /// store's clock, living at least `expires_in` from the moment the store acted.
    pub fn new(
        fence: u64,
        acquired_at: SystemTime,
        expires_at: SystemTime,
        expires_in: Duration,
    ) -> Self {
        Grant { fence, acquired_at, expires_at, expires_in }
    }
}

/// What an acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireOutcome {
    /// A slot is held under the request's token (newly, or already by an earlier attempt).
    Granted(Grant),
    /// Every slot is held by someone else; the first of them expires in `nearest_expiry`
    /// unless it is renewed.
    Full {
        /// Time until the earliest live slot expires.
        nearest_expiry: Duration,
    },
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// The slot is held and now lives for `expires_in` from the store's answer.
    Renewed {
        /// When the slot now expires, on the store's clock.
        expires_at: SystemTime,
        /// The slot's new time to live, at least, from the moment the store acted (rounded
        /// down, as [`Grant::expires_in`]).
        expires_in: Duration,
    },
    /// The token holds no live slot: it expired or was released. Nothing was changed.
    NotHeld,
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The slot was freed.
    Released,
    /// The slot is kept until its minimum lease time has passed, then expires by itself.
    Kept {
        /// Time until the slot expires.
        expires_in: Duration,
    },
    /// The token holds no live slot; nothing was changed.
    NotHeld,
}

/// A group as the store sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupSnapshot {
    /// The `max_leaders` the live slots were granted under; `None` when no slot is live.
    pub max_leaders: Option<u32>,
    /// The live slots whose holders may act, earliest grant first.
    pub leaders: Vec<SlotInfo>,
    /// Slots granted to candidates that may not act on them yet (etcd's lock-delay after a
    /// takeover): they count against `max_leaders`, but their holders do not lead yet.
    /// Empty on every other store.
    pub pending: Vec<SlotInfo>,
}

/// One live slot, as state reports it (without its token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// The candidate that holds it.
    pub holder: String,
    /// The fencing token it was granted with.
    pub fence: u64,
    /// When it was granted, on the store's clock.
    pub acquired_at: SystemTime,
    /// Time until it expires unless renewed.
    pub expires_in: Duration,
}

/// A group's live reservation of its next free slot, as [`LeaseStore::claim`] reads it: the
/// waiting candidate the slot is kept for (the best one that announced itself: the highest
/// priority, then the earliest arrival).
///
/// [`LeaseStore::claim`]: super::LeaseStore::claim
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimInfo {
    /// The waiting candidate.
    pub holder: String,
    /// Its priority (higher wins; 0 when it announced none).
    pub priority: i32,
    /// How long it has waited, by its arrival as the store recorded it.
    pub waited: Duration,
    /// Time until the reservation lapses unless its candidate asks again (on etcd, an upper
    /// bound: the time its lease was granted for).
    pub expires_in: Duration,
    /// The holder an operator prefers for the group ([`LeaseStore::prefer`]), if a live
    /// preference names one when the claim was read: its claim goes before every other.
    ///
    /// [`LeaseStore::prefer`]: super::LeaseStore::prefer
    pub preference: Option<String>,
}

impl ClaimInfo {
    /// A reservation of `holder` at `priority`, waiting `waited`, lapsing in `expires_in`,
    /// under no preference: for a store written outside this crate.
    pub fn new(holder: String, priority: i32, waited: Duration, expires_in: Duration) -> Self {
        ClaimInfo { holder, priority, waited, expires_in, preference: None }
    }

    /// The same claim, read while an operator preferred `holder` (or no one).
    #[must_use]
    pub fn with_preference(mut self, holder: Option<String>) -> Self {
        self.preference = holder;
        self
    }

    /// Whether the waiting candidate is the one an operator prefers.
    pub fn is_preferred(&self) -> bool {
        self.preference.as_deref() == Some(self.holder.as_str())
    }
}

/// An operator's preference for the holder that is to lead a group, as
/// [`LeaseStore::preference`] reads it: while it lives, that holder's claim on the group's
/// next free slot goes before every other, whatever their priorities, and a leader that
/// looks for better candidates steps down for it once it waits.
///
/// [`LeaseStore::preference`]: super::LeaseStore::preference
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Preference {
    /// The preferred holder id.
    pub holder: String,
    /// Time until the preference lapses by itself.
    pub expires_in: Duration,
}

impl Preference {
    /// A preference for `holder`, lapsing in `expires_in`: for a store written outside this
    /// crate.
    pub fn new(holder: String, expires_in: Duration) -> Self {
        Preference { holder, expires_in }
    }
}
