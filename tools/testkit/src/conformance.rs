//! The store conformance suite: the rules of `LeaseStore`, written once, run against every
//! store, this workspace's and a third party's alike. `conformance_suite!(#[test attribute]
//! make)` expands to one test per rule; `make` is a future giving the store and whatever
//! must live as long as it (a server, say):
//!
//! ```no_run
//! // In a test file (tests/conformance.rs) of the crate that makes the store:
//! use leader_testkit::conformance_suite;
//!
//! conformance_suite!(
//!     #[tokio::test]
//!     async { (leader_core::MemoryStore::new(), ()) } // your store, and what it needs kept
//! );
//! # fn main() {}
//! ```
//!
//! or [`run_all`] runs every rule one after another on one store.
//!
//! A slot that must stay live while a rule looks at it is granted for a minute; a slot whose
//! expiry a rule waits for lives the suite's lease (a second), so a real server on a busy
//! machine keeps every margin, and paused time makes it exact. A store whose clock is
//! coarse (etcd's whole-second TTLs, whose expired keys go within half a second) runs the
//! suite with a longer lease and a tick of slack after each expiry:
//! `conformance_suite!(#[test attribute] make, lease = …, tick = …)`.

use std::sync::OnceLock;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use async_trait::async_trait;
use leader_core::store::author::{HeldSlot, Layered, RENEW_BATCH_LEN, StoreLayer};
use leader_core::store::{
    AcquireOutcome, AcquireRequest, Grant, GroupSnapshot, ReleaseOutcome, RenewOutcome, Revocation,
    SlotRef,
};
use leader_core::{
    Error, KeyOptions, LeaderGroupElectionOptions, LeaderGroupElector, LeaderGroupState,
    LeaseStore, LeaseToken,
};
use tokio::time::{sleep, timeout};

/// The suite's lease and its tick: set once per test binary (by the macro), read by every rule.
static TIMING: OnceLock<(Duration, Duration)> = OnceLock::new();

/// Runs the suite with `lease` and `tick` instead of one second and none; every test of one
/// binary must ask the same (call it before [`run_all`] for a coarse clock).
pub fn set_timing(lease: Duration, tick: Duration) {
    let set = *TIMING.get_or_init(|| (lease, tick));
    assert_eq!(
        set,
        (lease, tick),
        "one timing (lease, tick) per test binary: this one was set first; give a suite of \
         another timing a test file of its own"
    );
}

/// The default lease and tick.
const DEFAULT_TIMING: (Duration, Duration) = (Duration::from_secs(1), Duration::ZERO);

/// The lease of a slot whose expiry a rule waits for.
fn lease() -> Duration {
    TIMING.get_or_init(|| DEFAULT_TIMING).0
}

/// How long after its expiry a slot may still be seen: the store's clock's coarseness.
fn tick() -> Duration {
    TIMING.get_or_init(|| DEFAULT_TIMING).1
}

/// The lease of a slot that must stay live while a rule looks at it.
const LIVE: Duration = Duration::from_secs(60);

/// Long enough for a slot granted now to have expired.
fn past_expiry(of: Duration) -> Duration {
    of + Duration::from_millis(50) + tick()
}

/// Calls `$callback!(args…; rule, rule, …)` with every rule of the suite: the one list that
/// both ways of running the suite use.
#[macro_export]
macro_rules! with_every_rule {
    ($($callback:ident)::+ ! ($($args:tt)*)) => {
        $($callback)::+! { $($args)*;
            grants_up_to_max_leaders_then_reports_full,
            acquire_is_idempotent_for_the_same_token,
            fences_strictly_increase,
            max_leaders_mismatch_names_both_values,
            renew_extends_only_a_held_slot,
            a_batch_renewal_answers_each_slot_as_a_renewal_would,
            release_is_token_checked,
            release_and_renew_never_revive_an_expired_slot,
            a_revocation_ends_renewals_and_hands_the_slot_on_only_at_its_expiry,
            min_lease_time_keeps_a_released_slot,
            expiry_frees_a_slot,
            release_wakes_watchers,
            shortening_renewal_wakes_watchers,
            state_reports_live_slots,
            grants_releases_and_shortening_renewals_wake_change_watches,
            an_observer_sees_grants_releases_and_expiries,
            an_observer_of_an_idle_group_reads_nothing,
            a_guard_holds_its_slot_until_released_and_renews_by_hand,
            a_guard_renews_in_the_background_until_refused_and_its_drop_then_does_nothing,
            a_guard_without_renewal_is_lost_at_its_deadline,
            a_dropped_guard_gives_its_slot_back_after_its_minimum_lease,
            a_guard_dropped_during_a_renewal_gives_its_slot_back,
        }
    };
}

