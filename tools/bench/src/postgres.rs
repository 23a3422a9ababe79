//! PostgreSQL: `PostgresStore` beside what a PostgreSQL user writes instead, session-level
//! advisory locks (`pg_try_advisory_lock` / `pg_advisory_unlock`, `pg_advisory_lock` to
//! wait), and beside the least a durable lease in a table costs, one row per lock taken
//! with one `UPDATE … WHERE expires_at <= now` (no fence, no groups, no waiting): on one
//! private server, through the same client crate (tokio-postgres), with the same tasks,
//! A B C D A B C D. The advisory locks run twice: prepared once per connection, as the
//! store's and the lease row's statements are, and sent as SQL text, as
//! `client.query_one("SELECT pg_try_advisory_lock($1)", …)` does (tokio-postgres then
//! prepares on every call: two round trips). The server runs `pg_stat_statements`, so the
//! statements each operation sends, and the server time they take, come from the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leader::store::deadpool_postgres::tokio_postgres::{self, Client, NoTls, Statement};
use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{LeaderElectionOptions, LeaderElector, LeaseStore, LeaseToken, PostgresStore};
use leader_testkit::postgres_server::PostgresServer;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

use crate::stats::{self, ms, percentile};
use crate::workloads::TASKS;

const LEASE: Duration = Duration::from_secs(10);

/// The two ways to elect on PostgreSQL.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Contender {
    Store,
    LeaseRow,
    AdvisoryLock,
    /// The same two calls sent as SQL text (`query_one("SELECT …")`), which tokio-postgres
    /// prepares on every call: two round trips per statement.
    AdvisoryLockText,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Contender::Store => "PostgresStore",
            Contender::LeaseRow => "lease row",
            Contender::AdvisoryLock => "advisory lock",
            Contender::AdvisoryLockText => "advisory (text)",
        }
    }
}

/// One task's handle: the store (which pools its connections), or a connection of its own
/// (an advisory lock lives in its session).
enum Worker {
    Store { store: PostgresStore, key: String },
    LeaseRow { client: Client, key: String, take: Statement, give_back: Statement },
    AdvisoryLock { client: Client, lock: i64, try_lock: Statement, unlock: Statement },
    AdvisoryLockText { client: Client, lock: i64 },
}

