//! A candidate process that holds per-call slots of a [`LeaderGroupElector`]: with
//! `run_if_leader` (closure mode) or with the guard `acquire` returns (guard mode). It acts
//! as the [`Leadership`](leader::Leadership) candidate does (a check and a fenced write
//! every tick, a term of about `--resign-after-ms`) and obeys the same commands; it reports
//! the same events, but for `TermBegan`, which only `wait_for_leadership` has.
//!
//! In guard mode a term that ends by choice ends with `release()` or, every other time, by
//! dropping the guard (the background release); a lost term's guard is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use leader::{
    KeyOptions, LeaderGroupElectionOptions, LeaderGroupElector, LeaderRunResult, Lease, LeaseStore,
};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::candidate::report_leading;
use crate::candidate::{
    CandidateArgs, CandidateMode, Random, Register, TICK, read_commands, report,
};
use crate::events::{Event, now_micros};
use crate::stalling::StallPoints;

/// What the command reader and the holding loop share.
struct Shared {
    stall_points: Arc<StallPoints>,
    /// Whether a term is held now: a stall is taken only then, declined otherwise.
    leading: AtomicBool,
    /// The fence of the term held now (0: none), for the end of a term a stop drops.
    holding: AtomicU64,
    /// Stop between the next check and its write.
    stall_next: AtomicBool,
    /// `stop`, or standard input closed.
    stop: CancellationToken,
}

impl Shared {
    /// Reports the end of the term a stop dropped while it was held (its guard or its
    /// `run_if_leader` call dropped with the wait): the checker judges it over from here.
    fn end_the_term_a_stop_dropped(&self) {
        let fence = self.holding.swap(0, Ordering::AcqRel);
        if fence != 0 {
            report(&Event::Ended { at: now_micros(), fence, reason: "stopped".into() });
        }
    }

    /// Declines the stalls asked for during a term that ended before taking them.
    fn decline_pending_stalls(&self) {
        let before_write = self.stall_next.swap(false, Ordering::AcqRel);
        if before_write || StallPoints::take(&self.stall_points.renewal) {
            report(&Event::StallDeclined { at: now_micros() });
        }
    }
}

/// How a held term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TermEnd {
    /// Held for its time: give it back.
    Resigned,
    /// The lease was lost (reported).
    Lost,
    /// Told to stop: give it back and exit.
    Stopping,
}

/// A term's end and its fence.
struct Held {
    end: TermEnd,
    fence: u64,
}

/// Runs the candidate in `mode` (closure or guard) over `store` until told to stop.
pub async fn run(
    args: CandidateArgs,
    mode: CandidateMode,
    store: impl LeaseStore + 'static,
    stall_points: Arc<StallPoints>,
) -> Result<(), String> {
    let lease = Duration::from_millis(args.lease_ms);
    let options = LeaderGroupElectionOptions::new(args.max_leaders)
        .lease_time(lease)
        .auto_extend(true)
        .renew_interval(lease / 3)
        .wait_time(10 * lease)
        .holder_id(args.id.clone())
        .keys(KeyOptions::new().exact_key(args.key.clone()));
    let elector = LeaderGroupElector::new(store, options).map_err(|e| e.to_string())?;
    let shared = Arc::new(Shared {
        stall_points,
        leading: AtomicBool::new(false),
        holding: AtomicU64::new(0),
        stall_next: AtomicBool::new(false),
        stop: CancellationToken::new(),
    });
    tokio::spawn(obey_commands(shared.clone()));
    let mut holder = Holder {
        shared: shared.clone(),
        register: Register::new(args.register.clone()),
        random: Random::seeded(std::process::id() as u64 ^ now_micros()),
        args,
    };
    while !shared.stop.is_cancelled() {
        let stop = shared.stop.clone();
        let term: Term<'_> = match mode {
            CandidateMode::Closure => Box::pin(holder.closure_term(&elector)),
            CandidateMode::Guard => Box::pin(holder.guard_term(&elector)),
            CandidateMode::Leadership | CandidateMode::Priority | CandidateMode::Partitions => {
                unreachable!("the Leadership and partitions candidates run elsewhere")
            }
        };
        // Told to stop while waiting for a slot: the wait is dropped (a slot granted in the
        // meantime is released in the background).
        let failed = tokio::select! {
            () = stop.cancelled() => None,
            failed = term => failed,
        };
        // The term future is dropped by now.
        shared.end_the_term_a_stop_dropped();
        if let Some(error) = failed {
            eprintln!("candidate: {error}; trying again");
            sleep(lease / 5).await;
        }
    }
    let _ = tokio::time::timeout(lease, leader::wait_for_releases()).await;
    report(&Event::Stopped { at: now_micros() });
    Ok(())
}

