//! The store conformance suite against `MemoryStore`, under paused tokio time.

use leader_testkit::conformance_suite;

use leader::MemoryStore;

conformance_suite!(
    #[tokio::test(start_paused = true)]
    async {
        (MemoryStore::new(), ())
    }
);
