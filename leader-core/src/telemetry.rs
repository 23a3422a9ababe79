//! Spans, events and metrics, in one place: every store call the electors, leaderships,
//! partition nodes and observers make goes through here.
//!
//! Spans (`leader.acquire`, `leader.renew`, `leader.renew_many`, `leader.release`,
//! `leader.state`, `leader.state_many`) are at debug level and carry the group key (a partition's key names its
//! set and index; and, as each applies, the holder, fence and outcome); tokens never
//! appear. Metrics (feature `metrics`, through the `metrics` facade) are
//! listed in docs/operating.md.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::Error;
use crate::store::LeaseStore;
use crate::store::{
    AcquireOutcome, AcquireRequest, ClaimInfo, GroupSnapshot, HeldSlot, Preference, ReleaseOutcome,
    RenewOutcome,
};
use crate::token::LeaseToken;

/// One store acquire, in a span, counted and timed.
pub(crate) async fn acquire(
    store: &dyn LeaseStore,
    request: AcquireRequest<'_>,
) -> Result<AcquireOutcome, Error> {
    let span = tracing::debug_span!(
        "leader.acquire",
        group = request.key,
        holder = request.holder,
        fence = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let started = Instant::now();
    let result = store.acquire(request).instrument(span.clone()).await;
    let outcome = match &result {
        Ok(AcquireOutcome::Granted(grant)) => {
            span.record("fence", grant.fence);
            "elected"
        }
        Ok(AcquireOutcome::Full { .. }) => "skipped",
        Err(_) => "error",
    };
    span.record("outcome", outcome);
    metric::acquired(request.key, outcome, started.elapsed());
    result
}

/// One store renewal, in a span, counted.
pub(crate) async fn renew(
    store: &dyn LeaseStore,
    key: &str,
    holder: &str,
    fence: u64,
    token: LeaseToken,
    lease_time: Duration,
) -> Result<RenewOutcome, Error> {
    let span = tracing::debug_span!(
        "leader.renew",
        group = key,
        holder,
        fence,
        outcome = tracing::field::Empty
    );
    let result = store.renew(key, token, lease_time).instrument(span.clone()).await;
    let outcome = match &result {
        Ok(RenewOutcome::Renewed { .. }) => "renewed",
        Ok(RenewOutcome::NotHeld) => "refused",
        Err(_) => "error",
    };
    span.record("outcome", outcome);
    metric::renewed(key, outcome);
    result
}

/// One batch renewal (a partition node's announcement and partitions), in a span; each
/// slot's outcome is counted under its own group, as a single renewal's is.
pub(crate) async fn renew_many(
    store: &dyn LeaseStore,
    slots: &[HeldSlot<'_>],
    lease_time: Duration,
) -> Result<Vec<RenewOutcome>, Error> {
    let span = tracing::debug_span!(
        "leader.renew_many",
        slots = slots.len(),
        renewed = tracing::field::Empty,
        outcome = tracing::field::Empty
    );
    let result = store.renew_many(slots, lease_time).instrument(span.clone()).await;
    match &result {
        Ok(answers) => {
            let mut renewed = 0;
            for (slot, answer) in slots.iter().zip(answers) {
                let outcome = match answer {
                    RenewOutcome::Renewed { .. } => "renewed",
                    RenewOutcome::NotHeld => "refused",
                };
                renewed += usize::from(outcome == "renewed");
                metric::renewed(slot.key, outcome);
            }
            span.record("renewed", renewed);
            span.record("outcome", "answered");
        }
        Err(_) => {
            slots.iter().for_each(|slot| metric::renewed(slot.key, "error"));
            span.record("outcome", "error");
        }
    }
    result
}

/// One store release, in a span.
pub(crate) async fn release(
    store: &dyn LeaseStore,
    key: &str,
    token: LeaseToken,
    min_lease_time: Duration,
) -> Result<ReleaseOutcome, Error> {
    let span = tracing::debug_span!("leader.release", group = key, outcome = tracing::field::Empty);
    let result = store.release(key, token, min_lease_time).instrument(span.clone()).await;
    let outcome = match &result {
        Ok(ReleaseOutcome::Released) => "released",
        Ok(ReleaseOutcome::Kept { .. }) => "kept",
        Ok(ReleaseOutcome::NotHeld) => "not held",
        Err(_) => "error",
    };
    span.record("outcome", outcome);
    result
}

/// One store state read, in a span.
pub(crate) async fn state(store: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
    let span = tracing::debug_span!("leader.state", group = key, active = tracing::field::Empty);
    let result = store.state(key).instrument(span.clone()).await;
    if let Ok(snapshot) = &result {
        span.record("active", snapshot.leaders.len());
    }
    result
}

/// [`LeaseStore::claim`], in a span that records the waiting candidate's priority, if any.
pub(crate) async fn claim(store: &dyn LeaseStore, key: &str) -> Result<Option<ClaimInfo>, Error> {
    let span = tracing::debug_span!("leader.claim", group = key, priority = tracing::field::Empty);
    let result = store.claim(key).instrument(span.clone()).await;
    if let Ok(Some(claim)) = &result {
        span.record("priority", claim.priority);
    }
    result
}

/// [`LeaseStore::prefer`], in a span that names the preferred holder (none: withdrawn).
pub(crate) async fn prefer(
    store: &dyn LeaseStore,
    key: &str,
    preferred: Option<(&str, Duration)>,
) -> Result<(), Error> {
    let holder = preferred.map(|(holder, _)| holder);
    let span = tracing::info_span!("leader.prefer", group = key, holder = holder);
    store.prefer(key, preferred).instrument(span).await
}

/// [`LeaseStore::preference`], in a span.
pub(crate) async fn preference(
    store: &dyn LeaseStore,
    key: &str,
) -> Result<Option<Preference>, Error> {
    let span = tracing::debug_span!("leader.preference", group = key);
    store.preference(key).instrument(span).await
}

/// [`LeaseStore::state_many`], in a span that records how many groups it read and how many
/// of them have a live slot.
pub(crate) async fn state_many(
    store: &dyn LeaseStore,
    keys: &[&str],
) -> Result<Vec<GroupSnapshot>, Error> {
    let span = tracing::debug_span!(
        "leader.state_many",
        groups = keys.len(),
        active = tracing::field::Empty
    );
    let result = store.state_many(keys).instrument(span.clone()).await;
    if let Ok(snapshots) = &result {
        span.record("active", snapshots.iter().filter(|group| !group.leaders.is_empty()).count());
    }
    result
}

/// Metric updates; no-ops without the `metrics` feature.
pub(crate) mod metric {
    use std::time::Duration;

    #[cfg(feature = "metrics")]
    fn label(value: &str) -> metrics::SharedString {
        metrics::SharedString::from(value.to_owned())
    }

    /// An acquire attempt and its latency.
    pub(crate) fn acquired(group: &str, outcome: &'static str, latency: Duration) {
        #[cfg(feature = "metrics")]
        {
            metrics::counter!("leader_acquire_attempts_total", "group" => label(group), "outcome" => outcome)
                .increment(1);
            metrics::histogram!("leader_acquire_duration_seconds", "group" => label(group))
                .record(latency.as_secs_f64());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (group, outcome, latency);
    }

    /// A renewal attempt.
    pub(crate) fn renewed(group: &str, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        metrics::counter!("leader_renewals_total", "group" => label(group), "outcome" => outcome)
            .increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = (group, outcome);
    }

    /// A change of leadership: `elected`, `lost` or `resigned`.
    pub(crate) fn transition(group: &str, transition: &'static str) {
        #[cfg(feature = "metrics")]
        metrics::counter!("leader_transitions_total", "group" => label(group), "transition" => transition)
            .increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = (group, transition);
    }

    /// Whether this instance leads `role` (long-lived leadership).
    pub(crate) fn is_leader(role: &str, leading: bool) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("leader_is_leader", "role" => label(role)).set(if leading {
            1.0
        } else {
            0.0
        });
        #[cfg(not(feature = "metrics"))]
        let _ = (role, leading);
    }

    /// Slots of `group` this process holds, up or down by one.
    pub(crate) fn held_slots(group: &str, delta: f64) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("leader_held_slots", "group" => label(group)).increment(delta);
        #[cfg(not(feature = "metrics"))]
        let _ = (group, delta);
    }

    /// A change of a group's holders an observer's reader saw (`changed`), or a failed read
    /// of the group (`error`).
    pub(crate) fn observed(group: &str, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        metrics::counter!("leader_observed_changes_total", "group" => label(group), "outcome" => outcome)
            .increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = (group, outcome);
    }

    /// Items a leader channel dropped.
    pub(crate) fn channel_dropped(channel: &str, reason: &'static str, n: u64) {
        #[cfg(feature = "metrics")]
        metrics::counter!("leader_channel_drops_total", "channel" => label(channel), "reason" => reason)
            .increment(n);
        #[cfg(not(feature = "metrics"))]
        let _ = (channel, reason, n);
    }
}
