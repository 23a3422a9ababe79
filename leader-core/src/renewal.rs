//! Keeping a held slot alive while its body runs, and firing the loss signal when it ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep_until, timeout_at};

use crate::lease::{Lease, LossReason};
use crate::outage::OutageLog;
use crate::store::{LeaseStore, RenewOutcome};
use crate::telemetry;

/// Watches `lease` until it is lost, renewing it every `extend_every` if that is set.
///
/// - Without auto-extension, the loss signal fires at the local deadline.
/// - A refused renewal fires it at once ([`LossReason::Refused`]).
/// - A failed renewal is retried at the cadence or at half the remaining lease, whichever is
///   sooner, until one succeeds or the local deadline passes ([`LossReason::Expired`]).
///
/// Returns once the signal has fired; the elector aborts it when the body ends first.
pub(crate) async fn supervise(
    store: Arc<dyn LeaseStore>,
    lease: Lease,
    lease_time: Duration,
    extend_every: Option<Duration>,
) {
    match extend_every {
        None => {
            sleep_until(lease.deadline()).await;
            lease.mark_lost(LossReason::Expired);
        }
        Some(every) => {
            let mut outage = OutageLog::default();
            let reason = keep_renewing(&*store, &lease, lease_time, every, &mut outage).await;
            lease.mark_lost(reason);
        }
    }
}

/// Renews `lease` every `every` until a renewal is refused or the local deadline passes, and
/// says which. Failed renewals are retried as [`supervise`] describes, and logged once per
/// outage.
pub(crate) async fn keep_renewing(
    store: &dyn LeaseStore,
    lease: &Lease,
    lease_time: Duration,
    every: Duration,
    outage: &mut OutageLog,
) -> LossReason {
    let mut next = Instant::now() + every;
    loop {
        let deadline = lease.deadline();
        sleep_until(next.min(deadline)).await;
        if Instant::now() >= deadline {
            return LossReason::Expired;
        }
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
        match renewal.await {
            Ok(Ok(RenewOutcome::Renewed { expires_at, expires_in })) => {
                outage.succeeded(lease.name());
                lease.renewed(expires_at, expires_in, sent_at);
                tracing::trace!(group = lease.name(), fence = lease.fence(), "lease renewed");
                next = sent_at + every;
            }
            Ok(Ok(RenewOutcome::NotHeld)) => return LossReason::Refused,
            Ok(Err(error)) => {
                outage.failed(lease.name(), "lease renewal", &error);
                let retry_in = every.min(lease.remaining() / 2).max(Duration::from_millis(1));
                next = Instant::now() + retry_in;
            }
            Err(_timed_out) => return LossReason::Expired,
        }
    }
}
