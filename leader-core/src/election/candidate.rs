//! The candidate loop: the one way a slot is won, for the per-call electors, the macros and
//! long-lived leadership alike. Attempts are driven by release events and the nearest
//! expiry, never by polling; what differs between callers (how long to try, what a store
//! failure means, what else ends the wait) is a [`Policy`].

use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::guard::SlotGuard;
use super::lease::local_deadline;
use super::options::Settings;
use crate::backoff::{Backoff, FIRST_PAUSE};
use crate::error::Error;
use crate::store::{AcquireOutcome, AcquireRequest, Grant, GroupWatch, LeaseStore};
use crate::telemetry;
use crate::token::LeaseToken;

/// A slot won with time left on it: the grant, when its request was sent (the base of the
/// local deadline), and the token it is held under (the guard's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Won {
    pub grant: Grant,
    pub sent_at: Instant,
    pub token: LeaseToken,
}

/// What a candidacy does besides asking the store.
pub(crate) trait Policy {
    /// How a candidacy ends without a slot.
    type Stop;

    /// Until when the candidate waits for a slot: `None`, for as long as it takes. A
    /// deadline that has passed already allows exactly one attempt, without subscribing
    /// to releases.
    fn deadline(&self) -> Option<Instant>;

    /// What the candidacy returns when its deadline passes without a slot.
    fn at_deadline(&mut self) -> Self::Stop;

    /// A store call failed: `Ok` to try again (after whatever pause the policy waited out),
    /// or how the candidacy ends.
    async fn failed(&mut self, error: Error) -> Result<(), Self::Stop>;

    /// The store answered a call (a grant, a refusal or a subscription).
    fn answered(&mut self);

    /// The store granted the slot in time, and the candidacy ends with it: by default an
    /// answer like any other.
    fn won(&mut self) {
        self.answered();
    }

    /// A grant arrived after its local deadline and was given back: `Ok` to go on.
    async fn gave_back_a_late_grant(&mut self, fence: u64) -> Result<(), Self::Stop>;

    /// Resolves when something other than a release or an expiry ends the wait after a
    /// refusal: `Some` to end the candidacy, `None` to attempt again at once.
    async fn interrupted(&mut self) -> Option<Self::Stop>;

    /// Whether the candidate waits fairly: after [`FAIR_AFTER_LOST`] hand-overs lost in a
    /// row it claims the group's next free slot (a [`Reservation`](crate::store::Reservation)),
    /// and the candidate that has waited longest holds the claim. Default: no.
    fn waits_fairly(&self) -> bool {
        false
    }

    /// The priority the candidate announces, if any: then every attempt claims the group's
    /// next free slot at that priority, from the first on (a higher priority takes the
    /// claim over whatever its arrival), so a holder that reads the claim can step down for
    /// it. Default: none.
    fn priority(&self) -> Option<i32> {
        None
    }
}

/// After how many hand-overs lost in a row (a release woke the candidate, and its attempt
/// was refused) a fair waiter claims the group's next free slot.
pub(crate) const FAIR_AFTER_LOST: u32 = 3;

/// How long a fair waiter's claim lives after each of its attempts (at most the lease
/// time): the longest a claim of a waiter that died holds a free slot back. The store
/// tells the claim's holder to attempt again within half of it, so the claim lives while
/// its holder waits.
pub(crate) const FAIR_HOLD: Duration = Duration::from_secs(1);

/// How long a claim made with `lease_time` lives after each attempt.
fn fair_hold(lease_time: Duration) -> Duration {
    FAIR_HOLD.min(lease_time).max(Duration::from_millis(2))
}

