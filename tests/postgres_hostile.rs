//! `PostgresStore` under settings a real deployment can have: long names, a role that
//! defaults to `REPEATABLE READ` or sets `lock_timeout`, a statement that outlives its
//! caller, a LISTEN connection a firewall dropped without a word, colliding 32-bit hashes,
//! reserved words and long keys. Each test runs its own private server.
#![cfg(feature = "postgres")]

mod support;

use std::time::Duration;

use leader::store::deadpool_postgres::{self, tokio_postgres};
use leader::store::{AcquireOutcome, ReleaseOutcome};
use leader::{Error, KeyOptions, LeaderElectionOptions, LeaderElector, LeaseStore, PostgresStore};
use support::postgres_server::PostgresServer;
use support::proxy::{Fault, Proxy};
use support::{request, request_for, token};

const SECOND: Duration = Duration::from_secs(1);

/// A plain client of the server as `postgres`, for what a test does beside the store.
async fn raw_client(server: &PostgresServer) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(&server.url(), tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// Holds group `key`'s lock (of the tables `schema.prefix…`) for `hold`, as a writer of the
/// group does while it commits: a release of a token nobody holds, in a transaction kept
/// open. Returns once the lock is held.
async fn hold_group_lock(
    server: &PostgresServer,
    schema_prefix: &str,
    key: &str,
    hold: Duration,
) -> tokio::task::JoinHandle<()> {
    let client = raw_client(server).await;
    let sql =
        format!("BEGIN; SELECT * FROM {schema_prefix}release('{key}', gen_random_uuid()::text, 0)");
    client.batch_execute(&sql).await.expect("the group's lock");
    tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        client.batch_execute("COMMIT").await.expect("commit");
    })
}