/// Reads the commands: stalls (taken only while leading), `disarm`, and anything else
/// (`stop`, or the end of input) stops.
async fn obey_commands(shared: Arc<Shared>) {
    let mut commands = read_commands();
    while let Some(command) = commands.recv().await {
        let points = &shared.stall_points;
        let leading = shared.leading.load(Ordering::Acquire);
        match command.as_str() {
            "stall" | "stall-renewal" if !leading => {
                report(&Event::StallDeclined { at: now_micros() })
            }
            "stall" => shared.stall_next.store(true, Ordering::Release),
            "stall-renewal" => points.renewal.store(true, Ordering::Release),
            "stall-grant" => points.grant.store(true, Ordering::Release),
            "disarm" => {
                shared.stall_next.store(false, Ordering::Release);
                points.renewal.store(false, Ordering::Release);
                points.grant.store(false, Ordering::Release);
            }
            _ => break,
        }
    }
    shared.stop.cancel();
}

/// One candidate's terms.
struct Holder {
    shared: Arc<Shared>,
    register: Register,
    random: Random,
    args: CandidateArgs,
}

type Term<'a> = std::pin::Pin<Box<dyn Future<Output = Option<String>> + 'a>>;

impl Holder {
    /// One `run_if_leader` call; the store's error, if it failed.
    async fn closure_term(&mut self, elector: &LeaderGroupElector) -> Option<String> {
        let key = self.args.key.clone();
        match elector.run_if_leader(&key, |lease| self.hold(lease)).await {
            Ok(LeaderRunResult::Elected(Held { end: TermEnd::Lost, .. }))
            | Ok(LeaderRunResult::Skipped) => None,
            Ok(LeaderRunResult::Elected(Held { fence, .. })) => {
                report(&Event::Ended { at: now_micros(), fence, reason: "resigned".into() });
                None
            }
            Err(error) => Some(error.to_string()),
        }
    }

    /// One `acquire`, the term under its guard, and its end; the store's error, if any.
    async fn guard_term(&mut self, elector: &LeaderGroupElector) -> Option<String> {
        let guard = match elector.acquire(&self.args.key).await {
            Ok(Some(guard)) => guard,
            Ok(None) => return None,
            Err(error) => return Some(error.to_string()),
        };
        let Held { end, fence } = self.hold(guard.lease().clone()).await;
        if end == TermEnd::Lost {
            drop(guard); // nothing to give back
            return None;
        }
        if self.random.coin() {
            drop(guard); // given back in the background
        } else if let Err(error) = guard.release().await {
            eprintln!("candidate: release failed ({error}); it goes on in the background");
        }
        report(&Event::Ended { at: now_micros(), fence, reason: "resigned".into() });
        None
    }

    /// Holds a term: every tick, the check and then the write, until the lease is lost,
    /// the term has lasted its time, or the candidate is told to stop.
    async fn hold(&mut self, lease: Lease) -> Held {
        let began = Instant::now();
        let hold_for = self.random.around(self.args.resign_after_ms);
        let shared = self.shared.clone();
        shared.leading.store(true, Ordering::Release);
        shared.holding.store(lease.fence(), Ordering::Release);
        let end = loop {
            if shared.stop.is_cancelled() {
                // It gives the slot back from here: the term is over for the checker.
                report(&Event::Resigning { at: now_micros(), fence: lease.fence() });
                break Held { end: TermEnd::Stopping, fence: lease.fence() };
            }
            // The check, right before acting: the time left first, as the Leadership
            // candidate reads it.
            let (at, remaining) = (now_micros(), lease.remaining());
            let Some(fence) = lease.live_fence() else {
                let reason = lease.loss_reason().map_or("ended".to_owned(), |r| r.to_string());
                report(&Event::Ended { at: now_micros(), fence: lease.fence(), reason });
                break Held { end: TermEnd::Lost, fence: lease.fence() };
            };
            report_leading(&lease, at, remaining);
            if shared.stall_next.swap(false, Ordering::AcqRel) {
                use std::io::Write as _;
                let _ = std::io::stdout().flush();
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
            }
            let at = now_micros();
            let accepted = self.register.write(&self.args.key, &self.args.id, fence).await;
            report(&Event::Wrote { at, fence, accepted });
            if began.elapsed() >= hold_for {
                report(&Event::Resigning { at: now_micros(), fence });
                break Held { end: TermEnd::Resigned, fence };
            }
            sleep(TICK).await;
        };
        shared.leading.store(false, Ordering::Release);
        shared.holding.store(0, Ordering::Release); // its end is reported
        shared.decline_pending_stalls();
        end
    }
}
