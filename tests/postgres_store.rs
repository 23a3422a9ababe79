//! `PostgresStore` against a private PostgreSQL server each test makes with `initdb` and
//! starts with `pg_ctl`: the conformance suite, durability across a SIGKILL of the server,
//! the schema's checks, and failures as clear errors.
#![cfg(feature = "postgres")]

use leader_testkit::conformance;
mod support;

use std::time::Duration;

use leader::store::{AcquireOutcome, ReleaseOutcome};
use leader::{Error, LeaderElectionOptions, LeaderElector, LeaseStore, PostgresStore};
use support::postgres_server::PostgresServer;
use support::{request, request_for, token};

const SECOND: Duration = Duration::from_secs(1);

// One server for the whole suite (initdb takes a second or two); every rule on its own key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.expect("connect");
    // A second store with its own tables on the same server follows the rules too (at the
    // same time: the two share nothing but the server).
    let other = PostgresStore::builder(server.url())
        .schema("elections")
        .table_prefix("jobs_")
        .connect()
        .await
        .unwrap();
    tokio::join!(conformance::run_all(&store, "pg"), conformance::run_all(&other, "pg-other"));
    // Its own tables: every rule's groups there (a rule's groups are named after the
    // rule; the batch renewal's are numbered after it), none in the default ones.
    let rules = "SELECT count(DISTINCT regexp_replace(key, '-([0-9]+|shortened)$', '')) \
                 FROM elections.jobs_groups WHERE key LIKE 'pg-other%'";
    assert_eq!(server.psql(rules), conformance::rule_count().to_string());
    let strays = "SELECT count(*) FROM leader_groups WHERE key LIKE 'pg-other%'";
    assert_eq!(server.psql(strays), "0");
}

#[tokio::test]
async fn a_committed_grant_survives_a_crash_of_the_server() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let held = token();
    let AcquireOutcome::Granted(grant) =
        store.acquire(request("leader:durable", 1, held)).await.unwrap()
    else {
        panic!("free")
    };
    server.kill();
    let err = store.acquire(request("leader:durable", 1, token())).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    server.restart();
    // No second believer: the grant is still there, and the same token still holds it.
    let outcome = store.acquire(request("leader:durable", 1, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Full { .. }), "{outcome:?}");
    let AcquireOutcome::Granted(again) =
        store.acquire(request("leader:durable", 1, held)).await.unwrap()
    else {
        panic!("the holder's retry is refused")
    };
    let same = (again.fence, again.acquired_at, again.expires_at);
    assert_eq!(same, (grant.fence, grant.acquired_at, grant.expires_at), "the same grant");
    let next = token();
    store.release("leader:durable", held, Duration::ZERO).await.unwrap();
    let AcquireOutcome::Granted(after) =
        store.acquire(request("leader:durable", 1, next)).await.unwrap()
    else {
        panic!("released")
    };
    assert!(after.fence > grant.fence);
}

/// With a synchronous standby a committed grant also survives a failover: the primary is
/// SIGKILLed and the standby promoted, and a store on it finds the grant (no second
/// holder), gives the holder's retry the same grant, and keeps fences increasing. Before
/// the promotion the standby refuses a full group from its snapshot, and anything that
/// would write is a transient error.
#[tokio::test]
async fn a_grant_survives_a_failover_to_a_synchronous_standby() {
    let primary = PostgresServer::start_with(&["-c", "synchronous_standby_names=*"]);
    let standby = PostgresServer::standby_of(&primary);
    let store = PostgresStore::connect(&primary.url()).await.unwrap();
    let held = token();
    let AcquireOutcome::Granted(grant) =
        store.acquire(request("leader:failover", 1, held)).await.unwrap()
    else {
        panic!("free")
    };
    let replica_state = "SELECT sync_state FROM pg_stat_replication";
    assert_eq!(primary.psql(replica_state), "sync", "the standby is synchronous");

    let on_standby = PostgresStore::connect(&standby.url()).await.unwrap();
    let outcome = on_standby.acquire(request("leader:failover", 1, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Full { .. }), "{outcome:?}");
    for err in [
        on_standby.acquire(request("leader:elsewhere", 1, token())).await.unwrap_err(),
        on_standby.renew("leader:failover", held, 10 * SECOND).await.unwrap_err(),
        on_standby.release("leader:failover", held, Duration::ZERO).await.unwrap_err(),
    ] {
        assert!(err.is_transient(), "{err:?}");
    }

    primary.kill();
    standby.promote();
    let outcome = on_standby.acquire(request("leader:failover", 1, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Full { .. }), "a second holder: {outcome:?}");
    let AcquireOutcome::Granted(again) =
        on_standby.acquire(request("leader:failover", 1, held)).await.unwrap()
    else {
        panic!("the holder's retry is refused")
    };
    assert_eq!((again.fence, again.acquired_at), (grant.fence, grant.acquired_at));
    let released = on_standby.release("leader:failover", held, Duration::ZERO).await.unwrap();
    assert_eq!(released, ReleaseOutcome::Released);
    let AcquireOutcome::Granted(next) =
        on_standby.acquire(request("leader:failover", 1, token())).await.unwrap()
    else {
        panic!("released")
    };
    assert!(next.fence > grant.fence, "{} after {}", next.fence, grant.fence);
}

