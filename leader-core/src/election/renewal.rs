//! Keeping a held slot alive while its body runs, and firing the loss signal when it ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep_until, timeout_at};

use super::lease::{Lease, LossReason};
use crate::error::Error;
use crate::outage::OutageLog;
use crate::store::{LeaseStore, RenewOutcome};
use crate::telemetry;

/// Watches `lease` until it is lost, renewing it every `renew_interval` if that is set.
///
/// - Without auto-extension, the loss is decided at the local deadline (which a renewal by
///   hand, [`LeaseGuard::renew`](crate::LeaseGuard::renew), moves on).
/// - A refused renewal decides it at once ([`LossReason::Refused`]).
/// - A failed renewal is retried at the cadence or at half the remaining lease, whichever is
///   sooner, until one succeeds or the local deadline passes ([`LossReason::Expired`]).
///
/// Returns once the loss is decided, here or elsewhere; the holder aborts it when it lets
/// the slot go first.
pub(crate) async fn supervise(
    store: Arc<dyn LeaseStore>,
    lease: Lease,
    lease_time: Duration,
    renew_interval: Option<Duration>,
) {
    match renew_interval {
        None => loop {
            tokio::select! {
                biased;
                () = sleep_until(lease.deadline()) => if lease.is_lost() { return },
                () = lease.lost() => return,
            }
        },
        Some(renew_interval) => {
            let mut outage = OutageLog::default();
            keep_renewing(&*store, &lease, lease_time, renew_interval, &mut outage).await;
        }
    }
}

/// What one renewal did.
pub(crate) enum Renewal {
    /// The store extended the slot: the lease's deadline moved on.
    Renewed,
    /// The lease's end is decided (here or before), for this reason.
    Lost(LossReason),
    /// The store failed; the slot may still be held until the lease's deadline.
    Failed(Error),
}

/// Renews `lease` once for `lease_time`, within its local deadline: the one renewal step of
/// the background loop and of a renewal by hand.
///
/// A lease whose end was decided, or whose deadline passes before the reply, is not renewed
/// (the reply cannot bring it back); a refusal decides its end ([`LossReason::Refused`]).
pub(crate) async fn renew_once(
    store: &dyn LeaseStore,
    lease: &Lease,
    lease_time: Duration,
) -> Renewal {
    if lease.is_lost() {
        return Renewal::Lost(lease.end(LossReason::Expired));
    }
    let deadline = lease.deadline();
    let sent_at = Instant::now();
    let renewal = timeout_at(
        deadline,
        telemetry::renew(
            store,
            lease.key(),
            lease.holder(),
            lease.fence(),
            lease.token(),
            lease_time,
        ),
    );
    let outcome = tokio::select! {
        biased;
        () = lease.lost() => return Renewal::Lost(lease.end(LossReason::Expired)),
        outcome = renewal => outcome,
    };
    match outcome {
        Ok(Ok(RenewOutcome::Renewed { expires_at, expires_in })) => {
            match lease.renewed(expires_at, expires_in, sent_at) {
                Ok(()) => Renewal::Renewed,
                Err(reason) => Renewal::Lost(reason),
            }
        }
        Ok(Ok(RenewOutcome::NotHeld)) => Renewal::Lost(lease.end(LossReason::Refused)),
        Ok(Err(error)) => Renewal::Failed(error),
        Err(_timed_out) => Renewal::Lost(lease.end(LossReason::Expired)),
    }
}

/// Renews `lease` until its end is decided, and returns the reason that stands.
///
/// The end may be decided here (a refused renewal, the deadline passing, a reply that
/// arrives after it) or anywhere else (a check such as `is_lost()` that found the deadline
/// passed, a step-down): the loop wakes on the loss signal, so it never renews a lease whose
/// end was decided. Renewals are due when `lease_time - renew_interval` remains before the local
/// deadline (two thirds of the lease by default) and never later than half the time left,
/// so the schedule follows the deadline, not when a reply happened to arrive. Failed
/// renewals are retried as [`supervise`] describes, and logged once per outage.
pub(crate) async fn keep_renewing(
    store: &dyn LeaseStore,
    lease: &Lease,
    lease_time: Duration,
    renew_interval: Duration,
    outage: &mut OutageLog,
) -> LossReason {
    let mut next = renewal_due(lease.deadline(), lease_time, renew_interval);
    loop {
        tokio::select! {
            biased;
            () = lease.lost() => return lease.end(LossReason::Expired),
            () = sleep_until(next.min(lease.deadline())) => {}
        }
        match renew_once(store, lease, lease_time).await {
            Renewal::Renewed => {
                outage.succeeded(lease.name());
                tracing::trace!(group = lease.name(), fence = lease.fence(), "lease renewed");
                next = renewal_due(lease.deadline(), lease_time, renew_interval);
            }
            Renewal::Lost(reason) => return reason,
            Renewal::Failed(error) => {
                outage.failed(lease.name(), "lease renewal", &error);
                let retry_in =
                    renew_interval.min(lease.remaining() / 2).max(Duration::from_millis(1));
                next = Instant::now() + retry_in;
            }
        }
    }
}

/// When the next renewal of a lease with local `deadline` is due: when `lease_time - renew_interval`
/// remains (both counted on the local clock, so a full lease is renewed `renew_interval`
/// after its request was sent), and no later than half the time left now.
pub(crate) fn renewal_due(
    deadline: Instant,
    lease_time: Duration,
    renew_interval: Duration,
) -> Instant {
    let now = Instant::now();
    let at_cadence = deadline
        .checked_sub(super::lease::local_span(lease_time).saturating_sub(renew_interval))
        .map_or(now, |at| at.max(now));
    let at_half = now + deadline.saturating_duration_since(now) / 2;
    at_cadence.min(at_half)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn renewal_is_due_when_two_thirds_remain_or_at_half_the_time_left() {
        let now = Instant::now();
        let (lease, renew_interval) = (12 * SECOND, 4 * SECOND);
        // A whole lease left (11.988 s on the local clock): due 4 s from now.
        let whole = super::super::lease::local_span(lease);
        assert_eq!(renewal_due(now + whole, lease, renew_interval), now + 4 * SECOND);
        // 9 s left: due when 7.988 s remain, 1.012 s from now (half the time left is later).
        let due = now + Duration::from_millis(1_012);
        assert_eq!(renewal_due(now + 9 * SECOND, lease, renew_interval), due);
        // 3 s left (a slow grant): at once.
        assert_eq!(renewal_due(now + 3 * SECOND, lease, renew_interval), now);
        // A renew interval of half the lease: half the time left is the cap.
        let due = now + Duration::from_millis(4_012); // 10 s less (11.988 s - 6 s)
        assert_eq!(renewal_due(now + 10 * SECOND, lease, 6 * SECOND), due);
        assert_eq!(renewal_due(now + whole, lease, 6 * SECOND), now + whole / 2);
        // The deadline passed: at once.
        assert_eq!(renewal_due(now, lease, renew_interval), now);
    }
}
