//! The measurements beside the workloads: the ceiling, round trips, latency against PING,
//! crash fail-over, idle cost and scale.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use leader::store::author::{Layered, ScriptCall, StoreLayer};
use leader::store::{AcquireOutcome, AcquireRequest, RenewOutcome};
use leader::{
    Error, LeaderElectionOptions, LeaderElector, Leadership, LeadershipOptions, LeaseStore,
    LeaseToken, MemoryStore, RedisStore,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{Instant, sleep};

use crate::server::Server;
use crate::stats;

fn request(key: &str, token: LeaseToken) -> AcquireRequest<'_> {
    AcquireRequest::new(key, std::num::NonZeroU32::MIN, token, "bench", Duration::from_secs(10))
}

fn token() -> LeaseToken {
    LeaseToken::generate().expect("random")
}

/// Loads `source` into the server's script cache; its SHA1, for EVALSHA.
pub async fn load_script(
    connection: &mut redis::aio::MultiplexedConnection,
    source: &str,
) -> String {
    redis::cmd("SCRIPT").arg("LOAD").arg(source).query_async(connection).await.unwrap()
}

/// Calls/s of our acquire and release scripts by EVALSHA from `redis-benchmark -c 50 -P 16`,
/// and of the same unpipelined. Acquires hit fresh random groups (every one a grant);
/// releases hit random groups (the cheaper not-held path), so the cycle ceiling derived
/// from them is, if anything, too high.
pub async fn ceiling(server: &Server, requests: u64) -> Ceiling {
    let mut connection = server.connection().await;
    // Fresh random groups and tokens: `redis-benchmark` replaces `__rand_int__`.
    let acquire_call =
        ScriptCall::acquire("c:__rand_int__", "__rand_int__", "bench", 10_000, 1).unwrap();
    let release_call = ScriptCall::release("c:__rand_int__", "__rand_int__", 0).unwrap();
    let acquire = load_script(&mut connection, acquire_call.source).await;
    let release = load_script(&mut connection, release_call.source).await;
    let evalsha = |sha: &str, call: &ScriptCall| -> Vec<String> {
        ["EVALSHA".to_owned(), sha.to_owned()].into_iter().chain(call.args.clone()).collect()
    };
    let acquire_args = evalsha(&acquire, &acquire_call);
    let release_args = evalsha(&release, &release_call);
    let acquire_args: Vec<&str> = acquire_args.iter().map(String::as_str).collect();
    let release_args: Vec<&str> = release_args.iter().map(String::as_str).collect();
    let acquire_pipelined = server.redis_benchmark(&acquire_args, 50, 16, requests);
    let release_pipelined = server.redis_benchmark(&release_args, 50, 16, requests);
    let acquire_plain = server.redis_benchmark(&acquire_args, 50, 1, requests / 4);
    server.cli(&["FLUSHALL"]);
    Ceiling { acquire_pipelined, release_pipelined, acquire_plain }
}

pub struct Ceiling {
    pub acquire_pipelined: f64,
    pub release_pipelined: f64,
    pub acquire_plain: f64,
}

impl Ceiling {
    /// Acquire + release cycles per second, at the pipelined rates.
    pub fn cycles(&self) -> f64 {
        1.0 / (1.0 / self.acquire_pipelined + 1.0 / self.release_pipelined)
    }
}

/// Client commands per operation, read from `INFO commandstats` (commands our scripts run
/// inside the server are not round trips and are left out).
pub async fn round_trips(server: &Server, store: &RedisStore) -> Vec<(&'static str, f64)> {
    const OPS: u64 = 500;
    let key = "bench:round-trips";
    // Warm the connection and every script.
    let held = token();
    store.acquire(request(key, held)).await.unwrap();
    store.renew(key, held, Duration::from_secs(10)).await.unwrap();
    store.state(key).await.unwrap();
    store.release(key, held, Duration::ZERO).await.unwrap();

    let mut results = Vec::new();
    let mut tokens = Vec::new();
    server.reset_stats();
    for i in 0..OPS {
        let t = token();
        store.acquire(request(&format!("{key}:{i}"), t)).await.unwrap();
        tokens.push(t);
    }
    results.push(("acquire (granted)", server.client_commands() as f64 / OPS as f64));
    server.reset_stats();
    for i in 0..OPS {
        let outcome = store.acquire(request(&format!("{key}:{i}"), token())).await.unwrap();
        assert!(matches!(outcome, AcquireOutcome::Full { .. }));
    }
    results.push(("failed attempt", server.client_commands() as f64 / OPS as f64));
    server.reset_stats();
    for (i, t) in tokens.iter().enumerate() {
        store.renew(&format!("{key}:{i}"), *t, Duration::from_secs(10)).await.unwrap();
    }
    results.push(("renew", server.client_commands() as f64 / OPS as f64));
    server.reset_stats();
    for i in 0..OPS {
        store.state(&format!("{key}:{i}")).await.unwrap();
    }
    results.push(("state", server.client_commands() as f64 / OPS as f64));
    server.reset_stats();
    for (i, t) in tokens.iter().enumerate() {
        store.release(&format!("{key}:{i}"), *t, Duration::ZERO).await.unwrap();
    }
    results.push(("release", server.client_commands() as f64 / OPS as f64));
    results
}

