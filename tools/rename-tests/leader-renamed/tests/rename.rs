//! `leader` renamed to `my_leader` in Cargo.toml: the macros find it, and `crate = "…"`
//! overrides the lookup.

use my_leader::{LeaderRunResult, MemoryStore, leader_election, leader_group_election};

/// A module that re-exports the runtime, to name with `crate = "…"`.
mod runtime {
    pub use my_leader::*;
}

#[leader_election(name = "renamed", store = MemoryStore::new())]
async fn found_by_lookup() -> u8 {
    1
}

#[leader_group_election(name = "renamed-group", max_leaders = 2, store = MemoryStore::new(), crate = "crate::runtime")]
async fn named_by_override() -> u8 {
    2
}

#[my_leader::leader_election(name = "renamed-path", store = MemoryStore::new(), crate = "::my_leader")]
async fn named_by_absolute_override() -> u8 {
    3
}

#[tokio::test]
async fn macros_work_with_a_renamed_dependency() {
    assert_eq!(found_by_lookup().await.unwrap(), LeaderRunResult::Elected(1));
    assert_eq!(named_by_override().await.unwrap(), LeaderRunResult::Elected(2));
    assert_eq!(named_by_absolute_override().await.unwrap(), LeaderRunResult::Elected(3));
}