/// Every rule, one after another, each on its own key `{prefix}-{rule}`: for stores that are
/// costly to set up once per test (a Cluster).
pub async fn run_all<S: LeaseStore + Clone + 'static>(store: &S, prefix: &str) {
    macro_rules! each {
        ($store:expr, $prefix:expr; $($name:ident,)*) => {
            $( $name($store, &format!("{}-{}", $prefix, stringify!($name))).await; )*
        };
    }
    with_every_rule!(each!(store, prefix));
}

/// How many rules the suite has.
pub fn rule_count() -> usize {
    macro_rules! count {
        (; $($name:ident,)*) => {
            [$(stringify!($name)),*].len()
        };
    }
    with_every_rule!(count!())
}

/// One `#[test]` per rule: `conformance_suite!(#[tokio::test] make_store())`, or with
/// `, lease = …, tick = …` for a store with a coarse clock. Every attribute written before
/// `make` goes on each test (`#[tokio::test] #[serial]`, say). One test binary runs the suite
/// with one timing: a second `conformance_suite!` with another timing in the same binary
/// fails its tests (the rules read the timing from one place), so give it a file of its own.
#[macro_export]
macro_rules! conformance_suite {
    ($(#[$attr:meta])+ $make:expr) => {
        $crate::with_every_rule!($crate::conformance_suite!(@tests [$(#[$attr])+] $make, None));
    };
    ($(#[$attr:meta])+ $make:expr, lease = $lease:expr, tick = $tick:expr) => {
        $crate::with_every_rule!(
            $crate::conformance_suite!(@tests [$(#[$attr])+] $make, Some(($lease, $tick)))
        );
    };
    (@tests $attrs:tt $make:expr, $timing:expr; $($name:ident,)*) => {
        $( $crate::conformance_suite!(@test $attrs $make, $timing, $name); )*
    };
    (@test [$(#[$attr:meta])+] $make:expr, $timing:expr, $name:ident) => {
        $(#[$attr])+
        async fn $name() {
            $crate::conformance::set_timing_or_default($timing);
            let (store, _keep_alive) = $make.await;
            $crate::conformance::$name(&store, stringify!($name)).await;
        }
    };
}

/// [`set_timing`] with what a suite asked for, or the default (a one-second lease, no tick):
/// what each test of [`conformance_suite!`] calls first, so two timings in one binary fail
/// whichever order the tests run in.
#[doc(hidden)]
pub fn set_timing_or_default(timing: Option<(Duration, Duration)>) {
    let (lease, tick) = timing.unwrap_or(DEFAULT_TIMING);
    set_timing(lease, tick);
}

fn token() -> LeaseToken {
    LeaseToken::generate().expect("OS random numbers")
}

/// A request for a slot that lives the suite's lease (a rule waits for its expiry).
fn request<'a>(key: &'a str, max_leaders: u32, token: LeaseToken) -> AcquireRequest<'a> {
    request_for(key, max_leaders, token, lease())
}

/// A request for a slot that stays live while the rule looks at it.
fn live<'a>(key: &'a str, max_leaders: u32, token: LeaseToken) -> AcquireRequest<'a> {
    request_for(key, max_leaders, token, LIVE)
}

fn request_for<'a>(
    key: &'a str,
    max_leaders: u32,
    token: LeaseToken,
    lease_time: Duration,
) -> AcquireRequest<'a> {
    AcquireRequest::new(
        key,
        std::num::NonZeroU32::new(max_leaders).expect("at least one slot"),
        token,
        "conformance",
        lease_time,
    )
}

async fn granted(store: &dyn LeaseStore, request: AcquireRequest<'_>) -> Grant {
    match store.acquire(request).await.expect("acquire") {
        AcquireOutcome::Granted(grant) => grant,
        other => panic!("expected a grant for {:?}, got {other:?}", request.key),
    }
}

/// The rule: Grants up to max leaders then reports full, on `key` of `store`.
pub async fn grants_up_to_max_leaders_then_reports_full<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    for _ in 0..3 {
        granted(store, live(key, 3, token())).await;
    }
    match store.acquire(live(key, 3, token())).await.unwrap() {
        AcquireOutcome::Full { nearest_expiry } => {
            assert!(
                nearest_expiry > Duration::ZERO && nearest_expiry <= LIVE,
                "{nearest_expiry:?}"
            );
        }
        other => panic!("a fourth candidate of three slots got {other:?}"),
    }
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 3);
}

/// The rule: Acquire is idempotent for the same token, on `key` of `store`.
pub async fn acquire_is_idempotent_for_the_same_token<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let retried = token();
    let first = granted(store, live(key, 2, retried)).await;
    let second = granted(store, live(key, 2, retried)).await;
    assert_eq!((first.fence, first.acquired_at), (second.fence, second.acquired_at));
    assert_eq!(
        store.state(key).await.unwrap().leaders.len(),
        1,
        "a retry must not take a second slot"
    );
    granted(store, live(key, 2, token())).await;
    // The group is now full, but the holder's retry still gets its own grant back.
    assert_eq!(granted(store, live(key, 2, retried)).await.fence, first.fence);
}

/// The rule: Fences strictly increase, on `key` of `store`.
pub async fn fences_strictly_increase<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let mut last = 0;
    for round in 0..6 {
        let held = token();
        let grant = granted(store, request(key, 1, held)).await;
        assert!(grant.fence > last, "round {round}: fence {} after {last}", grant.fence);
        last = grant.fence;
        if round % 2 == 0 {
            store.release(key, held, Duration::ZERO).await.unwrap();
        } else {
            sleep(past_expiry(lease())).await; // let it expire instead
        }
    }
}

/// The rule: Max leaders mismatch names both values, on `key` of `store`.
pub async fn max_leaders_mismatch_names_both_values<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let held = token();
    granted(store, live(key, 3, held)).await;
    let err = store.acquire(live(key, 5, token())).await.unwrap_err();
    assert!(matches!(err, Error::MaxLeadersMismatch { requested: 5, existing: 3, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("max_leaders 5") && message.contains("max_leaders 3"), "{message}");
    // A smaller size, for which the group is already full: still the mismatch, not "full".
    let err = store.acquire(live(key, 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::MaxLeadersMismatch { requested: 1, existing: 3, .. }), "{err:?}");
    // Once the old slots are gone the group takes the new size.
    store.release(key, held, Duration::ZERO).await.unwrap();
    granted(store, live(key, 5, token())).await;
    assert_eq!(store.state(key).await.unwrap().max_leaders, Some(5));
}

/// The rule: Renew extends only a held slot, on `key` of `store`.
pub async fn renew_extends_only_a_held_slot<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let held = token();
    // Long enough that the renewal comes well within it on a busy machine.
    let base = lease().max(Duration::from_secs(2));
    granted(store, request_for(key, 1, held, base)).await;
    assert_eq!(store.renew(key, token(), base).await.unwrap(), RenewOutcome::NotHeld);
    sleep(base / 4).await;
    let longer = base * 3;
    match store.renew(key, held, longer).await.unwrap() {
        RenewOutcome::Renewed { expires_in, .. } => {
            assert!(expires_in > base && expires_in <= longer, "{expires_in:?}")
        }
        other => panic!("the holder's renewal got {other:?}"),
    }
    sleep(base + base / 2).await; // past the original lease, well within the renewed one
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1, "renewal did not hold");
}

/// The rule: A batch renewal answers each slot as a renewal would, in order, also past one
/// round trip's worth of slots, on groups named after `key` of `store`.
pub async fn a_batch_renewal_answers_each_slot_as_a_renewal_would<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let base = lease().max(Duration::from_secs(2));
    // More slots than one round trip carries, so the store's parts meet.
    let count = RENEW_BATCH_LEN + 3;
    let keys: Vec<String> = (0..count).map(|i| format!("{key}-{i}")).collect();
    let tokens: Vec<LeaseToken> = (0..count).map(|_| token()).collect();
    // Granted live, a few at a time (a store whose grants are slow still grants them all
    // well within a lease), then brought down to `base` by a first batch: a renewal may
    // shorten a slot.
    for part in keys.iter().zip(&tokens).collect::<Vec<_>>().chunks(16) {
        let grants = part.iter().map(|(key, held)| granted(store, live(key, 1, **held)));
        futures_util::future::join_all(grants).await;
    }
    let all: Vec<HeldSlot<'_>> =
        keys.iter().zip(&tokens).map(|(key, held)| HeldSlot::new(key, *held)).collect();
    for (i, answer) in store.renew_many(&all, base).await.unwrap().iter().enumerate() {
        match answer {
            RenewOutcome::Renewed { expires_in, .. } => {
                assert!(*expires_in <= base, "slot {i} shortened to {expires_in:?}")
            }
            other => panic!("slot {i}, held, got {other:?}"),
        }
    }
    // Slot 1 released, slot 2 asked under a stranger's token: neither is held.
    store.release(&keys[1], tokens[1], Duration::ZERO).await.unwrap();
    let mut slots: Vec<HeldSlot<'_>> =
        keys.iter().zip(&tokens).map(|(key, held)| HeldSlot::new(key, *held)).collect();
    slots[2] = HeldSlot::new(&keys[2], token());
    assert_eq!(store.renew_many(&[], base).await.unwrap(), Vec::new(), "an empty batch");
    sleep(base / 4).await;
    let longer = base * 3;
    let answers = store.renew_many(&slots, longer).await.unwrap();
    assert_eq!(answers.len(), count, "one answer per slot");
    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (1 | 2, RenewOutcome::NotHeld) => {}
            (1 | 2, other) => panic!("slot {i}, not held, got {other:?}"),
            (_, RenewOutcome::Renewed { expires_in, .. }) => {
                assert!(*expires_in > base && *expires_in <= longer, "slot {i}: {expires_in:?}")
            }
            (_, other) => panic!("slot {i}, held, got {other:?}"),
        }
    }
    sleep(base + base / 2).await; // past the original lease, well within the renewed one
    for i in [0, 3, count - 1] {
        assert_eq!(store.state(&keys[i]).await.unwrap().leaders.len(), 1, "slot {i} lapsed");
    }
    assert!(store.state(&keys[2]).await.unwrap().leaders.is_empty(), "a stranger renewed slot 2");

    // A batch that shortens a slot wakes its refused waiter, as `renew` does, and leaves
    // nothing that refuses the next candidate once the shortened slot has expired.
    let shortened = format!("{key}-shortened");
    let held = token();
    granted(store, live(&shortened, 1, held)).await;
    let mut watch = store.watch_releases(&shortened).await.unwrap();
    refused(store, &shortened, 1).await;
    let renewed = store.renew_many(&[HeldSlot::new(&shortened, held)], lease()).await.unwrap();
    assert!(matches!(renewed[..], [RenewOutcome::Renewed { .. }]), "{renewed:?}");
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a shorter lease");
    sleep(past_expiry(lease())).await;
    granted(store, live(&shortened, 1, token())).await;
}

