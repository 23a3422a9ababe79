//! The attribute macros at run time, with explicit stores (the default store has its own
//! test binary, since it is process-wide).

mod support;

use std::time::Duration;

use leader::store::AcquireRequest;
use leader::{
    Error, LeaderRunResult, Lease, LeaseStore, LeaseToken, MemoryStore, RedisStore,
    leader_election, leader_group_election,
};
use support::redis_server::{RedisServer, free_port};

struct Workers {
    store: MemoryStore,
    processed: usize,
}

impl Workers {
    #[leader_group_election(name = "workers", max_leaders = 2, lease_time = "1m", store = self.store.clone())]
    async fn process(&self, batch: u32) -> (u32, u64) {
        (batch, Lease::current().expect("inside the body").fence())
    }

    #[leader_election(name = "counter", store = self.store.clone())]
    async fn count(&mut self) -> usize {
        self.processed += 1;
        self.processed
    }

    /// Consumes the service, for a receiver by value.
    #[leader_election(name = "shutdown", store = self.store.clone())]
    async fn shut_down(self) -> usize {
        self.processed
    }
}

async fn crashed_holder(store: &dyn LeaseStore, key: &str, max_leaders: u32) {
    let token = LeaseToken::generate().unwrap();
    let request = AcquireRequest::new(
        key,
        std::num::NonZeroU32::new(max_leaders).expect("at least one slot"),
        token,
        "crashed",
        Duration::from_secs(60),
    );
    store.acquire(request).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn elected_then_skipped_when_the_group_is_full() {
    let mut workers = Workers { store: MemoryStore::new(), processed: 0 };
    let (batch, fence) = workers.process(7).await.unwrap().elected().unwrap();
    assert_eq!((batch, fence), (7, 1));
    crashed_holder(&workers.store, "leader:workers", 2).await;
    crashed_holder(&workers.store, "leader:workers", 2).await;
    assert_eq!(workers.process(8).await.unwrap(), LeaderRunResult::Skipped);

    assert_eq!(workers.count().await.unwrap(), LeaderRunResult::Elected(1));
    assert_eq!(workers.count().await.unwrap(), LeaderRunResult::Elected(2));
    assert_eq!(workers.shut_down().await.unwrap(), LeaderRunResult::Elected(2));
}

#[leader_election(name = "report-{tenant}", min_lease_time = "30s", lease_time = "1m", store = store)]
async fn tenant_report(store: MemoryStore, tenant: &str) -> String {
    format!("report for {tenant}")
}

#[tokio::test(start_paused = true)]
async fn an_interpolated_name_elects_per_tenant_and_min_lease_holds() {
    let store = MemoryStore::new();
    let a = tenant_report(store.clone(), "a").await.unwrap();
    let b = tenant_report(store.clone(), "b").await.unwrap();
    assert_eq!(a.elected().as_deref(), Some("report for a"));
    assert_eq!(b.elected().as_deref(), Some("report for b"), "another tenant, another group");
    assert!(
        tenant_report(store.clone(), "a").await.unwrap().is_skipped(),
        "kept for the minimum lease"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(tenant_report(store.clone(), "a").await.unwrap().is_elected());
    let err = tenant_report(store, "has space").await.unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err:?}");
}

#[leader_election(name = "long-job", lease_time = "3s", auto_extend, store = store)]
async fn long_job(store: MemoryStore) -> bool {
    tokio::time::sleep(Duration::from_secs(20)).await;
    Lease::current().is_some_and(|lease| !lease.is_lost())
}

#[leader_election(name = "long-job-unextended", lease_time = "3s", store = store)]
async fn long_job_unextended(store: MemoryStore) -> bool {
    tokio::time::sleep(Duration::from_secs(20)).await;
    Lease::current().is_some_and(|lease| !lease.is_lost())
}

#[tokio::test(start_paused = true)]
async fn auto_extend_is_honoured() {
    assert_eq!(long_job(MemoryStore::new()).await.unwrap(), LeaderRunResult::Elected(true));
    assert_eq!(
        long_job_unextended(MemoryStore::new()).await.unwrap(),
        LeaderRunResult::Elected(false)
    );
}

#[leader_group_election(name = "waiting", max_leaders = 2, wait_time = "PT5S", store = store)]
async fn waiting(store: MemoryStore) -> tokio::time::Instant {
    tokio::time::Instant::now()
}

#[tokio::test(start_paused = true)]
async fn wait_time_is_honoured() {
    let store = MemoryStore::new();
    crashed_holder(&store, "leader:waiting", 2).await;
    crashed_holder(&store, "leader:waiting", 2).await;
    let started = tokio::time::Instant::now();
    assert!(waiting(store).await.unwrap().is_skipped());
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}

#[leader_election(name = "fragile", store = store)]
async fn strict(store: RedisStore) -> u8 {
    1
}

#[leader_election(name = "fragile", store = store, on_store_error = "skip")]
async fn lenient(store: RedisStore) -> u8 {
    1
}

#[leader_election(name = "tenant-{tenant}", store = store, on_store_error = "skip")]
async fn lenient_per_tenant(store: MemoryStore, tenant: &str) -> u8 {
    1
}

#[tokio::test]
async fn on_store_error_skip_turns_store_failures_into_skips() {
    let unreachable =
        || RedisStore::builder(format!("redis://127.0.0.1:{}", free_port())).build().unwrap();
    let err = strict(unreachable()).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(lenient(unreachable()).await.unwrap(), LeaderRunResult::Skipped);
    // Mistakes in the caller's own names are still errors.
    let err = lenient_per_tenant(MemoryStore::new(), "bad name").await.unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err:?}");
}

#[leader_election(name = "patient", store = store, on_store_error = "skip", wait_time = "10s")]
async fn patient(store: RedisStore) -> u8 {
    1
}

#[tokio::test]
async fn on_store_error_skip_keeps_trying_until_the_wait_is_over() {
    let mut server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    server.kill();
    let started = tokio::time::Instant::now();
    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        server.restart();
        server
    });
    // The store fails for the first 800 ms of the 10 s wait; the call keeps trying.
    assert_eq!(patient(store).await.unwrap(), LeaderRunResult::Elected(1));
    assert!(started.elapsed() >= Duration::from_millis(800));
    drop(restart.join().unwrap());
}

#[leader_group_election(name = "redis-pool", max_leaders = 2, lease_time = "1m", store = store)]
async fn on_redis(store: RedisStore) -> u64 {
    Lease::current().unwrap().fence()
}

#[tokio::test]
async fn works_on_redis() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let fence = on_redis(store.clone()).await.unwrap().elected().expect("a slot is free");
    assert!(fence > 0);
    crashed_holder(&store, "leader:redis-pool", 2).await;
    crashed_holder(&store, "leader:redis-pool", 2).await;
    assert!(on_redis(store).await.unwrap().is_skipped());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrapped_future_is_send() {
    let store = MemoryStore::new();
    let spawned = tokio::spawn(tenant_report(store, "spawned"));
    assert!(spawned.await.unwrap().unwrap().is_elected());
}