#[tokio::test]
async fn a_table_of_another_shape_is_a_clear_error_and_left_alone() {
    let server = PostgresServer::start();
    server.psql("CREATE TABLE public.leader_slots (key text, expires_at text)");
    let err = PostgresStore::connect(&server.url()).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, Error::Store { operation: "migrate", .. }), "{err:?}");
    assert!(message.contains("public.leader_slots exists with another shape"), "{message}");
    assert!(
        message.contains("column `expires_at` is text, expected timestamp with time zone"),
        "{message}"
    );
    assert!(message.contains("column `token` (uuid) is missing"), "{message}");
    assert_eq!(
        server.psql(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'leader_slots'"
        ),
        "2"
    );
    assert_eq!(
        server.psql("SELECT to_regclass('public.leader_groups') IS NULL"),
        "t",
        "nothing half-written"
    );
}

#[tokio::test]
async fn many_stores_migrating_at_once_make_one_schema() {
    let server = PostgresServer::start();
    let url = server.url();
    let connects = (0..8).map(|_| PostgresStore::connect(&url));
    for store in futures_util::future::join_all(connects).await {
        store.unwrap();
    }
    assert_eq!(server.psql("SELECT count(*) FROM pg_proc WHERE proname = 'leader_grant'"), "1");
}

#[tokio::test]
async fn a_read_only_server_and_an_unreachable_one_are_transient_errors() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    server.psql("ALTER DATABASE postgres SET default_transaction_read_only = on");
    let fresh = PostgresStore::builder(server.url()).build().unwrap();
    // The schema exists; a new connection is read-only, as on a hot standby.
    let err = fresh.acquire(request("leader:standby", 1, token())).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    // The server's own reason, once, in the message.
    let shown = err.to_string();
    assert!(shown.contains("read-only") && shown.contains("during acquire"), "{shown}");
    // A standby's "not held" is no answer either: it may lag behind the primary.
    let renewed = fresh.renew("leader:standby", token(), 10 * SECOND).await;
    assert!(renewed.as_ref().is_err_and(Error::is_transient), "{renewed:?}");
    let released = fresh.release("leader:standby", token(), Duration::ZERO).await;
    assert!(released.as_ref().is_err_and(Error::is_transient), "{released:?}");
    assert!(fresh.state("leader:standby").await.unwrap().leaders.is_empty(), "reads still work");
    drop(store);

    let port = support::redis_server::free_port();
    let unreachable = PostgresStore::builder(format!("postgres://app:hunter2@127.0.0.1:{port}/x"))
        .command_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let err = unreachable.state("leader:x").await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(!format!("{err} {err:?} {unreachable:?}").contains("hunter2"));
    let bad = PostgresStore::builder("postgres://app:hunter2@host:notaport/x").build().unwrap_err();
    assert!(bad.to_string().starts_with("invalid `url`"), "{bad}");
    assert!(!bad.to_string().contains("hunter2"), "{bad}");
}

