use leader::{LeaderRunResult, MemoryStore, leader_election};

#[tracing::instrument]
#[leader_election(name = "instrumented-outside", store = MemoryStore::new())]
async fn instrumented_outside(id: u32) -> u32 {
    tracing::info!("inside");
    id
}

#[leader_election(name = "instrumented-inside", store = MemoryStore::new())]
#[tracing::instrument(ret)]
async fn instrumented_inside(id: u32) -> u32 {
    id
}

#[tokio::main]
pub async fn main() -> Result<(), leader::Error> {
    assert_eq!(instrumented_outside(1).await?, LeaderRunResult::Elected(1));
    assert_eq!(instrumented_inside(2).await?, LeaderRunResult::Elected(2));
    Ok(())
}
