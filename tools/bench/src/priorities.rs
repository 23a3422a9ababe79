//! `--priorities`: what a priority costs and how fast it moves the role. Per store:
//! - the hand-over to a better candidate: a leader of priority 1 holds the role, a candidate
//!   of priority 5 starts; the time from its start to its first fenced action (it leads
//!   with a fence), with `step_down_delay` 200 ms and 2 s (the default);
//! - the hand-over to a preferred candidate: a leader of priority 5 holds the role, a
//!   candidate of priority 1 waits (for a second); the time from the operator's `prefer`
//!   naming it to its first fenced action, with the same delays;
//! - the announcement's cost: over 10 s of a steady state (a leader and a waiting candidate,
//!   both of priority 1 and the default `step_down_delay`, so nobody steps down), the
//!   waiting candidate's requests per second, the leader's reads of the claim per second,
//!   and the mean time of each (a round trip and the server's work).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use async_trait::async_trait;
use leader::store::author::{Layered, StoreLayer};
use leader::store::{AcquireOutcome, AcquireRequest, ClaimInfo, IntoSharedStore};
use leader::{
    Error, EtcdStore, KeyOptions, Leadership, LeadershipOptions, LeaseStore, MemoryStore,
    PostgresStore, RedisStore,
};
use leader_testkit::etcd::EtcdServer;
use leader_testkit::postgres_server::PostgresServer;
use leader_testkit::redis_server::RedisServer;
use tokio::time::{Instant, sleep};

/// Hand-overs timed per store and delay.
const ROUNDS: usize = 5;
/// How long the steady state is watched.
const STEADY: Duration = Duration::from_secs(10);

pub async fn run(say: &dyn Fn(String)) {
    say("priorities: hand-over to a candidate of a higher priority (start to first fenced action), to a preferred one (the operator's call to first fenced action), and what announcing costs".into());
    say("| store | to | step_down_delay | hand-over: fastest | median | slowest |".into());
    say("|---|---|---|---|---|---|".into());
    let memory = MemoryStore::new();
    let redis = RedisServer::start();
    let postgres = PostgresServer::start();
    let etcd = EtcdServer::start();
    let redis_store = RedisStore::connect(&redis.url()).await.expect("Redis connects");
    let postgres_store =
        PostgresStore::connect(&postgres.url()).await.expect("PostgreSQL connects");
    let etcd_store = EtcdStore::connect(&etcd.url()).await.expect("etcd connects");
    for to in [To::Better, To::Preferred] {
        for delay in [Duration::from_millis(200), Duration::from_secs(2)] {
            hand_overs("memory", &memory, to, delay, say).await;
            hand_overs("Redis", &redis_store, to, delay, say).await;
            hand_overs("PostgreSQL", &postgres_store, to, delay, say).await;
            hand_overs("etcd", &etcd_store, to, delay, say).await;
        }
    }
    say(String::new());
    say(
        "| store | waiting candidate: requests/s | mean time | leader: claim reads/s | mean time |"
            .into(),
    );
    say("|---|---|---|---|---|".into());
    cost("memory", &memory, say).await;
    cost("Redis", &redis_store, say).await;
    cost("PostgreSQL", &postgres_store, say).await;
    cost("etcd", &etcd_store, say).await;
}

fn options(key: &str, id: &str, priority: i32, delay: Duration) -> LeadershipOptions {
    LeadershipOptions::new()
        .keys(KeyOptions::new().exact_key(key))
        .holder_id(id)
        .lease_time(Duration::from_secs(10))
        .priority(priority)
        .step_down_delay(delay)
}

fn fresh_key(what: &str) -> String {
    format!("priorities-{what}-{}", leader::LeaseToken::generate().unwrap())
}

async fn until_leading(leadership: &Leadership) {
    while leadership.fence().is_none() {
        sleep(Duration::from_millis(1)).await;
    }
}

/// Whom a hand-over goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// A candidate of a higher priority, from its start.
    Better,
    /// A waiting candidate of a lower priority, from the operator's preference for it.
    Preferred,
}