#[tokio::test]
async fn a_paused_server_times_out_and_the_store_recovers() {
    let server = PostgresServer::start();
    // The schema first, by a store with the default timeout: a fresh server's migration
    // took more than the 2 s a 500 ms store allows it (four commands) in CI, beside other
    // suites starting their servers.
    PostgresStore::connect(&server.url()).await.unwrap();
    let store = PostgresStore::builder(server.url())
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    store.state("leader:paused").await.unwrap();
    server.pause();
    let err = store.acquire(request("leader:paused", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    server.resume();
    let mut recovered = false;
    for _ in 0..50 {
        if store.acquire(request("leader:paused", 1, token())).await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "the store answers again");
}

#[tokio::test]
async fn an_elector_waits_for_a_release_on_notify() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let held = token();
    let long = request_for("leader:handover", 1, held, 60 * SECOND);
    assert!(matches!(store.acquire(long).await.unwrap(), AcquireOutcome::Granted(_)));
    let waiter = LeaderElector::new(
        store.clone(),
        LeaderElectionOptions::new().wait_time(10 * SECOND).lease_time(10 * SECOND),
    )
    .unwrap();
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let won = waiter.run_if_leader("handover", |_| async {}).await.unwrap();
        (won, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = tokio::time::Instant::now();
    assert_eq!(
        store.release("leader:handover", held, Duration::ZERO).await.unwrap(),
        ReleaseOutcome::Released
    );
    let (won, _) = waiting.await.unwrap();
    assert!(won.is_elected());
    let handed_over = released.elapsed();
    assert!(handed_over < 5 * SECOND, "woken by NOTIFY, not by the 60 s expiry: {handed_over:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_hands_over_at_once_on_stop() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let options = leader::LeadershipOptions::new().lease_time(30 * SECOND);
    let first =
        leader::Leadership::start("scheduler", store.clone(), options.clone()).await.unwrap();
    first.wait_for_leadership().await.expect("no refusal");
    let second = leader::Leadership::start("scheduler", store.clone(), options).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(first.is_leader() && !second.is_leader(), "one leader");
    let fence = first.fence().unwrap();
    let stopped = tokio::time::Instant::now();
    first.stop().await.expect("stopped");
    tokio::time::timeout(5 * SECOND, second.wait_for_leadership())
        .await
        .expect("hand-over")
        .expect("no refusal");
    assert!(stopped.elapsed() < 5 * SECOND, "woken by NOTIFY, not the 30 s lease");
    assert!(second.fence().unwrap() > fence);
    second.stop().await.expect("stopped");
}

#[tokio::test]
async fn a_missing_privilege_is_a_clear_error_naming_it() {
    let server = PostgresServer::start();
    server.psql("CREATE ROLE reader LOGIN");
    // PostgreSQL 15 lets only the owner create in schema public.
    let url = format!("postgres://reader@127.0.0.1:{}/postgres", server.port);
    let err = PostgresStore::connect(&url).await.unwrap_err();
    assert!(matches!(err, Error::Store { operation: "migrate", .. }), "{err:?}");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("permission denied for schema public (42501)"), "{err}");
}

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

/// A release sends `NOTIFY` only when some store announced waiters of the group:
/// PostgreSQL serialises every committing transaction that sent one, across the cluster,
/// so one that nobody waits for slows every other release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_nobody_waits_for_sends_no_notify() {
    use futures_util::StreamExt;
    use leader::store::deadpool_postgres::tokio_postgres::{self, AsyncMessage, NoTls};

    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    store.migrate().await.unwrap();
    // A bare listener on the store's channel, which announces nothing itself.
    let (client, mut connection) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
    let (heard_tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(notice) = message {
                let _ = heard_tx.send(notice.payload().to_owned());
            }
        }
    });
    client.batch_execute("LISTEN public_leader_released").await.unwrap();
    let cycle = |key: &'static str| {
        let store = store.clone();
        async move {
            let held = token();
            store.acquire(request(key, 1, held)).await.unwrap();
            assert_eq!(
                store.release(key, held, Duration::ZERO).await.unwrap(),
                ReleaseOutcome::Released
            );
        }
    };

    // Nobody waits for the first group; a waiter of this store waits for the second.
    cycle("leader:alone").await;
    let mut watch = store.watch_releases("leader:waited").await.unwrap();
    cycle("leader:waited").await;
    tokio::time::timeout(2 * SECOND, watch.woken()).await.expect("the waiter woke");
    let first = tokio::time::timeout(2 * SECOND, heard.recv()).await.expect("a NOTIFY");
    assert_eq!(first.as_deref(), Some("leader:waited"), "the first NOTIFY heard");

    // The listening connection is cut: its successor announces the group again.
    let holder = "SELECT pid FROM pg_locks WHERE locktype = 'advisory'";
    let old = server.psql(holder);
    server.psql(&format!("SELECT pg_terminate_backend({old})"));
    support::eventually(10 * SECOND, "the group is announced again", || async {
        let now = server.psql(holder);
        !now.is_empty() && now != old
    })
    .await;
    cycle("leader:waited").await;
    let again = tokio::time::timeout(2 * SECOND, heard.recv()).await.expect("a NOTIFY");
    assert_eq!(again.as_deref(), Some("leader:waited"));

    // Once the last waiter has gone, its announcement is withdrawn, and releases are quiet.
    drop(watch);
    support::eventually(10 * SECOND, "the waiter's announcement is withdrawn", || async {
        server.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == "0"
    })
    .await;
    cycle("leader:waited").await;
    let late = tokio::time::timeout(SECOND / 2, heard.recv()).await;
    assert!(late.is_err(), "a NOTIFY nobody waited for: {late:?}");
}