impl Worker {
    /// One try-acquire, and a release if it won. Whether it won.
    async fn cycle(&self) -> bool {
        match self {
            Worker::Store { store, key } => {
                let token = LeaseToken::generate().unwrap();
                let request =
                    AcquireRequest::new(key, std::num::NonZeroU32::MIN, token, "bench", LEASE);
                match store.acquire(request).await.expect("acquire") {
                    AcquireOutcome::Granted(_) => {
                        store.release(key, token, Duration::ZERO).await.expect("release");
                        true
                    }
                    _ => false, // full
                }
            }
            Worker::LeaseRow { client, key, take, give_back } => {
                let holder = LeaseToken::generate().unwrap().to_string();
                let won = client.execute(take, &[key, &holder]).await.expect("take") == 1;
                if won {
                    client.execute(give_back, &[key, &holder]).await.expect("give back");
                }
                won
            }
            Worker::AdvisoryLock { client, lock, try_lock, unlock } => {
                let won: bool = client.query_one(try_lock, &[lock]).await.expect("try lock").get(0);
                if won {
                    client.query_one(unlock, &[lock]).await.expect("unlock");
                }
                won
            }
            Worker::AdvisoryLockText { client, lock } => {
                let row = client
                    .query_one("SELECT pg_try_advisory_lock($1)", &[lock])
                    .await
                    .expect("try lock");
                let won: bool = row.get(0);
                if won {
                    client
                        .query_one("SELECT pg_advisory_unlock($1)", &[lock])
                        .await
                        .expect("unlock");
                }
                won
            }
        }
    }
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

async fn worker(
    contender: Contender,
    store: &PostgresStore,
    url: &str,
    group: &str,
    lock: i64,
) -> Worker {
    match contender {
        Contender::Store => Worker::Store { store: store.clone(), key: group.to_owned() },
        Contender::LeaseRow => {
            let client = connect(url).await;
            client
                .execute(
                    "INSERT INTO bench_leases VALUES ($1, '', '-infinity') ON CONFLICT DO NOTHING",
                    &[&group],
                )
                .await
                .expect("lease row");
            let take = client
                .prepare(
                    "UPDATE bench_leases SET holder = $2, \
                     expires_at = clock_timestamp() + interval '10 s' \
                     WHERE key = $1 AND expires_at <= clock_timestamp()",
                )
                .await
                .expect("prepare");
            let give_back = client
                .prepare(
                    "UPDATE bench_leases SET expires_at = clock_timestamp() \
                     WHERE key = $1 AND holder = $2",
                )
                .await
                .expect("prepare");
            Worker::LeaseRow { client, key: group.to_owned(), take, give_back }
        }
        Contender::AdvisoryLock => {
            // Prepared once per connection, as the store's statements are.
            let client = connect(url).await;
            let try_lock =
                client.prepare("SELECT pg_try_advisory_lock($1)").await.expect("prepare");
            let unlock = client.prepare("SELECT pg_advisory_unlock($1)").await.expect("prepare");
            Worker::AdvisoryLock { client, lock, try_lock, unlock }
        }
        Contender::AdvisoryLockText => {
            Worker::AdvisoryLockText { client: connect(url).await, lock }
        }
    }
}

/// W1 (each task its own group) or W2 (all tasks one group): attempts and wins per second.
async fn workload(
    contender: Contender,
    store: &PostgresStore,
    url: &str,
    run: &str,
    contended: bool,
    period: Duration,
) -> (f64, f64) {
    let attempts = Arc::new(AtomicU64::new(0));
    let won = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for task in 0..TASKS {
        let (group, lock) = if contended {
            (format!("bench:pg-w2:{run}"), 2_000_000)
        } else {
            (format!("bench:pg-w1:{run}:{task}"), 1_000_000 + task as i64)
        };
        workers.push(worker(contender, store, url, &group, lock).await);
    }
    let until = Instant::now() + period;
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|worker| {
            let (attempts, won) = (attempts.clone(), won.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    if worker.cycle().await {
                        won.fetch_add(1, Ordering::Relaxed);
                    }
                    attempts.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("worker");
    }
    (
        stats::rate(attempts.load(Ordering::Relaxed), period),
        stats::rate(won.load(Ordering::Relaxed), period),
    )
}

/// W3: a holder releases; a waiter, already waiting, takes the slot. From the release call
/// to the waiter's grant. None for the lease row, which has no way to wait but polling.
async fn hand_over(
    contender: Contender,
    store: &PostgresStore,
    url: &str,
    samples: usize,
) -> Option<Vec<Duration>> {
    if matches!(contender, Contender::LeaseRow | Contender::AdvisoryLockText) {
        return None;
    }
    let mut latencies = Vec::with_capacity(samples);
    for sample in 0..samples {
        let latency = match contender {
            Contender::Store => {
                let key = format!("leader:pg-w3:{sample}");
                let held = LeaseToken::generate().unwrap();
                let request =
                    AcquireRequest::new(&key, std::num::NonZeroU32::MIN, held, "holder", LEASE);
                assert!(matches!(
                    store.acquire(request).await.unwrap(),
                    AcquireOutcome::Granted(_)
                ));
                let waiter = LeaderElector::new(
                    store.clone(),
                    LeaderElectionOptions::new()
                        .wait_time(Duration::from_secs(10))
                        .lease_time(LEASE),
                )
                .unwrap();
                let name = format!("pg-w3:{sample}");
                let waiting = tokio::spawn(async move {
                    waiter
                        .run_if_leader(&name, |_| async { Instant::now() })
                        .await
                        .unwrap()
                        .elected()
                });
                sleep(Duration::from_millis(20)).await; // the waiter is refused, then waits
                let released = Instant::now();
                store.release(&key, held, Duration::ZERO).await.unwrap();
                waiting.await.unwrap().expect("the waiter got the slot") - released
            }
            Contender::LeaseRow | Contender::AdvisoryLockText => unreachable!("not measured"),
            Contender::AdvisoryLock => {
                let lock = 3_000_000 + sample as i64;
                let (holder, waiter) = (connect(url).await, connect(url).await);
                holder.query_one("SELECT pg_advisory_lock($1)", &[&lock]).await.unwrap();
                let waiting = tokio::spawn(async move {
                    waiter.query_one("SELECT pg_advisory_lock($1)", &[&lock]).await.unwrap();
                    Instant::now()
                });
                sleep(Duration::from_millis(20)).await;
                let released = Instant::now();
                holder.query_one("SELECT pg_advisory_unlock($1)", &[&lock]).await.unwrap();
                waiting.await.unwrap() - released
            }
        };
        latencies.push(latency);
    }
    Some(latencies)
}

/// Client statements per operation and the server's time per statement, from
/// `pg_stat_statements` (the store's own set-up statements left out), on one warm
/// connection, one operation at a time.
async fn statements(url: &str, admin: &Client) -> Vec<(String, f64, f64)> {
    const OPS: u64 = 200;
    let store = PostgresStore::builder(url).pool_size(1).connect().await.expect("store");
    let key = "bench:pg-round-trips";
    let warm = LeaseToken::generate().unwrap();
    let request =
        |token| AcquireRequest::new(key, std::num::NonZeroU32::MIN, token, "bench", LEASE);
    store.acquire(request(warm)).await.unwrap();
    store.renew(key, warm, LEASE).await.unwrap();
    store.state(key).await.unwrap();
    store.release(key, warm, Duration::ZERO).await.unwrap();
    admin.batch_execute("SELECT pg_stat_statements_reset()").await.unwrap();
    for _ in 0..OPS {
        let token = LeaseToken::generate().unwrap();
        store.acquire(request(token)).await.unwrap();
        store.renew(key, token, LEASE).await.unwrap();
        store.state(key).await.unwrap();
        store.release(key, token, Duration::ZERO).await.unwrap();
    }
    let rows = admin
        .query(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements \
             WHERE query LIKE 'SELECT %leader\\_%' ORDER BY query",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|row| {
            let (query, calls, total_ms): (String, i64, f64) = (row.get(0), row.get(1), row.get(2));
            (query, calls as f64 / OPS as f64, total_ms * 1_000.0 / calls.max(1) as f64)
        })
        .collect()
}

/// One `SELECT 1` round trip on a warm connection, p50: back to back, and after 20 ms idle
/// (as W3's release comes): how much of a hand-over is the machine waking up.
async fn round_trips(url: &str) -> (Duration, Duration) {
    let client = connect(url).await;
    let statement = client.prepare("SELECT 1").await.expect("prepare");
    let mut p50 = [Duration::ZERO; 2];
    for (i, idle) in [Duration::ZERO, Duration::from_millis(20)].into_iter().enumerate() {
        let mut latencies = Vec::new();
        for _ in 0..40 {
            sleep(idle).await;
            let sent = Instant::now();
            client.query_one(&statement, &[]).await.expect("SELECT 1");
            latencies.push(sent.elapsed());
        }
        p50[i] = percentile(&mut latencies, 50.0);
    }
    (p50[0], p50[1])
}

/// The whole PostgreSQL section: prints a table and returns the figures.
pub async fn run(quick: bool, say: &dyn Fn(String)) -> Value {
    let server = PostgresServer::start_with(&["-c", "shared_preload_libraries=pg_stat_statements"]);
    let url = server.url();
    let admin = connect(&url).await;
    admin.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await.unwrap();
    let store = PostgresStore::builder(&url).pool_size(TASKS).connect().await.expect("store");
    admin
        .batch_execute(
            "CREATE TABLE bench_leases (key text PRIMARY KEY, holder text NOT NULL, \
             expires_at timestamptz NOT NULL)",
        )
        .await
        .unwrap();
    let period = Duration::from_secs(if quick { 1 } else { 3 });
    let samples = if quick { 20 } else { 100 };

    let mut figures = serde_json::Map::new();
    let contenders = [
        Contender::Store,
        Contender::LeaseRow,
        Contender::AdvisoryLock,
        Contender::AdvisoryLockText,
    ];
    let mut w1 = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    let mut w2 = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for round in 0..2 {
        for (i, contender) in contenders.iter().enumerate() {
            let run = format!("{round}-{i}");
            w1[i].push(workload(*contender, &store, &url, &run, false, period).await.1);
            w2[i].push(workload(*contender, &store, &url, &run, true, period).await.0);
        }
    }
    let mut w3: Vec<Option<Vec<Duration>>> = Vec::new();
    for contender in contenders {
        w3.push(hand_over(contender, &store, &url, samples).await);
    }
    say(format!(
        "PostgreSQL (64 tasks, {TASKS} connections, 10 s lease; two rounds, A B C D A B C D):"
    ));
    say(format!(
        "{:<16} {:>14} {:>14} {:>12} {:>12}",
        "", "W1 cycles/s", "W2 attempts/s", "W3 p50 ms", "W3 p99 ms"
    ));
    for (i, contender) in contenders.iter().enumerate() {
        let (p50, p99) = match &mut w3[i] {
            Some(latencies) => (percentile(latencies, 50.0), percentile(latencies, 99.0)),
            None => (Duration::ZERO, Duration::ZERO),
        };
        let w3_ms = |p: Duration| if w3[i].is_some() { ms(p) } else { "-".to_owned() };
        let rounds = |values: &[f64]| {
            values.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(" / ")
        };
        say(format!(
            "{:<16} {:>14} {:>14} {:>12} {:>12}",
            contender.name(),
            rounds(&w1[i]),
            rounds(&w2[i]),
            w3_ms(p50),
            w3_ms(p99)
        ));
        figures.insert(
            contender.name().to_owned(),
            json!({"w1": w1[i], "w2": w2[i], "w3_p50_ms": p50.as_secs_f64() * 1e3, "w3_p99_ms": p99.as_secs_f64() * 1e3}),
        );
    }
    for (query, per_op, server_us) in statements(&url, &admin).await {
        // The acquire statement looks in plain SQL and calls leader_grant only when a slot
        // looks free; the others are one function call each.
        let function = if query.starts_with("SELECT CASE") {
            "acquire statement".to_owned()
        } else {
            query
                .split("FROM ")
                .nth(1)
                .and_then(|rest| rest.split('(').next())
                .unwrap_or(&query)
                .to_owned()
        };
        say(format!(
            "  {function}: {per_op:.2} statements per operation, {server_us:.1} µs of server time each"
        ));
        figures.insert(function, json!({"statements_per_op": per_op, "server_us": server_us}));
    }
    let (busy, idle) = round_trips(&url).await;
    say(format!(
        "  a round trip (SELECT 1, p50): {} ms back to back, {} ms after 20 ms idle",
        ms(busy),
        ms(idle)
    ));
    figures.insert(
        "round_trip_ms".to_owned(),
        json!({"busy": busy.as_secs_f64() * 1e3, "after_idle": idle.as_secs_f64() * 1e3}),
    );
    Value::Object(figures)
}
