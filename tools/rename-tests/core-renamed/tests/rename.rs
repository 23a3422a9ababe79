//! No `leader` facade, only `leader-core` renamed to `core_alias`, and the macros crate.

use core_alias::{LeaderRunResult, MemoryStore};
use leader_macros::{leader_election, leader_group_election};

#[leader_election(name = "core-only", store = MemoryStore::new())]
async fn single() -> &'static str {
    "single"
}

#[leader_group_election(name = "core-only-group", max_leaders = 3, store = MemoryStore::new())]
async fn group() -> &'static str {
    "group"
}

#[tokio::test]
async fn macros_work_on_leader_core_alone() {
    assert_eq!(single().await.unwrap(), LeaderRunResult::Elected("single"));
    assert_eq!(group().await.unwrap(), LeaderRunResult::Elected("group"));
}