/// The rule: Release is token checked, on `key` of `store`.
pub async fn release_is_token_checked<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let held = token();
    granted(store, live(key, 1, held)).await;
    assert_eq!(store.release(key, token(), Duration::ZERO).await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1, "a stranger released the slot");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert!(store.state(key).await.unwrap().leaders.is_empty());
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::NotHeld);
}

/// The rule: Release and renew never revive an expired slot, on `key` of `store`.
pub async fn release_and_renew_never_revive_an_expired_slot<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let held = token();
    granted(store, request(key, 1, held)).await;
    sleep(past_expiry(lease())).await;
    assert_eq!(store.release(key, held, lease()).await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(store.renew(key, held, lease()).await.unwrap(), RenewOutcome::NotHeld);
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "an expired slot came back");
    granted(store, request(key, 1, token())).await;
}

/// A slot ended by a caller that was not granted it (an operator's `leader release`): its
/// holder's next renewal is refused, and nobody gets the slot before the holder's deadline
/// can have passed; `Revocation::Now` frees it at once.
pub async fn a_revocation_ends_renewals_and_hands_the_slot_on_only_at_its_expiry<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let lease = lease().max(Duration::from_secs(2));
    let held = token();
    let sent_at = tokio::time::Instant::now();
    granted(store, request_for(key, 1, held, lease)).await;
    match store.revoke(key, SlotRef::Token(held), Revocation::AtExpiry).await.unwrap() {
        ReleaseOutcome::Kept { expires_in } => {
            assert!(expires_in <= lease + tick(), "{expires_in:?}")
        }
        other => panic!("a revocation at expiry got {other:?}"),
    }
    assert_eq!(store.renew(key, held, lease).await.unwrap(), RenewOutcome::NotHeld);
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::NotHeld);
    // Nobody is granted it before the holder's deadline (at most a lease after its request).
    let next = token();
    let taken = timeout(lease * 3 + tick(), async {
        loop {
            match store.acquire(live(key, 1, next)).await.unwrap() {
                AcquireOutcome::Granted(grant) => return grant,
                _ => sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("granted once the revoked slot's holder can no longer act");
    assert!(sent_at.elapsed() >= lease, "handed on {:?} after its grant", sent_at.elapsed());
    // By its fence, now: free at once.
    let freed = store.revoke(key, SlotRef::Fence(taken.fence), Revocation::Now).await.unwrap();
    assert_eq!(freed, ReleaseOutcome::Released);
    assert_eq!(store.renew(key, next, LIVE).await.unwrap(), RenewOutcome::NotHeld);
    let started = tokio::time::Instant::now();
    granted(store, live(key, 1, token())).await;
    assert!(started.elapsed() < lease, "a slot freed now waited {:?}", started.elapsed());
    let unknown = store.revoke(key, SlotRef::Fence(1), Revocation::Now).await.unwrap();
    assert_eq!(unknown, ReleaseOutcome::NotHeld);
}

/// A revoked holder's token is granted no slot of the group until the revoked slot lapses,
/// though the group has room: an acquire its holder sent before the revocation, answered
/// late, would otherwise give it a new term, and its renewals (by token) would keep the
/// revoked term's lease alive under a fence the store no longer holds. Not yet in
/// [`with_every_rule`]: the memory store keeps it; Redis, PostgreSQL and etcd do not yet.
pub async fn a_revoked_token_gets_no_new_slot_until_the_revoked_one_lapses<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let lease = lease().max(Duration::from_secs(2));
    let held = token();
    let first = granted(store, request_for(key, 2, held, lease)).await;
    let revoked = store.revoke(key, SlotRef::Token(held), Revocation::AtExpiry).await.unwrap();
    assert!(matches!(revoked, ReleaseOutcome::Kept { .. }), "{revoked:?}");
    match store.acquire(request_for(key, 2, held, lease)).await.unwrap() {
        AcquireOutcome::Full { nearest_expiry } => {
            assert!(nearest_expiry <= lease + tick(), "{nearest_expiry:?}")
        }
        AcquireOutcome::Granted(grant) => panic!(
            "the revoked token was granted fence {} after fence {} was revoked",
            grant.fence, first.fence
        ),
        other => panic!("an acquire answered {other:?}"),
    }
    assert_eq!(store.renew(key, held, lease).await.unwrap(), RenewOutcome::NotHeld);
    // Another candidate takes the free slot at once.
    granted(store, request_for(key, 2, token(), lease)).await;
    sleep(past_expiry(lease)).await;
    granted(store, request_for(key, 2, held, lease)).await;
}

/// The rule: Min lease time keeps a released slot, on `key` of `store`.
pub async fn min_lease_time_keeps_a_released_slot<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let held = token();
    granted(store, live(key, 1, held)).await;
    // Long enough that the release and the next attempt come well within it.
    let min_lease = lease().max(Duration::from_secs(2)) / 2;
    match store.release(key, held, min_lease).await.unwrap() {
        ReleaseOutcome::Kept { expires_in } => assert!(expires_in <= min_lease, "{expires_in:?}"),
        other => panic!("release within the minimum lease got {other:?}"),
    }
    match store.acquire(request(key, 1, token())).await.unwrap() {
        AcquireOutcome::Full { nearest_expiry } => assert!(nearest_expiry <= min_lease),
        other => panic!("the kept slot was free: {other:?}"),
    }
    sleep(past_expiry(min_lease)).await;
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "kept past the minimum lease");
    granted(store, request(key, 1, token())).await;
}

