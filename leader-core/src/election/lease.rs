//! [`Lease`]: what a winner holds while its body runs.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::Grant;
use crate::telemetry;
use crate::token::LeaseToken;

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
/// A lease is one term of a slot, and the term's end is decided once, by whoever notices it
/// first: a refused renewal, the local deadline passing (seen by a renewal, by the deadline
/// timer, or by a check such as [`is_lost`](Self::is_lost) or [`live_fence`](Self::live_fence)),
/// or this instance stepping down. Everything else follows that one decision: the loss
/// signal, [`loss_reason`](Self::loss_reason), and a late renewal reply, which can no
/// longer extend a lease whose end was decided.
///
/// ```
/// use leader_core::{Lease, LeaderElector, LeaderElectionOptions, LeaderRunResult, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let elector = LeaderElector::new(MemoryStore::new(), LeaderElectionOptions::new())?;
/// let result = elector.run_if_leader("nightly-report", |lease| async move {
///     // Gate each action on a check right before it: the fence while the lease is live.
///     let Some(fence) = lease.live_fence() else { return None };
///     // Code that was not handed the lease can still find it:
///     assert_eq!(Lease::current().map(|current| current.fence()), Some(fence));
///     Some(fence)
/// }).await?;
/// assert_eq!(result, LeaderRunResult::Elected(Some(1)));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lease {
    inner: Arc<Inner>,
}

/// Called once, with the reason, when the end of a lease is decided.
pub(crate) type LossHook = Box<dyn Fn(LossReason) + Send + Sync>;