async fn wait_for_a_release_of(
    store: &PostgresStore,
    waiter: &PostgresStore,
    name: &str,
) -> Duration {
    let key = format!("leader:{name}");
    let held = token();
    let long = request_for(&key, 1, held, 60 * SECOND);
    assert!(matches!(store.acquire(long).await.unwrap(), AcquireOutcome::Granted(_)));
    let options = LeaderElectionOptions::new()
        .wait_time(20 * SECOND)
        .lease_time(10 * SECOND)
        .keys(KeyOptions::new().max_len(4096));
    let elector = LeaderElector::new(waiter.clone(), options).unwrap();
    let name = name.to_owned();
    let waiting = tokio::spawn(async move { elector.run_if_leader(&name, |_| async {}).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = tokio::time::Instant::now();
    assert_eq!(store.release(&key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    let won = waiting.await.unwrap().unwrap();
    assert!(won.is_elected(), "{won:?}");
    released.elapsed()
}

/// With a 63-byte schema and a 40-byte prefix (the limits), the NOTIFY channel
/// `{schema}_{prefix}released` would be 112 bytes, which `pg_notify` refuses: every
/// release of a waited-on group failed. Every derived name now fits.
#[tokio::test]
async fn names_at_their_limits_keep_releases_and_their_wake_ups() {
    let server = PostgresServer::start();
    let (schema, prefix) = (format!("s{}", "x".repeat(62)), format!("p{}_", "y".repeat(38)));
    let store = PostgresStore::builder(server.url())
        .schema(&schema)
        .table_prefix(&prefix)
        .connect()
        .await
        .expect("names at the limits are usable");
    let handed_over = wait_for_a_release_of(&store, &store, "long-names").await;
    assert!(handed_over < 10 * SECOND, "woken by NOTIFY, not the 60 s lease: {handed_over:?}");
    let err = PostgresStore::builder(server.url()).schema(format!("{schema}z")).build();
    assert!(err.unwrap_err().to_string().contains("at most 63 bytes"));
    let err = PostgresStore::builder(server.url()).table_prefix(format!("{prefix}z")).build();
    assert!(err.unwrap_err().to_string().contains("at most 40 bytes"));
}

/// 8 candidates contending for 2 s for group `name` of 2, each call waiting 20 ms.
async fn contend(store: &PostgresStore, name: &str) -> support::Contention {
    let contest = support::Contest {
        wait_time: Duration::from_millis(20),
        until: support::Until::Elapsed(2 * SECOND),
        ..support::Contest::new(name, 2, 8)
    };
    contest.run(std::slice::from_ref(store)).await
}

/// A role whose sessions default to `REPEATABLE READ` (or `SERIALIZABLE`) got
/// serialization failures under contention, surfacing as `Err` from `run_if_leader`. The
/// store's own connections are pinned to `READ COMMITTED`; on a pool of the
/// application's, a serialization failure is retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeatable_read_and_serializable_roles_wait_or_skip_and_never_fail() {
    let server = PostgresServer::start();
    PostgresStore::connect(&server.url()).await.unwrap(); // the schema, as the owner
    server.psql("CREATE ROLE rr LOGIN SUPERUSER");
    server.psql("ALTER ROLE rr SET default_transaction_isolation = 'repeatable read'");
    server.psql("CREATE ROLE ser LOGIN SUPERUSER");
    server.psql("ALTER ROLE ser SET default_transaction_isolation = 'serializable'");
    for role in ["rr", "ser"] {
        let url = format!("postgres://{role}@127.0.0.1:{}/postgres", server.port);
        let own = PostgresStore::builder(&url).pool_size(8).connect().await.unwrap();
        let seen = contend(&own, &format!("{role}-own")).await;
        let (most, elected) = (seen.most_at_once, seen.elected);
        assert!(seen.errors.is_empty(), "{role}, the store's own pool: {:?}", seen.errors);
        assert!(most <= 2 && elected > 10, "{role}: {most} at once, {elected} elections");

        // A pool of the application's keeps the role's isolation.
        let config: tokio_postgres::Config = url.parse().unwrap();
        let manager = deadpool_postgres::Manager::new(config.clone(), tokio_postgres::NoTls);
        let pool = deadpool_postgres::Pool::builder(manager).max_size(8).build().unwrap();
        let client = pool.get().await.unwrap();
        let isolation = client.query_one("SHOW transaction_isolation", &[]).await.unwrap();
        assert_ne!(isolation.get::<_, String>(0), "read committed", "{role}'s own sessions");
        drop(client);
        let theirs = PostgresStore::pool_builder(pool, config).connect().await.unwrap();
        let seen = contend(&theirs, &format!("{role}-theirs")).await;
        let (most, elected) = (seen.most_at_once, seen.elected);
        assert!(seen.errors.is_empty(), "{role}, a pool of the application's: {:?}", seen.errors);
        assert!(most <= 2 && elected > 10, "{role}: {most} at once, {elected} elections");
    }
}

/// A `lock_timeout` the role sets (55P03) made contention a permanent
/// `Error::Store`; it is retried, and the grant made once the group's lock is free.
#[tokio::test]
async fn a_role_lock_timeout_is_contention_not_a_store_error() {
    let server = PostgresServer::start();
    PostgresStore::connect(&server.url()).await.unwrap();
    server.psql("CREATE ROLE impatient LOGIN SUPERUSER");
    server.psql("ALTER ROLE impatient SET lock_timeout = '20ms'");
    let url = format!("postgres://impatient@127.0.0.1:{}/postgres", server.port);
    let store = PostgresStore::connect(&url).await.unwrap();
    let holder = hold_group_lock(&server, "public.leader_", "leader:lt", SECOND).await;
    let outcome = store.acquire(request("leader:lt", 1, token())).await;
    assert!(matches!(outcome, Ok(AcquireOutcome::Granted(_))), "{outcome:?}");
    holder.await.unwrap();
}

/// A role's `lock_timeout` reached the LISTEN connection too: an announcement that met a
/// release's transaction (which holds the group's wait lock until it commits) failed, only
/// logged, and the group stayed unannounced while watched, so its releases sent no NOTIFY
/// and a waiter waited out the lease. The listening session now sets no lock timeout.
#[tokio::test]
async fn a_role_lock_timeout_leaves_no_watched_group_unannounced() {
    let server = PostgresServer::start();
    let holder = PostgresStore::connect(&server.url()).await.unwrap();
    server.psql("CREATE ROLE impatient LOGIN SUPERUSER");
    server.psql("ALTER ROLE impatient SET lock_timeout = '20ms'");
    let url = format!("postgres://impatient@127.0.0.1:{}/postgres", server.port);
    let waiter = PostgresStore::connect(&url).await.unwrap();
    let _listening = waiter.watch_releases("leader:warm").await.unwrap();
    let key = "leader:announced";
    // What a release that found no waiter does: the wait lock, held until its commit.
    let releasing = raw_client(&server).await;
    let sql = format!("BEGIN; SELECT pg_try_advisory_xact_lock(public.leader_wait_key('{key}'))");
    releasing.batch_execute(&sql).await.unwrap();
    let commit = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        releasing.batch_execute("COMMIT").await.unwrap();
    });
    let mut watch = waiter.watch_releases(key).await.unwrap();
    commit.await.unwrap();
    let held = token();
    let long = request_for(key, 1, held, 60 * SECOND);
    assert!(matches!(holder.acquire(long).await.unwrap(), AcquireOutcome::Granted(_)));
    // Wake-ups from before the release (the reconnection of a slow start, say) are spent.
    while tokio::time::timeout(Duration::from_millis(20), watch.woken()).await.is_ok() {}
    assert_eq!(holder.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    let woken = tokio::time::timeout(5 * SECOND, watch.woken()).await;
    assert!(woken.is_ok(), "the release sent no NOTIFY: the group was not announced");
}

/// A `statement_timeout` the role sets (57014), on a pool of the application's
/// (the store's own connections set their own), is contention too: retried.
#[tokio::test]
async fn a_role_statement_timeout_on_an_application_pool_is_retried() {
    let server = PostgresServer::start();
    PostgresStore::connect(&server.url()).await.unwrap();
    server.psql("CREATE ROLE hasty LOGIN SUPERUSER");
    server.psql("ALTER ROLE hasty SET statement_timeout = '20ms'");
    let url = format!("postgres://hasty@127.0.0.1:{}/postgres", server.port);
    let config: tokio_postgres::Config = url.parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config.clone(), tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager).max_size(2).build().unwrap();
    let store = PostgresStore::pool_builder(pool, config).build().unwrap();
    store.state("leader:st").await.unwrap();
    let holder = hold_group_lock(&server, "public.leader_", "leader:st", SECOND).await;
    let outcome = store.acquire(request("leader:st", 1, token())).await;
    assert!(matches!(outcome, Ok(AcquireOutcome::Granted(_))), "{outcome:?}");
    holder.await.unwrap();
}

/// Failures while connecting that only a change of configuration mends (a wrong
/// password, a missing database, no CONNECT privilege) are permanent store errors naming
/// the server's reason; an unreachable server stays transient.
#[tokio::test]
async fn connection_failures_are_classed_by_their_sqlstate() {
    let hba = tempfile::Builder::new().prefix("leader-hba-").tempdir().unwrap();
    let hba_file = hba.path().join("pg_hba.conf");
    std::fs::write(
        &hba_file,
        "host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(hba.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&hba_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let server = PostgresServer::start_with(&["-c", &format!("hba_file={}", hba_file.display())]);
    server.psql("CREATE ROLE app LOGIN PASSWORD 'right-one'");
    server.psql("CREATE DATABASE closed");
    server.psql("REVOKE CONNECT ON DATABASE closed FROM PUBLIC");
    let port = server.port;
    let cases = [
        (format!("postgres://app:wrong-one@127.0.0.1:{port}/postgres"), "28P01"),
        (format!("postgres://postgres@127.0.0.1:{port}/missing"), "3D000"),
        (format!("postgres://app:right-one@127.0.0.1:{port}/closed"), "42501"),
    ];
    for (url, code) in cases {
        let store = PostgresStore::builder(&url).build().unwrap();
        let err = store.state("leader:x").await.unwrap_err();
        assert!(matches!(err, Error::Store { .. }), "{code}: {err:?}");
        assert!(!err.is_transient(), "{code}: {err:?}");
        assert!(err.to_string().contains(code), "{code}: {err}");
        assert!(!err.to_string().contains("wrong-one"), "{err}");
    }
    server.kill();
    let store = PostgresStore::builder(format!("postgres://app:right-one@127.0.0.1:{port}/x"))
        .build()
        .unwrap();
    let err = store.state("leader:x").await.unwrap_err();
    assert!(err.is_transient(), "unreachable: {err:?}");
}

/// A statement that timed out kept waiting for the group's lock on the server and
/// granted a slot after its caller had gone. It is cancelled now: once the lock is free,
/// the group is still empty.
#[tokio::test]
async fn a_statement_that_timed_out_grants_nothing_later() {
    let server = PostgresServer::start();
    let store = PostgresStore::builder(server.url())
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let holder = hold_group_lock(&server, "public.leader_", "leader:late", 2 * SECOND).await;
    let err = store.acquire(request("leader:late", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { operation: "acquire", .. }), "{err:?}");
    holder.await.unwrap(); // the lock is free
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slots = server.psql("SELECT count(*) FROM leader_slots WHERE key = 'leader:late'");
    assert_eq!(slots, "0", "a grant made after its caller gave up");
    let waiting = server.psql(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%leader_grant%' \
         AND state = 'active' AND pid <> pg_backend_pid()",
    );
    assert_eq!(waiting, "0", "a statement still running");
}

/// The LISTEN connection goes silent (a firewall dropped its state): the first
/// waiters of other groups are held up by nobody, the silence is noticed, and after a
/// new connection a release wakes its waiter at once again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_listen_connection_holds_up_no_waiter_and_is_replaced() {
    let server = PostgresServer::start();
    let direct = PostgresStore::connect(&server.url()).await.unwrap();
    // The pool talks to the server directly; the LISTEN connection goes through a proxy.
    let proxy = Proxy::start(server.port).await;
    let config: tokio_postgres::Config =
        format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port).parse().unwrap();
    let manager =
        deadpool_postgres::Manager::new(server.url().parse().unwrap(), tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager).max_size(4).build().unwrap();
    let store =
        PostgresStore::pool_builder(pool, config).command_timeout(SECOND).connect().await.unwrap();
    let _first = store.watch_releases("leader:first").await.unwrap();
    proxy.freeze().await;
    let started = tokio::time::Instant::now();
    let watches = futures_util::future::join_all(
        ["leader:b", "leader:c", "leader:d"].map(|key| store.watch_releases(key)),
    )
    .await;
    let waited = started.elapsed();
    let watches: Vec<_> = watches.into_iter().map(|w| w.expect("a watch, not a timeout")).collect();
    assert!(waited < 2 * SECOND, "the watches waited for one another: {waited:?}");
    // Noticed and replaced within a few command timeouts; then releases wake again.
    tokio::time::sleep(3 * SECOND).await;
    let handed_over = wait_for_a_release_of(&direct, &store, "b").await;
    assert!(handed_over < 10 * SECOND, "woken by NOTIFY, not the 60 s lease: {handed_over:?}");
    drop(watches);
}

