//! The loop behind a [`Leadership`](super::Leadership): stand as candidate, lead while
//! renewals succeed, step down, and again, until stopped.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::preemption::better_candidate;
use super::{Command, Shared, WhenUncoordinated};
use crate::backoff::{Backoff, FIRST_PAUSE};
use crate::duration::MAX_DURATION;
use crate::election::candidate::{self, Won};
use crate::election::guard::SlotGuard;
use crate::election::lease::{Lease, LossHook, LossReason};
use crate::election::renewal::keep_renewing;
use crate::error::Error;
use crate::outage::OutageLog;
use crate::store::{AcquireRequest, ClaimInfo, Grant};
use crate::telemetry;
use crate::token::LeaseToken;

/// How long a resigned leader leaves its released slot to those waiting before it stands
/// again (or `retry_interval`, if shorter). They are woken by the release at once, so a
/// round trip or two gives each its chance; a slot nobody took is then taken back, not
/// left empty for the whole retry interval. A candidate that took the slot keeps it: the
/// resigner's attempt is refused and it waits, as every candidate does.
const RESIGN_GRACE: Duration = Duration::from_millis(100);

/// What the loop does next.
enum Next {
    /// Stand as candidate now.
    Stand,
    /// Stand again after this pause (after resigning, or after a fault).
    StandAfter(Duration),
    /// Stop for good.
    Stop,
}

/// Runs the loop until the leadership is stopped.
pub(super) async fn run(shared: Arc<Shared>, mut commands: mpsc::UnboundedReceiver<Command>) {
    let backoff = Backoff::new(FIRST_PAUSE, shared.settings.retry_interval);
    let mut state = LoopState { term: 0, outage: OutageLog::default(), last_error: None, backoff };
    if !shared.store.coordinates() {
        uncoordinated(&shared, &mut commands, &mut state).await;
    } else {
        let mut next = Next::Stand;
        loop {
            next = match next {
                Next::Stop => break,
                Next::StandAfter(pause) => {
                    match pause_unless_stopped(&shared, &mut commands, pause).await {
                        true => Next::Stand,
                        false => Next::Stop,
                    }
                }
                Next::Stand => {
                    let round = AssertUnwindSafe(one_term(&shared, &mut commands, &mut state))
                        .catch_unwind();
                    match round.await {
                        Ok(next) => next,
                        Err(panic) => {
                            let message = panic_message(&panic);
                            tracing::error!(role = %shared.settings.role, message, "leadership loop faulted; backing off");
                            step_down(&shared, LossReason::SteppedDown);
                            Next::StandAfter(shared.settings.retry_delay())
                        }
                    }
                }
            };
        }
    }
    shared.status.send_modify(|status| {
        status.is_leader = false;
        status.fence = None;
        status.stopped = true;
    });
}

/// Why a term ended by this instance's own decision.
enum Ended {
    /// A resignation.
    Command(Command),
    /// A candidate of a higher priority waits (see `priority`).
    Preempted(ClaimInfo),
}

/// What the loop carries from term to term.
struct LoopState {
    term: u64,
    outage: OutageLog,
    /// The last non-transient error, so a repeated one is logged once.
    last_error: Option<String>,
    /// The pauses after failed store calls: from 50 ms, doubling up to `retry_interval`,
    /// so a role leads again soon after a short outage ends.
    backoff: Backoff,
}

/// One candidacy and, if won, one term.
///
/// The term's end is decided once, on its lease, by whoever notices first: the renewals
/// here (refused, or the deadline passed), a check in the application (`is_leader()`,
/// `fence()`), or a resignation or stop. The loop wakes on that decision wherever it was
/// made, then steps down, releases the slot (unless a refused renewal showed it is gone)
/// and stands again.
async fn one_term(
    shared: &Arc<Shared>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    state: &mut LoopState,
) -> Next {
    let (grant, sent_at, token, mut slot) = match stand(shared, commands, state).await {
        Ok(won) => won,
        Err(next) => return next,
    };
    let settings = &shared.settings;
    let term = state.term + 1;
    let lease = term_lease(shared, term, token, grant, sent_at);
    let begun = begin_term(shared, &lease, term);
    shared.answered.send_replace(true);
    if !begun {
        // The deadline passed between the grant's check and now (a stall): never published.
        step_down(shared, LossReason::Expired);
        slot.release_within(settings.lease_time).await;
        return Next::Stand;
    }
    state.term = term;
    telemetry::metric::transition(&settings.key, "elected");
    tracing::info!(role = %settings.role, holder = %settings.holder_id, term, fence = lease.fence(), "elected");

    let ended = tokio::select! {
        biased;
        reason = keep_renewing(&*shared.store, &lease, settings.lease_time, settings.renew_interval, &mut state.outage) => {
            tracing::warn!(role = %settings.role, term, %reason, "lost leadership");
            step_down(shared, reason);
            if reason == LossReason::Refused {
                slot.forget();
            } else {
                // A renewal cut off by the deadline may still have extended the slot: give
                // it back, so the role does not wait a lease for a slot held by nobody.
                slot.release_within(settings.lease_time).await;
            }
            return Next::Stand;
        }
        () = shared.shutdown.cancelled() => None,
        command = commands.recv() => command.map(Ended::Command),
        better = better_candidate(&*shared.store, settings) => Some(Ended::Preempted(better)),
    };
    step_down(shared, LossReason::SteppedDown);
    // A release the store does not answer goes on in the background (the slot's drop); a
    // stop reports it.
    let released = slot.release().await;
    if let (None, Err(error)) = (&ended, released) {
        *shared.stop_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
    }
    match ended {
        Some(Ended::Command(Command::Resign(done))) => {
            tracing::info!(role = %settings.role, term, "resigned");
            let _ = done.send(());
            Next::StandAfter(settings.retry_interval.min(RESIGN_GRACE))
        }
        Some(Ended::Preempted(better)) => {
            tracing::info!(
                role = %settings.role, term, candidate = %better.holder, priority = better.priority,
                "stepped down for a candidate of a higher priority"
            );
            Next::StandAfter(settings.retry_interval.min(RESIGN_GRACE))
        }
        None => Next::Stop,
    }
}