struct Inner {
    name: Arc<str>,
    key: Arc<str>,
    token: LeaseToken,
    fence: u64,
    holder: Arc<str>,
    acquired_at: SystemTime,
    term: Mutex<Term>,
    lost: CancellationToken,
    /// Whether the `leader_held_slots` gauge still counts this lease.
    held: AtomicBool,
    on_loss: Option<LossHook>,
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

/// The term's state: every change of it is made under one lock, so the end is decided once.
#[derive(Clone, Copy)]
struct Term {
    /// The store's expiry, on the store's clock.
    expires_at: SystemTime,
    /// On the local clock, counted from when the request that set it was sent, so it never
    /// falls after the store's expiry.
    deadline: Instant,
    /// When the request of the last successful grant or renewal was sent, on the local clock.
    confirmed_at: Instant,
    /// Why the term ended, once that is decided.
    ended: Option<LossReason>,
}

/// How much slower than the store's clock this process's clock may run: a time to live of
/// `d` lasts `d - d / CLOCK_DRIFT_DIVISOR` on the local clock at least (0.1%: twice the
/// most NTP slews a clock by, 500 ppm, and many times a quartz oscillator's drift).
pub(crate) const CLOCK_DRIFT_DIVISOR: u32 = 1_000;

/// The local deadline of a slot that lives `expires_in` from the store's answer to a
/// request sent at `sent_at`: the store acted after the send, so the slot lives at least
/// until then, less what this clock may lag the store's over that time
/// ([`CLOCK_DRIFT_DIVISOR`]). The one rule of every lease's deadline: a term's, a
/// partition's, a node's announcement.
pub(crate) fn local_deadline(sent_at: Instant, expires_in: Duration) -> Instant {
    sent_at + local_span(expires_in)
}

/// How long a time to live of `expires_in` counts on the local clock: less what this clock
/// may lag the store's over it.
pub(crate) fn local_span(expires_in: Duration) -> Duration {
    expires_in - expires_in / CLOCK_DRIFT_DIVISOR
}

impl Lease {
    /// A lease for `grant`, whose request was sent at `sent_at`; `on_loss` is called once
    /// when its end is decided.
    pub(crate) fn new(
        name: Arc<str>,
        key: Arc<str>,
        token: LeaseToken,
        holder: Arc<str>,
        grant: Grant,
        sent_at: Instant,
        on_loss: Option<LossHook>,
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
                term: Mutex::new(Term {
                    expires_at: grant.expires_at,
                    deadline: local_deadline(sent_at, grant.expires_in),
                    confirmed_at: sent_at,
                    ended: None,
                }),
                lost: CancellationToken::new(),
                held: AtomicBool::new(true),
                on_loss,
            }),
        }
    }

    /// The lease of the body this task runs, if it runs inside `run_if_leader`.
    pub fn current() -> Option<Lease> {
        CURRENT.try_with(Lease::clone).ok()
    }

    /// Runs `future` with this lease as [`Lease::current`] (the task-local's own future: an
    /// `async fn` here would hold the body's future twice).
    pub(crate) fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self, future)
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
    /// Pass it to downstream stores so they can reject writes from a stale leader. To act
    /// on it, take it from [`live_fence`](Self::live_fence), which checks the lease first.
    pub fn fence(&self) -> u64 {
        self.inner.fence
    }

    /// The fencing token while the lease is live, checked here and now; `None` once it is
    /// lost. The one check to make right before each action:
    /// `if let Some(fence) = lease.live_fence() { write(fence) }`.
    pub fn live_fence(&self) -> Option<u64> {
        (!self.is_lost()).then_some(self.inner.fence)
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
        self.term().expires_at
    }

    /// Time left before the local deadline, which never falls after the store's expiry;
    /// zero once the lease is lost.
    pub fn remaining(&self) -> Duration {
        let term = self.term();
        match term.ended {
            Some(_) => Duration::ZERO,
            None => term.deadline.saturating_duration_since(Instant::now()),
        }
    }

    /// Whether the slot is no longer held: its end was decided (the loss signal has fired),
    /// or the local deadline has passed, which this call then decides. The deadline is
    /// checked here and now, so a process that was paused past its lease (a stop signal, a
    /// long stall) sees the loss on its first check after waking, before the task that
    /// renews has run; check right before acting on leadership.
    pub fn is_lost(&self) -> bool {
        self.decide(|term| (Instant::now() >= term.deadline).then_some(LossReason::Expired))
            .is_some()
    }

    /// Why the lease was lost, once that is decided.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.term().ended
    }

    /// Resolves when the slot is no longer held: a renewal was refused, or the local deadline
    /// passed. Race your work against it to stop in time.
    ///
    /// It resolves when the loss is decided, or at the deadline itself (which it then
    /// decides), even if nothing else runs to notice: a lease whose renewal task is gone
    /// (its runtime shut down) still signals here. After a pause of the whole process it
    /// resolves only once the process runs again, so check
    /// [`live_fence`](Self::live_fence) or [`is_lost`](Self::is_lost) right before each action
    /// too.
    pub async fn lost(&self) {
        loop {
            tokio::select! {
                biased;
                () = self.inner.lost.cancelled() => return,
                () = tokio::time::sleep_until(self.deadline()) => if self.is_lost() { return },
            }
        }
    }

    /// A token cancelled with the loss signal, for APIs that take a `CancellationToken`.
    /// Cancelling it yourself does not affect the lease. Like [`lost`](Self::lost), it can be
    /// late after a pause of the process: gate each action on a check.
    pub fn loss_token(&self) -> CancellationToken {
        self.inner.lost.child_token()
    }

    /// Time since the store last confirmed the slot (granted or renewed it).
    pub fn since_confirmed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.term().confirmed_at)
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.term().deadline
    }

    /// Whether the end is decided or the deadline has passed, without deciding anything.
    pub(crate) fn is_over(&self) -> bool {
        let term = self.term();
        term.ended.is_some() || Instant::now() >= term.deadline
    }

    /// Records a successful renewal whose request was sent at `sent_at`, unless the end of
    /// the lease was decided first or its deadline passed before the reply arrived (that
    /// decides it): then the reason, and the lease stays lost.
    pub(crate) fn renewed(
        &self,
        expires_at: SystemTime,
        expires_in: Duration,
        sent_at: Instant,
    ) -> Result<(), LossReason> {
        let ended = self.decide(|term| {
            if Instant::now() >= term.deadline {
                return Some(LossReason::Expired);
            }
            term.expires_at = expires_at;
            term.deadline = local_deadline(sent_at, expires_in);
            term.confirmed_at = sent_at;
            None
        });
        ended.map_or(Ok(()), Err)
    }

    /// Records that the holder let the slot go (released it, or dropped its guard): unless
    /// its end was decided before, the term ends as [`LossReason::SteppedDown`], quietly
    /// (a release is no loss to warn of), and clones of the lease see it lost from now on.
    pub(crate) fn released(&self) {
        let newly_ended = {
            let mut term = self.lock_term();
            term.ended.is_none().then(|| term.ended = Some(LossReason::SteppedDown)).is_some()
        };
        let inner = &*self.inner;
        inner.end_hold();
        if newly_ended {
            inner.lost.cancel();
            if let Some(on_loss) = &inner.on_loss {
                on_loss(LossReason::SteppedDown);
            }
        }
    }

    /// Decides the end of the lease for `reason`, unless it was decided before; returns the
    /// reason that stands (the first one).
    pub(crate) fn end(&self, reason: LossReason) -> LossReason {
        self.decide(|_| Some(reason)).unwrap_or(reason)
    }

    /// The one place an end is decided. Under the lock: an end decided before stands;
    /// otherwise `check` may change the term and says whether it ends now, and why. What
    /// follows a new decision runs once, outside the lock. Returns the reason that stands,
    /// or `None` while the lease lives.
    fn decide(&self, check: impl FnOnce(&mut Term) -> Option<LossReason>) -> Option<LossReason> {
        let decided = {
            let mut term = self.lock_term();
            if term.ended.is_some() {
                return term.ended;
            }
            let reason = check(&mut term)?;
            term.ended = Some(reason);
            reason
        };
        self.after_loss(decided);
        Some(decided)
    }

    /// Everything that follows the decision, once: the gauge, the log, the loss signal and
    /// the hook.
    fn after_loss(&self, reason: LossReason) {
        let inner = &*self.inner;
        inner.end_hold();
        let transition = if reason == LossReason::SteppedDown { "resigned" } else { "lost" };
        telemetry::metric::transition(&inner.key, transition);
        tracing::warn!(
            group = %inner.name,
            holder = %inner.holder,
            fence = inner.fence,
            %reason,
            "lease lost"
        );
        inner.lost.cancel();
        if let Some(on_loss) = &inner.on_loss {
            on_loss(reason);
        }
    }

    fn lock_term(&self) -> std::sync::MutexGuard<'_, Term> {
        self.inner.term.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn term(&self) -> Term {
        *self.lock_term()
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
            .field("lost", &self.is_over())
            .finish()
    }
}