/// The rule: Expiry frees a slot, on `key` of `store`.
pub async fn expiry_frees_a_slot<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    // Long enough that the refusal comes well within it.
    let expiring = lease().max(Duration::from_secs(2));
    granted(store, request_for(key, 1, token(), expiring)).await;
    assert!(matches!(
        store.acquire(request(key, 1, token())).await.unwrap(),
        AcquireOutcome::Full { .. }
    ));
    sleep(past_expiry(expiring)).await;
    granted(store, request(key, 1, token())).await;
}

/// The rule: Release wakes watchers, on `key` of `store`.
pub async fn release_wakes_watchers<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let (first, second) = (token(), token());
    granted(store, live(key, 2, first)).await;
    granted(store, live(key, 2, second)).await;
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(store.watch_releases(key).await.unwrap());
    }
    // Candidates wait only after a refusal: a store may leave the releases nobody can be
    // waiting for unpublished.
    refused(store, key, 2).await;
    store.release(key, first, Duration::ZERO).await.unwrap();
    for watch in &mut watches {
        timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a release");
    }
    // A release kept for the minimum lease shortens the slot, which also wakes waiters.
    granted(store, live(key, 2, token())).await;
    refused(store, key, 2).await;
    store.release(key, second, lease() * 2).await.unwrap();
    timeout(Duration::from_secs(5), watches[0].woken()).await.expect("woken by a kept release");
}

