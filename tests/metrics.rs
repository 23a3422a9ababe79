//! The metrics a scripted sequence of elections records (feature `metrics`), read from a
//! debugging recorder. One test in its own binary: the recorder is process-wide.
#![cfg(feature = "metrics")]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use leader::store::AcquireRequest;
use leader::store::author::{HeldSlot, Layered, StoreLayer};
use leader::{
    LeaderChannel, LeaderChannelOptions, LeaderElectionOptions, LeaderElector,
    LeaderGroupElectionOptions, LeaderGroupElector, Leadership, LeadershipOptions, LeaseStore,
    LeaseToken, MemoryStore, PartitionOptions, Partitions,
};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use support::{Faulty, FaultyStore};
use tokio::time::sleep;

const SECOND: Duration = Duration::from_secs(1);

/// A recorder whose values can be read without resetting them (unlike metrics-util's
/// debugging recorder, whose snapshots drain counters and gauges).
#[derive(Clone)]
struct TestRecorder(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0.get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0.get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0.get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

fn key(name: &str, labels: &[(&str, &str)]) -> Key {
    let labels: Vec<metrics::Label> =
        labels.iter().map(|(k, v)| metrics::Label::new(k.to_string(), v.to_string())).collect();
    Key::from_parts(name.to_owned(), labels)
}

impl TestRecorder {
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.0.get_counter_handles().get(&key(name, labels)).map_or(0, |c| c.load(Ordering::SeqCst))
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let handles = self.0.get_gauge_handles();
        let gauge =
            handles.get(&key(name, labels)).unwrap_or_else(|| panic!("no gauge {name} {labels:?}"));
        f64::from_bits(gauge.load(Ordering::SeqCst))
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.0.get_histogram_handles().get(&key(name, labels)).map_or(0, |h| h.data().len())
    }
}

