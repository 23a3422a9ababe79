//! `--fairness`: how evenly waiters are served. Twenty waiters contend for one slot (each
//! its own elector, as twenty processes would be), 1,000 hand-overs in all: a waiter that
//! wins holds the slot for a moment, releases it and waits again at once. Printed per
//! store, with fair waiting off and on (the default): the spread of wins (1,000 / 20 = 50
//! each if perfectly fair) and the most hand-overs any waiter lost in a row while it waited
//! (19 if served in turn).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::store::IntoSharedStore;
use leader::{
    EtcdStore, LeaderGroupElectionOptions, LeaderGroupElector, MemoryStore, PostgresStore,
    RedisStore,
};
use leader_testkit::etcd::EtcdServer;
use leader_testkit::postgres_server::PostgresServer;
use leader_testkit::redis_server::RedisServer;
use tokio::time::Instant;

const WAITERS: usize = 20;
const HAND_OVERS: usize = 1_000;
/// How long a winner holds the slot before it releases it.
const HOLD: Duration = Duration::from_millis(2);

pub async fn run(say: &dyn Fn(String)) {
    say(format!(
        "fairness: {WAITERS} waiters for one slot, {HAND_OVERS} hand-overs (held {HOLD:?} each)"
    ));
    say("| store | fair waiting | wins: fewest | median | most | most hand-overs lost in a row | time |".into());
    say("|---|---|---|---|---|---|---|".into());
    let memory = MemoryStore::new();
    for fair in [false, true, false, true] {
        measure("memory", fair, |_| memory.clone(), say).await;
    }
    let redis = RedisServer::start();
    let mut stores = Vec::new();
    for _ in 0..WAITERS {
        stores.push(RedisStore::connect(&redis.url()).await.expect("Redis connects"));
    }
    for fair in [false, true, false, true] {
        measure("Redis", fair, |at| stores[at].clone(), say).await;
    }
    let postgres = PostgresServer::start();
    let mut stores = Vec::new();
    for _ in 0..WAITERS {
        stores.push(PostgresStore::connect(&postgres.url()).await.expect("PostgreSQL connects"));
    }
    for fair in [false, true, false, true] {
        measure("PostgreSQL", fair, |at| stores[at].clone(), say).await;
    }
    let etcd = EtcdServer::start();
    let mut stores = Vec::new();
    for _ in 0..WAITERS {
        stores.push(EtcdStore::connect(&etcd.url()).await.expect("etcd connects"));
    }
    for fair in [false, true, false, true] {
        measure("etcd", fair, |at| stores[at].clone(), say).await;
    }
}

/// Runs the contest with waiter `at` on `store(at)`, waiting fairly or not, and says its
/// figures.
async fn measure<S: IntoSharedStore>(
    name: &str,
    fair: bool,
    store: impl Fn(usize) -> S,
    say: &dyn Fn(String),
) {
    let winners: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(Vec::with_capacity(HAND_OVERS)));
    let group = format!("fairness-{name}-{fair}-{}", leader::LeaseToken::generate().unwrap());
    let started = Instant::now();
    let mut waiters = Vec::new();
    for at in 0..WAITERS {
        let options = LeaderGroupElectionOptions::new(1)
            .lease_time(Duration::from_secs(10))
            .wait_time(Duration::from_secs(60))
            .fair_waiting(fair);
        let elector = LeaderGroupElector::new(store(at), options).expect("valid options");
        let (winners, group) = (Arc::clone(&winners), group.clone());
        waiters.push(tokio::spawn(async move {
            loop {
                let Some(guard) = elector.acquire(&group).await.expect("the store answers") else {
                    continue;
                };
                {
                    let mut winners = winners.lock().unwrap();
                    if winners.len() == HAND_OVERS {
                        return;
                    }
                    winners.push(at);
                }
                tokio::time::sleep(HOLD).await;
                guard.release().await.expect("released");
            }
        }));
    }
    for waiter in waiters {
        waiter.await.expect("a waiter ends");
    }
    let took = started.elapsed();
    let winners = winners.lock().unwrap().clone();
    let (wins, lost_in_a_row) = tally(&winners);
    let mut sorted = wins.clone();
    sorted.sort_unstable();
    say(format!(
        "| {name} | {} | {} | {} | {} | {lost_in_a_row} | {:.1} s |",
        if fair { "on" } else { "off" },
        sorted[0],
        sorted[WAITERS / 2],
        sorted[WAITERS - 1],
        took.as_secs_f64()
    ));
}

/// Each waiter's wins, and the most hand-overs in a row any waiter lost: the others' wins
/// between two of its own (or before its first, or after its last, while it waited).
fn tally(winners: &[usize]) -> (Vec<usize>, usize) {
    let mut wins = vec![0; WAITERS];
    let mut since_last_win = vec![0usize; WAITERS];
    let mut worst = 0;
    for &winner in winners {
        for (waiter, lost) in since_last_win.iter_mut().enumerate() {
            if waiter == winner {
                worst = worst.max(*lost);
                *lost = 0;
            } else {
                *lost += 1;
            }
        }
        wins[winner] += 1;
    }
    (wins, worst.max(since_last_win.into_iter().max().unwrap_or(0)))
}