/// The rule: Shortening renewal wakes watchers, on `key` of `store`.
pub async fn shortening_renewal_wakes_watchers<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let held = token();
    granted(store, live(key, 1, held)).await;
    let mut watch = store.watch_releases(key).await.unwrap();
    refused(store, key, 1).await;
    // The refused candidate waits for the nearest expiry it was told; a renewal with a
    // shorter lease brings it forward, so the candidate must look again.
    let renewed = store.renew(key, held, lease() / 10).await.unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed { .. }), "{renewed:?}");
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a shorter lease");
}

/// An attempt on group `key` (of `max_leaders`) by a new candidate, which must be refused.
async fn refused(store: &dyn LeaseStore, key: &str, max_leaders: u32) {
    let outcome = store.acquire(live(key, max_leaders, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Full { .. }), "not refused: {outcome:?}");
}

/// The rule: State reports live slots, on `key` of `store`.
pub async fn state_reports_live_slots<S: LeaseStore + Clone + 'static>(store: &S, key: &str) {
    let empty = store.state(key).await.unwrap();
    assert_eq!((empty.max_leaders, empty.leaders.len()), (None, 0));
    for holder in ["a", "b"] {
        let mut request = live(key, 2, token());
        request.holder = holder;
        granted(store, request).await;
    }
    let state = store.state(key).await.unwrap();
    assert_eq!(state.max_leaders, Some(2));
    let holders: Vec<&str> = state.leaders.iter().map(|slot| slot.holder.as_str()).collect();
    assert_eq!(holders, ["a", "b"]);
    assert!(state.leaders[0].fence < state.leaders[1].fence);
    assert!(
        state
            .leaders
            .iter()
            .all(|slot| slot.expires_in <= LIVE && slot.expires_in > Duration::ZERO)
    );
}

