//! A term's life has one owner: the loss is decided once, whoever notices it first, and the
//! term token, `is_leader()`, `fence()`, the status watch, `health()`, the release of the
//! slot and standing again all follow that decision. Each test here reproduces a way the
//! parts used to disagree after a stall or a slow reply.

mod support;

use std::time::Duration;

use leader::{
    Delivery, LeaderChannel, LeaderChannelOptions, LeaderElectionOptions, LeaderElector,
    LeaderGroupElectionOptions, LeaderGroupElector, LeaderRunResult, LeadershipOptions, LeaseStore,
    LossReason, MemoryStore,
};
use support::{Faulty, FaultyStore, start};
use tokio::time::{Instant, sleep, timeout};

const SECOND: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// Short timings for the tests that stall a real thread.
fn short() -> LeadershipOptions {
    LeadershipOptions::new()
        .lease_time(SECOND)
        .renew_interval(SECOND / 3)
        .retry_interval(100 * MS)
        .retry_jitter(Duration::ZERO)
}

/// A renewal is in flight when the thread stalls for 800 ms of a 1 s lease. On
/// waking, the application's `is_leader()` runs before the loop reads the (late) renewal
/// reply, and decides the loss. The loop must follow that decision: step down, release and
/// stand again, so the role has a leader again within a lease plus a retry.
#[tokio::test(flavor = "current_thread")]
async fn a_loss_decided_by_is_leader_during_a_stalled_renewal_ends_the_term_everywhere() {
    let shared = MemoryStore::new();
    let a_store = FaultyStore::over(shared.clone());
    let a = start("stalled", a_store.clone(), short().holder_id("a")).await;
    timeout(5 * SECOND, a.wait_for_leadership()).await.expect("a leads").expect("no refusal");
    let b = start("stalled", shared.clone(), short().holder_id("b")).await;
    let mut a_status = a.subscribe();

    a_store.delay_renewal_reply(20 * MS);
    timeout(2 * SECOND, a_store.renewal_started()).await.expect("a renewal in flight");
    std::thread::sleep(800 * MS); // the stall: nothing else runs on this thread
    assert!(!a.is_leader(), "the local deadline passed during the stall");
    assert!(a.fence().is_none(), "no fence for an ended term");
    assert!(a.leadership_token().is_cancelled());
    assert!(!a_status.borrow_and_update().is_leader, "the watch follows the decision at once");

    let stalled_at = Instant::now();
    let lead = timeout(5 * SECOND, async {
        loop {
            if let Some(fence) = a.fence().or(b.fence()) {
                return fence;
            }
            sleep(5 * MS).await;
        }
    })
    .await
    .expect("the role has a leader again (before the fix: a kept renewing, nobody led)");
    // A lease plus a retry, with room for a busy machine.
    assert!(stalled_at.elapsed() <= 3 * SECOND, "{:?}", stalled_at.elapsed());
    let state = shared.state("leader:stalled").await.unwrap();
    assert_eq!(state.leaders.len(), 1, "{state:?}");
    assert_eq!(state.leaders[0].fence, lead, "the slot is the leader's, not the old term's");
    assert!(a.health().is_healthy() && b.health().is_healthy());
    a.stop().await.expect("stopped");
    b.stop().await.expect("stopped");
}

/// A renewal cut off by the local deadline may still have extended the slot at the
/// store. The loop releases the old token before standing again, so the role does not wait
/// a lease for a slot held by nobody.
#[tokio::test(start_paused = true)]
async fn a_term_lost_by_expiry_releases_its_slot_before_standing_again() {
    let store = FaultyStore::default();
    let options = LeadershipOptions::new().lease_time(15 * SECOND).renew_interval(5 * SECOND);
    let leadership = start("expiring", store.clone(), options).await;
    let first = leadership.wait_for_leadership().await.expect("no refusal");
    let first_lease = leadership.lease().unwrap();
    // The renewal at 5 s extends the slot to 20 s at the store; its reply comes at 16 s,
    // after the local deadline (15 s).
    store.delay_renewal_reply(11 * SECOND);
    first.cancelled().await;
    let lost_at = Instant::now();
    assert_eq!(first_lease.loss_reason(), Some(LossReason::Expired));
    timeout(10 * SECOND, leadership.wait_for_leadership()).await.unwrap().expect("no refusal");
    assert!(
        lost_at.elapsed() < SECOND,
        "elected again {:?} after the loss (before the fix: when the old slot expired, 5 s)",
        lost_at.elapsed()
    );
    assert_eq!(leadership.term(), 2);
    assert_eq!(store.releases(), 1, "the old token was released");
}

