//! Contention: candidates on many stores, in any isolation, never hold more than
//! `max_leaders` slots, and their refused attempts spend no transaction ids.

use std::time::Duration;

use leader::store::{AcquireOutcome, ReleaseOutcome};
use leader::{LeaseStore, PostgresStore};

use super::SECOND;
use crate::support;
use crate::support::postgres_server::PostgresServer;
use crate::support::{request, token};

/// A refused attempt writes nothing, even one that saw a free slot and had to wait for a
/// grant in flight: under contention the server hands out transaction ids only to grants
/// and releases (a row lock taken to refuse would cost one each, and WAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_attempts_under_contention_spend_no_transaction_ids() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    let server = PostgresServer::start();
    let store = PostgresStore::builder(server.url()).pool_size(16).connect().await.unwrap();
    store.migrate().await.unwrap();
    // Each reading spends one id itself.
    let next_id = || server.psql("SELECT pg_current_xact_id()::text").parse::<u64>().unwrap();
    let before = next_id();
    let (granted, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let until = tokio::time::Instant::now() + 2 * SECOND;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (store, granted, refused) = (store.clone(), granted.clone(), refused.clone());
            tokio::spawn(async move {
                while tokio::time::Instant::now() < until {
                    let held = token();
                    match store.acquire(request("leader:contended", 1, held)).await.unwrap() {
                        AcquireOutcome::Granted(_) => {
                            granted.fetch_add(1, Relaxed);
                            let released = store.release("leader:contended", held, Duration::ZERO);
                            assert_eq!(released.await.unwrap(), ReleaseOutcome::Released);
                        }
                        _ => {
                            refused.fetch_add(1, Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let spent = next_id() - before - 1;
    let (granted, refused) = (granted.load(Relaxed), refused.load(Relaxed));
    assert!(
        granted > 10 && refused > granted,
        "no contention: {granted} grants, {refused} refusals"
    );
    // A few ids of slack for the server's own work (an automatic ANALYZE takes one).
    assert!(
        spent <= 2 * granted + 5,
        "{spent} transaction ids for {granted} grants, as many releases and {refused} refusals"
    );
}

/// A grant made without the group's advisory lock (by hand, serialised on the group's row
/// alone) while an acquire is between its look and its grant: the acquire's serialization
/// failure is retried and finds the group full, never a second slot in a group of one.
#[tokio::test]
async fn a_grant_made_without_the_lock_in_between_is_never_a_slot_too_many() {
    let server = std::sync::Arc::new(PostgresServer::start());
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let first = token();
    store.acquire(request("leader:mixed", 1, first)).await.unwrap();
    store.release("leader:mixed", first, Duration::ZERO).await.unwrap();
    // A grant by hand: the group's row locked and its fence moved, a slot inserted, and the
    // commit held back for a moment.
    let old_grant = {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            server.psql(
                "BEGIN; \
                 UPDATE leader_groups SET last_fence = last_fence + 1 WHERE key = 'leader:mixed'; \
                 INSERT INTO leader_slots SELECT 'leader:mixed', gen_random_uuid(), 'old', \
                   last_fence, clock_timestamp(), clock_timestamp() + interval '10 s' \
                   FROM leader_groups WHERE key = 'leader:mixed'; \
                 SELECT pg_sleep(2); COMMIT;",
            )
        })
    };
    support::eventually(10 * SECOND, "the grant by hand holds the group's row", || async {
        server.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == "1"
    })
    .await;
    let outcome = store.acquire(request("leader:mixed", 1, token())).await;
    old_grant.await.unwrap();
    assert!(matches!(outcome, Ok(AcquireOutcome::Full { .. })), "{outcome:?}");
    let slots = store.state("leader:mixed").await.unwrap().leaders;
    assert_eq!(slots.len(), 1, "{slots:?}");
    assert_eq!(slots[0].holder, "old");
}

/// In sessions that default to REPEATABLE READ (a snapshot older than the advisory lock's
/// wait), contending acquires still never hold more than max_leaders slots at once: a stale
/// look ends in a transient serialization failure, never a grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeatable_read_sessions_never_exceed_max_leaders() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

    let server = PostgresServer::start();
    PostgresStore::connect(&server.url()).await.unwrap().migrate().await.unwrap();
    server.psql("ALTER DATABASE postgres SET default_transaction_isolation = 'repeatable read'");
    let store = PostgresStore::builder(server.url()).pool_size(8).connect().await.unwrap();
    let isolation = server.psql("SHOW default_transaction_isolation");
    assert_eq!(isolation, "repeatable read");
    let (holding, most, granted) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let until = tokio::time::Instant::now() + 2 * SECOND;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, holding, most, granted) =
                (store.clone(), holding.clone(), most.clone(), granted.clone());
            tokio::spawn(async move {
                while tokio::time::Instant::now() < until {
                    let held = token();
                    match store.acquire(request("leader:rr", 2, held)).await {
                        Ok(AcquireOutcome::Granted(_)) => {
                            most.fetch_max(holding.fetch_add(1, SeqCst) + 1, SeqCst);
                            granted.fetch_add(1, SeqCst);
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            holding.fetch_sub(1, SeqCst);
                            store.release("leader:rr", held, Duration::ZERO).await.unwrap();
                        }
                        Ok(_) => {} // full
                        Err(error) => assert!(error.is_transient(), "{error:?}"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(granted.load(SeqCst) > 10, "{} grants", granted.load(SeqCst));
    assert_eq!(most.load(SeqCst), 2, "holders at once in a group of 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_candidates_on_many_stores_never_exceed_max_leaders() {
    let server = PostgresServer::start();
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(PostgresStore::connect(&server.url()).await.unwrap()); // a pool each
    }
    let hold = Duration::from_millis(2);
    let contest = support::Contest {
        // Generous: a candidate skipped on a busy machine would count as no election.
        wait_time: 10 * SECOND,
        hold,
        until: support::Until::Rounds(8),
        ..support::Contest::new("shared-pool", 3, 6)
    };
    let seen = contest.run(&stores).await;
    assert!(seen.errors.is_empty(), "{:?}", seen.errors);
    let most = seen.most_at_once;
    assert!(most <= 3, "{most} holders at once in a group of 3");
    assert_eq!(most, 3, "24 candidates never filled the group");
    assert!(seen.elected > 24, "only {} elections", seen.elected);
    let left = stores[0].state("leader:shared-pool").await.unwrap();
    assert!(left.leaders.is_empty(), "slots left behind: {left:?}");
}