/// The rule: Grants releases and shortening renewals wake change watches, on `key` of `store`.
pub async fn grants_releases_and_shortening_renewals_wake_change_watches<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let mut watch = store.watch_changes(key).await.unwrap();
    let (held, other) = (token(), token());
    granted(store, live(key, 2, held)).await;
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a grant");
    granted(store, live(key, 2, other)).await;
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a second grant");
    store.release(key, other, Duration::ZERO).await.unwrap();
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a release");
    let renewed = store.renew(key, held, lease() / 10).await.unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed { .. }), "{renewed:?}");
    timeout(Duration::from_secs(5), watch.woken()).await.expect("woken by a shorter lease");
}

/// An elector over `store` whose every name is the store key `key`, for observers.
fn elector_on<S: LeaseStore + Clone + 'static>(store: &S, key: &str) -> LeaderGroupElector {
    let options = LeaderGroupElectionOptions::new(2).keys(KeyOptions::new().exact_key(key));
    LeaderGroupElector::new(store.clone(), options).unwrap()
}

/// The observer's next change, within 5 s.
async fn next_change(observer: &mut leader_core::GroupObserver) -> LeaderGroupState {
    timeout(Duration::from_secs(5), observer.changed()).await.expect("a change").unwrap()
}

fn holders(state: &LeaderGroupState) -> Vec<(&str, u64)> {
    state.leaders.iter().map(|slot| (slot.holder.as_str(), slot.fence)).collect()
}

/// The rule: An observer sees grants releases and expiries, on `key` of `store`.
pub async fn an_observer_sees_grants_releases_and_expiries<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let mut observer = elector_on(store, key).observe("observed").await.unwrap();
    let before = observer.current();
    assert!(before.is_empty() && before.max_leaders.is_none(), "an unknown group: {before:?}");
    let (first, second) = (token(), token());
    let mut grant = live(key, 2, first);
    grant.holder = "10.0.0.1:80";
    let fence = granted(store, grant).await.fence;
    let state = next_change(&mut observer).await;
    assert_eq!(holders(&state), [("10.0.0.1:80", fence)], "{state:?}");
    assert_eq!(holders(&observer.current()), [("10.0.0.1:80", fence)]);
    // A grant taken with a long lease and renewed shorter: the observer sees it expire at
    // the shorter time, long before the lease it was granted with.
    let mut long = live(key, 2, second);
    long.holder = "10.0.0.2:80";
    let later = granted(store, long).await.fence;
    let state = next_change(&mut observer).await;
    assert_eq!(holders(&state), [("10.0.0.1:80", fence), ("10.0.0.2:80", later)]);
    store.release(key, first, Duration::ZERO).await.unwrap();
    let state = next_change(&mut observer).await;
    assert_eq!(holders(&state), [("10.0.0.2:80", later)], "after the release");
    store.renew(key, second, lease()).await.unwrap();
    let renewed_at = tokio::time::Instant::now();
    let state = next_change(&mut observer).await;
    assert!(state.is_empty(), "the holder that stopped renewing expired: {state:?}");
    assert!(renewed_at.elapsed() >= lease() - Duration::from_millis(5), "seen before it expired");
}

/// A layer that counts the state reads, renewals and releases made through it, and can hold
/// each renewal's reply back (the renewal reached the store; its answer is late).
#[derive(Debug, Clone, Default)]
struct Counts {
    reads: Arc<AtomicUsize>,
    releases: Arc<AtomicUsize>,
    renewals: Arc<AtomicUsize>,
    renewal_reply_delay: Duration,
}

/// `inner`, counted.
type Counting<S> = Layered<Counts, S>;

fn counting<S>(inner: S) -> Counting<S> {
    Layered::new(Counts::default(), inner)
}

#[async_trait]
impl StoreLayer for Counts {
    async fn renew(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        let outcome = inner.renew(key, token, lease_time).await;
        self.renewals.fetch_add(1, SeqCst);
        sleep(self.renewal_reply_delay).await;
        outcome
    }

