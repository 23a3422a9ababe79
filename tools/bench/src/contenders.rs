//! The libraries under test, behind one interface: take a slot of a group and give it back.

use std::sync::Arc;
use std::time::Duration;

use distributed_lock_core::{
    DistributedLock, DistributedSemaphore, LockHandle, LockProvider, SemaphoreProvider,
};
use distributed_lock_redis::RedisLockProvider;
use leader::{LeaderGroupElectionOptions, LeaderGroupElector, RedisStore};

/// A library, connected to the bench's server.
#[derive(Clone)]
pub enum Contender {
    Leader(RedisStore),
    /// leader's guard form: `acquire`, then `release`.
    LeaderGuard(RedisStore),
    Rslock(Arc<rslock::LockManager>),
    DistributedLockRedis(Arc<RedisLockProvider>),
}

/// One task's handle on one group, made once per task so the loop measures only the calls.
pub enum Worker {
    Leader(LeaderGroupElector, String),
    LeaderGuard(LeaderGroupElector, String),
    Rslock(Arc<rslock::LockManager>, String),
    DlrLock(distributed_lock_redis::RedisDistributedLock),
    DlrSemaphore(distributed_lock_redis::RedisDistributedSemaphore),
}

pub const LEASE: Duration = Duration::from_secs(10);

impl Contender {
    pub async fn connect(name: &str, url: &str) -> Self {
        match name {
            "leader" => Contender::Leader(RedisStore::connect(url).await.expect("leader connects")),
            "leader-guard" => {
                Contender::LeaderGuard(RedisStore::connect(url).await.expect("leader connects"))
            }
            "rslock" => {
                let mut manager = rslock::LockManager::new(vec![url.to_owned()]);
                manager.set_retry(1, Duration::ZERO); // try-acquire: one attempt
                Contender::Rslock(Arc::new(manager))
            }
            "distributed-lock-redis" => Contender::DistributedLockRedis(Arc::new(
                RedisLockProvider::builder()
                    .url(url)
                    .expiry(LEASE)
                    .min_validity(LEASE * 9 / 10) // its default ratio; the default value assumes a 30 s expiry
                    .build()
                    .await
                    .expect("dlr connects"),
            )),
            other => panic!("unknown contender {other}"),
        }
    }

    /// Whether it offers groups of `n` > 1 slots.
    pub fn supports(&self, n: u32) -> bool {
        n == 1 || !matches!(self, Contender::Rslock(_))
    }

    pub fn worker(&self, group: &str, n: u32) -> Worker {
        match self {
            Contender::Leader(store) => {
                let options = LeaderGroupElectionOptions::new(n).lease_time(LEASE);
                Worker::Leader(
                    LeaderGroupElector::new(store.clone(), options).unwrap(),
                    group.to_owned(),
                )
            }
            Contender::LeaderGuard(store) => {
                let options = LeaderGroupElectionOptions::new(n).lease_time(LEASE);
                Worker::LeaderGuard(
                    LeaderGroupElector::new(store.clone(), options).unwrap(),
                    group.to_owned(),
                )
            }
            Contender::Rslock(manager) => Worker::Rslock(manager.clone(), group.to_owned()),
            Contender::DistributedLockRedis(provider) if n == 1 => {
                Worker::DlrLock(provider.create_lock(group))
            }
            Contender::DistributedLockRedis(provider) => {
                Worker::DlrSemaphore(provider.create_semaphore(group, n))
            }
        }
    }
}

impl Worker {
    /// One try: take a slot if one is free and give it back at once. True if taken.
    pub async fn cycle(&self) -> bool {
        match self {
            Worker::Leader(elector, group) => elector
                .run_if_leader(group, |_| async {})
                .await
                .expect("no store error")
                .is_elected(),
            Worker::LeaderGuard(elector, group) => {
                match elector.acquire(group).await.expect("no store error") {
                    Some(guard) => {
                        guard.release().await.expect("released");
                        true
                    }
                    None => false,
                }
            }
            Worker::Rslock(manager, group) => match manager.lock(group.as_bytes(), LEASE).await {
                Ok(lock) => {
                    manager.unlock(&lock).await;
                    true
                }
                Err(_) => false,
            },
            Worker::DlrLock(lock) => match lock.try_acquire().await.expect("no store error") {
                Some(handle) => {
                    handle.release().await.expect("released");
                    true
                }
                None => false,
            },
            Worker::DlrSemaphore(semaphore) => {
                match semaphore.try_acquire().await.expect("no store error") {
                    Some(handle) => {
                        handle.release().await.expect("released");
                        true
                    }
                    None => false,
                }
            }
        }
    }
}