#[tokio::test(start_paused = true)]
async fn a_scripted_sequence_of_elections_is_counted() {
    let metrics = TestRecorder(Arc::new(Registry::atomic()));
    metrics::set_global_recorder(metrics.clone()).expect("the only recorder in this binary");

    // Per-call elections on a group of 2: two elected, one skipped behind two crashed holders.
    let store = FaultyStore::default();
    let group = LeaderGroupElector::new(store.clone(), LeaderGroupElectionOptions::new(2)).unwrap();
    let key = &[("group", "leader:pool")];
    assert!(group.run_if_leader("pool", |_| async {}).await.unwrap().is_elected());
    assert!(group.run_if_leader("pool", |_| async {}).await.unwrap().is_elected());
    for _ in 0..2 {
        let token = LeaseToken::generate().unwrap();
        let request = AcquireRequest::new(
            "leader:pool",
            std::num::NonZeroU32::new(2).unwrap(),
            token,
            "x",
            60 * SECOND,
        );
        store.inner().acquire(request).await.unwrap();
    }
    assert!(group.run_if_leader("pool", |_| async {}).await.unwrap().is_skipped());
    store.cut_off(true);
    assert!(group.run_if_leader("pool", |_| async {}).await.is_err());
    store.cut_off(false);
    let attempts =
        |outcome| metrics.counter("leader_acquire_attempts_total", &[key[0], ("outcome", outcome)]);
    assert_eq!((attempts("elected"), attempts("skipped"), attempts("error")), (2, 1, 1));
    assert_eq!(metrics.samples("leader_acquire_duration_seconds", key), 4);
    assert_eq!(
        metrics.counter("leader_transitions_total", &[key[0], ("transition", "elected")]),
        2
    );
    assert_eq!(metrics.gauge("leader_held_slots", key), 0.0, "both released");

    // Renewals: three succeed over a 10 s body with a 3 s lease, then one is refused.
    let memory = MemoryStore::new();
    let options = LeaderElectionOptions::new().lease_time(3 * SECOND).auto_extend(true);
    let elector = LeaderElector::new(memory.clone(), options).unwrap();
    let metrics_in_body = &metrics;
    let held = elector.run_if_leader("renewed", |lease| async move {
        sleep(Duration::from_millis(3_500)).await; // renewals at 1, 2, 3 s
        let renewed_key = &[("group", "leader:renewed")];
        let holding = metrics_in_body.gauge("leader_held_slots", renewed_key);
        memory.release(lease.key(), lease.token(), Duration::ZERO).await.unwrap();
        lease.lost().await; // the renewal at 4 s is refused
        holding
    });
    assert_eq!(held.await.unwrap().elected(), Some(1.0), "held while the body ran");
    let renewed = &[("group", "leader:renewed")];
    assert_eq!(metrics.counter("leader_renewals_total", &[renewed[0], ("outcome", "renewed")]), 3);
    assert_eq!(metrics.counter("leader_renewals_total", &[renewed[0], ("outcome", "refused")]), 1);
    assert_eq!(
        metrics.counter("leader_transitions_total", &[renewed[0], ("transition", "lost")]),
        1
    );
    assert_eq!(metrics.gauge("leader_held_slots", renewed), 0.0);

    // Long-lived leadership: elected, resigned, elected again; the gauge follows.
    let leadership =
        Leadership::start("scheduler", MemoryStore::new(), LeadershipOptions::new()).await.unwrap();
    leadership.wait_for_leadership().await.expect("no refusal");
    let role = &[("role", "scheduler")];
    assert_eq!(metrics.gauge("leader_is_leader", role), 1.0);
    leadership.resign().await;
    assert_eq!(metrics.gauge("leader_is_leader", role), 0.0);
    leadership.wait_for_leadership().await.expect("no refusal");
    let scheduler = ("group", "leader:scheduler");
    assert_eq!(
        metrics.counter("leader_transitions_total", &[scheduler, ("transition", "elected")]),
        2
    );
    assert_eq!(
        metrics.counter("leader_transitions_total", &[scheduler, ("transition", "resigned")]),
        1
    );

    // Channel drops by reason.
    let follower =
        Leadership::start("scheduler-standby", MemoryStore::new(), LeadershipOptions::new())
            .await
            .unwrap();
    let channel = LeaderChannel::new("events", &follower, LeaderChannelOptions::new()).unwrap();
    follower.stop().await.expect("stopped");
    for item in 0..3 {
        channel.writer().send(item).await;
    }
    assert_eq!(
        metrics.counter(
            "leader_channel_drops_total",
            &[("channel", "events"), ("reason", "follower")]
        ),
        3
    );

    // Observed changes: one per change per process, however many observers.
    let observed_store = MemoryStore::new();
    let elector = LeaderElector::new(observed_store.clone(), LeaderElectionOptions::new()).unwrap();
    let mut observers = Vec::new();
    for _ in 0..10 {
        observers.push(elector.observe("observed").await.unwrap());
    }
    let (done, finish) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn({
        let elector = elector.clone();
        async move {
            elector
                .run_if_leader("observed", |_| async {
                    finish.await.ok();
                })
                .await
        }
    });
    for observer in &mut observers {
        assert_eq!(observer.changed().await.unwrap().active_count, 1);
    }
    done.send(()).unwrap();
    assert!(holder.await.unwrap().unwrap().is_elected());
    for observer in &mut observers {
        assert!(observer.changed().await.unwrap().is_empty());
    }
    let observed = &[("group", "leader:observed"), ("outcome", "changed")];
    assert_eq!(metrics.counter("leader_observed_changes_total", observed), 2);
    leadership.stop().await.expect("stopped");

    // A partitions node: every acquire and renewal it sends is counted under its group.
    let counted = Arc::new(CountCalls::default());
    let store = Layered::new(Arc::clone(&counted), MemoryStore::new());
    let options = PartitionOptions::new().lease_time(3 * SECOND);
    let mut node = Partitions::start("sharded", 4, store, options).await.unwrap();
    while node.owned().len() < 4 {
        node.next_event().await.expect("the node runs");
    }
    sleep(5 * SECOND).await; // two renewals of the batch
    node.stop().await.unwrap();
    let mut keys: Vec<String> = (0..4).map(|index| format!("leader:sharded/{index}")).collect();
    keys.push("leader:sharded/members".to_owned());
    for key in &keys {
        let sent = counted.calls(key);
        let attempts = ["elected", "skipped", "error"].map(|outcome| {
            metrics
                .counter("leader_acquire_attempts_total", &[("group", key), ("outcome", outcome)])
        });
        let renewals = ["renewed", "refused", "error"].map(|outcome| {
            metrics.counter("leader_renewals_total", &[("group", key), ("outcome", outcome)])
        });
        assert_eq!(attempts.iter().sum::<u64>(), sent.0, "{key}: acquires sent and counted");
        assert_eq!(renewals.iter().sum::<u64>(), sent.1, "{key}: renewals sent and counted");
        assert!(sent.0 >= 1 && sent.1 >= 2, "{key}: {sent:?}");
    }
    for key in &keys[..4] {
        assert_eq!(metrics.gauge("leader_held_slots", &[("group", key)]), 0.0, "{key}");
    }
    let first = ("group", keys[0].as_str());
    assert_eq!(metrics.counter("leader_transitions_total", &[first, ("transition", "elected")]), 1);
}

/// Counts the acquires and the renewals (batched or not) sent for each group.
#[derive(Debug, Default)]
struct CountCalls(std::sync::Mutex<std::collections::HashMap<String, (u64, u64)>>);

impl CountCalls {
    fn calls(&self, key: &str) -> (u64, u64) {
        self.0.lock().unwrap().get(key).copied().unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl StoreLayer for CountCalls {
    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<leader::store::AcquireOutcome, leader::Error> {
        self.0.lock().unwrap().entry(request.key.to_owned()).or_default().0 += 1;
        inner.acquire(request).await
    }

    async fn renew_many(
        &self,
        inner: &dyn LeaseStore,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<leader::store::RenewOutcome>, leader::Error> {
        for slot in slots {
            self.0.lock().unwrap().entry(slot.key.to_owned()).or_default().1 += 1;
        }
        inner.renew_many(slots, lease_time).await
    }
}