    async fn release(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        self.releases.fetch_add(1, SeqCst);
        inner.release(key, token, min_lease_time).await
    }

    async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
        self.reads.fetch_add(1, SeqCst);
        inner.state(key).await
    }
}

/// The rule: An observer of an idle group reads nothing, on `key` of `store`.
pub async fn an_observer_of_an_idle_group_reads_nothing<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let counting = counting(store.clone());
    let elector = elector_on(&counting, key);
    let mut observers = Vec::new();
    for _ in 0..100 {
        observers.push(elector.observe("idle").await.unwrap());
    }
    assert_eq!(counting.layer().reads.load(SeqCst), 1, "100 observers of one store share one read");
    sleep(Duration::from_millis(500)).await;
    assert_eq!(counting.layer().reads.load(SeqCst), 1, "an idle group is never read again");
    // One change: one read, whatever the number of observers.
    granted(store, live(key, 2, token())).await;
    for observer in &mut observers {
        assert_eq!(next_change(observer).await.active_count, 1);
    }
    assert_eq!(counting.layer().reads.load(SeqCst), 2, "one read for the grant");
}

/// An elector of one slot over `store` whose every name is the store key `key`, taking a
/// slot at once or not at all.
fn guard_elector<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
    options: LeaderGroupElectionOptions,
) -> LeaderGroupElector {
    let options = options.keys(KeyOptions::new().exact_key(key)).wait_time(Duration::ZERO);
    LeaderGroupElector::new(store.clone(), options).unwrap()
}

/// Waits up to 10 s for the group to have `leaders` live slots.
async fn until_leaders(store: &dyn LeaseStore, key: &str, leaders: usize) {
    timeout(Duration::from_secs(10), async {
        while store.state(key).await.unwrap().leaders.len() != leaders {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the group never had {leaders} live slot(s)"));
}

/// The rule: A guard holds its slot until released and renews by hand, on `key` of `store`.
pub async fn a_guard_holds_its_slot_until_released_and_renews_by_hand<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let base = lease().max(Duration::from_secs(2));
    let elector = guard_elector(store, key, LeaderGroupElectionOptions::new(1).lease_time(base));
    let guard = elector.acquire("held").await.unwrap().expect("a free slot");
    let fence = guard.live_fence().expect("live");
    assert!(elector.acquire("held").await.unwrap().is_none(), "a held slot was granted again");
    // Held across awaits in another task, renewed by hand there.
    let guard = tokio::spawn(async move {
        sleep(base / 2).await;
        let before = guard.remaining();
        assert!(guard.renew().await.unwrap(), "the holder's renewal");
        assert!(guard.remaining() > before, "the deadline moved on: {:?}", guard.remaining());
        guard
    })
    .await
    .unwrap();
    // Renewed at half the lease: a quarter of a lease past the first lease, a quarter within
    // the renewed one.
    sleep(base * 3 / 4).await;
    let state = store.state(key).await.unwrap();
    assert_eq!(state.leaders.iter().map(|slot| slot.fence).collect::<Vec<_>>(), [fence]);
    assert_eq!(guard.live_fence(), Some(fence));
    let lease = guard.lease().clone();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "released");
    assert_eq!(lease.live_fence(), None, "a clone of a released lease acts no more");
    assert_eq!(lease.loss_reason(), Some(leader_core::LossReason::SteppedDown));
    let next = elector.acquire("held").await.unwrap().expect("free again");
    assert!(next.fence() > fence);
}

/// The rule: A guard renews in the background until refused and its drop then does nothing, on `key` of `store`.
pub async fn a_guard_renews_in_the_background_until_refused_and_its_drop_then_does_nothing<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let counting = counting(store.clone());
    let options = LeaderGroupElectionOptions::new(1).lease_time(lease()).auto_extend(true);
    let guard = guard_elector(&counting, key, options).acquire("renewed").await.unwrap().unwrap();
    let fence = guard.fence();
    sleep(lease() * 5 / 2).await;
    assert_eq!(guard.live_fence(), Some(fence), "renewed in the background");
    assert!(
        counting.layer().renewals.load(SeqCst) >= 2,
        "{} renewals",
        counting.layer().renewals.load(SeqCst)
    );
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1);
    // An operator frees the slot; the next renewal is refused and the loss signalled.
    let freed = store.revoke(key, SlotRef::Fence(fence), Revocation::Now).await.unwrap();
    assert_eq!(freed, ReleaseOutcome::Released);
    timeout(lease() * 2, guard.lost()).await.expect("the loss is signalled");
    assert_eq!(guard.loss_reason(), Some(leader_core::LossReason::Refused));
    assert!(!guard.renew().await.unwrap(), "a lost slot is not renewed");
    // Another holder takes the slot; dropping the lost guard leaves it alone.
    let other = token();
    granted(store, live(key, 1, other)).await;
    drop(guard);
    leader_core::wait_for_releases().await;
    assert_eq!(counting.layer().releases.load(SeqCst), 0, "a lost guard's drop asked the store");
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1);
}

