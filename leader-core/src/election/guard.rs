//! [`SlotGuard`]: releases a slot however the code holding it ends.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::background;
use crate::backoff::{Backoff, FIRST_PAUSE, RELEASE_RETRY_CEILING};
use crate::error::Error;
use crate::store::{LeaseStore, ReleaseOutcome};
use crate::telemetry;
use crate::token::LeaseToken;

/// Releases the slot of `token` when dropped while armed, in the background (counted, so
/// [`wait_for_releases`](crate::wait_for_releases) can wait for it).
///
/// It is armed while an acquire is in flight (its reply may be lost) and while the slot is
/// held, so a dropped future, a panic or a failed acquire never leaves a slot behind. The
/// background release is tried again (with [`Backoff`], pauses of at most
/// [`RELEASE_RETRY_CEILING`]) while the store fails, until the store answers or
/// [`release_retry_limit`] has passed: an acquire that timed out may still be run by a
/// store that was paused, granting the slot whenever it wakes, and only a release the store
/// answered after it gives that slot back.
pub(crate) struct SlotGuard {
    store: Arc<dyn LeaseStore>,
    key: Arc<str>,
    token: LeaseToken,
    min_lease_time: Duration,
    lease_time: Duration,
    armed: bool,
    /// The runtime it was made on: a drop outside any runtime releases there.
    runtime: Option<tokio::runtime::Handle>,
}

impl SlotGuard {
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        key: Arc<str>,
        token: LeaseToken,
        min_lease_time: Duration,
        lease_time: Duration,
    ) -> Self {
        let runtime = tokio::runtime::Handle::try_current().ok();
        SlotGuard { store, key, token, min_lease_time, lease_time, armed: false, runtime }
    }

    pub(crate) fn set_armed(&mut self, armed: bool) {
        self.armed = armed;
    }

    /// A guard of the same slot under another token, not armed: a candidacy that goes on
    /// under a new token while this one's give-back may still be in flight.
    pub(crate) fn successor(&self, token: LeaseToken) -> SlotGuard {
        SlotGuard::new(
            Arc::clone(&self.store),
            Arc::clone(&self.key),
            token,
            self.min_lease_time,
            self.lease_time,
        )
    }

    /// Whether the slot may be held under its token: dropping the guard now would release it.
    pub(crate) fn is_armed(&self) -> bool {
        self.armed
    }

    /// Releases the slot now (keeping it until the minimum lease time) and waits for the
    /// store. The guard is disarmed once the store answered or failed for good; after a
    /// transient failure it stays armed, so dropping it tries again in the background.
    pub(crate) async fn release(&mut self) -> Result<ReleaseOutcome, Error> {
        self.release_keeping(self.min_lease_time).await
    }

    /// [`release`](Self::release), waiting at most `bound` for the store: what a term that
    /// ends by itself does (it stands again next, and a store that does not answer must not
    /// keep it). Past `bound`, or after a transient failure, the guard stays armed, so
    /// dropping it goes on trying in the background; `None` then.
    pub(crate) async fn release_within(&mut self, bound: Duration) -> Option<ReleaseOutcome> {
        match tokio::time::timeout(bound, self.release()).await {
            Ok(result) => result.ok(),
            Err(_) => {
                tracing::debug!(key = %self.key, ?bound, "release not answered in time; trying again in the background");
                self.armed = true;
                None
            }
        }
    }

    /// Frees a slot no body ran under (a grant whose reply came too late) and waits for
    /// the store. The minimum lease time protects work that ran, so it does not apply (by
    /// then it has mostly run out anyway: a grant is late only once its lease has). After a
    /// transient failure the guard stays armed: the candidate's next attempt (the same
    /// token) finds the slot, or the guard's drop gives it back.
    pub(crate) async fn give_back(&mut self) -> Option<ReleaseOutcome> {
        self.release_keeping(Duration::ZERO).await.ok()
    }

    /// [`release`](Self::release) (`keep_min_lease`) or [`give_back`](Self::give_back),
    /// tried again with the backoff while the store fails transiently, until it answers,
    /// fails for good or `stopped` is cancelled: what an owner does whose session would keep
    /// an abandoned slot alive for as long as the owner lives (a partitions node on etcd),
    /// however long the store is out. After a transient failure the guard stays armed, so
    /// dropping it goes on trying in the background.
    pub(crate) async fn release_until_stopped(
        &mut self,
        keep_min_lease: bool,
        stopped: &CancellationToken,
    ) -> Result<ReleaseOutcome, Error> {
        let min_lease_time = if keep_min_lease { self.min_lease_time } else { Duration::ZERO };
        let give_up = GiveUp::On(stopped);
        let result =
            release_until_answered(&*self.store, &self.key, self.token, min_lease_time, give_up)
                .await;
        self.armed = matches!(&result, Err(error) if error.is_transient());
        result
    }

    /// The store ended the slot itself (it refused a renewal): nothing to give back.
    pub(crate) fn forget(&mut self) {
        self.armed = false;
    }

    async fn release_keeping(&mut self, min_lease_time: Duration) -> Result<ReleaseOutcome, Error> {
        let result = telemetry::release(&*self.store, &self.key, self.token, min_lease_time).await;
        match &result {
            Ok(outcome) => tracing::debug!(key = %self.key, ?outcome, "slot released"),
            Err(error) if error.is_transient() => {
                tracing::debug!(key = %self.key, %error, "release failed; trying again in the background")
            }
            Err(error) => {
                tracing::warn!(key = %self.key, %error, "release failed; the slot expires at the end of its lease")
            }
        }
        self.armed = matches!(&result, Err(error) if error.is_transient());
        result
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, key, token, min_lease) =
            (self.store.clone(), self.key.clone(), self.token, self.min_lease_time);
        let give_up_at = tokio::time::Instant::now() + release_retry_limit(self.lease_time);
        // The current runtime, or else (a drop on a plain thread) the one it was made on.
        match tokio::runtime::Handle::try_current().ok().or_else(|| self.runtime.clone()) {
            Some(runtime) => background::spawn_release(&runtime, async move {
                let give_up = GiveUp::At(give_up_at);
                let _ = release_until_answered(&*store, &key, token, min_lease, give_up).await;
            }),
            None => tracing::warn!(
                key = %key,
                "slot dropped outside a tokio runtime; it expires at the end of its lease"
            ),
        }
    }
}

