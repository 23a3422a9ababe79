//! [`LeaderGroupState`]: who holds a group's slots now.

use crate::store::SlotInfo;

/// A group's slots as the store reported them.
///
/// ```
/// use leader_core::{LeaderGroupElectionOptions, LeaderGroupElector, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let group = LeaderGroupElector::new(MemoryStore::new(), LeaderGroupElectionOptions::new(3))?;
/// let state = group.state("thumbnail-workers").await?;
/// assert_eq!((state.max_leaders, state.active_count), (None, 0)); // no slot: size unknown
/// assert!(state.is_empty() && !state.is_full());
/// assert_eq!(state.available_slots(), None);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderGroupState {
    /// The group's name.
    pub name: String,
    /// The group's store key.
    pub key: String,
    /// How many slots the group has, as its live slots were granted under; `None` while no
    /// slot is live (the store keeps no size for an empty group).
    pub max_leaders: Option<u32>,
    /// How many slots are held by holders that may act (the length of `leaders`).
    pub active_count: u32,
    /// The live slots whose holders may act, earliest grant first.
    pub leaders: Vec<SlotInfo>,
    /// Slots granted to candidates that may not act on them yet (etcd's lock-delay after a
    /// takeover): they count against `max_leaders`, but their holders do not lead yet.
    pub pending: Vec<SlotInfo>,
}

impl LeaderGroupState {
    /// Slots free now (pending ones count as taken); `None` when the group's size is
    /// unknown (no slot is live).
    pub fn available_slots(&self) -> Option<u32> {
        self.max_leaders.map(|max| max.saturating_sub(self.taken()))
    }

    /// Whether every slot is taken (pending ones included).
    pub fn is_full(&self) -> bool {
        self.max_leaders.is_some_and(|max| self.taken() >= max)
    }

    fn taken(&self) -> u32 {
        self.active_count.saturating_add(self.pending.len() as u32)
    }

    /// Whether no slot is held (pending ones included).
    pub fn is_empty(&self) -> bool {
        self.active_count == 0 && self.pending.is_empty()
    }
}