/// The rule: A guard without renewal is lost at its deadline, on `key` of `store`.
pub async fn a_guard_without_renewal_is_lost_at_its_deadline<S: LeaseStore + Clone + 'static>(
    store: &S,
    key: &str,
) {
    let counting = counting(store.clone());
    let options = LeaderGroupElectionOptions::new(1).lease_time(lease());
    let asked_at = tokio::time::Instant::now();
    let guard = guard_elector(&counting, key, options).acquire("expiring").await.unwrap().unwrap();
    // Nothing polls the guard: its own task fires the loss at the local deadline (at most a
    // lease after the request), not a lease later.
    timeout(lease() * 2, guard.lost()).await.expect("the loss is signalled at the deadline");
    let signalled = asked_at.elapsed();
    assert!(signalled < lease() + lease() / 2, "signalled {signalled:?} after the request");
    assert_eq!(guard.loss_reason(), Some(leader_core::LossReason::Expired));
    assert_eq!(guard.live_fence(), None);
    assert!(!guard.renew().await.unwrap(), "a lease past its deadline is not renewed");
    assert_eq!(
        counting.layer().renewals.load(SeqCst),
        0,
        "renewal past the deadline asked the store"
    );
    // Dropped after a loss by the deadline, it still gives back once: a renewal the deadline
    // cut off could have extended the slot at the store.
    drop(guard);
    leader_core::wait_for_releases().await;
    assert_eq!(
        counting.layer().releases.load(SeqCst),
        1,
        "an expired guard's drop gave nothing back"
    );
    assert!(store.state(key).await.unwrap().leaders.is_empty());
}

/// The rule: A dropped guard gives its slot back after its minimum lease, on `key` of `store`.
pub async fn a_dropped_guard_gives_its_slot_back_after_its_minimum_lease<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let min_lease = lease().max(Duration::from_secs(2)) / 2;
    let options = LeaderGroupElectionOptions::new(1).lease_time(LIVE).min_lease_time(min_lease);
    let elector = guard_elector(store, key, options);
    let asked_at = tokio::time::Instant::now();
    let guard = elector.acquire("dropped").await.unwrap().unwrap();
    let lease = guard.lease().clone();
    drop(guard);
    assert_eq!(lease.loss_reason(), Some(leader_core::LossReason::SteppedDown), "dropped: ended");
    leader_core::wait_for_releases().await;
    // Kept until the minimum lease, then free: far sooner than the minute it was granted.
    if asked_at.elapsed() < min_lease / 2 {
        assert!(elector.acquire("dropped").await.unwrap().is_none(), "free before its minimum");
    }
    until_leaders(store, key, 0).await;
    // The minimum counts from the grant, which came after the request (a coarse clock may
    // free it up to a tick early).
    let freed = asked_at.elapsed();
    assert!(freed + tick() >= min_lease, "freed {freed:?} after the request");
    // Without a minimum lease, a drop frees the slot at once.
    let elector = guard_elector(store, key, LeaderGroupElectionOptions::new(1).lease_time(LIVE));
    drop(elector.acquire("dropped").await.unwrap().expect("free after the minimum"));
    leader_core::wait_for_releases().await;
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "a dropped guard kept its slot");
}

/// The rule: A guard dropped during a renewal gives its slot back, on `key` of `store`.
pub async fn a_guard_dropped_during_a_renewal_gives_its_slot_back<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    // Renewals reach the store and their replies come a second late.
    let counts = Counts { renewal_reply_delay: Duration::from_secs(1), ..Counts::default() };
    let counting = Layered::new(counts, store.clone());
    let base = lease().max(Duration::from_secs(3));
    let options = LeaderGroupElectionOptions::new(1)
        .lease_time(base)
        .auto_extend(true)
        .renew_interval(base / 3);
    let guard = guard_elector(&counting, key, options).acquire("renewing").await.unwrap().unwrap();
    timeout(base, async {
        while counting.layer().renewals.load(SeqCst) == 0 {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a renewal reached the store");
    drop(guard); // its reply still on its way
    leader_core::wait_for_releases().await;
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "kept after the drop");
    sleep(Duration::from_secs(1) + Duration::from_millis(200)).await; // past the late reply
    assert!(store.state(key).await.unwrap().leaders.is_empty(), "the late renewal revived it");
    assert_eq!(counting.layer().releases.load(SeqCst), 1);
}