/// Uncontended acquire latency with one task, p50 and p99 of each series.
pub struct Latency {
    /// `RedisStore::acquire`.
    pub acquire: (Duration, Duration),
    /// The same acquire script sent as a bare `EVALSHA` on a plain connection: what the
    /// script costs without the store's client code.
    pub raw_script: (Duration, Duration),
    /// A `PING` round trip.
    pub ping: (Duration, Duration),
}

/// One task acquiring (and releasing, untimed) a slot over and over, against a bare
/// `EVALSHA` of the same script and a `PING`, interleaved one of each per sample so all
/// three see the same moments of a noisy machine.
pub async fn latency(server: &Server, store: &RedisStore, samples: usize) -> Latency {
    let key = "bench:latency";
    let mut connection = server.connection().await;
    let probe = ScriptCall::acquire(key, "", "bench", 10_000, 1).unwrap();
    let script = load_script(&mut connection, probe.source).await;
    let (mut acquires, mut raw, mut pings) =
        (Vec::with_capacity(samples), Vec::with_capacity(samples), Vec::with_capacity(samples));
    for _ in 0..samples {
        let t = token();
        let started = Instant::now();
        store.acquire(request(key, t)).await.unwrap();
        acquires.push(started.elapsed());
        store.release(key, t, Duration::ZERO).await.unwrap();

        let t = token();
        let call = ScriptCall::acquire(key, &t.to_string(), "bench", 10_000, 1).unwrap();
        let started = Instant::now();
        let _: redis::Value = redis::cmd("EVALSHA")
            .arg(&script)
            .arg(&call.args)
            .query_async(&mut connection)
            .await
            .unwrap();
        raw.push(started.elapsed());
        store.release(key, t, Duration::ZERO).await.unwrap();

        let started = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut connection).await.unwrap();
        pings.push(started.elapsed());
    }
    let tails = |series: &mut Vec<Duration>| {
        (stats::percentile(series, 50.0), stats::percentile(series, 99.0))
    };
    Latency { acquire: tails(&mut acquires), raw_script: tails(&mut raw), ping: tails(&mut pings) }
}

/// A holder process killed with SIGKILL (no release); a waiter in this process takes the
/// slot. How long after the dead holder's expiry (both on the server's clock) the waiter
/// held it, per trial.
pub async fn crash_fail_over(server: &Server, trials: usize) -> Vec<Duration> {
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let options = LeaderElectionOptions::new().wait_time(Duration::from_secs(10));
    let waiter = LeaderElector::new(store, options).unwrap();
    let mut overshoots = Vec::new();
    for trial in 0..trials {
        let group = format!("crash-{trial}");
        let key = format!("leader:{group}");
        let mut holder = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--hold", &server.url(), &key, "1000"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("holder process");
        let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
        let line = lines.next_line().await.unwrap().expect("the holder reports its grant");
        let expires_at_ms: u64 = line.strip_prefix("held until ").unwrap().parse().unwrap();
        holder.start_kill().unwrap(); // SIGKILL
        holder.wait().await.unwrap();
        let acquired_at = waiter
            .run_if_leader(&group, |lease| async move { lease.acquired_at() })
            .await
            .unwrap()
            .elected()
            .expect("the waiter got the slot within its wait time");
        let acquired_ms = acquired_at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        overshoots.push(Duration::from_millis(acquired_ms.saturating_sub(expires_at_ms)));
    }
    overshoots
}

/// The `--hold` child: take a slot, report its expiry, and wait to be killed.
pub async fn hold_until_killed(url: &str, key: &str, lease_ms: u64) {
    let store = RedisStore::connect(url).await.expect("holder connects");
    let mut request = request(key, token());
    request.lease_time = Duration::from_millis(lease_ms);
    let AcquireOutcome::Granted(grant) = store.acquire(request).await.expect("holder acquires")
    else {
        panic!("the slot was taken");
    };
    let expires_ms = grant.expires_at.duration_since(UNIX_EPOCH).unwrap().as_millis();
    println!("held until {expires_ms}");
    std::future::pending::<()>().await;
}

