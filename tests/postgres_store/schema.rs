//! The schema: made once by stores that start together, migrated from an older version and
//! refused from a newer one, checked against a table of another shape or a missing privilege;
//! and a database without it, where candidates make it and reads write nothing.

use leader::store::AcquireOutcome;
use leader::{Error, LeaderElectionOptions, LeaderElector, LeaseStore, PostgresStore};

use super::SECOND;
use crate::support::postgres_server::PostgresServer;
use crate::support::{request, token};

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
    assert_eq!(version, "leader-core schema 11");
    let outcome = upgraded.acquire(request("leader:kept", 1, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Full { .. }), "the slot was kept: {outcome:?}");

    // Schema 9's claims had no priority and no holder: its rows are kept, at priority 0.
    server.psql("ALTER TABLE leader_reservations DROP COLUMN priority, DROP COLUMN holder");
    server.psql(
        "INSERT INTO leader_reservations VALUES ('leader:kept', \
         '00000000-0000-0000-0000-000000000001', now(), now() + interval '1 minute')",
    );
    server.psql(&format!("COMMENT ON FUNCTION {grant} IS 'leader-core schema 9'"));
    let upgraded = PostgresStore::connect(&server.url()).await.expect("migrates schema 9");
    let claim = upgraded.claim("leader:kept").await.unwrap().expect("the old claim was kept");
    assert_eq!((claim.priority, claim.holder.as_str()), (0, ""));
    let better =
        request("leader:kept", 1, token()).reserving_at(std::time::Duration::ZERO, 10 * SECOND, 1);
    assert!(matches!(upgraded.acquire(better).await.unwrap(), AcquireOutcome::Full { .. }));
    assert_eq!(upgraded.claim("leader:kept").await.unwrap().map(|claim| claim.priority), Some(1));

    // Schema 10 had no preferences: the table and the reading function are made.
    server.psql("DROP TABLE leader_preferences; DROP FUNCTION leader_preferred(text)");
    server.psql(&format!("COMMENT ON FUNCTION {grant} IS 'leader-core schema 10'"));
    let upgraded = PostgresStore::connect(&server.url()).await.expect("migrates schema 10");
    upgraded.prefer("leader:kept", Some(("favourite", 10 * SECOND))).await.unwrap();
    let preference = upgraded.preference("leader:kept").await.unwrap().expect("a preference");
    assert_eq!(preference.holder, "favourite");

    server.psql(&format!("COMMENT ON FUNCTION {grant} IS 'leader-core schema 99'"));
    let err = PostgresStore::connect(&server.url()).await.unwrap_err();
    assert!(matches!(err, Error::Store { operation: "migrate", .. }), "{err:?}");
    let shown = err.to_string();
    assert!(shown.contains("\"leader-core schema 99\", newer than this build's"), "{shown}");
    assert!(shown.contains("\"leader-core schema 11\""), "{shown}");
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
