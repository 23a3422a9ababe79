//! A candidate's store, wrapped so the candidate can stop itself (SIGSTOP, continued by the
//! lab) at the worst moments of a term's life: with a renewal's reply in hand, or a grant's.
//!
//! After the lab continues it, the reply is handed back at the task's next poll, after one
//! yield: tokio wakes a yielded task after the timers that expired during the stall, so the
//! candidate's own check (its 10 ms tick) runs first, and the library then finds the reply
//! ready. The order in which a process woken from a stall runs its tasks is not up to the
//! library, and this is the one that once left a role without a leader.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use leader::store::author::{Layered, StoreLayer};
use leader::store::{AcquireOutcome, AcquireRequest, ReleaseOutcome, RenewOutcome};
use leader::{Error, LeaseStore, LeaseToken};

/// Which stall is armed; each fires once.
#[derive(Debug, Default)]
pub struct StallPoints {
    /// Stop with the next renewal's reply in hand.
    pub renewal: AtomicBool,
    /// Stop with the next grant's reply in hand.
    pub grant: AtomicBool,
}

impl StallPoints {
    /// Disarms `point`; whether it was armed.
    pub fn take(point: &AtomicBool) -> bool {
        point.swap(false, Ordering::AcqRel)
    }
}

/// The layer of a candidate's store: the stall points, and a report of each release of a
/// grant it saw ([`Event::Releasing`](crate::events::Event::Releasing)).
#[derive(Debug)]
pub struct Stalls {
    points: Arc<StallPoints>,
    /// The fence of each token granted and not yet released.
    fences: Mutex<HashMap<LeaseToken, u64>>,
    /// In partitions mode, the set's key: a release of group `{set}/{i}` is reported as
    /// partition `i`'s.
    set: Option<String>,
}

/// The candidate's store: the real one, through [`Stalls`].
pub type StallingStore<S> = Layered<Stalls, S>;

/// `inner`, stopping at the armed `points`.
pub fn stalling<S>(inner: S, points: Arc<StallPoints>) -> StallingStore<S> {
    Layered::new(Stalls { points, fences: Mutex::new(HashMap::new()), set: None }, inner)
}

/// `inner` for a node of set `set` (partitions mode): each release of a partition's grant
/// the node sends (a hand-over, or a partition given back after its local deadline passed)
/// is reported as that partition's.
pub fn reporting_releases<S>(inner: S, set: &str) -> StallingStore<S> {
    let points = Arc::new(StallPoints::default());
    let set = Some(set.to_owned());
    Layered::new(Stalls { points, fences: Mutex::new(HashMap::new()), set }, inner)
}

impl Stalls {
    fn fences(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseToken, u64>> {
        self.fences.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Stops this process until the lab continues it, then yields once, so the tasks whose
/// timers expired meanwhile run before the reply is handed back.
async fn stall(event: &crate::events::Event) {
    crate::candidate::report(event);
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    tokio::task::yield_now().await;
}

#[async_trait]
impl StoreLayer for Stalls {
    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        let outcome = inner.acquire(request).await;
        if let Ok(AcquireOutcome::Granted(grant)) = &outcome {
            self.fences().insert(request.token, grant.fence);
        }
        if let Ok(AcquireOutcome::Granted(grant)) = &outcome
            && StallPoints::take(&self.points.grant)
        {
            let at = crate::events::now_micros();
            stall(&crate::events::Event::Stalling {
                at,
                fence: grant.fence,
                during: "grant".into(),
            })
            .await;
        }
        outcome
    }

    async fn renew(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        let outcome = inner.renew(key, token, lease_time).await;
        if matches!(outcome, Ok(RenewOutcome::Renewed { .. }))
            && StallPoints::take(&self.points.renewal)
        {
            let at = crate::events::now_micros();
            stall(&crate::events::Event::Stalling { at, fence: 0, during: "renewal".into() }).await;
        }
        outcome
    }

    async fn release(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        let fence = self.fences().remove(&token);
        if let Some(fence) = fence {
            let at = crate::events::now_micros();
            let releasing = crate::events::Event::Releasing { at, fence };
            let partition = self
                .set
                .as_deref()
                .and_then(|set| key.strip_prefix(set)?.strip_prefix('/')?.parse::<u32>().ok());
            match (&self.set, partition) {
                (None, _) => crate::candidate::report(&releasing),
                (Some(_), Some(partition)) => {
                    crate::candidate::report_partition(partition, &releasing);
                }
                (Some(_), None) => {} // the node's announcement
            }
        }
        inner.release(key, token, min_lease_time).await
    }
}
