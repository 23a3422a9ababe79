//! The store conformance suite against `MemoryStore`, under paused tokio time.

mod conformance;

use leader::MemoryStore;

conformance_suite!(
    #[tokio::test(start_paused = true)]
    async {
        (MemoryStore::new(), ())
    }
);