/// Item 2 with several slots: without the release, one process held two of the N slots.
#[tokio::test(start_paused = true)]
async fn a_group_member_never_holds_two_slots_after_a_loss_by_expiry() {
    let store = FaultyStore::default();
    let options =
        LeadershipOptions::new().lease_time(15 * SECOND).renew_interval(5 * SECOND).max_leaders(2);
    let leadership = start("pool", store.clone(), options).await;
    let first = leadership.wait_for_leadership().await.expect("no refusal");
    store.delay_renewal_reply(11 * SECOND);
    first.cancelled().await;
    timeout(10 * SECOND, leadership.wait_for_leadership()).await.unwrap().expect("no refusal");
    let state = store.state("leader:pool").await.unwrap();
    assert_eq!(state.leaders.len(), 1, "one instance, one slot: {state:?}");
    assert_eq!(Some(state.leaders[0].fence), leadership.fence());
}

/// The first renewal is scheduled from the local deadline (when two thirds of the
/// lease remain, or at once if less is left), not from when the grant's reply arrived.
#[tokio::test(start_paused = true)]
async fn a_slow_grant_is_renewed_from_its_deadline_not_from_its_reply() {
    let store = FaultyStore::default();
    // Granted at 0 s, reply at 9 s: 3 s of the 12 s lease are left on arrival.
    store.delay_acquire_reply(9 * SECOND);
    let began = Instant::now();
    let options = LeadershipOptions::new().lease_time(12 * SECOND).renew_interval(4 * SECOND);
    let leadership = start("slow-grant", store.clone(), options).await;
    let term = leadership.wait_for_leadership().await.expect("no refusal");
    sleep(11 * SECOND).await;
    assert!(!term.is_cancelled(), "the term lapsed without a renewal (before the fix)");
    let offsets: Vec<Duration> = store.renewal_times().iter().map(|t| *t - began).collect();
    // 9 s: at once, since less than 8 s (two thirds) remained; then whenever 8 s remain of
    // the renewed leases (9 + 12 - 8 = 13, then 17).
    assert_eq!(offsets, [9, 13, 17].map(Duration::from_secs).to_vec());
    leadership.stop().await.expect("stopped");
}

/// Item 3, steady state: renewals follow the deadline, at `renew_interval` after each send.
#[tokio::test(start_paused = true)]
async fn renewals_keep_the_cadence_from_each_send() {
    let store = FaultyStore::default();
    let began = Instant::now();
    let options = LeadershipOptions::new().lease_time(12 * SECOND).renew_interval(4 * SECOND);
    let leadership = start("cadence", store.clone(), options).await;
    leadership.wait_for_leadership().await.expect("no refusal");
    sleep(2 * SECOND).await;
    store.delay_renewal_reply(3 * SECOND); // a slow reply does not shift the schedule
    sleep(15 * SECOND).await;
    let offsets: Vec<Duration> = store.renewal_times().iter().map(|t| *t - began).collect();
    assert_eq!(offsets, [4, 8, 12, 16].map(Duration::from_secs).to_vec());
    leadership.stop().await.expect("stopped");
}

/// Item 5, per call: a grant whose reply arrives after its deadline never reaches the body;
/// the slot is released and the call goes on as a lost attempt.
#[tokio::test(start_paused = true)]
async fn run_if_leader_never_runs_the_body_under_an_expired_grant() {
    let store = FaultyStore::default();
    store.delay_acquire_reply(11 * SECOND);
    let elector =
        LeaderElector::new(store.clone(), LeaderElectionOptions::new().lease_time(10 * SECOND))
            .unwrap();
    let result = elector.run_if_leader("late", |_| async { "ran" }).await.unwrap();
    assert_eq!(result, LeaderRunResult::Skipped, "one attempt, granted too late");
    assert_eq!(store.releases(), 1, "the late grant was given back");

    // With time left to wait, the next attempt wins a live slot.
    store.delay_acquire_reply(11 * SECOND);
    let group = LeaderGroupElector::new(
        store.clone(),
        LeaderGroupElectionOptions::new(2).lease_time(10 * SECOND).wait_time(30 * SECOND),
    )
    .unwrap();
    let seen = group
        .run_if_leader("late-group", |lease| async move { (lease.is_lost(), lease.remaining()) })
        .await
        .unwrap();
    // A whole lease left, on the local clock: 0.1% less (for a clock slower than the store's).
    assert_eq!(seen, LeaderRunResult::Elected((false, 10 * SECOND - 10 * SECOND / 1000)));
    let state = store.state("leader:late-group").await.unwrap();
    assert!(state.leaders.is_empty(), "both grants given back: {state:?}");
}

