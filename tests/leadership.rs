//! Long-lived leadership, under paused time on `MemoryStore` (and on Redis where the
//! behaviour is the store's).

mod support;

use std::time::Duration;

use leader::{
    DisabledStore, Leadership, LeadershipOptions, LeaseStore, MemoryStore, RedisStore,
    WhenUncoordinated,
};
use support::redis_server::RedisServer;
use support::{Faulty, FaultyStore, capture_logs, eventually, start};
use tokio::time::{Instant, sleep, timeout};

const SECOND: Duration = Duration::from_secs(1);

fn options() -> LeadershipOptions {
    // lease 15 s, renew every 5 s, retry every 1 s + up to 250 ms.
    LeadershipOptions::new().lease_time(15 * SECOND)
}

async fn leaders(instances: &[Leadership]) -> Vec<usize> {
    instances.iter().enumerate().filter(|(_, l)| l.is_leader()).map(|(i, _)| i).collect()
}

/// Waits (in paused time, so instantly) until exactly `n` instances lead; returns which.
async fn settle(instances: &[Leadership], n: usize) -> Vec<usize> {
    let deadline = Instant::now() + 60 * SECOND;
    loop {
        let now_leading = leaders(instances).await;
        if now_leading.len() == n {
            return now_leading;
        }
        assert!(Instant::now() < deadline, "never {n} leaders; now {now_leading:?}");
        sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn exactly_one_of_several_instances_leads_and_keeps_leading() {
    let store = MemoryStore::new();
    let mut instances = Vec::new();
    for i in 0..5 {
        instances.push(
            start("scheduler", store.clone(), options().holder_id(format!("instance-{i}"))).await,
        );
    }
    let first = settle(&instances, 1).await;
    let leader = &instances[first[0]];
    let (term, fence) = (leader.term(), leader.fence());
    assert_eq!(term, 1);
    for _ in 0..20 {
        sleep(3 * SECOND).await; // a minute of renewals
        assert_eq!(leaders(&instances).await, first, "leadership moved or was shared");
    }
    assert_eq!((leader.term(), leader.fence()), (term, fence), "the same term throughout");
    assert!(!leader.leadership_token().is_cancelled());
    for other in instances.iter().filter(|l| !l.is_leader()) {
        assert!(other.leadership_token().is_cancelled(), "a follower's token is cancelled");
    }
}

#[tokio::test(start_paused = true)]
async fn stop_hands_over_without_waiting_for_expiry() {
    let store = MemoryStore::new();
    let a = start("outbox", store.clone(), options()).await;
    let term = a.wait_for_leadership().await.expect("no refusal");
    let b = start("outbox", store.clone(), options()).await;
    sleep(SECOND).await;
    assert!(!b.is_leader());
    let stopped_at = Instant::now();
    a.stop().await.expect("stopped");
    assert!(term.is_cancelled() && !a.is_leader() && a.status().stopped);
    timeout(SECOND, b.wait_for_leadership()).await.expect("b leads at once").expect("no refusal");
    assert!(stopped_at.elapsed() < 10 * Duration::from_millis(1), "{:?}", stopped_at.elapsed());
    // A stopped leadership never waits for leadership again, and says why.
    let error = a.wait_for_leadership().await.expect_err("stopped");
    assert!(matches!(&error, leader::Error::Stopped { role } if role == "outbox"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_crashed_leader_is_replaced_within_the_lease() {
    let shared = MemoryStore::new();
    let crashing = FaultyStore::over(shared.clone());
    let a = start("reports", crashing.clone(), options()).await;
    let a_term = a.wait_for_leadership().await.expect("no refusal");
    let b = start("reports", shared.clone(), options()).await;
    sleep(SECOND).await;
    // Cut a off from the store: it renews no more and releases nothing.
    crashing.cut_off(true);
    let cut_at = Instant::now();
    timeout(20 * SECOND, b.wait_for_leadership()).await.expect("b takes over").expect("no refusal");
    let took_over = cut_at.elapsed();
    // The slot lives at most one lease (15 s) past a's last renewal, which came before the cut;
    // b notices the expiry at once (its timer is set to the nearest expiry).
    assert!(took_over <= 15 * SECOND, "took {took_over:?}");
    assert!(a_term.is_cancelled(), "a stepped down by then (its local deadline came first)");
    assert!(!a.is_leader());
}

/// A stop whose release the store failed (a blip) gives the slot back once the store
/// answers again, instead of leaving it held by nobody until its lease runs out.
#[tokio::test(start_paused = true)]
async fn a_release_the_store_failed_is_tried_again_until_it_answers() {
    let shared = MemoryStore::new();
    let flaky = FaultyStore::over(shared.clone());
    let a = start("reports", flaky.clone(), options()).await;
    a.wait_for_leadership().await.expect("no refusal");
    flaky.cut_off(true);
    a.stop().await.expect_err("the store did not answer the release");
    sleep(SECOND).await;
    flaky.cut_off(false);
    let answering = Instant::now();
    let b = start("reports", shared.clone(), options()).await;
    timeout(5 * SECOND, b.wait_for_leadership())
        .await
        .expect("b leads once the store answers the release, not at the slot's expiry")
        .expect("no refusal");
    assert!(answering.elapsed() <= SECOND, "{:?}", answering.elapsed());
}

#[tokio::test(start_paused = true)]
async fn resign_lets_another_instance_lead_first() {
    let store = MemoryStore::new();
    let a = start("janitor", store.clone(), options()).await;
    a.wait_for_leadership().await.expect("no refusal");
    let b = start("janitor", store.clone(), options()).await;
    let c = start("janitor", store.clone(), options()).await;
    sleep(SECOND).await;
    let resigned_at = Instant::now();
    a.resign().await;
    assert!(!a.is_leader());
    let instances = [a.clone(), b, c];
    let now_leading = settle(&instances, 1).await;
    assert_ne!(now_leading, [0], "a won its own resignation back");
    assert!(resigned_at.elapsed() < SECOND);
    sleep(30 * SECOND).await;
    assert!(!a.is_leader(), "the new leader keeps its term");
}

#[tokio::test(start_paused = true)]
async fn renewal_failures_are_retried_at_the_cadence_or_half_the_remaining_lease() {
    let store = FaultyStore::default();
    let leadership = start(
        "billing",
        store.clone(),
        options().lease_time(12 * SECOND).renew_interval(4 * SECOND),
    )
    .await;
    let token = leadership.wait_for_leadership().await.expect("no refusal");
    let elected_at = Instant::now();
    store.fail_renewals(2);
    sleep(20 * SECOND).await;
    assert!(
        !token.is_cancelled() && leadership.is_leader(),
        "the term survived two failed renewals"
    );
    let offsets: Vec<Duration> = store.renewal_times().iter().map(|t| *t - elected_at).collect();
    // Each local deadline comes 0.1% early (11.988 s after a send). t=4 fails (7.988 s left:
    // retry at half, 3.994 s); t=7.994 fails (3.994 s left: retry at half, 1.997 s);
    // t=9.991 succeeds; then every 4 s.
    let expected: Vec<Duration> =
        [4_000, 7_994, 9_991, 13_991, 17_991].map(Duration::from_millis).to_vec();
    assert_eq!(offsets, expected);
}

#[tokio::test(start_paused = true)]
async fn a_refused_renewal_steps_down_at_once_and_cancels_the_token() {
    let store = MemoryStore::new();
    let leadership = start("fenced", store.clone(), options()).await;
    let token = leadership.wait_for_leadership().await.expect("no refusal");
    let lease = leadership.lease().unwrap();
    // An operator frees the slot; the next renewal (within 5 s) is refused.
    store.release(lease.key(), lease.token(), Duration::ZERO).await.unwrap();
    let freed_at = Instant::now();
    timeout(10 * SECOND, token.cancelled()).await.expect("token cancelled");
    assert!(freed_at.elapsed() <= 5 * SECOND);
    assert_eq!(lease.loss_reason(), Some(leader::LossReason::Refused));
    // The slot is free, so it is elected again, in a new term with a higher fence.
    let old_fence = lease.fence();
    leadership.wait_for_leadership().await.expect("no refusal");
    assert_eq!(leadership.term(), 2);
    assert!(leadership.fence().unwrap() > old_fence);
}

#[tokio::test(start_paused = true)]
async fn an_outage_is_logged_once_and_nobody_leads_meanwhile() {
    let (_guard, logs) = capture_logs();
    let store = FaultyStore::default();
    store.cut_off(true);
    let leadership = start("ledger", store.clone(), options()).await;
    sleep(30 * SECOND).await;
    assert!(!leadership.is_leader());
    assert!(store.acquires() + store.watches() > 20, "retried every ~1 s");
    assert_eq!(logs.lines_with("store outage:").len(), 1, "{:?}", logs.lines_with("store"));
    store.cut_off(false);
    timeout(10 * SECOND, leadership.wait_for_leadership())
        .await
        .expect("leads once the store is back")
        .expect("no refusal");
    assert_eq!(logs.lines_with("store outage over").len(), 1);
}

/// After a store failure the loop retries with the electors' backoff (from 50 ms,
/// doubling up to `retry_interval`), not once per `retry_interval`: a role whose store
/// was out for 1.5 s leads again soon after the store answers, not a retry interval later.
#[tokio::test(start_paused = true)]
async fn after_an_outage_the_role_leads_again_soon_after_the_store_answers() {
    let store = FaultyStore::default();
    let options = LeadershipOptions::new().lease_time(SECOND).retry_interval(5 * SECOND);
    let leadership = start("quick", store.clone(), options).await;
    leadership.wait_for_leadership().await.expect("no refusal");
    store.cut_off(true);
    sleep(Duration::from_millis(1_500)).await;
    assert!(!leadership.is_leader(), "the term ended with its lease");
    store.cut_off(false);
    let answered = Instant::now();
    timeout(30 * SECOND, leadership.wait_for_leadership())
        .await
        .expect("leads again")
        .expect("no refusal");
    let after = answered.elapsed();
    assert!(after < SECOND, "led again {after:?} after the store answered");
    assert_eq!(leadership.term(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_loop_is_logged_and_survived() {
    let (_guard, logs) = capture_logs();
    let store = FaultyStore::default();
    store.panic_on_acquires(1);
    let leadership = start("sturdy", store.clone(), options()).await;
    timeout(10 * SECOND, leadership.wait_for_leadership())
        .await
        .expect("leads after the fault")
        .expect("no refusal");
    assert_eq!(logs.lines_with("leadership loop faulted").len(), 1);
    assert!(!logs.lines_with("injected panic in acquire").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_group_keeps_n_active_members_and_standbys_take_over() {
    let store = MemoryStore::new();
    let mut instances = Vec::new();
    for _ in 0..4 {
        instances.push(start("workers", store.clone(), options().max_leaders(2)).await);
    }
    let active = settle(&instances, 2).await;
    instances[active[0]].stop().await.expect("stopped");
    let live: Vec<Leadership> = instances
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != active[0])
        .map(|(_, l)| l.clone())
        .collect();
    let now_active = settle(&live, 2).await;
    assert_eq!(now_active.len(), 2, "a standby took the freed slot");
    let fences: Vec<u64> = live.iter().filter_map(Leadership::fence).collect();
    assert_eq!(fences.len(), 2);
    assert_ne!(fences[0], fences[1]);
}

#[tokio::test(start_paused = true)]
async fn subscribers_see_every_change_with_term_and_fence() {
    let store = MemoryStore::new();
    let leadership = start("watched", store, options()).await;
    let mut changes = leadership.subscribe();
    let elected = changes.wait_for(|s| s.is_leader).await.unwrap().clone();
    assert_eq!((elected.term, elected.fence, elected.coordinated), (1, Some(1), true));
    leadership.resign().await;
    let stepped_down = changes.wait_for(|s| !s.is_leader).await.unwrap().clone();
    assert_eq!((stepped_down.term, stepped_down.fence), (1, None));
    let again = changes.wait_for(|s| s.is_leader).await.unwrap().clone();
    assert_eq!((again.term, again.fence), (2, Some(2)));
}

#[tokio::test(start_paused = true)]
async fn an_uncoordinated_store_follows_by_default_or_leads_if_asked() {
    let (_guard, logs) = capture_logs();
    let follower = start("local", DisabledStore, options()).await;
    let leader =
        start("local-lead", DisabledStore, options().when_uncoordinated(WhenUncoordinated::Lead))
            .await;
    sleep(60 * SECOND).await; // four leases: an uncoordinated term never runs out
    assert!(!follower.is_coordinated() && !follower.is_leader());
    assert!(!leader.is_coordinated() && leader.is_leader());
    assert!(!leader.leadership_token().is_cancelled());
    assert_eq!(logs.lines_with("does not coordinate").len(), 2, "once per role");
    assert!(!follower.describe().coordinated);
}

/// A grant whose reply was lost, and a leadership stopped before its retry: the slot the
/// lost grant may hold is given back, not left held by nobody for a lease.
#[tokio::test(start_paused = true)]
async fn a_lost_grant_is_given_back_when_the_leadership_stops_before_its_retry() {
    let store = FaultyStore::default();
    store.lose_acquire_replies(1);
    let leadership = start("stopped-early", store.clone(), options()).await;
    eventually(SECOND, "the first attempt", || async { store.acquires() == 1 }).await;
    leadership.stop().await.expect("stopped");
    assert_eq!(store.acquires(), 1, "stopped before the retry");
    eventually(5 * SECOND, "the lost grant is given back", || async {
        store.state("leader:stopped-early").await.unwrap().leaders.is_empty()
    })
    .await;
}

/// A grant whose reply was lost is not left to expire: the retry, with the same token, gets
/// that very grant after the first pause of the backoff (not a lease later, as a new token
/// would).
#[tokio::test(start_paused = true)]
async fn a_lost_grant_reply_is_recovered_by_the_retry_not_by_expiry() {
    let store = FaultyStore::default();
    store.lose_acquire_replies(1);
    let started = Instant::now();
    let leadership = start("lost-reply", store.clone(), options()).await;
    timeout(5 * SECOND, leadership.wait_for_leadership())
        .await
        .expect("elected by the retry")
        .expect("no refusal");
    assert!(started.elapsed() <= SECOND + Duration::from_millis(250), "{:?}", started.elapsed());
    assert_eq!(store.acquires(), 2, "the lost grant and the retry that found it");
    let state = store.state("leader:lost-reply").await.unwrap();
    assert_eq!(state.leaders.len(), 1, "one slot: the retry did not take a second one");
    assert_eq!(Some(state.leaders[0].fence), leadership.fence());
    leadership.stop().await.expect("stopped");
}

/// A process paused past its lease (here: the runtime's only thread blocked, so no timer
/// fires) must see the loss on its first check after waking, before acting.
#[tokio::test(flavor = "current_thread")]
async fn a_leader_paused_past_its_lease_sees_the_loss_on_its_first_check() {
    let options = options()
        .lease_time(Duration::from_millis(300))
        .renew_interval(Duration::from_millis(100))
        .retry_interval(Duration::from_millis(100));
    let leadership = start("paused", MemoryStore::new(), options).await;
    let token =
        timeout(5 * SECOND, leadership.wait_for_leadership()).await.unwrap().expect("no refusal");
    let lease = leadership.lease().expect("leading");
    assert!(leadership.is_leader() && !lease.is_lost());

    std::thread::sleep(Duration::from_millis(400)); // the pause: nothing else runs

    assert!(!leadership.is_leader(), "the local deadline passed during the pause");
    assert!(lease.is_lost());
    assert_eq!(lease.loss_reason(), Some(leader::LossReason::Expired));
    assert!(token.is_cancelled(), "the check fired the loss signal too");
    leadership.stop().await.expect("stopped");
}

#[tokio::test]
async fn describe_reports_the_composition_even_with_the_store_cut_off() {
    let store = FaultyStore::default();
    store.cut_off(true);
    let options =
        options().keys(leader::KeyOptions::new().namespace("billing:")).holder_id("node-1");
    let leadership = start("scheduler", store.clone(), options).await;
    let description = leadership.describe();
    assert_eq!(description.key, "billing:leader:scheduler");
    assert_eq!((description.store, description.max_leaders), ("faulty", 1));
    assert_eq!(
        description.to_string(),
        "role `scheduler` on faulty store key `billing:leader:scheduler` (one of 1 slots as `node-1`): \
         lease time 15s, renew every 5s, retry every 1s + up to 250ms"
    );
    leadership.stop().await.expect("stopped");
}

#[tokio::test]
async fn invalid_options_fail_before_anything_starts() {
    let store = FaultyStore::default();
    let err = Leadership::start(
        "x",
        store.clone(),
        options().lease_time(10 * SECOND).renew_interval(6 * SECOND),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().starts_with("invalid `renew_interval` 6s"), "{err}");
    assert!(Leadership::start("two words", store.clone(), options()).await.is_err());
    assert_eq!(store.acquires() + store.watches(), 0, "nothing touched the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_one_instance_leads_and_stop_hands_over_at_once() {
    let server = RedisServer::start();
    let options = options().lease_time(10 * SECOND).retry_interval(Duration::from_millis(200));
    let mut instances = Vec::new();
    for _ in 0..3 {
        let store = RedisStore::connect(&server.url()).await.unwrap(); // a process each, in effect
        instances.push(start("redis-role", store, options.clone()).await);
    }
    eventually(10 * SECOND, "one leader", || async { leaders(&instances).await.len() == 1 }).await;
    sleep(Duration::from_millis(500)).await;
    let first = leaders(&instances).await;
    assert_eq!(first.len(), 1);
    let stopped_at = std::time::Instant::now();
    instances[first[0]].stop().await.expect("stopped");
    eventually(5 * SECOND, "another leader", || async {
        let now = leaders(&instances).await;
        now.len() == 1 && now != first
    })
    .await;
    assert!(stopped_at.elapsed() < 5 * SECOND, "handed over by release, not by the 10 s expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_probe_turns_unhealthy_when_renewals_stop() {
    let store = FaultyStore::default();
    // A lease of seconds, renewed every second: healthy through a busy machine's stalls.
    let options = options()
        .lease_time(3 * SECOND)
        .renew_interval(SECOND)
        .retry_interval(Duration::from_millis(50));
    let leadership = start("probed", store.clone(), options).await;
    timeout(5 * SECOND, leadership.wait_for_leadership()).await.unwrap().expect("no refusal");
    sleep(Duration::from_millis(1_500)).await;
    assert!(leadership.health().is_healthy(), "renewing: {:?}", leadership.health());
    // The next renewal wedges the loop's thread for more than a lease: the loop still
    // believes it leads, the probe says it is wedged, and `is_leader()` checks the deadline
    // itself. Watch from a plain thread, since a wedged worker can hold up tokio's timers.
    store.block_next_renewal(Duration::from_secs(5));
    let probe = leadership.clone();
    let seen = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..400 {
            seen.push((probe.is_leader(), probe.health()));
            std::thread::sleep(Duration::from_millis(20));
        }
        seen
    })
    .join()
    .unwrap();
    let wedged = seen.iter().find_map(|(leading, health)| match health {
        leader::LeadershipHealth::Wedged { since_confirmed, lease_time } => {
            Some((*leading, *since_confirmed > *lease_time))
        }
        _ => None,
    });
    assert_eq!(wedged, Some((false, true)), "never reported wedged past the lease");
    // Once the thread is free, the loop finds the lease gone and steps down or is elected
    // anew: healthy again.
    assert!(seen.last().unwrap().1.is_healthy(), "{:?}", seen.last());
    leadership.stop().await.expect("stopped");
}

#[tokio::test(start_paused = true)]
async fn standbys_do_not_poll_while_the_leader_renews() {
    let shared = MemoryStore::new();
    let leader_store = FaultyStore::over(shared.clone());
    let standby_store = FaultyStore::over(shared.clone());
    let options =
        options().lease_time(15 * SECOND).renew_interval(5 * SECOND).retry_interval(SECOND);
    let leader = start("quiet", leader_store, options.clone()).await;
    leader.wait_for_leadership().await.expect("no refusal");
    let standby = start("quiet", standby_store.clone(), options).await;
    sleep(SECOND).await;
    let before = standby_store.acquires();
    sleep(60 * SECOND).await;
    let attempts = standby_store.acquires() - before;
    // It wakes when the slot it saw could expire (renewals move that moment on by 10 s or
    // so each time), never every 1 s retry interval.
    assert!(attempts <= 7, "{attempts} attempts in 60 s");
    assert!(!standby.is_leader());
}