/// Stands as candidate for a slot of `request.key` under `request.token` until it is won
/// (`Ok`) or the policy ends the candidacy (`Err`).
///
/// It subscribes to the group's releases first (unless the deadline allows a single
/// attempt), then after each refusal sleeps until a release, the nearest expiry (at least
/// 1 ms) or the deadline, and makes a last attempt at the deadline. Every attempt uses the
/// same token, so one after a lost reply gets that grant back instead of a second slot.
///
/// `guard` is armed while a request is in flight and while a transient failure may have
/// granted the slot, and left armed once the slot is won: dropping it gives the slot back.
/// A policy that [announces a priority](Policy::priority) sends every attempt with a claim at
/// that priority. One that [waits fairly](Policy::waits_fairly) counts the hand-overs it
/// loses, and from [`FAIR_AFTER_LOST`] on sends each attempt with a claim to the next free slot (the
/// store answers the claim's holder with a nearest expiry within half the claim's life, so
/// it attempts again, renewing the claim, before the claim lapses).
///
/// A grant whose reply arrived after its local deadline (a stall, a slow network) is never
/// returned: it is given back, and counts as a lost attempt. A give-back the store did not
/// answer may still land, and would free a later grant of the same token: the candidacy
/// goes on under a new token (and a new guard; the old one goes on giving its slot back in
/// the background), so the slot it wins is the one [`Won::token`] names.
pub(crate) async fn stand<P: Policy>(
    store: &dyn LeaseStore,
    mut request: AcquireRequest<'_>,
    guard: &mut SlotGuard,
    policy: &mut P,
) -> Result<Won, P::Stop> {
    let deadline = policy.deadline();
    let single_attempt = deadline.is_some_and(|deadline| deadline <= Instant::now());
    let mut releases: Option<GroupWatch> = None;
    let started = Instant::now();
    let reserves = store.keeps_reservations();
    let fair = policy.waits_fairly() && reserves;
    let priority = policy.priority().filter(|_| reserves);
    let hold_for = fair_hold(request.lease_time);
    // Hand-overs lost in a row: refusals right after a release woke the candidate.
    let mut lost = 0u32;
    let mut woken_by_release = false;
    loop {
        if priority.is_some() || (fair && lost >= FAIR_AFTER_LOST) {
            request = request.reserving_at(started.elapsed(), hold_for, priority.unwrap_or(0));
        }
        if releases.is_none() && !single_attempt {
            match store.watch_releases(request.key).await {
                Ok(watch) => releases = Some(watch),
                Err(error) => {
                    policy.failed(error).await?;
                    continue;
                }
            }
        }
        let sent_at = Instant::now();
        guard.set_armed(true);
        let nearest_expiry = match telemetry::acquire(store, request).await {
            Ok(AcquireOutcome::Granted(grant))
                if Instant::now() < local_deadline(sent_at, grant.expires_in) =>
            {
                policy.won();
                return Ok(Won { grant, sent_at, token: request.token });
            }
            Ok(AcquireOutcome::Granted(grant)) => {
                policy.answered();
                tracing::debug!(
                    group = request.key,
                    fence = grant.fence,
                    "grant arrived after its local deadline; released it"
                );
                guard.give_back().await;
                if guard.is_armed() {
                    match LeaseToken::generate() {
                        Ok(token) => {
                            request.token = token;
                            // The old guard, dropped armed, gives its slot back until answered.
                            drop(std::mem::replace(guard, guard.successor(token)));
                        }
                        Err(error) => policy.failed(error).await?,
                    }
                }
                policy.gave_back_a_late_grant(grant.fence).await?;
                Duration::ZERO
            }
            Ok(AcquireOutcome::Full { nearest_expiry }) => {
                policy.answered();
                guard.set_armed(false);
                if woken_by_release {
                    lost = lost.saturating_add(1);
                }
                nearest_expiry
            }
            Err(error) => {
                // A transient failure may have granted the slot before the reply was lost:
                // the guard stays armed, so the slot is adopted by the next attempt (the
                // same token) or given back when the candidacy ends.
                guard.set_armed(error.is_transient());
                policy.failed(error).await?;
                continue;
            }
        };
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            return Err(policy.at_deadline());
        }
        let Some(watch) = releases.as_mut() else {
            return Err(policy.at_deadline());
        };
        let wait = nearest_expiry.max(Duration::from_millis(1));
        let wake_at = deadline.map_or(now + wait, |deadline| deadline.min(now + wait));
        woken_by_release = false;
        tokio::select! {
            // A stop or a resignation first: releases that keep coming must not hide it.
            biased;
            stop = policy.interrupted() => if let Some(stop) = stop { return Err(stop) },
            () = watch.woken() => woken_by_release = true,
            () = sleep_until(wake_at) => {}
        }
    }
}

/// The policy of a per-call election (`run_if_leader`, and the macros): wait until
/// `wait_time` is over; a store failure ends the call with the error, unless the macros'
/// `on_store_error = "skip"` asked to try again (with [`Backoff`]) until then and return
/// `Skipped`.
pub(crate) struct PerCall<'a> {
    deadline: Instant,
    group: &'a str,
    skip_on_store_error: bool,
    fair_waiting: bool,
    priority: Option<i32>,
    backoff: Backoff,
}

/// How a per-call candidacy ends without a slot.
pub(crate) enum PerCallStop {
    /// Every slot stayed held by others until `wait_time` was over.
    Skipped,
    /// The store failed (or the request was invalid).
    Failed(Error),
}

impl<'a> PerCall<'a> {
    /// Waits `wait_time` from now for a slot of `group`, pausing up to `retry_interval`
    /// after a failure.
    pub(crate) fn new(group: &'a str, settings: &Settings) -> Self {
        PerCall {
            deadline: Instant::now() + settings.wait_time,
            group,
            skip_on_store_error: settings.skip_on_store_error,
            fair_waiting: settings.fair_waiting,
            priority: settings.priority,
            backoff: Backoff::new(
                FIRST_PAUSE.min(settings.retry_interval),
                settings.retry_interval,
            ),
        }
    }
}

impl Policy for PerCall<'_> {
    type Stop = PerCallStop;

    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }

    fn at_deadline(&mut self) -> PerCallStop {
        PerCallStop::Skipped
    }

    async fn failed(&mut self, error: Error) -> Result<(), PerCallStop> {
        if !(self.skip_on_store_error && error.is_store_failure()) {
            return Err(PerCallStop::Failed(error));
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            tracing::warn!(group = self.group, %error, "store failed; skipping as on_store_error = \"skip\" asks");
            return Err(PerCallStop::Skipped);
        }
        tracing::warn!(
            group = self.group, %error, wait_left = ?left,
            "store failed; trying again until wait_time is over, as on_store_error = \"skip\" asks"
        );
        tokio::time::sleep(self.backoff.next_pause().min(left)).await;
        Ok(())
    }

    fn answered(&mut self) {
        self.backoff.reset();
    }

    async fn gave_back_a_late_grant(&mut self, _fence: u64) -> Result<(), PerCallStop> {
        Ok(())
    }

    async fn interrupted(&mut self) -> Option<PerCallStop> {
        std::future::pending().await
    }

    fn waits_fairly(&self) -> bool {
        self.fair_waiting
    }

    fn priority(&self) -> Option<i32> {
        self.priority
    }
}
