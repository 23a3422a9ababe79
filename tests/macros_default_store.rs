//! The attribute macros with the process-wide default store (a test binary of its own,
//! since the default is process-wide).

use leader::{Error, LeaderRunResult, MemoryStore, leader_election};

#[leader_election(name = "uses-the-default")]
async fn uses_the_default() -> &'static str {
    "ran"
}

#[tokio::test]
async fn without_a_store_the_call_says_how_to_install_one() {
    let err = uses_the_default().await.unwrap_err();
    assert!(matches!(err, Error::NoDefaultStore), "{err:?}");
    assert!(err.to_string().contains("leader::install_default_store"), "{err}");

    assert!(leader::install_default_store(MemoryStore::new()).is_none());
    assert_eq!(uses_the_default().await.unwrap(), LeaderRunResult::Elected("ran"));
}
