use leader::{LeaderRunResult, MemoryStore, leader_election, leader_group_election};

struct Service {
    store: MemoryStore,
    runs: u32,
}

impl Service {
    #[leader_group_election(name = "by-ref", max_leaders = 3, store = self.store.clone())]
    async fn by_ref(&self) -> u32 {
        self.runs
    }

    #[leader_election(name = "by-mut", store = self.store.clone())]
    async fn by_mut(&mut self) -> u32 {
        self.runs += 1;
        self.runs
    }

    #[leader_election(name = "by-value", store = self.store.clone())]
    async fn by_value(self) -> u32 {
        self.runs
    }

    #[leader_election(name = "associated", store = store)]
    async fn associated(store: MemoryStore) -> &'static str {
        "no receiver"
    }
}

#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), leader::Error> {
    let mut service = Service { store: MemoryStore::new(), runs: 0 };
    assert_eq!(service.by_ref().await?, LeaderRunResult::Elected(0));
    assert_eq!(service.by_mut().await?, LeaderRunResult::Elected(1));
    assert_eq!(Service::associated(MemoryStore::new()).await?.elected(), Some("no receiver"));
    assert_eq!(service.by_value().await?, LeaderRunResult::Elected(1));
    Ok(())
}
