//! Waiting for a slot: attempts driven by release events and the nearest expiry, no polling.

use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::guard::SlotGuard;
use super::lease::local_deadline;
use crate::store::{AcquireOutcome, AcquireRequest, Grant, LeaseStore};
use crate::{Error, telemetry};

/// Acquires a slot within `wait_time`, or `None` if every attempt found the group full.
///
/// With `wait_time` zero it makes exactly one attempt. Otherwise it subscribes to the group's
/// releases first, then after each refusal sleeps until a release, the nearest expiry or the
/// deadline, whichever comes first, and makes a last attempt at the deadline.
///
/// Returns the grant and the instant its request was sent (the base of the local deadline).
/// A grant whose reply arrived after its local deadline (a stall, a slow network) is never
/// returned: it is released and counts as a lost attempt, like a refusal.
/// `guard` is armed while a request is in flight and left armed once a slot is held.
pub(crate) async fn acquire_slot(
    store: &dyn LeaseStore,
    request: AcquireRequest<'_>,
    wait_time: Duration,
    guard: &mut SlotGuard,
) -> Result<Option<(Grant, Instant)>, Error> {
    let deadline = Instant::now() + wait_time;
    let mut releases =
        if wait_time.is_zero() { None } else { Some(store.watch_releases(request.key).await?) };
    loop {
        let sent_at = Instant::now();
        guard.set_armed(true);
        let outcome = telemetry::acquire(store, request).await;
        let nearest_expiry = match outcome {
            Ok(AcquireOutcome::Granted(grant))
                if Instant::now() < local_deadline(sent_at, grant.expires_in) =>
            {
                return Ok(Some((grant, sent_at)));
            }
            Ok(AcquireOutcome::Granted(grant)) => {
                tracing::debug!(
                    group = request.key,
                    fence = grant.fence,
                    "grant arrived after its local deadline; released it"
                );
                guard.give_back().await;
                Duration::ZERO
            }
            Ok(AcquireOutcome::Full { nearest_expiry }) => nearest_expiry,
            Err(error) => {
                // A transient failure may have granted the slot before the reply was lost:
                // leave the guard armed so the slot is released.
                guard.set_armed(error.is_transient());
                return Err(error);
            }
        };
        guard.set_armed(false);
        let now = Instant::now();
        let Some(releases) = releases.as_mut().filter(|_| now < deadline) else {
            return Ok(None);
        };
        let wake_at = deadline.min(now + nearest_expiry.max(Duration::from_millis(1)));
        tokio::select! {
            () = releases.released() => {}
            () = sleep_until(wake_at) => {}
        }
    }
}
