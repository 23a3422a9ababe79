//! etcd: `EtcdStore` beside what an etcd user writes instead, through the same client crate
//! (etcd-client) on the same three-member cluster (loopback, 50 ms heartbeat), with the same
//! tasks, A B C D A B C D:
//!
//! - `LockClient`, a lease per lock: grant a lease, `lock` with it, `unlock`, revoke the
//!   lease (etcd-client's own example, with the revoke a careful user adds);
//! - `LockClient` on one session lease per task, granted once (as Go's `concurrency.Session`
//!   does): `lock` and `unlock`;
//! - the election API on one session lease per task: `campaign` and `resign`.
//!
//! The locks and the election block until they win, so under contention (W2) they report the
//! cycles they completed; `EtcdStore` reports its attempts (most refused) and its wins. W3
//! is a hand-over to a waiter, beside two plain writes in a row (a release and a grant are
//! two commits). Round trips per operation are the gRPC messages the members received, and
//! disk writes the WAL fsyncs they made (`/metrics`), per operation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leader::store::etcd_client::{Client, LockOptions, ResignOptions};
use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{EtcdStore, LeaderElectionOptions, LeaderElector, LeaseStore, LeaseToken};
use leader_testkit::etcd::EtcdCluster;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

use crate::stats::{ms, percentile};
use crate::workloads::TASKS;

const LEASE: Duration = Duration::from_secs(10);
const TTL: i64 = 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Contender {
    Store,
    /// A store (its own connections) per task, as separate processes have.
    StorePerTask,
    LockPerLease,
    LockSession,
    Election,
}

impl Contender {
    const ALL: [Contender; 5] = [
        Contender::Store,
        Contender::StorePerTask,
        Contender::LockPerLease,
        Contender::LockSession,
        Contender::Election,
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::Store => "EtcdStore, one for all",
            Contender::StorePerTask => "EtcdStore, one per task",
            Contender::LockPerLease => "LockClient, lease per lock",
            Contender::LockSession => "LockClient, session lease",
            Contender::Election => "election, session lease",
        }
    }
}

/// One task's handle.
struct Worker {
    contender: Contender,
    store: EtcdStore,
    client: Client,
    key: String,
    /// The task's session lease (for the session contenders).
    session: i64,
}

impl Worker {
    async fn new(contender: Contender, store: &EtcdStore, url: &[String], key: String) -> Worker {
        let mut client = Client::connect(url, None).await.expect("connect");
        let session = match contender {
            Contender::LockSession | Contender::Election => {
                client.lease_grant(60, None).await.expect("session lease").id()
            }
            _ => 0,
        };
        let store = match contender {
            Contender::StorePerTask => {
                let hosts: Vec<&str> =
                    url.iter().map(|endpoint| endpoint.trim_start_matches("http://")).collect();
                EtcdStore::connect(&format!("etcd://{}", hosts.join(","))).await.expect("store")
            }
            _ => store.clone(),
        };
        Worker { contender, store, client, key, session }
    }

    /// One cycle: take and give back. For the store, a try (whether it won); the others wait
    /// until they win.
    async fn cycle(&mut self) -> bool {
        let key = self.key.as_str();
        match self.contender {
            Contender::Store | Contender::StorePerTask => {
                let token = LeaseToken::generate().unwrap();
                let request =
                    AcquireRequest::new(key, std::num::NonZeroU32::MIN, token, "bench", LEASE);
                match self.store.acquire(request).await.expect("acquire") {
                    AcquireOutcome::Granted(_) => {
                        self.store.release(key, token, Duration::ZERO).await.expect("release");
                        true
                    }
                    _ => false,
                }
            }
            Contender::LockPerLease => {
                let lease = self.client.lease_grant(TTL, None).await.expect("grant").id();
                let options = LockOptions::new().with_lease(lease);
                let locked = self.client.lock(key, Some(options)).await.expect("lock");
                self.client.unlock(locked.key()).await.expect("unlock");
                self.client.lease_revoke(lease).await.expect("revoke");
                true
            }
            Contender::LockSession => {
                let options = LockOptions::new().with_lease(self.session);
                let locked = self.client.lock(key, Some(options)).await.expect("lock");
                self.client.unlock(locked.key()).await.expect("unlock");
                true
            }
            Contender::Election => {
                let won = self.client.campaign(key, "bench", self.session).await.expect("campaign");
                let leader = won.leader().expect("a leader key").clone();
                let resign = ResignOptions::new().with_leader(leader);
                self.client.resign(Some(resign)).await.expect("resign");
                true
            }
        }
    }
}