/// Item 5, long-lived: a term whose grant arrived after its deadline is never published.
#[tokio::test(start_paused = true)]
async fn wait_for_leadership_never_returns_an_expired_term() {
    let store = FaultyStore::default();
    store.delay_acquire_reply(16 * SECOND); // lease 15 s
    let leadership = start("late", store.clone(), LeadershipOptions::new()).await;
    let mut changes = leadership.subscribe();
    let term = leadership.wait_for_leadership().await.expect("no refusal");
    assert!(!term.is_cancelled());
    assert!(leadership.is_leader(), "handed a term already over (before the fix)");
    assert!(leadership.lease().unwrap().remaining() > 14 * SECOND);
    assert_eq!(changes.borrow_and_update().term, 1, "the late grant was not counted as a term");
    leadership.stop().await.expect("stopped");
}

/// After a pause, the term token is cancelled by the loop, which may run after the
/// application's own timer. `fence()` checks the deadline itself: the one gate to use.
#[tokio::test(flavor = "current_thread")]
async fn after_a_pause_fence_is_none_before_the_loop_has_run() {
    let leadership =
        start("gated", MemoryStore::new(), short().lease_time(300 * MS).renew_interval(100 * MS))
            .await;
    let term =
        timeout(5 * SECOND, leadership.wait_for_leadership()).await.unwrap().expect("no refusal");
    let fence = leadership.fence().expect("leading");
    let lease = leadership.lease().unwrap();
    assert_eq!(lease.live_fence(), Some(fence));

    std::thread::sleep(400 * MS); // the pause

    assert_eq!(lease.live_fence(), None);
    assert_eq!(leadership.fence(), None, "a fence for a term past its deadline (before the fix)");
    assert!(term.is_cancelled(), "the check decided the loss, so the token follows");
    assert!(!leadership.status().is_leader, "and so does the status");
    leadership.stop().await.expect("stopped");
}

/// A channel write after a pause is a follower's, even before the loop has run.
#[tokio::test(flavor = "current_thread")]
async fn a_channel_write_after_a_pause_is_dropped_as_a_followers() {
    let leadership =
        start("channel", MemoryStore::new(), short().lease_time(300 * MS).renew_interval(100 * MS))
            .await;
    let channel = LeaderChannel::new("events", &leadership, LeaderChannelOptions::new()).unwrap();
    timeout(5 * SECOND, leadership.wait_for_leadership()).await.unwrap().expect("no refusal");
    assert_eq!(channel.writer().send(1).await, Delivery::Queued);

    std::thread::sleep(400 * MS);

    let delivery = channel.writer().send(2).await;
    assert_eq!(delivery, Delivery::Dropped(leader::DropReason::Follower));
    assert_eq!(channel.reader().try_recv(), Some(1));
    assert_eq!(channel.reader().try_recv(), None);
    leadership.stop().await.expect("stopped");
}

/// Formatting a lease reads it; it decides nothing.
#[tokio::test(flavor = "current_thread")]
async fn debug_formatting_a_lease_decides_no_loss() {
    let leadership =
        start("debug", MemoryStore::new(), short().lease_time(300 * MS).renew_interval(100 * MS))
            .await;
    timeout(5 * SECOND, leadership.wait_for_leadership()).await.unwrap().expect("no refusal");
    let lease = leadership.lease().unwrap();
    std::thread::sleep(400 * MS);
    let shown = format!("{lease:?}");
    assert!(shown.contains("lost: true"), "{shown}");
    assert_eq!(lease.loss_reason(), None, "Debug decided the loss (before the fix)");
    assert!(lease.is_lost());
    assert_eq!(lease.loss_reason(), Some(LossReason::Expired));
    leadership.stop().await.expect("stopped");
}

/// A dropped `run_if_leader` future releases in the background, and a program
/// shutting down can wait for that release.
#[tokio::test(start_paused = true)]
async fn a_shutting_down_program_can_wait_for_background_releases() {
    let store = FaultyStore::default();
    store.delay_release_reply(2 * SECOND);
    let elector = LeaderElector::new(store.clone(), LeaderElectionOptions::new()).unwrap();
    let running = elector.run_if_leader("dropped", |_| std::future::pending::<()>());
    assert!(timeout(SECOND, running).await.is_err(), "the body never ends; dropped here");
    let waited_from = Instant::now();
    timeout(10 * SECOND, leader::wait_for_releases()).await.expect("releases finish");
    assert!(waited_from.elapsed() >= 2 * SECOND, "returned before the release's reply");
    assert_eq!(store.releases(), 1);
    assert!(store.state("leader:dropped").await.unwrap().leaders.is_empty());
}
