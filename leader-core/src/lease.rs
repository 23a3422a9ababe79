//! [`Lease`]: what a winner holds while its body runs.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::Grant;
use crate::{LeaseToken, telemetry};

tokio::task_local! {
    static CURRENT: Lease;
}

/// Why a lease was lost before its body finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal found the slot no longer held under this lease's token (it expired at the
    /// store, or an operator released it).
    Refused,
    /// The local deadline passed without a successful renewal: no auto-extension, or the
    /// store could not be reached in time.
    Expired,
    /// This instance stepped down itself: it resigned or stopped.
    SteppedDown,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Refused => "renewal refused",
            LossReason::Expired => "lease expired",
            LossReason::SteppedDown => "stepped down",
        })
    }
}

/// One held slot of a group: its token, fencing token, holder, times and loss signal.
///
/// Cheap to clone; clones share the loss signal and the renewed expiry.
///
/// ```
/// use leader_core::{Lease, LeaderElector, LeaderElectionOptions, LeaderRunResult, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let elector = LeaderElector::new(MemoryStore::new(), LeaderElectionOptions::new())?;
/// let result = elector.run_if_leader("nightly-report", |lease| async move {
///     assert!(!lease.is_lost());
///     // Code that was not handed the lease can still find it:
///     Lease::current().map(|current| current.fence())
/// }).await?;
/// assert_eq!(result, LeaderRunResult::Elected(Some(1)));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lease {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    key: Arc<str>,
    token: LeaseToken,
    fence: u64,
    holder: Arc<str>,
    acquired_at: SystemTime,
    expiry: Mutex<Expiry>,
    lost: CancellationToken,
    loss_reason: OnceLock<LossReason>,
    /// Whether the `leader_held_slots` gauge still counts this lease.
    held: AtomicBool,
}

impl Inner {
    /// Stops counting this lease as held, once.
    fn end_hold(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            telemetry::metric::held_slots(&self.key, -1.0);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.end_hold();
    }
}

#[derive(Clone, Copy)]
struct Expiry {
    /// On the store's clock.
    at: SystemTime,
    /// On the local clock, measured from before the request that set it, so it never falls
    /// after the store's expiry.
    deadline: Instant,
    /// When the request of the last successful grant or renewal was sent, on the local clock.
    confirmed_at: Instant,
}

impl Lease {
    /// A lease for `grant`, whose request was sent at `sent_at`.
    pub(crate) fn new(
        name: Arc<str>,
        key: Arc<str>,
        token: LeaseToken,
        holder: Arc<str>,
        grant: Grant,
        sent_at: Instant,
    ) -> Self {
        telemetry::metric::held_slots(&key, 1.0);
        Lease {
            inner: Arc::new(Inner {
                name,
                key,
                token,
                fence: grant.fence,
                holder,
                acquired_at: grant.acquired_at,
                expiry: Mutex::new(Expiry {
                    at: grant.expires_at,
                    deadline: sent_at + grant.expires_in,
                    confirmed_at: sent_at,
                }),
                lost: CancellationToken::new(),
                loss_reason: OnceLock::new(),
                held: AtomicBool::new(true),
            }),
        }
    }

    /// The lease of the body this task runs, if it runs inside `run_if_leader`.
    pub fn current() -> Option<Lease> {
        CURRENT.try_with(Lease::clone).ok()
    }

    /// Runs `future` with this lease as [`Lease::current`].
    pub(crate) async fn scope<F: Future>(self, future: F) -> F::Output {
        CURRENT.scope(self, future).await
    }

    /// The group or role name the lease was won for.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The store key of the group.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The secret the slot is held under.
    pub fn token(&self) -> LeaseToken {
        self.inner.token
    }

    /// The fencing token: strictly greater than that of every earlier grant of the group.
    /// Pass it to downstream stores so they can reject writes from a stale leader.
    pub fn fence(&self) -> u64 {
        self.inner.fence
    }

    /// The candidate id that holds the slot.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// When the slot was granted, on the store's clock.
    pub fn acquired_at(&self) -> SystemTime {
        self.inner.acquired_at
    }

    /// When the slot expires unless renewed again, on the store's clock.
    pub fn expires_at(&self) -> SystemTime {
        self.expiry().at
    }

    /// Time left before the local deadline, which never falls after the store's expiry.
    pub fn remaining(&self) -> Duration {
        self.expiry().deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the slot is no longer held: the loss signal has fired, or the local deadline
    /// has passed. The deadline is checked here and now, so a process that was paused past
    /// its lease (a stop signal, a long stall) sees the loss on its first check after
    /// waking, even before the task that fires the signal has run; check right before
    /// acting on leadership.
    pub fn is_lost(&self) -> bool {
        if self.inner.lost.is_cancelled() {
            return true;
        }
        if Instant::now() < self.deadline() {
            return false;
        }
        if self.inner.held.load(Ordering::Acquire) {
            self.mark_lost(LossReason::Expired);
        }
        true
    }

    /// Why the lease was lost, once it has been.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.inner.loss_reason.get().copied()
    }

    /// Resolves when the slot is no longer held: a renewal was refused, or the local deadline
    /// passed. Race your work against it to stop in time.
    pub async fn lost(&self) {
        self.inner.lost.cancelled().await
    }

    /// A token cancelled with the loss signal, for APIs that take a `CancellationToken`.
    /// Cancelling it yourself does not affect the lease.
    pub fn loss_token(&self) -> CancellationToken {
        self.inner.lost.child_token()
    }

    /// Time since the store last confirmed the slot (granted or renewed it).
    pub fn since_confirmed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.expiry().confirmed_at)
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.expiry().deadline
    }

    /// Records a successful renewal whose request was sent at `sent_at`.
    pub(crate) fn renewed(&self, expires_at: SystemTime, expires_in: Duration, sent_at: Instant) {
        let mut expiry = self.inner.expiry.lock().unwrap_or_else(|p| p.into_inner());
        *expiry = Expiry { at: expires_at, deadline: sent_at + expires_in, confirmed_at: sent_at };
    }

    /// Records that the slot was released: the lease no longer counts as held.
    pub(crate) fn released(&self) {
        self.inner.end_hold();
    }

    /// Fires the loss signal; the first reason given is kept.
    pub(crate) fn mark_lost(&self, reason: LossReason) {
        self.inner.end_hold();
        if self.inner.loss_reason.set(reason).is_ok() {
            let transition = if reason == LossReason::SteppedDown { "resigned" } else { "lost" };
            telemetry::metric::transition(&self.inner.key, transition);
            tracing::warn!(
                group = %self.inner.name,
                holder = %self.inner.holder,
                fence = self.inner.fence,
                %reason,
                "lease lost"
            );
        }
        self.inner.lost.cancel();
    }

    fn expiry(&self) -> Expiry {
        *self.inner.expiry.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.inner.name)
            .field("key", &self.inner.key)
            .field("token", &self.inner.token)
            .field("fence", &self.inner.fence)
            .field("holder", &self.inner.holder)
            .field("remaining", &self.remaining())
            .field("lost", &self.is_lost())
            .finish()
    }
}
