//! W1, W2, W3: the workloads every contender runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distributed_lock_core::{DistributedLock, LockHandle, LockProvider};
use leader::{LeaderElectionOptions, LeaderElector};
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep};

use crate::contenders::{Contender, LEASE};
use crate::stats;

/// Tasks per workload, as the peers' published figures used.
pub const TASKS: usize = 64;

/// W1: `TASKS` tasks, each cycling acquire + release on its own group. Cycles per second.
pub async fn uncontended(contender: &Contender, n: u32, run: &str, period: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + period;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let worker = contender.worker(&format!("bench:w1:{run}:{task}"), n);
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                if worker.cycle().await {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker finished");
    }
    stats::rate(done.load(Ordering::Relaxed), period)
}

/// W2: `TASKS` tasks trying one group (try-acquire, release at once). Attempts per second,
/// and how many of them won.
pub async fn contended(contender: &Contender, n: u32, run: &str, period: Duration) -> (f64, u64) {
    let attempts = Arc::new(AtomicU64::new(0));
    let won = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + period;
    let group = format!("bench:w2:{run}");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let worker = contender.worker(&group, n);
        let (attempts, won) = (attempts.clone(), won.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                if worker.cycle().await {
                    won.fetch_add(1, Ordering::Relaxed);
                }
                attempts.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker finished");
    }
    (stats::rate(attempts.load(Ordering::Relaxed), period), won.load(Ordering::Relaxed))
}

/// W3: a holder on one connection releases; a waiter on another, already waiting, takes
/// the slot. Hand-over latencies, from the release call to the waiter's grant.
pub async fn hand_over(
    holder: &Contender,
    waiter: &Contender,
    run: &str,
    samples: usize,
) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(samples);
    for sample in 0..samples {
        let group = format!("bench:w3:{run}:{sample}");
        let latency = match (holder, waiter) {
            (Contender::Leader(a), Contender::Leader(b)) => leader_hand_over(a, b, &group).await,
            (Contender::Rslock(a), Contender::Rslock(_)) => rslock_hand_over(a, &group).await,
            (Contender::DistributedLockRedis(a), Contender::DistributedLockRedis(b)) => {
                dlr_hand_over(a, b, &group).await
            }
            _ => unreachable!("holder and waiter are the same library"),
        };
        latencies.push(latency);
    }
    latencies
}

async fn leader_hand_over(
    holder: &leader::RedisStore,
    waiter: &leader::RedisStore,
    group: &str,
) -> Duration {
    let options = LeaderElectionOptions::new().lease_time(LEASE).wait_time(Duration::from_secs(5));
    let holding = LeaderElector::new(holder.clone(), options.clone()).unwrap();
    let waiting = LeaderElector::new(waiter.clone(), options).unwrap();
    let (held_tx, held_rx) = oneshot::channel();
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let group_name = group.to_owned();
    let holder_task = tokio::spawn(async move {
        holding
            .run_if_leader(&group_name, |_| async move {
                held_tx.send(()).unwrap();
                go_rx.await.unwrap();
                Instant::now() // the release starts now
            })
            .await
            .unwrap()
            .elected()
            .unwrap()
    });
    held_rx.await.unwrap();
    let group_name = group.to_owned();
    let waiter_task = tokio::spawn(async move {
        waiting.run_if_leader(&group_name, |_| async { Instant::now() }).await
    });
    sleep(Duration::from_millis(20)).await; // the waiter has tried once and is waiting
    go_tx.send(()).unwrap();
    let released_at = holder_task.await.unwrap();
    let elected_at =
        waiter_task.await.unwrap().unwrap().elected().expect("the waiter got the slot");
    elected_at.saturating_duration_since(released_at)
}

async fn rslock_hand_over(holder: &rslock::LockManager, group: &str) -> Duration {
    // The waiter uses rslock's defaults for waiting: retries with a random delay of up to 200 ms.
    let waiter = rslock::LockManager::new(holder_url());
    let lock = holder.lock(group.as_bytes(), LEASE).await.expect("holder locks");
    let group_name = group.to_owned();
    let waiting = tokio::spawn(async move {
        let lock =
            waiter.acquire_no_guard(group_name.as_bytes(), LEASE).await.expect("waiter locks");
        let at = Instant::now();
        waiter.unlock(&lock).await;
        at
    });
    sleep(Duration::from_millis(20)).await;
    let released_at = Instant::now();
    holder.unlock(&lock).await;
    waiting.await.unwrap().saturating_duration_since(released_at)
}

async fn dlr_hand_over(
    holder: &distributed_lock_redis::RedisLockProvider,
    waiter: &distributed_lock_redis::RedisLockProvider,
    group: &str,
) -> Duration {
    let handle = holder.create_lock(group).try_acquire().await.unwrap().expect("holder locks");
    let lock = waiter.create_lock(group);
    // Its acquire(timeout) makes one attempt against a single server and does not wait, so
    // the waiter polls try_acquire every 10 ms, as the peers' published figures did.
    let waiting = tokio::spawn(async move {
        loop {
            if let Some(handle) = lock.try_acquire().await.expect("no store error") {
                let at = Instant::now();
                handle.release().await.unwrap();
                return at;
            }
            sleep(Duration::from_millis(10)).await;
        }
    });
    sleep(Duration::from_millis(20)).await;
    let released_at = Instant::now();
    handle.release().await.unwrap();
    waiting.await.unwrap().saturating_duration_since(released_at)
}

/// rslock's manager does not expose its URL; the bench sets it once.
fn holder_url() -> Vec<String> {
    vec![crate::SERVER_URL.get().expect("set at start").clone()]
}
