use leader::{LeaderRunResult, MemoryStore, leader_election};

/// Docs and attributes stay on the wrapped fn.
#[leader_election(name = "free", store = MemoryStore::new())]
#[must_use = "the report matters"]
pub async fn free(day: u32) -> String {
    format!("day {day}")
}

#[leader_election(name = "unit", lease_time = "1m30s", store = MemoryStore::new())]
async fn returns_unit() {}

#[leader_election(name = "early-{day}", store = MemoryStore::new())]
async fn returns_early(day: u32) -> Result<u32, String> {
    if day == 0 {
        return Err("day zero".to_owned());
    }
    let parsed: u32 = "5".parse().map_err(|_| "bad".to_owned())?;
    Ok(day + parsed)
}

#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), leader::Error> {
    assert_eq!(free(1).await?, LeaderRunResult::Elected("day 1".to_owned()));
    assert_eq!(returns_unit().await?, LeaderRunResult::Elected(()));
    assert_eq!(returns_early(0).await?, LeaderRunResult::Elected(Err("day zero".to_owned())));
    assert_eq!(returns_early(1).await?, LeaderRunResult::Elected(Ok(6)));
    Ok(())
}
