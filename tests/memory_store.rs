//! The store conformance suite against `MemoryStore`, under paused tokio time.

use leader_testkit::conformance_suite;

use leader::MemoryStore;

conformance_suite!(
    #[tokio::test(start_paused = true)]
    async {
        (MemoryStore::new(), ())
    }
);

/// A rule the memory store keeps and the server-backed stores do not yet (see the rule).
#[tokio::test(start_paused = true)]
async fn a_revoked_token_gets_no_new_slot_until_the_revoked_one_lapses() {
    leader_testkit::conformance::a_revoked_token_gets_no_new_slot_until_the_revoked_one_lapses(
        &MemoryStore::new(),
        "revoked-token",
    )
    .await;
}

/// The simulation's faults of the store itself: a clock stepped ahead ends a slot that much
/// sooner, one stepped back lets it last that much longer, and a loss of data forgets every
/// slot with fences still increasing (or, asked to, counting from zero again).
#[tokio::test(start_paused = true)]
async fn the_store_clock_steps_and_data_losses_the_simulation_plays() {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use leader::LeaseToken;
    use leader::store::{AcquireOutcome, AcquireRequest, LeaseStore};

    const LEASE: Duration = Duration::from_secs(10);
    let store = MemoryStore::new();
    let grant = |key: &'static str| {
        let store = store.clone();
        async move {
            let token = LeaseToken::generate().unwrap();
            let request = AcquireRequest::new(key, NonZeroU32::MIN, token, "me", LEASE);
            match store.acquire(request).await.unwrap() {
                AcquireOutcome::Granted(grant) => grant,
                other => panic!("{key}: {other:?}"),
            }
        }
    };
    let live = |key: &'static str| {
        let store = store.clone();
        async move { store.state(key).await.unwrap().leaders.len() }
    };

    let first = grant("ahead").await;
    store.__step_clock(Duration::from_secs(4), true);
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(live("ahead").await, 1, "9 s of the store's 10 s");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(live("ahead").await, 0, "gone 4 s early");

    grant("back").await;
    store.__step_clock(Duration::from_secs(3), false);
    tokio::time::advance(Duration::from_secs(12)).await;
    assert_eq!(live("back").await, 1, "9 s of the store's 10 s");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(live("back").await, 0, "gone 3 s late");

    let before = grant("lost").await;
    store.__lose_data(true);
    assert_eq!(live("lost").await, 0, "forgotten");
    let after = grant("lost").await;
    assert!(after.fence > before.fence && before.fence > first.fence, "fences still increase");
    store.__lose_data(false);
    assert_eq!(grant("lost").await.fence, 1, "counting from zero again");
}

/// A claim's times out of the store's range are refused, naming the value, as a lease's are.
#[tokio::test(start_paused = true)]
async fn a_claim_out_of_range_is_refused_naming_its_value() {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use leader::LeaseStore;
    use leader::store::AcquireRequest;

    let store = MemoryStore::new();
    let token = leader::LeaseToken::generate().unwrap();
    let second = Duration::from_secs(1);
    let request = AcquireRequest::new("claims", NonZeroU32::MIN, token, "test", second);
    for (claim, named) in [
        (request.reserving(Duration::MAX, second), "invalid `waited`"),
        (request.reserving(second, Duration::ZERO), "invalid `hold_for`"),
    ] {
        let refused = store.acquire(claim).await.unwrap_err().to_string();
        assert!(refused.starts_with(named), "{refused}");
    }
}