/// Attempts and wins per second of `TASKS` tasks, each on its own key (W1) or all on one (W2).
async fn workload(
    contender: Contender,
    store: &EtcdStore,
    endpoints: &[String],
    run: &str,
    contended: bool,
    period: Duration,
) -> (f64, f64) {
    let mut workers = Vec::new();
    for task in 0..TASKS {
        let key = if contended {
            format!("bench:etcd-w2:{run}")
        } else {
            format!("bench:etcd-w1:{run}:{task}")
        };
        workers.push(Worker::new(contender, store, endpoints, key).await);
    }
    let (attempts, won) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let until = Instant::now() + period;
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            let (attempts, won) = (attempts.clone(), won.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    // A lock or a campaign still waiting at the end is not counted.
                    let Ok(result) = tokio::time::timeout_at(until, worker.cycle()).await else {
                        break;
                    };
                    if result {
                        won.fetch_add(1, Ordering::Relaxed);
                    }
                    attempts.fetch_add(1, Ordering::Relaxed);
                }
                if worker.session != 0 {
                    let _ = worker.client.lease_revoke(worker.session).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let seconds = period.as_secs_f64();
    (
        attempts.load(Ordering::Relaxed) as f64 / seconds,
        won.load(Ordering::Relaxed) as f64 / seconds,
    )
}

/// Release-to-waiter latencies, `samples` of them, and how many hand-overs did not finish
/// within 10 s (left out).
async fn hand_over(
    contender: Contender,
    store: &EtcdStore,
    endpoints: &[String],
    samples: usize,
) -> (Vec<Duration>, usize) {
    let mut latencies = Vec::with_capacity(samples);
    let mut stuck = 0;
    for sample in 0..samples {
        let key = format!("bench:etcd-w3:{}:{sample}", contender.name().replace(' ', "-"));
        let one = hand_over_once(contender, store, endpoints, key);
        match tokio::time::timeout(Duration::from_secs(10), one).await {
            Ok(latency) => latencies.push(latency),
            Err(_) => {
                stuck += 1;
                eprintln!("{}: hand-over {sample} did not finish within 10 s", contender.name());
            }
        }
    }
    (latencies, stuck)
}

/// One hand-over of `key`: from the release to the waiter's return.
async fn hand_over_once(
    contender: Contender,
    store: &EtcdStore,
    endpoints: &[String],
    key: String,
) -> Duration {
    match contender {
        Contender::Store | Contender::StorePerTask => {
            let held = LeaseToken::generate().unwrap();
            let request =
                AcquireRequest::new(&key, std::num::NonZeroU32::MIN, held, "holder", LEASE);
            let granted = store.acquire(request).await.unwrap();
            assert!(matches!(granted, AcquireOutcome::Granted(_)), "{granted:?}");
            let options = LeaderElectionOptions::new()
                .wait_time(Duration::from_secs(10))
                .lease_time(LEASE)
                .keys(leader::KeyOptions::new().exact_key(&key));
            let waiter = LeaderElector::new(store.clone(), options).unwrap();
            let waiting = tokio::spawn(async move {
                waiter.run_if_leader("w3", |_| async { Instant::now() }).await.unwrap().elected()
            });
            sleep(Duration::from_millis(50)).await; // refused, then waiting on the watch
            let released = Instant::now();
            store.release(&key, held, Duration::ZERO).await.unwrap();
            waiting.await.unwrap().expect("the waiter got the slot") - released
        }
        Contender::LockPerLease | Contender::LockSession => {
            let mut holder =
                Worker::new(Contender::LockSession, store, endpoints, key.clone()).await;
            let mut waiter =
                Worker::new(Contender::LockSession, store, endpoints, key.clone()).await;
            let options = LockOptions::new().with_lease(holder.session);
            let locked = holder.client.lock(key.as_str(), Some(options)).await.unwrap();
            let waiting = tokio::spawn(async move {
                let options = LockOptions::new().with_lease(waiter.session);
                waiter.client.lock(key.as_str(), Some(options)).await.unwrap();
                let at = Instant::now();
                let _ = waiter.client.lease_revoke(waiter.session).await;
                at
            });
            sleep(Duration::from_millis(50)).await;
            let released = Instant::now();
            holder.client.unlock(locked.key()).await.unwrap();
            let latency = waiting.await.unwrap() - released;
            let _ = holder.client.lease_revoke(holder.session).await;
            latency
        }
        Contender::Election => {
            let mut holder = Worker::new(Contender::Election, store, endpoints, key.clone()).await;
            let mut waiter = Worker::new(Contender::Election, store, endpoints, key.clone()).await;
            let won = holder.client.campaign(key.as_str(), "a", holder.session).await.unwrap();
            let leader = won.leader().unwrap().clone();
            let waiting = tokio::spawn(async move {
                waiter.client.campaign(key.as_str(), "b", waiter.session).await.unwrap();
                let at = Instant::now();
                let _ = waiter.client.lease_revoke(waiter.session).await;
                at
            });
            sleep(Duration::from_millis(50)).await;
            let released = Instant::now();
            holder.client.resign(Some(ResignOptions::new().with_leader(leader))).await.unwrap();
            let latency = waiting.await.unwrap() - released;
            let _ = holder.client.lease_revoke(holder.session).await;
            latency
        }
    }
}

/// Two plain writes in a row (a put, then another), `samples` times: what a release and a
/// grant cost at the least.
async fn two_writes(endpoints: &[String], samples: usize) -> Vec<Duration> {
    let mut client = Client::connect(endpoints, None).await.expect("connect");
    let mut latencies = Vec::with_capacity(samples);
    for sample in 0..samples {
        sleep(Duration::from_millis(50)).await; // as idle as a hand-over's release
        let started = Instant::now();
        client.put(format!("bench:etcd-writes:{sample}:a"), "x", None).await.unwrap();
        client.put(format!("bench:etcd-writes:{sample}:b"), "x", None).await.unwrap();
        latencies.push(started.elapsed());
    }
    latencies
}

/// gRPC messages the members received and WAL fsyncs they made, in all.
fn counters(cluster: &EtcdCluster) -> (f64, f64) {
    let mut messages = 0.0;
    let mut fsyncs = 0.0;
    for member in &cluster.members {
        messages += member.metric("grpc_server_msg_received_total").unwrap_or(0.0);
        fsyncs += member.metric("etcd_disk_wal_fsync_duration_seconds_count").unwrap_or(0.0);
    }
    (messages, fsyncs)
}

/// Messages and fsyncs per call of each operation, `COUNT` calls of each, one at a time,
/// on a warm store (its connections made, a released slot's lease kept).
async fn per_operation(cluster: &EtcdCluster, url: &str) -> Vec<(&'static str, f64, f64)> {
    const COUNT: usize = 50;
    let store = EtcdStore::connect(url).await.unwrap();
    let one = std::num::NonZeroU32::MIN;
    let request = |key, token| AcquireRequest::new(key, one, token, "bench", LEASE);
    let key = "bench:etcd-per-op";
    let warm = LeaseToken::generate().unwrap();
    store.acquire(request(key, warm)).await.unwrap();
    store.release(key, warm, Duration::ZERO).await.unwrap();
    let mut rows = Vec::new();
    let per_call = |before: (f64, f64), after: (f64, f64)| {
        ((after.0 - before.0) / COUNT as f64, (after.1 - before.1) / COUNT as f64)
    };

    let holder = LeaseToken::generate().unwrap();
    store.acquire(request(key, holder)).await.unwrap();
    let before = counters(cluster);
    for _ in 0..COUNT {
        let outcome = store.acquire(request(key, LeaseToken::generate().unwrap())).await.unwrap();
        assert!(matches!(outcome, AcquireOutcome::Full { .. }), "{outcome:?}");
    }
    let (messages, fsyncs) = per_call(before, counters(cluster));
    rows.push(("acquire, refused (group full)", messages, fsyncs));
    let before = counters(cluster);
    for _ in 0..COUNT {
        store.renew(key, holder, LEASE).await.unwrap();
    }
    let (messages, fsyncs) = per_call(before, counters(cluster));
    rows.push(("renew", messages, fsyncs));
    let before = counters(cluster);
    for _ in 0..COUNT {
        store.state(key).await.unwrap();
    }
    let (messages, fsyncs) = per_call(before, counters(cluster));
    rows.push(("state (one slot)", messages, fsyncs));
    store.release(key, holder, Duration::ZERO).await.unwrap();

    // A grant and its release, on a warm store (each grant reuses the lease the release before
    // it kept), then releases alone.
    let before = counters(cluster);
    for _ in 0..COUNT {
        let token = LeaseToken::generate().unwrap();
        let outcome = store.acquire(request(key, token)).await.unwrap();
        assert!(matches!(outcome, AcquireOutcome::Granted(_)), "{outcome:?}");
        store.release(key, token, Duration::ZERO).await.unwrap();
    }
    let cycle = per_call(before, counters(cluster));
    let keys: Vec<String> = (0..COUNT).map(|i| format!("{key}:{i}")).collect();
    let tokens: Vec<LeaseToken> = (0..COUNT).map(|_| LeaseToken::generate().unwrap()).collect();
    for (key, token) in keys.iter().zip(&tokens) {
        store.acquire(request(key, *token)).await.unwrap();
    }
    let before = counters(cluster);
    for (key, token) in keys.iter().zip(&tokens) {
        store.release(key, *token, Duration::ZERO).await.unwrap();
    }
    let release = per_call(before, counters(cluster));
    rows.push(("acquire, granted (a kept lease)", cycle.0 - release.0, cycle.1 - release.1));
    rows.push(("release", release.0, release.1));
    rows
}

/// The whole etcd section: prints a table and returns the figures.
pub async fn run(quick: bool, say: &dyn Fn(String)) -> Value {
    let cluster = EtcdCluster::start(3).await;
    let url = cluster.url();
    let endpoints: Vec<String> =
        cluster.members.iter().map(|member| format!("http://{}", member.endpoint())).collect();
    let store = EtcdStore::connect(&url).await.expect("store");
    let period = Duration::from_secs(if quick { 1 } else { 3 });
    let samples = if quick { 10 } else { 100 };

    let mut figures = serde_json::Map::new();
    let mut w1 = [const { Vec::new() }; Contender::ALL.len()];
    let mut w2 = [const { Vec::new() }; Contender::ALL.len()];
    for round in 0..2 {
        for (i, contender) in Contender::ALL.iter().enumerate() {
            let run = format!("{round}-{i}");
            w1[i].push(workload(*contender, &store, &endpoints, &run, false, period).await.1);
            w2[i].push(workload(*contender, &store, &endpoints, &run, true, period).await);
        }
    }
    // W1 and W2 leave the lock service with the waits they cancelled (a lock or campaign
    // still waiting when the period ended): the hand-overs run on a new cluster.
    drop(store);
    drop(cluster);
    let cluster = EtcdCluster::start(3).await;
    let url = cluster.url();
    let endpoints: Vec<String> =
        cluster.members.iter().map(|member| format!("http://{}", member.endpoint())).collect();
    let store = EtcdStore::connect(&url).await.expect("store");
    let mut writes = two_writes(&endpoints, samples).await;
    let writes_p50 = percentile(&mut writes, 50.0);
    say(format!(
        "etcd (3 members on loopback, {TASKS} tasks, 10 s lease; two rounds, A B C D A B C D):"
    ));
    say(format!(
        "{:<28} {:>14} {:>26} {:>10} {:>10}",
        "", "W1 cycles/s", "W2 attempts/s (wins/s)", "W3 p50 ms", "W3 p99 ms"
    ));
    for (i, contender) in Contender::ALL.iter().enumerate() {
        let (mut w3, stuck) = hand_over(*contender, &store, &endpoints, samples).await;
        if w3.is_empty() {
            w3.push(Duration::ZERO);
        }
        let (p50, p99) = (percentile(&mut w3, 50.0), percentile(&mut w3, 99.0));
        if stuck > 0 {
            say(format!(
                "  {}: {stuck} of {samples} hand-overs did not finish within 10 s",
                contender.name()
            ));
        }
        let rounds = |values: &[f64]| {
            values.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(" / ")
        };
        let contended = w2[i]
            .iter()
            .map(|(attempts, won)| format!("{attempts:.0} ({won:.0})"))
            .collect::<Vec<_>>()
            .join(" / ");
        say(format!(
            "{:<28} {:>14} {:>26} {:>10} {:>10}",
            contender.name(),
            rounds(&w1[i]),
            contended,
            ms(p50),
            ms(p99)
        ));
        figures.insert(
            contender.name().to_owned(),
            json!({
                "w1": w1[i],
                "w2_attempts": w2[i].iter().map(|(a, _)| *a).collect::<Vec<_>>(),
                "w2_wins": w2[i].iter().map(|(_, w)| *w).collect::<Vec<_>>(),
                "w3_p50_ms": p50.as_secs_f64() * 1e3,
                "w3_p99_ms": p99.as_secs_f64() * 1e3,
                "w3_stuck": stuck,
            }),
        );
    }
    say(format!("  two plain writes in a row (p50): {} ms", ms(writes_p50)));
    figures.insert("two_writes_p50_ms".into(), json!(writes_p50.as_secs_f64() * 1e3));
    for (operation, messages, fsyncs) in per_operation(&cluster, &url).await {
        say(format!(
            "  {operation}: {messages:.2} gRPC messages, {fsyncs:.2} WAL fsyncs (all members) per call"
        ));
        figures.insert(operation.to_owned(), json!({"messages": messages, "fsyncs": fsyncs}));
    }
    Value::Object(figures)
}