async fn hand_overs<S: IntoSharedStore + LeaseStore + Clone>(
    name: &str,
    store: &S,
    to: To,
    delay: Duration,
    say: &dyn Fn(String),
) {
    let mut times = Vec::with_capacity(ROUNDS);
    let (first, next) =
        if to == To::Better { (("low", 1), ("high", 5)) } else { (("high", 5), ("low", 1)) };
    for _ in 0..ROUNDS {
        let key = fresh_key(name);
        let leader = Leadership::start("r", store.clone(), options(&key, first.0, first.1, delay));
        let leader = leader.await.expect("starts");
        until_leading(&leader).await;
        let mut started = Instant::now();
        let waiting = Leadership::start("r", store.clone(), options(&key, next.0, next.1, delay));
        let waiting = waiting.await.expect("starts");
        if to == To::Preferred {
            sleep(Duration::from_secs(1)).await;
            assert!(leader.is_leader(), "{name}: a worse candidate took over");
            started = Instant::now();
            store.prefer(&key, Some((next.0, Duration::from_secs(60)))).await.expect("prefers");
        }
        until_leading(&waiting).await;
        times.push(started.elapsed());
        waiting.stop().await.expect("stops");
        leader.stop().await.expect("stops");
    }
    times.sort_unstable();
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let to = if to == To::Better { "higher priority" } else { "preferred" };
    say(format!(
        "| {name} | {to} | {delay:?} | {} | {} | {} |",
        ms(times[0]),
        ms(times[ROUNDS / 2]),
        ms(times[ROUNDS - 1])
    ));
}

/// Counts and times the acquires and the claim reads that pass through it.
#[derive(Debug, Default)]
struct Calls {
    acquires: AtomicU64,
    acquire_ns: AtomicU64,
    reads: AtomicU64,
    read_ns: AtomicU64,
}

#[async_trait]
impl StoreLayer for Calls {
    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        let started = Instant::now();
        let outcome = inner.acquire(request).await;
        self.acquires.fetch_add(1, Relaxed);
        self.acquire_ns.fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
        outcome
    }

    async fn claim(&self, inner: &dyn LeaseStore, key: &str) -> Result<Option<ClaimInfo>, Error> {
        let started = Instant::now();
        let claim = inner.claim(key).await;
        self.reads.fetch_add(1, Relaxed);
        self.read_ns.fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
        claim
    }
}

async fn cost<S: LeaseStore + Clone + 'static>(name: &str, store: &S, say: &dyn Fn(String)) {
    let key = fresh_key(name);
    // Equal priorities: the steady state of an announced candidate, with the default delay.
    let delay = Duration::from_secs(2);
    let leader_calls = Arc::new(Calls::default());
    let waiter_calls = Arc::new(Calls::default());
    let leading = Layered::new(Arc::clone(&leader_calls), store.clone());
    let waiting = Layered::new(Arc::clone(&waiter_calls), store.clone());
    let low =
        Leadership::start("r", leading, options(&key, "low", 1, delay)).await.expect("starts");
    until_leading(&low).await;
    let high = Leadership::start("r", waiting, options(&key, "high", 1, delay)).await;
    let high = high.expect("starts");
    sleep(Duration::from_secs(1)).await;
    let before = (snapshot(&waiter_calls), snapshot(&leader_calls));
    sleep(STEADY).await;
    let after = (snapshot(&waiter_calls), snapshot(&leader_calls));
    let per_second = |count: u64| count as f64 / STEADY.as_secs_f64();
    let mean = |ns: u64, count: u64| match count {
        0 => "-".to_owned(),
        _ => format!("{:.2} ms", ns as f64 / count as f64 / 1e6),
    };
    let (waits, wait_ns) = (after.0.0 - before.0.0, after.0.1 - before.0.1);
    let (reads, read_ns) = (after.1.2 - before.1.2, after.1.3 - before.1.3);
    say(format!(
        "| {name} | {:.1} | {} | {:.1} | {} |",
        per_second(waits),
        mean(wait_ns, waits),
        per_second(reads),
        mean(read_ns, reads)
    ));
    high.stop().await.expect("stops");
    low.stop().await.expect("stops");
}

fn snapshot(calls: &Calls) -> (u64, u64, u64, u64) {
    (
        calls.acquires.load(Relaxed),
        calls.acquire_ns.load(Relaxed),
        calls.reads.load(Relaxed),
        calls.read_ns.load(Relaxed),
    )
}
