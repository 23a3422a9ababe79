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
