//! [`LeaseGuard`]: a slot held outside a closure, until it is released or dropped.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use super::guard::SlotGuard;
use super::lease::{Lease, LossReason};
use super::renewal::{Renewal, renew_once, supervise};
use crate::error::Error;
use crate::store::{LeaseStore, ReleaseOutcome};

/// One slot of a group, held from [`acquire`](crate::LeaderGroupElector::acquire) until
/// [`release`](Self::release) or drop: the form to use when the work that needs the slot is
/// not one closure (a spawned task, a struct field, several awaits of a handler).
///
/// It dereferences to the slot's [`Lease`]: the fence, [`live_fence`](Lease::live_fence),
/// the loss signal ([`lost`](Lease::lost), [`loss_token`](Lease::loss_token)) and the time
/// left. It is `Send + 'static`, so it moves into a task or a struct.
///
/// - With `auto_extend`, the slot is renewed in the background while the guard lives, as
///   under `run_if_leader`. Without it, [`renew`](Self::renew) extends it by hand; the loss
///   is decided at the local deadline either way, and a refused renewal decides it at once.
/// - [`release`](Self::release) gives the slot back and says what the store did. Dropping
///   the guard gives it back in the background (count on
///   [`wait_for_releases`](crate::wait_for_releases) at shutdown). Both keep the slot until
///   `min_lease_time` after the grant, as `run_if_leader` does.
/// - Once the store refused a renewal, dropping the guard does nothing: the slot is no
///   longer this holder's. After a loss by the deadline it still gives the slot back (one
///   release, answered `NotHeld` when the slot is gone): a renewal the deadline cut off may
///   have extended it at the store.
/// - Releasing or dropping ends the lease for every clone of it
///   ([`LossReason::SteppedDown`]): a task still holding a clone sees it lost.
/// - Its renewal task runs on the runtime that acquired it. A guard that outlives that
///   runtime renews nothing more; [`lost`](Lease::lost) and
///   [`live_fence`](Lease::live_fence) still see the deadline pass, and a drop still
///   releases (on the current runtime, or else on the acquiring one while it runs).
///
/// ```
/// use std::time::Duration;
/// use leader_core::{LeaderElectionOptions, LeaderElector, MemoryStore};
/// use leader_core::store::ReleaseOutcome;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let elector = LeaderElector::new(
///     MemoryStore::new(),
///     LeaderElectionOptions::new().lease_time(Duration::from_secs(30)).auto_extend(true),
/// )?;
/// let Some(guard) = elector.acquire("outbox-drain").await? else {
///     return Ok(()); // someone else drains the outbox
/// };
/// let drain = tokio::spawn(async move {
///     // The guard moved into the task; each write is gated on the lease.
///     while let Some(fence) = guard.live_fence() {
///         println!("drained a batch under fence {fence}");
///         # break;
///     }
///     guard.release().await
/// });
/// assert_eq!(drain.await.unwrap()?, ReleaseOutcome::Released);
/// # Ok(()) }
/// ```
pub struct LeaseGuard {
    /// The task that renews the slot or watches its deadline: stopped first when the guard
    /// goes. `None` when the caller drives the supervision itself (`run_if_leader`).
    supervisor: Option<AbortOnDrop>,
    lease: Lease,
    slot: SlotGuard,
    store: Arc<dyn LeaseStore>,
    lease_time: Duration,
    /// Set once `release` began: the guard then gives the slot back however its lease ends.
    releasing: bool,
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who keeps a guard's lease: a task of its own, or the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Supervision {
    /// A spawned task renews the slot (or watches its deadline) while the guard lives.
    Spawned,
    /// The caller polls [`supervise`] itself, beside the work it runs.
    ByCaller,
}

impl LeaseGuard {
    /// The guard of `lease`, released through `slot`; with [`Supervision::Spawned`], a task
    /// renews it every `renew_interval` (if set) or watches its deadline.
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        lease: Lease,
        slot: SlotGuard,
        lease_time: Duration,
        renew_interval: Option<Duration>,
        supervision: Supervision,
    ) -> Self {
        let supervisor = (supervision == Supervision::Spawned).then(|| {
            let task = supervise(store.clone(), lease.clone(), lease_time, renew_interval);
            AbortOnDrop(tokio::spawn(task))
        });
        LeaseGuard { supervisor, lease, slot, store, lease_time, releasing: false }
    }

    /// The slot's lease (the guard also dereferences to it).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Renews the slot now, for another `lease_time`, within the lease's local deadline;
    /// what rslock calls `extend`. With `auto_extend` this is seldom needed: the guard
    /// renews in the background.
    ///
    /// - `Ok(true)`: renewed; the deadline moved on.
    /// - `Ok(false)`: the slot is no longer held (the lease was lost before, the store
    ///   refused, or the deadline passed before its answer): see
    ///   [`loss_reason`](Lease::loss_reason).
    /// - `Err(_)`: the store failed; the slot may still be held until the deadline, and a
    ///   later renewal may succeed.
    pub async fn renew(&self) -> Result<bool, Error> {
        match renew_once(&*self.store, &self.lease, self.lease_time).await {
            Renewal::Renewed => Ok(true),
            Renewal::Lost(_) => Ok(false),
            Renewal::Failed(error) => Err(error),
        }
    }

    /// Gives the slot back and says what the store did: [`ReleaseOutcome::Released`],
    /// [`Kept`](ReleaseOutcome::Kept) until `min_lease_time` after the grant, or
    /// [`NotHeld`](ReleaseOutcome::NotHeld) when the slot was already gone (it expired, or
    /// an operator released it). The lease ends first, for every clone of it.
    ///
    /// On a store failure the error is returned and the release goes on in the background
    /// (as a dropped guard's does) until the store answers or a lease has passed.
    pub async fn release(mut self) -> Result<ReleaseOutcome, Error> {
        self.releasing = true;
        self.supervisor = None;
        self.lease.released();
        self.slot.release().await
    }
}

impl Deref for LeaseGuard {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.supervisor = None;
        if !self.releasing && self.lease.loss_reason() == Some(LossReason::Refused) {
            // The store said the slot is no longer this holder's: nothing to give back.
            self.slot.forget();
        }
        // Otherwise the slot guard, still armed, releases in the background as it drops:
        // also after a loss by the deadline, since a renewal the deadline cut off may still
        // have extended the slot at the store.
        self.lease.released();
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard").field("lease", &self.lease).finish_non_exhaustive()
    }
}
