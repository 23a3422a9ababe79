use leader::{LeaderRunResult, MemoryStore, leader_group_election};

#[leader_group_election(
    name = "everything",
    max_leaders = 4,
    wait_time = "PT0.5S",
    lease_time = "2h",
    min_lease_time = "1m30s",
    auto_extend = true,
    holder_id = "worker-1",
    store = MemoryStore::new(),
    on_store_error = "error",
    crate = "::leader",
)]
async fn everything() -> String {
    leader::Lease::current().unwrap().holder().to_owned()
}

#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), leader::Error> {
    assert_eq!(everything().await?, LeaderRunResult::Elected("worker-1".to_owned()));
    Ok(())
}