/// How long a background release is tried for a slot of `lease_time`: a lease, and at least
/// a minute, since a store paused for longer (a stopped process, a frozen VM) runs what it
/// was sent before whenever it wakes. After that the release is given up (logged), and a
/// slot such a store grants late lives out one lease.
pub(crate) fn release_retry_limit(lease_time: Duration) -> Duration {
    lease_time.max(Duration::from_secs(60))
}

/// When a release tried again gives up (the slot then lives out its lease at the store).
#[derive(Clone, Copy)]
enum GiveUp<'a> {
    /// At this moment: a guard dropped, whose owner is gone.
    At(tokio::time::Instant),
    /// Once this is cancelled: an owner that lives on, and whose session would keep an
    /// abandoned slot alive (a partitions node), gives up when it stops.
    On(&'a CancellationToken),
}

/// Releases the slot, trying again with the backoff while the store fails transiently,
/// until it answers, fails for good, or `give_up` says so; the last answer.
async fn release_until_answered(
    store: &dyn LeaseStore,
    key: &str,
    token: LeaseToken,
    min_lease_time: Duration,
    give_up: GiveUp<'_>,
) -> Result<ReleaseOutcome, Error> {
    let mut backoff = Backoff::new(FIRST_PAUSE, RELEASE_RETRY_CEILING);
    loop {
        let error = match telemetry::release(store, key, token, min_lease_time).await {
            Ok(outcome) => {
                tracing::debug!(key, ?outcome, "slot released");
                return Ok(outcome);
            }
            Err(error) => error,
        };
        let pause = backoff.next_pause();
        let given_up = !error.is_transient()
            || matches!(give_up, GiveUp::At(at) if tokio::time::Instant::now() + pause >= at);
        if given_up {
            tracing::warn!(key, %error, "release failed; given up (the slot expires at the end of its lease)");
            return Err(error);
        }
        if matches!(give_up, GiveUp::On(stopped) if stopped.is_cancelled()) {
            tracing::debug!(key, %error, "release failed; its owner stops");
            return Err(error);
        }
        tracing::debug!(key, %error, ?pause, "release failed; trying again");
        match &give_up {
            GiveUp::At(_) => tokio::time::sleep(pause).await,
            GiveUp::On(stopped) => {
                tokio::select! {
                    () = stopped.cancelled() => {}
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}
