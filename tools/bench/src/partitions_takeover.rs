//! `--partitions-takeover`: how long a survivor takes to own a dead node's partitions,
//! against the partition count, on every store (memory, Redis, PostgreSQL, a one-member
//! etcd; servers of its own on loopback). Two nodes of one set, lease 2 s, balanced; then
//! one node's every store call fails (the process is gone as far as the store can tell)
//! and the clock runs until the survivor owns every partition. The documented bound is
//! the lease plus a round trip or two, plus one TTL (the lock-delay) on etcd. On etcd,
//! 4,096 partitions are measured at a 6 s lease: at 2 s, on a one-member etcd sharing two
//! cores with this process, the survivor's session lapses while it takes 2,048 over (its
//! renewals do not keep up), and the set does not settle.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use leader::store::author::{HeldSlot, Layered, StoreLayer};
use leader::store::{AcquireOutcome, AcquireRequest, GroupSnapshot, ReleaseOutcome, RenewOutcome};
use leader::{Error, EtcdStore, LeaseStore, LeaseToken, MemoryStore};
use leader_testkit::etcd::EtcdServer;
use leader_testkit::postgres_server::PostgresServer;
use leader_testkit::redis_server::RedisServer;
use tokio::time::Instant;

use crate::partitions::node;

/// The partition counts measured on each store.
const COUNTS: [u32; 3] = [256, 1024, 4096];

/// The nodes' lease.
const LEASE: Duration = Duration::from_secs(2);

pub async fn run(say: &dyn Fn(String)) {
    say("a dead node's partitions re-owned by the survivor (two nodes of one set):".to_owned());
    for count in COUNTS {
        let store = MemoryStore::new();
        takeover("memory", count, store.clone(), store, LEASE, LEASE, say).await;
    }
    let redis = RedisServer::start();
    for count in COUNTS {
        let connect = || async { leader::RedisStore::connect(&redis.url()).await.unwrap() };
        takeover("Redis", count, connect().await, connect().await, LEASE, LEASE, say).await;
    }
    let postgres = PostgresServer::start();
    for count in COUNTS {
        let connect = || async { leader::PostgresStore::connect(&postgres.url()).await.unwrap() };
        let (dying, surviving) = (connect().await, connect().await);
        takeover("PostgreSQL", count, dying, surviving, LEASE, LEASE, say).await;
    }
    let etcd = EtcdServer::start();
    for count in COUNTS {
        let connect = || async { EtcdStore::connect(&etcd.url()).await.unwrap() };
        let lease = if count > 1024 { Duration::from_secs(6) } else { LEASE };
        takeover("etcd", count, connect().await, connect().await, lease, 2 * lease, say).await;
    }
}

/// Two nodes of a set of `count` partitions, one on `dying` (cut once they are balanced),
/// one on `surviving`, at `lease`; says how long until the survivor owned them all,
/// beside `bound`.
async fn takeover<S: LeaseStore + Clone + 'static>(
    store_name: &str,
    count: u32,
    dying: S,
    surviving: S,
    lease: Duration,
    bound: Duration,
    say: &dyn Fn(String),
) {
    let name = format!("takeover{count}");
    let cut = Arc::new(Cut::default());
    let dying = Layered::new(Arc::clone(&cut), dying);
    let dying = node(&dying, &name, count, lease, "dying".to_owned()).await;
    let survivor = node(&surviving, &name, count, lease, "survivor".to_owned()).await;
    let half = count as usize / 2;
    let balanced = Instant::now();
    while dying.view().owned.len() != half || survivor.view().owned.len() != half {
        assert!(balanced.elapsed() < Duration::from_secs(120), "{store_name}: not balanced");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cut.0.store(true, Ordering::SeqCst);
    let started = Instant::now();
    while survivor.view().owned.len() != count as usize {
        assert!(started.elapsed() < Duration::from_secs(120), "{store_name}: not taken over");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed();
    say(format!(
        "  {store_name:<10} {count:>5} partitions, lease {lease:?}: the dead node's {half} owned after {took:>8.2?} (bound: {bound:?} and a margin)"
    ));
    cut.0.store(false, Ordering::SeqCst);
    // A release the store refused now (etcd: "too many requests" while it catches up)
    // expires by itself; the figure above stands.
    if let Err(error) = survivor.stop().await {
        say(format!("    the survivor's stop: {error}"));
    }
    let _ = dying.stop().await;
}

/// Fails every call while set: to the store, the node is gone.
#[derive(Debug, Default)]
struct Cut(AtomicBool);

impl Cut {
    fn check(&self, operation: &'static str) -> Result<(), Error> {
        if !self.0.load(Ordering::SeqCst) {
            return Ok(());
        }
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "cut");
        Err(Error::Unavailable {
            store: "cut",
            endpoint: String::new(),
            operation,
            cause: Box::new(cause),
        })
    }
}

#[async_trait]
impl StoreLayer for Cut {
    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        self.check("acquire")?;
        inner.acquire(request).await
    }

    async fn renew(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        self.check("renew")?;
        inner.renew(key, token, lease_time).await
    }

    async fn renew_many(
        &self,
        inner: &dyn LeaseStore,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        self.check("renew_many")?;
        inner.renew_many(slots, lease_time).await
    }

    async fn release(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        self.check("release")?;
        inner.release(key, token, min_lease_time).await
    }

    async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
        self.check("state")?;
        inner.state(key).await
    }

    async fn state_many(
        &self,
        inner: &dyn LeaseStore,
        keys: &[&str],
    ) -> Result<Vec<GroupSnapshot>, Error> {
        self.check("state_many")?;
        inner.state_many(keys).await
    }
}
