use std::fmt::Display;

use leader::{LeaderRunResult, LeaseStore, MemoryStore, leader_election, leader_group_election};

#[leader_election(name = "generic", store = store)]
async fn generic<S: LeaseStore + 'static, T: Display>(store: S, value: T) -> String {
    value.to_string()
}

#[leader_group_election(name = "where-{label}", max_leaders = 2, store = store)]
async fn with_where_clause<S, T>(store: S, label: &str, items: Vec<T>) -> usize
where
    S: LeaseStore + 'static,
    T: Clone + Send,
{
    items.len() + label.len()
}

#[leader_election(name = "impl-arg", store = MemoryStore::new())]
async fn impl_argument(value: impl Display) -> String {
    value.to_string()
}

#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), leader::Error> {
    assert_eq!(generic(MemoryStore::new(), 5).await?, LeaderRunResult::Elected("5".to_owned()));
    assert_eq!(
        with_where_clause(MemoryStore::new(), "ab", vec![1, 2, 3]).await?,
        LeaderRunResult::Elected(5)
    );
    assert_eq!(impl_argument('x').await?, LeaderRunResult::Elected("x".to_owned()));
    Ok(())
}