/// Makes `lease` the current term and publishes it, unless its end was decided or its
/// deadline passed first: then nothing is published and it returns false.
fn begin_term(shared: &Shared, lease: &Lease, term: u64) -> bool {
    *shared.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(lease.clone());
    // Checked inside the watch's update: the lease's loss hook updates the watch too, so
    // either it runs first and this sees the end, or it runs after and undoes this.
    let published = shared.status.send_if_modified(|status| {
        if lease.is_over() {
            return false;
        }
        status.is_leader = true;
        status.term = term;
        status.fence = Some(lease.fence());
        true
    });
    if published {
        telemetry::metric::is_leader(&shared.settings.role, true);
    }
    published
}

/// Stands as candidate until a slot is won with time left on it (`Ok`: the grant, when its
/// request was sent, its token, and the guard that gives it back: the term's one way to
/// release it), or says what to do instead (`Err`): the candidate loop with [`Standing`]'s
/// policy.
async fn stand(
    shared: &Arc<Shared>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    state: &mut LoopState,
) -> Result<(Grant, Instant, LeaseToken, SlotGuard), Next> {
    let settings = &shared.settings;
    // One token for the whole candidacy: a retry after a lost reply gets the same grant.
    let token = match LeaseToken::generate() {
        Ok(token) => token,
        Err(error) => return Err(failed(shared, state, error)),
    };
    let key: Arc<str> = Arc::from(settings.key.as_str());
    // Gives back, if the candidacy ends first, a slot an unanswered attempt may have won.
    let mut guard =
        SlotGuard::new(shared.store.clone(), key, token, Duration::ZERO, settings.lease_time);
    let request = AcquireRequest {
        key: &settings.key,
        max_leaders: settings.max_leaders,
        token,
        holder: &settings.holder_id,
        lease_time: settings.lease_time,
        session: None,
        reservation: None,
    };
    let mut policy = Standing { shared, commands, state };
    let Won { grant, sent_at, token } =
        candidate::stand(&*shared.store, request, &mut guard, &mut policy).await?;
    // The term owns the slot, and its guard, from here; its end releases it.
    Ok((grant, sent_at, token, guard))
}

/// Long-lived leadership's candidate policy: stand for as long as it takes; after a store
/// failure log it (an outage once) and pause with the backoff; after a grant that came too
/// late (the store answered, slowly) pause only the backoff's first pause; a stop ends the
/// candidacy, a resignation is answered (there is nothing to step down from).
struct Standing<'a> {
    shared: &'a Arc<Shared>,
    commands: &'a mut mpsc::UnboundedReceiver<Command>,
    state: &'a mut LoopState,
}

impl candidate::Policy for Standing<'_> {
    type Stop = Next;

    fn deadline(&self) -> Option<Instant> {
        None
    }

    fn at_deadline(&mut self) -> Next {
        Next::Stand
    }

    async fn failed(&mut self, error: Error) -> Result<(), Next> {
        let next = failed(self.shared, self.state, error);
        retry_or(pause_then(self.shared, self.commands, next).await)
    }

    fn answered(&mut self) {
        succeeded(self.shared, self.state);
        self.shared.answered.send_replace(true);
    }

    fn won(&mut self) {
        // Told answered once the term is published (or found over), so a `start` that
        // returns after a grant finds the instance leading.
        succeeded(self.shared, self.state);
    }

    async fn gave_back_a_late_grant(&mut self, fence: u64) -> Result<(), Next> {
        // Never hand over a term that is already over. A late grant says the store was
        // slow, not that it fails now: it answered, so stand again at once (after at most
        // the backoff's first pause), while the slot just given back is still free.
        tracing::warn!(role = %self.shared.settings.role, fence, "grant arrived after its local deadline; released it");
        succeeded(self.shared, self.state);
        let next = Next::StandAfter(self.shared.settings.failure_delay(FIRST_PAUSE));
        retry_or(pause_then(self.shared, self.commands, next).await)
    }

    async fn interrupted(&mut self) -> Option<Next> {
        tokio::select! {
            biased;
            () = self.shared.shutdown.cancelled() => Some(Next::Stop),
            command = self.commands.recv() => match command {
                // Not leading: nothing to step down from.
                Some(Command::Resign(done)) => {
                    let _ = done.send(());
                    None
                }
                None => Some(Next::Stop),
            },
        }
    }

    fn waits_fairly(&self) -> bool {
        self.shared.settings.fair_waiting
    }

    fn priority(&self) -> Option<i32> {
        self.shared.settings.priority
    }
}

