//! [`LeaderGroupState`]: who holds a group's slots now.

use crate::SlotInfo;

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
    /// How many slots are held (the length of `leaders`).
    pub active_count: u32,
    /// The live slots, earliest grant first.
    pub leaders: Vec<SlotInfo>,
}

impl LeaderGroupState {
    /// Slots free now; `None` when the group's size is unknown (no slot is live).
    pub fn available_slots(&self) -> Option<u32> {
        self.max_leaders.map(|max| max.saturating_sub(self.active_count))
    }

    /// Whether every slot is held.
    pub fn is_full(&self) -> bool {
        self.max_leaders.is_some_and(|max| self.active_count >= max)
    }

    /// Whether no slot is held.
    pub fn is_empty(&self) -> bool {
        self.active_count == 0
    }
}