/// One migration mechanism: a database of an older schema version is migrated in place
/// (its functions replaced, its slots kept), and one of a newer version is refused with an
/// error naming both versions, rather than run with functions this build does not know.
#[tokio::test]
async fn older_schemas_are_migrated_and_newer_ones_refused() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let held = token();
    assert!(matches!(
        store.acquire(request("leader:kept", 1, held)).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    let grant = "leader_grant(text, text, text, bigint, integer, boolean)";
    server.psql(&format!("COMMENT ON FUNCTION {grant} IS 'leader-core schema 5'"));
    let upgraded = PostgresStore::connect(&server.url()).await.expect("migrates an older schema");
    let version = server.psql(&format!("SELECT obj_description('{grant}'::regprocedure)"));
    assert_eq!(version, "leader-core schema 8");
    let outcome = upgraded.acquire(request("leader:kept", 1, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Full { .. }), "the slot was kept: {outcome:?}");

    server.psql(&format!("COMMENT ON FUNCTION {grant} IS 'leader-core schema 99'"));
    let err = PostgresStore::connect(&server.url()).await.unwrap_err();
    assert!(matches!(err, Error::Store { operation: "migrate", .. }), "{err:?}");
    let shown = err.to_string();
    assert!(shown.contains("\"leader-core schema 99\", newer than this build's"), "{shown}");
    assert!(shown.contains("\"leader-core schema 8\""), "{shown}");
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

// The electors', Leadership's and the macros' Redis tests, where they apply, on PostgreSQL.

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

#[tokio::test]
async fn auto_extend_and_loss_work_on_postgres() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let options = LeaderElectionOptions::new().lease_time(Duration::from_secs(4)).auto_extend(true);
    let elector = LeaderElector::new(store.clone(), options).unwrap();
    let result = elector
        .run_if_leader("extended", |lease| async move {
            // Twice the lease: only renewals (every third of it) keep it.
            tokio::time::sleep(Duration::from_secs(8)).await;
            let survived = !lease.is_lost();
            store.release(lease.key(), lease.token(), Duration::ZERO).await.unwrap();
            tokio::time::timeout(5 * SECOND, lease.lost())
                .await
                .expect("loss noticed at the next renewal");
            (survived, lease.loss_reason())
        })
        .await
        .unwrap();
    assert_eq!(result.elected(), Some((true, Some(leader::LossReason::Refused))));
}

struct Workers {
    store: PostgresStore,
}

impl Workers {
    #[leader::leader_group_election(name = "workers", max_leaders = 2, lease_time = "1m", store = self.store.clone())]
    async fn process(&self, batch: u32) -> (u32, u64) {
        (batch, leader::Lease::current().expect("inside the body").fence())
    }
}

#[tokio::test]
async fn the_macros_elect_and_skip_on_postgres() {
    let server = PostgresServer::start();
    let workers = Workers { store: PostgresStore::connect(&server.url()).await.unwrap() };
    let (batch, fence) = workers.process(7).await.unwrap().elected().unwrap();
    assert_eq!(batch, 7);
    assert!(fence > 0);
    for _ in 0..2 {
        let crashed = request_for("leader:workers", 2, token(), 60 * SECOND);
        assert!(matches!(
            workers.store.acquire(crashed).await.unwrap(),
            AcquireOutcome::Granted(_)
        ));
    }
    assert_eq!(workers.process(8).await.unwrap(), leader::LeaderRunResult::Skipped);
}

/// A service opens its store without I/O at start-up; on a database where no store ever
/// ran, its candidates' first calls (a waiting `run_if_leader` watches for releases before
/// its first attempt, a `Leadership` too) make the schema, and they elect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_elect_on_a_new_database_through_a_store_built_without_io() {
    let server = PostgresServer::start();
    let by_url = leader::store::builder(server.url()).build().expect("no I/O");
    let elector = LeaderElector::new(
        by_url,
        LeaderElectionOptions::new().wait_time(5 * SECOND).lease_time(10 * SECOND),
    )
    .unwrap();
    let won = tokio::time::timeout(20 * SECOND, elector.run_if_leader("fresh", |_| async {}))
        .await
        .expect("answers");
    assert!(won.expect("no store error on a new database").is_elected());

    let other = PostgresServer::start();
    let built = PostgresStore::builder(other.url()).build().expect("no I/O");
    let leadership = leader::Leadership::start("fresh", built, leader::LeadershipOptions::new())
        .await
        .expect("valid options");
    tokio::time::timeout(20 * SECOND, leadership.wait_for_leadership())
        .await
        .expect("a Leadership leads on a new database")
        .expect("no refusal");
    leadership.stop().await.expect("stopped");
}