/// Only a grant deleted expired slot rows, so a group whose last write was a
/// release or a renewal kept up to N of them. Every write takes them now.
#[tokio::test]
async fn an_idle_group_keeps_only_its_row() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    // Long enough to outlive the third grant on a busy machine (a grant deletes the
    // expired rows it sees).
    let short = |held| request_for("leader:idle", 3, held, Duration::from_millis(1_500));
    let (a, b, c) = (token(), token(), token());
    for held in [a, b] {
        assert!(matches!(store.acquire(short(held)).await.unwrap(), AcquireOutcome::Granted(_)));
    }
    assert!(matches!(
        store.acquire(request("leader:idle", 3, c)).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rows = || server.psql("SELECT count(*) FROM leader_slots WHERE key = 'leader:idle'");
    assert_eq!(rows(), "3", "two expired, one live");
    store.renew("leader:idle", c, 10 * SECOND).await.unwrap();
    assert_eq!(rows(), "1", "a renewal takes the expired rows");
    let d = token();
    assert!(matches!(store.acquire(short(d)).await.unwrap(), AcquireOutcome::Granted(_)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        store.release("leader:idle", c, Duration::ZERO).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(rows(), "0", "a release takes the expired rows");
    assert_eq!(server.psql("SELECT count(*) FROM leader_groups WHERE key = 'leader:idle'"), "1");
}

/// Reserved words as the schema failed at migration with a syntax error, a key
/// over the index's limit at the first grant (54000). Both are refused up front, naming
/// the limit; a key at the limit is granted, and its waited-on release notifies.
#[tokio::test]
async fn reserved_words_and_long_keys_are_refused_naming_the_limit() {
    let server = PostgresServer::start();
    let client = raw_client(&server).await;
    let rows = client
        .query("SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T')", &[])
        .await
        .unwrap();
    assert!(rows.len() > 50, "{} reserved words", rows.len());
    for row in rows {
        let word: String = row.get(0);
        let err = PostgresStore::builder(server.url()).schema(&word).build().unwrap_err();
        assert!(err.to_string().contains("reserves"), "{word}: {err}");
    }
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let too_long = format!("leader:{}", "k".repeat(2042));
    assert_eq!(too_long.len(), 2049);
    let err = store.acquire(request(&too_long, 1, token())).await.unwrap_err();
    assert!(err.to_string().contains("at most 2048 bytes"), "{err}");
    assert!(err.to_string().contains("2049 bytes"), "{err}");
    // A key at the limit that does not compress (every byte differs from its neighbours).
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let name: String = (0..2041)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            char::from(b'a' + (seed >> 59) as u8 % 26)
        })
        .collect();
    assert_eq!(format!("leader:{name}").len(), 2048);
    let handed_over = wait_for_a_release_of(&store, &store, &name).await;
    assert!(handed_over < 10 * SECOND, "woken by NOTIFY: {handed_over:?}");
}

/// Group locks were keyed by 32-bit `hashtext`, under which these two names
/// collide: a writer of one held up the other. Keys are 64 bits now.
#[tokio::test]
async fn groups_whose_32_bit_hashes_collide_do_not_share_a_lock() {
    let server = PostgresServer::start();
    let collide = "SELECT hashtext('leader:job-28633') = hashtext('leader:job-42639')";
    assert_eq!(server.psql(collide), "t", "the names collide under hashtext");
    let store =
        PostgresStore::builder(server.url()).command_timeout(4 * SECOND).connect().await.unwrap();
    let holder = hold_group_lock(&server, "public.leader_", "leader:job-28633", 6 * SECOND).await;
    let started = tokio::time::Instant::now();
    let outcome = store.acquire(request("leader:job-42639", 1, token())).await;
    assert!(matches!(outcome, Ok(AcquireOutcome::Granted(_))), "{outcome:?}");
    assert!(started.elapsed() < 4 * SECOND, "waited for the other group's lock");
    holder.await.unwrap();
}

/// A retry on a new connection started a fresh deadline, so an operation whose
/// connection broke late could take twice the command timeout. One deadline bounds the
/// operation, its retry included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_deadline_bounds_an_operation_and_its_retry() {
    let server = PostgresServer::start();
    let proxy = Proxy::start(server.port).await;
    let store =
        PostgresStore::builder(format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port))
            .command_timeout(2 * SECOND)
            .pool_size(1)
            .connect()
            .await
            .unwrap();
    store.acquire(request("leader:warm", 1, token())).await.unwrap(); // prepared, pooled
    proxy.set(Fault::BlackHole);
    let started = tokio::time::Instant::now();
    let cut_late = async {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        proxy.cut().await; // the connection breaks; the retry's connection gets no answer
    };
    let (outcome, ()) =
        tokio::join!(store.acquire(request("leader:deadline", 1, token())), cut_late);
    let took = started.elapsed();
    proxy.set(Fault::None);
    assert!(matches!(outcome, Err(Error::Timeout { operation: "acquire", .. })), "{outcome:?}");
    // A deadline of its own for the retry would end at 1.5 s + 2 s at the soonest.
    assert!(took < Duration::from_millis(3_400), "the retry had a deadline of its own: {took:?}");
}