/// `Ok` to stand again in the same candidacy, or what to do instead.
fn retry_or(next: Next) -> Result<(), Next> {
    match next {
        Next::Stand => Ok(()),
        other => Err(other),
    }
}

/// Logs a failed store call (an outage once, another error once until it changes), reports
/// a refusal only a change of configuration helps in the status (so health and
/// `wait_for_leadership` carry it), and says to retry after the retry delay.
fn failed(shared: &Shared, state: &mut LoopState, error: Error) -> Next {
    let role = &shared.settings.role;
    if error.is_transient() {
        state.outage.failed(role, "election", &error);
    } else {
        let message = error.to_string();
        if state.last_error.as_ref() != Some(&message) {
            tracing::error!(role = %role, %error, "cannot stand for election; retrying");
            state.last_error = Some(message);
            let failure = Arc::new(error);
            shared.status.send_modify(|status| status.failure = Some(failure));
        }
    }
    shared.answered.send_replace(true);
    Next::StandAfter(shared.settings.failure_delay(state.backoff.next_pause()))
}

fn succeeded(shared: &Shared, state: &mut LoopState) {
    state.outage.succeeded(&shared.settings.role);
    state.last_error = None;
    state.backoff.reset();
    shared.status.send_if_modified(|status| status.failure.take().is_some());
}

/// Waits out `next`'s pause here, so a retry does not return to the caller first.
async fn pause_then(
    shared: &Arc<Shared>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    next: Next,
) -> Next {
    match next {
        Next::StandAfter(pause) if !pause_unless_stopped(shared, commands, pause).await => {
            Next::Stop
        }
        Next::StandAfter(_) => Next::Stand,
        other => other,
    }
}

/// Sleeps `pause`, answering resignations (nothing to step down from); false if stopped.
async fn pause_unless_stopped(
    shared: &Arc<Shared>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    pause: Duration,
) -> bool {
    let until = Instant::now() + pause;
    loop {
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(until) => return true,
            () = shared.shutdown.cancelled() => return false,
            command = commands.recv() => match command {
                Some(Command::Resign(done)) => { let _ = done.send(()); }
                None => return false,
            },
        }
    }
}

/// Ends the current term, if any, for `reason` (unless its end was decided already): the
/// loop no longer holds it, and the lease's loss hook reports the change.
fn step_down(shared: &Shared, reason: LossReason) {
    let current = shared.current.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(lease) = current {
        lease.end(reason);
    }
}

/// Over a store that does not coordinate: follow (never lead) or lead alone.
async fn uncoordinated(
    shared: &Arc<Shared>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    state: &mut LoopState,
) {
    let settings = &shared.settings;
    shared.answered.send_replace(true); // no store to ask
    let leads = settings.when_uncoordinated == WhenUncoordinated::Lead;
    tracing::warn!(
        role = %settings.role,
        store = shared.store.kind(),
        behaviour = ?settings.when_uncoordinated,
        "the store does not coordinate: {}",
        if leads { "leading without coordination" } else { "following; this instance will not lead" }
    );
    loop {
        if leads {
            state.term += 1;
            // Nothing renews an uncoordinated term, so it never runs out.
            let now = SystemTime::now();
            let grant = Grant {
                fence: 0,
                acquired_at: now,
                expires_at: now + MAX_DURATION,
                expires_in: MAX_DURATION,
            };
            let token = LeaseToken::from_u128(0);
            let lease = term_lease(shared, state.term, token, grant, Instant::now());
            begin_term(shared, &lease, state.term);
        }
        let command = tokio::select! {
            biased;
            () = shared.shutdown.cancelled() => None,
            command = commands.recv() => command,
        };
        step_down(shared, LossReason::SteppedDown);
        match command {
            Some(Command::Resign(done)) => {
                let _ = done.send(());
                if !pause_unless_stopped(shared, commands, settings.retry_interval).await {
                    return;
                }
            }
            None => return,
        }
    }
}

/// The lease of term `term` of this role, for `grant` requested at `sent_at`. Whoever
/// decides its end reports it on the status watch at once.
fn term_lease(
    shared: &Arc<Shared>,
    term: u64,
    token: LeaseToken,
    grant: Grant,
    sent_at: Instant,
) -> Lease {
    let settings = &shared.settings;
    let (role, key) = (Arc::from(settings.role.as_str()), Arc::from(settings.key.as_str()));
    let watcher = Arc::downgrade(shared);
    let on_loss: LossHook = Box::new(move |_reason| {
        if let Some(shared) = watcher.upgrade() {
            shared.term_ended(term);
        }
    });
    Lease::new(role, key, token, settings.holder_id.clone(), grant, sent_at, Some(on_loss))
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
