//! `PostgresStore` against a private PostgreSQL server each test makes with `initdb` and
//! starts with `pg_ctl`: the conformance suite, durability across a SIGKILL of the server,
//! the schema's checks, and failures as clear errors.
#![cfg(feature = "postgres")]

use leader_testkit::conformance;
#[path = "postgres_store/claims.rs"]
mod claims;
#[path = "postgres_store/contention.rs"]
mod contention;
#[path = "postgres_store/schema.rs"]
mod schema;
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

// The electors', Leadership's and the macros' Redis tests, where they apply, on PostgreSQL.

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