/// Candidates dropped while their acquires are on their way (waiters whose callers gave
/// up: a timeout around `run_if_leader`), among observers coming and going and another
/// store taking and releasing the slot, leave no slot behind, though the server may run an
/// acquire after the candidate's background release: that release waits for the acquire
/// it follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn candidates_dropped_while_their_acquires_are_on_their_way_leave_no_slot() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    store.migrate().await.unwrap();
    let other = PostgresStore::connect(&server.url()).await.unwrap();
    let key = "leader:dropped";
    let options = |wait: Duration| {
        LeaderElectionOptions::new()
            .wait_time(wait)
            .lease_time(60 * SECOND)
            .keys(KeyOptions::new().exact_key(key))
    };
    let observing = LeaderElector::new(store.clone(), options(Duration::ZERO)).unwrap();
    let waiting = LeaderElector::new(store.clone(), options(Duration::from_millis(200))).unwrap();
    let taking = LeaderElector::new(other.clone(), options(Duration::ZERO)).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let taker = tokio::spawn({
        let stop = stop.clone();
        async move {
            while !stop.is_cancelled() {
                if let Ok(Some(guard)) = taking.acquire("dropped").await {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _ = guard.release().await;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (observing, waiting) = (observing.clone(), waiting.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..400u64 {
                if task % 4 == 3 {
                    let gives_up = Duration::from_millis(i % 7 + 1);
                    let _ = tokio::time::timeout(
                        gives_up,
                        waiting.run_if_leader("dropped", |_| async {}),
                    )
                    .await;
                } else if let Ok(Ok(observer)) =
                    tokio::time::timeout(5 * SECOND, observing.observe("dropped")).await
                {
                    drop(observer);
                }
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(120 * SECOND, task).await.expect("no hang").expect("no panic");
    }
    stop.cancel();
    taker.await.unwrap();
    tokio::time::timeout(20 * SECOND, leader::wait_for_releases()).await.expect("releases done");
    support::eventually(10 * SECOND, "no slot held by a candidate that is gone", || async {
        other.state(key).await.unwrap().leaders.is_empty()
    })
    .await;
}