/// Client commands sent by `waiters` waiters on a full group, in `window`, while nothing
/// changes.
pub async fn idle_cost(server: &Server, waiters: usize, window: Duration) -> u64 {
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let key = "leader:idle";
    let mut request = request(key, token());
    request.lease_time = Duration::from_secs(120);
    store.acquire(request).await.unwrap();
    let options = LeaderElectionOptions::new().wait_time(Duration::from_secs(60));
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let elector = LeaderElector::new(store.clone(), options.clone()).unwrap();
        tasks.push(tokio::spawn(async move { elector.run_if_leader("idle", |_| async {}).await }));
    }
    sleep(Duration::from_secs(1)).await; // every waiter has tried once
    server.reset_stats();
    sleep(window).await;
    let sent = server.client_commands();
    for task in tasks {
        task.abort();
    }
    sent
}

/// Counts the store calls of many leaderships.
#[derive(Debug, Clone, Default)]
struct Counts {
    acquires: Arc<AtomicU64>,
    renewals: Arc<AtomicU64>,
}

#[async_trait]
impl StoreLayer for Counts {
    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        self.acquires.fetch_add(1, Ordering::Relaxed);
        inner.acquire(request).await
    }

    async fn renew(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<RenewOutcome, Error> {
        self.renewals.fetch_add(1, Ordering::Relaxed);
        inner.renew(key, token, lease).await
    }
}

/// `candidates` leaderships over `groups` roles on one store: resident memory per candidate,
/// and, over `window`, renewals per holder per lease and acquire attempts per standby per
/// lease.
pub async fn scale<S: LeaseStore + Clone + 'static>(
    store: S,
    candidates: usize,
    groups: usize,
    window: Duration,
) -> HashMap<&'static str, f64> {
    let lease = Duration::from_secs(3);
    let counting = Layered::new(Counts::default(), store);
    let counts = counting.layer().clone();
    let options = LeadershipOptions::new().lease_time(lease).renew_interval(Duration::from_secs(1));
    let before = stats::resident_bytes();
    let heap_before = crate::heap::live_bytes();
    let mut leaderships = Vec::with_capacity(candidates);
    for i in 0..candidates {
        let role = format!("scale-{}", i % groups);
        leaderships
            .push(Leadership::start(&role, counting.clone(), options.clone()).await.unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while leaderships.iter().filter(|l| l.is_leader()).count() < groups && Instant::now() < deadline
    {
        sleep(Duration::from_millis(100)).await;
    }
    sleep(Duration::from_secs(1)).await;
    let after = stats::resident_bytes();
    let heap_after = crate::heap::live_bytes();
    let (acquires, renewals) =
        (counts.acquires.load(Ordering::Relaxed), counts.renewals.load(Ordering::Relaxed));
    sleep(window).await;
    let acquires = counts.acquires.load(Ordering::Relaxed) - acquires;
    let renewals = counts.renewals.load(Ordering::Relaxed) - renewals;
    let leases = window.as_secs_f64() / lease.as_secs_f64();
    let holders = leaderships.iter().filter(|l| l.is_leader()).count();
    let standbys = candidates - holders;
    let stopping: Vec<_> = leaderships.iter().map(Leadership::stop).collect();
    futures_util::future::join_all(stopping).await;
    HashMap::from([
        ("holders", holders as f64),
        ("bytes_per_candidate", after.saturating_sub(before) as f64 / candidates as f64),
        (
            "heap_bytes_per_candidate",
            heap_after.saturating_sub(heap_before) as f64 / candidates as f64,
        ),
        ("renewals_per_holder_per_lease", renewals as f64 / holders.max(1) as f64 / leases),
        ("attempts_per_standby_per_lease", acquires as f64 / standbys.max(1) as f64 / leases),
    ])
}

/// Scale on the in-memory store.
pub async fn scale_memory(
    candidates: usize,
    groups: usize,
    window: Duration,
) -> HashMap<&'static str, f64> {
    scale(MemoryStore::new(), candidates, groups, window).await
}

/// The elector's one-entry name cache: ns per `run_if_leader` on a `MemoryStore` (where
/// resolution is a visible share of a call) when every call names the same group (a hit)
/// and when calls alternate between two groups (a miss each time, the lock included), in
/// rounds A B A B. Returns the best round of each.
pub async fn name_cache(calls: usize, rounds: usize) -> (f64, f64) {
    let elector = leader::LeaderGroupElector::new(
        MemoryStore::new(),
        leader::LeaderGroupElectionOptions::new(2),
    )
    .unwrap();
    let names = ["report-tenant-a", "report-tenant-b"];
    let run = async |alternate: bool| {
        let started = Instant::now();
        for i in 0..calls {
            let name = names[if alternate { i % 2 } else { 0 }];
            let outcome = elector.run_if_leader(name, |_| async {}).await.unwrap();
            assert!(outcome.is_elected(), "two slots, one caller: always elected");
        }
        started.elapsed().as_nanos() as f64 / calls as f64
    };
    let (mut hit, mut miss) = (f64::MAX, f64::MAX);
    for _ in 0..rounds {
        hit = hit.min(run(false).await);
        miss = miss.min(run(true).await);
    }
    (hit, miss)
}
