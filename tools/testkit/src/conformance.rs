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

mod grants;
mod guards;
mod observers;
mod preferences;
mod priorities;
mod releases;
mod reservations;
mod watches;

use std::sync::OnceLock;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use async_trait::async_trait;
use leader_core::store::author::{Layered, StoreLayer};
use leader_core::store::{
    AcquireOutcome, AcquireRequest, Grant, GroupSnapshot, ReleaseOutcome, RenewOutcome,
};
use leader_core::{Error, LeaseStore, LeaseToken};
use tokio::time::sleep;

pub use self::grants::{
    a_batch_renewal_answers_each_slot_as_a_renewal_would, acquire_is_idempotent_for_the_same_token,
    fences_strictly_increase, grants_up_to_max_leaders_then_reports_full,
    max_leaders_mismatch_names_both_values, renew_extends_only_a_held_slot,
};
pub use self::guards::{
    a_dropped_guard_gives_its_slot_back_after_its_minimum_lease,
    a_guard_dropped_during_a_renewal_gives_its_slot_back,
    a_guard_holds_its_slot_until_released_and_renews_by_hand,
    a_guard_renews_in_the_background_until_refused_and_its_drop_then_does_nothing,
    a_guard_without_renewal_is_lost_at_its_deadline,
};
pub use self::observers::{
    a_batch_read_answers_each_group_as_a_read_would, an_observer_of_an_idle_group_reads_nothing,
    an_observer_sees_grants_releases_and_expiries, state_reports_live_slots,
};
pub use self::preferences::{
    a_leader_steps_down_for_the_preferred_holder_and_for_no_absent_one,
    a_preferred_holder_takes_the_claim_whatever_its_priority,
};
pub use self::priorities::{
    a_higher_priority_takes_the_reservation_and_the_claim_names_it,
    a_leader_steps_down_only_for_a_strictly_higher_priority,
    a_waiter_behind_another_claim_asks_again_when_it_would_lapse,
};
pub use self::releases::{
    a_revocation_ends_renewals_and_hands_the_slot_on_only_at_its_expiry,
    a_revoked_token_gets_no_new_slot_until_the_revoked_one_lapses, expiry_frees_a_slot,
    min_lease_time_keeps_a_released_slot, release_and_renew_never_revive_an_expired_slot,
    release_is_token_checked,
};
pub use self::reservations::{
    a_reservation_keeps_the_last_free_slot_for_the_earliest_waiter,
    a_reservation_lapses_and_never_holds_back_a_second_free_slot,
};
pub use self::watches::{
    grants_releases_and_shortening_renewals_wake_change_watches, release_wakes_watchers,
    shortening_renewal_wakes_watchers,
};

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
            a_reservation_keeps_the_last_free_slot_for_the_earliest_waiter,
            a_reservation_lapses_and_never_holds_back_a_second_free_slot,
            a_higher_priority_takes_the_reservation_and_the_claim_names_it,
            a_leader_steps_down_only_for_a_strictly_higher_priority,
            a_waiter_behind_another_claim_asks_again_when_it_would_lapse,
            a_preferred_holder_takes_the_claim_whatever_its_priority,
            a_leader_steps_down_for_the_preferred_holder_and_for_no_absent_one,
            release_wakes_watchers,
            shortening_renewal_wakes_watchers,
            state_reports_live_slots,
            a_batch_read_answers_each_group_as_a_read_would,
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

/// An attempt on group `key` (of `max_leaders`) by a new candidate, which must be refused.
async fn refused(store: &dyn LeaseStore, key: &str, max_leaders: u32) {
    let outcome = store.acquire(live(key, max_leaders, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Full { .. }), "not refused: {outcome:?}");
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
