//! Claims on a group's next free slot (fair waiting) that this store did not write.

use leader::store::AcquireOutcome;
use leader::{LeaseStore, PostgresStore};

use super::SECOND;
use crate::support::postgres_server::PostgresServer;
use crate::support::{request, token};

/// A claim row this store did not write (its end at infinity, or beyond the store's range)
/// made every acquire of the group fail converting it to microseconds. It counts as no
/// claim now, and the next claim replaces it.
#[tokio::test]
async fn a_claim_this_store_did_not_write_holds_nothing_back() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let ends = ["'infinity'", "'294276-01-01'", "now() + interval '5000 years'"];
    for (at, until) in ends.iter().enumerate() {
        let key = format!("leader:claimed-{at}");
        server.psql(&format!(
            "INSERT INTO leader_reservations VALUES ('{key}', \
             '00000000-0000-0000-0000-000000000000', now(), {until})"
        ));
        let granted = store.acquire(request(&key, 1, token())).await.unwrap();
        assert!(matches!(granted, AcquireOutcome::Granted(_)), "{until}: {granted:?}");
        let claim = request(&key, 1, token()).reserving(SECOND, 10 * SECOND);
        assert!(matches!(store.acquire(claim).await.unwrap(), AcquireOutcome::Full { .. }));
        let replaced = format!(
            "SELECT count(*) FROM leader_reservations WHERE key = '{key}' \
             AND held_until < now() + interval '1 minute'"
        );
        assert_eq!(server.psql(&replaced), "1", "{until}");
    }
    // An infinite arrival made `claim` fail (and `leader state` with it): no claim is read.
    server.psql(
        "INSERT INTO leader_reservations VALUES ('leader:claimed-inf', \
         '00000000-0000-0000-0000-000000000000', '-infinity', now() + interval '1 hour')",
    );
    assert_eq!(store.claim("leader:claimed-inf").await.unwrap(), None);
    // A preference row that never lapses is no preference: it neither fails a read nor
    // puts its holder first.
    let key = "leader:preferred-forever";
    server.psql(&format!("INSERT INTO leader_preferences VALUES ('{key}', 'forever', 'infinity')"));
    assert_eq!(store.preference(key).await.unwrap(), None);
    assert!(matches!(
        store.acquire(request(key, 1, token())).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    let better = request(key, 1, token()).reserving_at(SECOND, 10 * SECOND, 2);
    assert!(matches!(store.acquire(better).await.unwrap(), AcquireOutcome::Full { .. }));
    let mut forever = request(key, 1, token()).reserving_at(SECOND, 10 * SECOND, 0);
    forever.holder = "forever";
    assert!(matches!(store.acquire(forever).await.unwrap(), AcquireOutcome::Full { .. }));
    let claim = store.claim(key).await.unwrap().expect("a claim");
    assert_eq!((claim.priority, claim.preference), (2, None));
}
