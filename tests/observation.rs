//! Observation across connections, as across processes: the observer on one store (its own
//! connections, subscription or LISTEN), the candidates on others, against real Redis and
//! PostgreSQL servers; and an observer through a server's loss and return.

mod support;

use std::time::Duration;

use leader::store::SharedStore;
use leader::{GroupObserver, LeaderElectionOptions, LeaderElector, LeaseStore};
use support::observing::{Calls, KEY, next, stores, take};
use support::postgres_server::PostgresServer;
use support::redis::group_key;
use support::redis_server::RedisServer;
use support::{granted_fence, request_for, token};
use tokio::time::{Instant, timeout};

const SECOND: Duration = Duration::from_secs(1);

/// Grant, release, a crashed holder's expiry and a hand-over to a waiting candidate, each
/// seen by an observer on another connection, in order, with the right holders and fences.
async fn an_observer_on_another_connection_sees_every_change(url: &str) {
    let [observing, first, second] = stores(url).await;
    let options = LeaderElectionOptions::new().keys(leader::KeyOptions::new().exact_key(KEY));
    let mut observer =
        LeaderElector::new(observing, options.clone()).unwrap().observe("observed").await.unwrap();
    assert!(observer.current().is_empty());

    // A grant, then its release.
    let held = token();
    let fence = take(&first, "10.0.0.1:8080", held, 10 * SECOND).await;
    assert_eq!(next(&mut observer).await, [("10.0.0.1:8080".to_owned(), fence)]);
    first.release(KEY, held, Duration::ZERO).await.unwrap();
    assert_eq!(next(&mut observer).await, []);

    // A holder that crashed: never renewed, never released; seen when its lease ends.
    // Long enough that the observer reads the grant before it lapses on a busy machine.
    let lease = 2 * SECOND;
    let sent = Instant::now();
    let crashed = take(&second, "10.0.0.2:8080", token(), lease).await;
    assert!(crashed > fence);
    assert_eq!(next(&mut observer).await, [("10.0.0.2:8080".to_owned(), crashed)]);
    assert_eq!(next(&mut observer).await, [], "the crashed holder's expiry");
    assert!(sent.elapsed() >= lease, "seen {:?} after the grant", sent.elapsed());

    // A hand-over: a candidate waiting on a held group takes it at the release.
    let held = token();
    let before = take(&first, "10.0.0.1:8080", held, 10 * SECOND).await;
    assert_eq!(next(&mut observer).await, [("10.0.0.1:8080".to_owned(), before)]);
    let waiting = LeaderElector::new(
        second.clone(),
        options.holder_id("10.0.0.3:8080").wait_time(5 * SECOND),
    )
    .unwrap();
    let (done, finish) = tokio::sync::oneshot::channel::<()>();
    let candidate = tokio::spawn(async move {
        waiting
            .run_if_leader("observed", |lease| async move {
                finish.await.ok();
                lease.fence()
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await; // the candidate waits
    first.release(KEY, held, Duration::ZERO).await.unwrap();
    // The release and the grant may reach the observer as one change or two.
    let mut seen = next(&mut observer).await;
    if seen.is_empty() {
        seen = next(&mut observer).await;
    }
    let [(holder, taken)] = seen.as_slice() else { panic!("one holder: {seen:?}") };
    assert_eq!(holder, "10.0.0.3:8080");
    assert!(*taken > before);
    done.send(()).unwrap();
    let ran = candidate.await.unwrap().unwrap();
    assert_eq!(ran.elected(), Some(*taken), "the observer saw the candidate's own fence");
    assert_eq!(next(&mut observer).await, [], "the candidate's release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_an_observer_on_another_connection_sees_every_change() {
    let server = RedisServer::start();
    an_observer_on_another_connection_sees_every_change(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_observer_on_another_connection_sees_every_change() {
    let server = PostgresServer::start();
    an_observer_on_another_connection_sees_every_change(&server.url()).await;
}

/// A server that goes away: `changed()` reports the failure (never a frozen state), and
/// once the server is back (here without its data, so without the announcement that had
/// its grants published) a grant is seen again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_reports_a_lost_redis_and_recovers_when_it_is_back() {
    let mut server = RedisServer::start();
    let [observing, candidate, _] = stores(&server.url()).await;
    let options = LeaderElectionOptions::new().keys(leader::KeyOptions::new().exact_key(KEY));
    let mut observer =
        LeaderElector::new(observing, options).unwrap().observe("observed").await.unwrap();
    server.kill();
    let failed = timeout(5 * SECOND, observer.changed()).await.expect("told within 5 s");
    let error = failed.expect_err("the server is gone");
    assert!(error.is_transient(), "{error:?}");
    server.restart();
    // Back: the observer reads the (now empty) group again, and its store subscribes again.
    loop {
        match timeout(5 * SECOND, observer.changed()).await.expect("a change in 5 s") {
            Ok(state) => break assert!(state.is_empty(), "{state:?}"),
            Err(error) => assert!(error.is_transient(), "{error:?}"),
        }
    }
    support::eventually(5 * SECOND, "the subscription is back", || async {
        server.cli(&["PUBSUB", "NUMPAT"]) == "2"
    })
    .await;
    let group = group_key(KEY);
    support::eventually(5 * SECOND, "the group is announced again", || async {
        server.cli(&["HKEYS", &group]).lines().any(|field| field.starts_with("watcher:"))
    })
    .await;
    // Only a published grant can tell the observer now: the group had no slot to time.
    let mut request = request_for(KEY, 1, token(), 10 * SECOND);
    request.holder = "10.0.0.9:8080";
    let fence = granted_fence(candidate.acquire(request).await.expect("the candidate is back"));
    let seen = next(&mut observer).await;
    assert_eq!(seen, [("10.0.0.9:8080".to_owned(), fence)]);
}

/// The last observer's leaving withdraws the store's announcement: Redis publishes the
/// group's grants no more, and PostgreSQL's LISTEN connection lets go of its locks.
#[tokio::test]
async fn dropping_the_last_observer_withdraws_its_announcement() {
    let server = RedisServer::start();
    let store = leader::RedisStore::connect(&server.url()).await.unwrap();
    let elector = LeaderElector::new(
        store.clone(),
        LeaderElectionOptions::new().keys(leader::KeyOptions::new().exact_key(KEY)),
    )
    .unwrap();
    let (first, second) =
        (elector.observe("observed").await.unwrap(), elector.observe("observed").await.unwrap());
    let watched = || server.cli(&["HEXISTS", &group_key(KEY), "watched"]);
    assert_eq!(watched(), "1");
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(watched(), "1", "one observer is left");
    drop(second);
    support::eventually(5 * SECOND, "the announcement is withdrawn", || async { watched() == "0" })
        .await;

    let server = PostgresServer::start();
    let store = leader::PostgresStore::connect(&server.url()).await.unwrap();
    let observer = LeaderElector::new(
        store,
        LeaderElectionOptions::new().keys(leader::KeyOptions::new().exact_key(KEY)),
    )
    .unwrap()
    .observe("observed")
    .await
    .unwrap();
    let locks = || server.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'");
    assert_eq!(locks(), "2", "the wait and observe locks");
    drop(observer);
    support::eventually(5 * SECOND, "the locks are let go", || async { locks() == "0" }).await;
}

/// A store without change events (`watch_changes` unsupported, as the trait's default):
/// observers read its state once a second instead, and still see every change that lasts.
#[derive(Debug, Clone, Default)]
struct NoChangeEvents;

#[async_trait::async_trait]
impl leader::store::author::StoreLayer for NoChangeEvents {
    fn kind(&self, _: &dyn LeaseStore) -> &'static str {
        "no-change-events"
    }

    async fn watch_changes(
        &self,
        _: &dyn LeaseStore,
        _: &str,
    ) -> Result<leader::store::author::GroupWatch, leader::Error> {
        Err(leader::Error::Unsupported { store: "no-change-events", operation: "watch changes" })
    }
}

type WithoutChangeEvents = leader::store::author::Layered<NoChangeEvents, leader::MemoryStore>;

#[tokio::test(start_paused = true)]
async fn a_store_without_change_events_is_read_once_a_second() {
    let store = WithoutChangeEvents::default();
    let options = LeaderElectionOptions::new().keys(leader::KeyOptions::new().exact_key(KEY));
    let mut observer =
        LeaderElector::new(store.clone(), options).unwrap().observe("x").await.unwrap();
    let shared: SharedStore = std::sync::Arc::new(store);
    let fence = take(&shared, "10.0.0.4:8080", token(), 60 * SECOND).await;
    let started = Instant::now();
    assert_eq!(next(&mut observer).await, [("10.0.0.4:8080".to_owned(), fence)]);
    assert!(started.elapsed() <= SECOND, "seen within a second: {:?}", started.elapsed());
}

/// `Leadership::observe()` sees the role's terms, this instance's own included, and the
/// observer's stream gives the same changes.
#[tokio::test]
async fn a_leadership_observes_its_own_role() {
    use futures_util::StreamExt;
    use leader::{Leadership, LeadershipOptions};

    let store = leader::MemoryStore::new();
    let options = LeadershipOptions::new().holder_id("10.0.0.5:8080");
    let leadership = Leadership::start("scheduler", store, options).await.unwrap();
    let observer = leadership.observe().await.unwrap();
    assert_eq!(observer.key(), "leader:scheduler");
    let mut changes = Box::pin(observer.into_stream());
    if leadership.fence().is_none() {
        let state = timeout(5 * SECOND, changes.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(state.leaders[0].holder, "10.0.0.5:8080");
    }
    leadership.stop().await.expect("stopped");
    let state = timeout(5 * SECOND, changes.next()).await.unwrap().unwrap().unwrap();
    assert!(state.is_empty(), "the term ended: {state:?}");
}

/// A release's `NOTIFY` carries the bare key and a grant's `granted <key>`: a key with a
/// space (`granted leader:observed`) would read as a grant of another group, and its own
/// waiters would never wake. `PostgresStore` refuses such a key, naming why.
#[tokio::test]
async fn postgres_refuses_a_key_that_would_read_as_another_groups_grant() {
    let server = PostgresServer::start();
    let store = leader::PostgresStore::connect(&server.url()).await.unwrap();
    let key = format!("granted {KEY}");
    let err = store.acquire(request_for(&key, 1, token(), SECOND)).await.unwrap_err();
    assert!(matches!(err, leader::Error::InvalidKey { .. }), "{err:?}");
    assert!(err.to_string().contains("whitespace"), "{err}");
    assert!(store.state(&key).await.unwrap().leaders.is_empty(), "nothing was granted");
}

/// Observing as a newcomer does it: from a store and a name alone (no elector), or with
/// the candidates' key options; a group with no live slot reports its size as unknown,
/// whatever the candidates' size; the stream comes from a clone, so `current()` stays; a
/// single-leader group's `leader()` is its one holder.
#[tokio::test]
async fn a_store_and_a_name_are_enough_to_observe() {
    use futures_util::StreamExt;
    use leader::{GroupObserver, KeyOptions, LeaderGroupElectionOptions, LeaderGroupElector};

    let store = leader::store::connect("memory://").await.unwrap();
    let mut observer = GroupObserver::start(&store, "billing").await.unwrap();
    assert_eq!(observer.key(), "leader:billing");
    let empty = observer.current();
    assert!(empty.is_empty() && empty.max_leaders.is_none(), "unknown size: {empty:?}");
    assert_eq!(empty.available_slots(), None);
    assert!(observer.leader().is_none());

    // A single leader: `leader()` names it, and a stream leaves `current()` in place.
    let mut changes = Box::pin(observer.stream());
    let mut request = request_for("leader:billing", 1, token(), 60 * SECOND);
    request.holder = "10.0.0.8:8080";
    let fence = granted_fence(store.acquire(request).await.unwrap());
    let seen = timeout(5 * SECOND, changes.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(seen.leaders[0].fence, fence);
    assert_eq!(observer.changed().await.unwrap().leaders[0].fence, fence);
    assert_eq!(observer.leader().map(|slot| slot.holder), Some("10.0.0.8:8080".to_owned()));

    // The candidates' own key options, and a 3-slot group observed by anyone: its size is
    // the store's, not the observer's.
    let keys = KeyOptions::new().namespace("billing:");
    let workers = LeaderGroupElector::new(
        store.clone(),
        LeaderGroupElectionOptions::new(3).keys(keys.clone()).holder_id("w1"),
    )
    .unwrap();
    let mut pool = GroupObserver::start_with_keys(&store, "pool", &keys).await.unwrap();
    assert_eq!(pool.key(), "billing:leader:pool");
    let (done, finish) = tokio::sync::oneshot::channel::<()>();
    let working = tokio::spawn(async move {
        workers
            .run_if_leader("pool", |_| async {
                finish.await.ok();
            })
            .await
    });
    let state = pool.changed().await.unwrap();
    assert_eq!((state.max_leaders, state.available_slots()), (Some(3), Some(2)));
    assert!(pool.leader().is_none(), "not a single-leader group");
    done.send(()).unwrap();
    assert!(working.await.unwrap().unwrap().is_elected());
    assert_eq!(pool.changed().await.unwrap().max_leaders, None, "empty again: unknown");
}

/// On etcd, whose times to live are whole seconds (a slot's last second reads as 0), an
/// observer reads a crashed holder's group a few times while its slot runs out, not every
/// millisecond of its last second.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn a_crashed_holders_last_second_costs_an_observer_a_few_reads_on_etcd() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use leader::store::author::Layered;

    let (holding, server) = support::etcd_store::solo().await;
    let reads = Arc::new(Calls::default());
    let observing: SharedStore = Arc::new(Layered::new(
        Arc::clone(&reads),
        leader::EtcdStore::connect(&server.url()).await.unwrap(),
    ));
    let mut observer = GroupObserver::start_with_keys(
        &observing,
        "crashed",
        &leader::KeyOptions::new().exact_key(KEY),
    )
    .await
    .unwrap();
    // Granted for 2 s and never renewed: the holder crashed.
    let holding: SharedStore = Arc::new(holding);
    let fence = take(&holding, "10.0.0.9:8080", token(), 2 * SECOND).await;
    assert_eq!(next(&mut observer).await, [("10.0.0.9:8080".to_owned(), fence)]);
    let (before, started) = (reads.reads.load(Ordering::Relaxed), Instant::now());
    assert_eq!(next(&mut observer).await, []);
    let (made, took) = (reads.reads.load(Ordering::Relaxed) - before, started.elapsed());
    println!("{made} reads in the {took:?} until the crashed holder's slot was gone");
    assert!(made <= 4, "{made} reads in {took:?}");
}

/// Everything made from one `SharedStore` uses it as it is: two electors (one made with
/// `new`, as the docs show) and an observer started from the handle share one reader, so the
/// group is watched once.
#[tokio::test]
async fn electors_and_an_observer_over_one_shared_store_share_one_reader() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use leader::store::author::Layered;

    let watches = Arc::new(Calls::default());
    let shared: SharedStore =
        Arc::new(Layered::new(Arc::clone(&watches), leader::MemoryStore::new()));
    let first = LeaderElector::new(shared.clone(), LeaderElectionOptions::new()).unwrap();
    let second = LeaderElector::new(shared.clone(), LeaderElectionOptions::new()).unwrap();
    let observers = [
        first.observe("shared").await.unwrap(),
        second.observe("shared").await.unwrap(),
        GroupObserver::start(&shared, "shared").await.unwrap(),
    ];
    assert!(observers.iter().all(|observer| observer.leader().is_none()));
    assert_eq!(watches.watches.load(Ordering::Relaxed), 1, "one reader, one watch of the group");
}
