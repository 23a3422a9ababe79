//! [`SlotGuard`]: releases a slot however the code holding it ends.

use std::sync::Arc;
use std::time::Duration;

use super::background;
use crate::backoff::{Backoff, FIRST_PAUSE};
use crate::store::{LeaseStore, ReleaseOutcome};
use crate::{LeaseToken, telemetry};

/// Releases the slot of `token` when dropped while armed, in the background (counted, so
/// [`wait_for_releases`](crate::wait_for_releases) can wait for it).
///
/// It is armed while an acquire is in flight (its reply may be lost) and while the slot is
/// held, so a dropped future, a panic or a failed acquire never leaves a slot behind. The
/// background release is tried again (with [`Backoff`]) while the store fails, until the
/// store answers or a whole lease has passed: an acquire that timed out may have granted
/// the slot, and only a release the store answered gives it back.
pub(crate) struct SlotGuard {
    store: Arc<dyn LeaseStore>,
    key: Arc<str>,
    token: LeaseToken,
    min_lease_time: Duration,
    lease_time: Duration,
    armed: bool,
}

impl SlotGuard {
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        key: Arc<str>,
        token: LeaseToken,
        min_lease_time: Duration,
        lease_time: Duration,
    ) -> Self {
        SlotGuard { store, key, token, min_lease_time, lease_time, armed: false }
    }

    pub(crate) fn set_armed(&mut self, armed: bool) {
        self.armed = armed;
    }

    /// Releases the slot now and waits for the store, leaving the guard disarmed. A failure
    /// is logged, not returned: the body's value matters more, and the slot expires by
    /// itself at the end of its lease.
    pub(crate) async fn release(&mut self) -> Option<ReleaseOutcome> {
        self.armed = false;
        release_logged(&*self.store, &self.key, self.token, self.min_lease_time).await
    }
}

impl SlotGuard {
    /// Frees a slot no body ran under (a grant whose reply came too late) and waits for
    /// the store, leaving the guard disarmed. The minimum lease time protects work that
    /// ran, so it does not apply (by then it has mostly run out anyway: a grant is late only
    /// once its lease has).
    pub(crate) async fn give_back(&mut self) -> Option<ReleaseOutcome> {
        self.armed = false;
        release_logged(&*self.store, &self.key, self.token, Duration::ZERO).await
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, key, token, min_lease) =
            (self.store.clone(), self.key.clone(), self.token, self.min_lease_time);
        let give_up_at = tokio::time::Instant::now() + self.lease_time;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => background::spawn_release(&runtime, async move {
                release_until_answered(&*store, &key, token, min_lease, give_up_at).await;
            }),
            Err(_) => tracing::warn!(
                key = %key,
                "slot dropped outside a tokio runtime; it expires at the end of its lease"
            ),
        }
    }
}

/// Releases the slot, trying again while the store fails transiently, until it answers or
/// `give_up_at` (by then the slot has expired by itself).
async fn release_until_answered(
    store: &dyn LeaseStore,
    key: &str,
    token: LeaseToken,
    min_lease_time: Duration,
    give_up_at: tokio::time::Instant,
) {
    let mut backoff = Backoff::new(FIRST_PAUSE, Duration::from_secs(1));
    loop {
        match telemetry::release(store, key, token, min_lease_time).await {
            Ok(outcome) => {
                tracing::debug!(key, ?outcome, "slot released");
                return;
            }
            Err(error) => {
                let pause = backoff.next_pause();
                if !error.is_transient() || tokio::time::Instant::now() + pause >= give_up_at {
                    tracing::warn!(key, %error, "release failed; the slot expires at the end of its lease");
                    return;
                }
                tracing::debug!(key, %error, ?pause, "release failed; trying again");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

async fn release_logged(
    store: &dyn LeaseStore,
    key: &str,
    token: LeaseToken,
    min_lease_time: Duration,
) -> Option<ReleaseOutcome> {
    match telemetry::release(store, key, token, min_lease_time).await {
        Ok(outcome) => {
            tracing::debug!(key, ?outcome, "slot released");
            Some(outcome)
        }
        Err(error) => {
            tracing::warn!(key, %error, "release failed; the slot expires at the end of its lease");
            None
        }
    }
}