/// An operator's or observer's read never runs DDL: on a database without the schema, a
/// role without CREATE reads an empty group and no groups, observes, and leaves the
/// database as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_on_a_database_without_the_schema_write_nothing() {
    let server = PostgresServer::start();
    server.psql("CREATE ROLE monitor LOGIN");
    let url = format!("postgres://monitor@127.0.0.1:{}/postgres", server.port);
    let store = leader::store::connect(&url).await.expect("a read-only check");
    let state = store.state("leader:reports").await.expect("an empty state");
    assert!(state.leaders.is_empty() && state.max_leaders.is_none(), "{state:?}");
    let groups = store.list_groups("leader:", "").await.expect("no groups");
    assert!(groups.is_empty(), "{groups:?}");
    let watch = store.watch_changes("leader:reports").await.expect("an observer's watch");
    drop(watch);
    let elector = LeaderElector::new(store, LeaderElectionOptions::new()).unwrap();
    let observer = elector.observe("reports").await.expect("observes");
    assert!(observer.current().leaders.is_empty());
    let made = "SELECT count(*) FROM pg_class WHERE relname LIKE 'leader\\_%' \
                UNION ALL SELECT count(*) FROM pg_proc WHERE proname LIKE 'leader\\_%'";
    assert_eq!(server.psql(made), "0\n0", "a read made part of the schema");

    // Once a candidate made the schema, a monitoring role needs SELECT on the two tables
    // (docs/postgres-store.md), and nothing more.
    let owner = PostgresStore::builder(server.url()).build().unwrap();
    let held = token();
    assert!(matches!(
        owner.acquire(request("leader:reports", 1, held)).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    server.psql("GRANT SELECT ON public.leader_groups, public.leader_slots TO monitor");
    let monitor = leader::store::connect(&url).await.unwrap();
    let state = monitor.state("leader:reports").await.expect("a monitor's read");
    assert_eq!(state.leaders.len(), 1, "{state:?}");
    assert_eq!(monitor.list_groups("leader:", "").await.unwrap(), ["leader:reports"]);
}

/// Processes that start together on a new database each make the schema: the first makes
/// it, the others find it made once they hold the migration's lock, and none replaces the
/// functions while another calls them ("cache lookup failed for function", XX000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_starting_together_on_a_new_database_all_get_answers() {
    let server = PostgresServer::start();
    for round in 0..3 {
        let database = format!("fresh{round}");
        server.psql(&format!("CREATE DATABASE {database}"));
        let url = format!("{}/{database}", server.url().rsplit_once('/').unwrap().0);
        let mut stores = Vec::new();
        for _ in 0..8 {
            stores.push(PostgresStore::builder(url.clone()).build().unwrap());
        }
        let calls = stores.iter().enumerate().map(|(i, store)| async move {
            let key = format!("leader:fresh-{i}");
            let held = token();
            store.acquire(request(&key, 1, held)).await?;
            for _ in 0..20 {
                store.renew(&key, held, SECOND).await?;
            }
            Ok::<_, Error>(())
        });
        for (i, result) in futures_util::future::join_all(calls).await.into_iter().enumerate() {
            if let Err(error) = result {
                panic!("round {round}, store {i}: {}", leader::error_chain(&error));
            }
        }
    }
}
