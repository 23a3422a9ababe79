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
/// assert_eq!((state.max_leaders, state.active_count), (3, 0));
/// assert!(state.is_empty() && !state.is_full());
/// assert_eq!(state.available_slots(), 3);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderGroupState {
    /// The group's name.
    pub name: String,
    /// The group's store key.
    pub key: String,
    /// How many slots the group has: the store's value while slots are live, else the
    /// elector's.
    pub max_leaders: u32,
    /// How many slots are held (the length of `leaders`).
    pub active_count: u32,
    /// The live slots, earliest grant first.
    pub leaders: Vec<SlotInfo>,
}

impl LeaderGroupState {
    /// Slots free now.
    pub fn available_slots(&self) -> u32 {
        self.max_leaders.saturating_sub(self.active_count)
    }

    /// Whether every slot is held.
    pub fn is_full(&self) -> bool {
        self.active_count >= self.max_leaders
    }

    /// Whether no slot is held.
    pub fn is_empty(&self) -> bool {
        self.active_count == 0
    }
}
