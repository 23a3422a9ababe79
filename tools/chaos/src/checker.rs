//! The checker: judges a finished run from the candidates' reports, the register's log and
//! the store's samples, independently of the library's own bookkeeping.

mod intervals;
mod terms;
#[cfg(test)]
mod tests;

use std::time::Duration;

use self::intervals::{first_covered, longest_short, most_overlapping};
use self::terms::{Term, terms};
use crate::events::Event;
use crate::fleet::Reported;
use crate::monitor::Sample;
use crate::register::RegisterWrite;

/// When a fault was in force, and which candidates it took out of action meanwhile (for
/// good, if killed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultWindow {
    /// When the fault began, µs since the epoch.
    pub start: u64,
    /// When it stopped.
    pub end: u64,
    /// Candidates paused or stopped during the window.
    pub out: Vec<usize>,
}

/// Everything a run left behind.
#[derive(Debug, Clone)]
pub struct Run {
    /// Slots in the group.
    pub max_leaders: usize,
    /// Everything the candidates reported.
    pub reports: Vec<Reported>,
    /// The fenced register's log.
    pub writes: Vec<RegisterWrite>,
    /// The store's view over time.
    pub samples: Vec<Sample>,
    /// The faults, in order.
    pub faults: Vec<FaultWindow>,
    /// Candidates killed during the run.
    pub killed: Vec<usize>,
    /// Live slots left once every candidate had stopped and every lease could have run out.
    pub leaked: usize,
    /// Candidates that did not exit cleanly when told to stop.
    pub unclean_exits: Vec<usize>,
    /// The longest a recovery may take: one lease plus one retry.
    pub recovery_bound: Duration,
    /// The fault loses the store's data at once (a restart without persistence and without
    /// waiting out the lease): the store then forgets grants, so holders may overlap by
    /// their own beliefs, and only fencing protects the downstream store.
    pub store_forgets_grants: bool,
    /// The fault must make a stale write reach the register (which must reject it).
    pub expects_rejected_write: bool,
    /// The fault slows the network without cutting it: the longest the role may be short
    /// of N leaders, during the fault or after it.
    pub shortfall_bound: Option<Duration>,
    /// The network leaves time to renew, so no term may end by running out.
    pub terms_must_not_lapse: bool,
}

/// What the checker found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// Terms granted (fences seen).
    pub terms: usize,
    /// Most live slots at one instant, by the store's clock.
    pub max_holders: usize,
    /// Most candidates believing they led at one instant, up to their local deadlines.
    pub max_believers: usize,
    /// Writes the register accepted.
    pub writes_accepted: usize,
    /// Accepted writes that broke the register's order (one slot) or came from a term whose
    /// slot had been granted again (several slots): must be zero.
    pub stale_accepted: usize,
    /// Accepted writes that reached the register after a newer grant. A violation when the
    /// write's check came after that grant (unless the store forgot grants, when fencing
    /// alone keeps the register's order); counted only when the check came before it (the
    /// writer descheduled between its check and its write: fencing's case).
    pub superseded_accepted: usize,
    /// Checks that found a term leading after its local deadline: must be zero.
    pub checks_past_deadline: usize,
    /// Terms `wait_for_leadership()` handed over with no time left: must be zero.
    pub terms_handed_over_expired: usize,
    /// Terms that ended by running out (their local deadline passed).
    pub terms_lapsed: usize,
    /// Writes the register rejected for an old fence.
    pub writes_rejected: usize,
    /// The longest time from a fault's end to N leaders again.
    pub recovery: Duration,
    /// The longest stretch with fewer than N leaders, once N had first led: what the faults
    /// cost in availability.
    pub longest_short: Duration,
    /// Live slots left at the end.
    pub leaked: usize,
    /// Every broken rule, in words; empty when the run passed.
    pub violations: Vec<String>,
}

impl Verdict {
    /// Adds the verdict of one more group judged in the same run (a partition of a set):
    /// counts add up, extremes keep the worst, violations are named with `prefix`.
    pub fn merge(&mut self, prefix: &str, other: Verdict) {
        self.terms += other.terms;
        self.max_holders = self.max_holders.max(other.max_holders);
        self.max_believers = self.max_believers.max(other.max_believers);
        self.writes_accepted += other.writes_accepted;
        self.stale_accepted += other.stale_accepted;
        self.superseded_accepted += other.superseded_accepted;
        self.checks_past_deadline += other.checks_past_deadline;
        self.terms_handed_over_expired += other.terms_handed_over_expired;
        self.terms_lapsed += other.terms_lapsed;
        self.writes_rejected += other.writes_rejected;
        self.recovery = self.recovery.max(other.recovery);
        self.longest_short = self.longest_short.max(other.longest_short);
        self.leaked += other.leaked;
        self.violations.extend(other.violations.into_iter().map(|v| format!("{prefix}{v}")));
    }
}

/// How a candidate reports a term that ran out (`LossReason::Expired`).
const LAPSED: &str = "lease expired";

/// Judges `run`.
pub fn check(run: &Run) -> Verdict {
    let terms = terms(&run.reports);
    let mut verdict = Verdict { terms: terms.len(), leaked: run.leaked, ..Verdict::default() };
    let violations = &mut verdict.violations;
    let n = run.max_leaders;

    // Fences strictly increase in grant order.
    let mut granted: Vec<&Term> = terms.values().collect();
    granted.sort_by_key(|term| (term.acquired_at, term.fence));
    for pair in granted.windows(2) {
        if pair[1].fence <= pair[0].fence {
            violations.push(format!(
                "fence {} (c{}) granted after fence {} (c{})",
                pair[1].fence, pair[1].candidate, pair[0].fence, pair[0].candidate
            ));
        }
    }

    // At most N live slots: the store's samples, and (unless the store forgets grants) the
    // terms' own intervals on the store's clock.
    let sampled = run.samples.iter().map(|s| s.slots.len()).max().unwrap_or(0);
    let from_terms =
        if run.store_forgets_grants { 0 } else { most_overlapping(terms.values().map(Term::held)) };
    verdict.max_holders = sampled.max(from_terms);
    if verdict.max_holders > n {
        violations.push(format!(
            "{} live slots at once (N = {n}): {sampled} in the store's samples, {from_terms} by \
             the terms' grant and expiry times",
            verdict.max_holders
        ));
    }
    verdict.max_believers = most_overlapping(terms.values().map(Term::belief));
    if verdict.max_believers > n && !run.store_forgets_grants {
        violations.push(format!("{} candidates believed they led at once", verdict.max_believers));
    }

    // A check that says "leading" must come before the term's local deadline: a candidate
    // woken from a pause must notice the loss before it acts.
    for report in &run.reports {
        if let Event::Leading { at, fence, believes_until, .. } = report.event
            && believes_until <= at
        {
            verdict.checks_past_deadline += 1;
            violations.push(format!(
                "c{} found itself leading with fence {fence} {} µs after its local deadline",
                report.candidate,
                at - believes_until
            ));
        }
    }

    // No check finds a term leading after its end was reported.
    for report in &run.reports {
        if let Event::Leading { at, fence, .. } = report.event
            && let Some(ended_at) = terms.get(&(report.candidate, fence)).and_then(|t| t.ended_at)
            && at > ended_at
        {
            violations.push(format!(
                "c{} found itself leading with fence {fence} {} µs after the term's end",
                report.candidate,
                at - ended_at
            ));
        }
    }

    // A term handed over by `wait_for_leadership()` has time left: the library never hands
    // user code a term that is already over (say, a grant whose reply came too late).
    for report in &run.reports {
        if let Event::TermBegan { at, fence, believes_until } = report.event
            && believes_until <= at
        {
            verdict.terms_handed_over_expired += 1;
            violations.push(format!(
                "c{} was handed term {fence} already over (deadline {} µs before)",
                report.candidate,
                at - believes_until
            ));
        }
    }

    // The register's log, judged on its own: with one slot, accepted fences never go down.
    // And every accepted write came from a term nobody had superseded yet (a newer grant
    // with one slot; with several, a grant after the writer's lease ran out).
    let mut highest_accepted = 0;
    for write in &run.writes {
        if !write.accepted {
            verdict.writes_rejected += 1;
            continue;
        }
        verdict.writes_accepted += 1;
        if n == 1 && write.fence < highest_accepted {
            verdict.stale_accepted += 1;
            violations.push(format!(
                "stale write accepted: {} with fence {} after fence {highest_accepted}",
                write.holder, write.fence
            ));
        }
        highest_accepted = highest_accepted.max(write.fence);
        let candidate = write.holder.trim_start_matches('c').parse().unwrap_or(usize::MAX);
        let Some(term) = terms.get(&(candidate, write.fence)) else {
            violations
                .push(format!("write by {} with fence {} of no term", write.holder, write.fence));
            continue;
        };
        let superseded_by = granted.iter().find(|other| {
            other.granted_at() < write.at
                && if n == 1 {
                    other.fence > term.fence
                } else {
                    other.acquired_at >= term.expires_at
                }
        });
        let Some(other) = superseded_by else { continue };
        if n > 1 {
            verdict.stale_accepted += 1;
        }
        verdict.superseded_accepted += 1;
        // The check this write followed: when it came before the newer grant, the writer
        // believed rightly and reached the register late (its process descheduled between
        // the check and the write on a busy machine): the gap that fencing covers, judged
        // by the register's order above; a check after the grant is the library's fault.
        let checked_at = run
            .reports
            .iter()
            .filter(|report| report.candidate == candidate)
            .filter_map(|report| match report.event {
                Event::Leading { at, fence, .. } if fence == write.fence && at <= write.at => {
                    Some(at)
                }
                _ => None,
            })
            .max();
        let checked_before_the_grant = checked_at.is_some_and(|at| at < other.granted_at());
        if n == 1 && checked_before_the_grant {
            continue;
        }
        if !run.store_forgets_grants || n > 1 {
            violations.push(format!(
                "write accepted from a superseded term: {} with fence {} after fence {} was \
                 granted to c{}",
                write.holder, write.fence, other.fence, other.candidate
            ));
        }
    }
    if run.expects_rejected_write && verdict.writes_rejected == 0 {
        violations.push("the late write never reached the register".to_owned());
    }

    // What candidates in action believed: a killed candidate acts no more after its kill.
    let killed_at = |candidate: usize| {
        run.faults.iter().filter(|f| f.out.contains(&candidate)).map(|f| f.start).min()
    };
    let acting: Vec<(u64, u64)> = terms
        .values()
        .map(|term| {
            let (start, end) = term.belief();
            match killed_at(term.candidate) {
                Some(at) if run.killed.contains(&term.candidate) => (start, end.min(at)),
                _ => (start, end),
            }
        })
        .collect();

    // Recovery after each fault: N candidates in action believe they lead again.
    for fault in &run.faults {
        match first_covered(acting.iter().copied(), fault.end, n) {
            Some(at) => {
                let took = Duration::from_micros(at.saturating_sub(fault.end));
                verdict.recovery = verdict.recovery.max(took);
                if took > run.recovery_bound {
                    violations.push(format!(
                        "recovered {took:?} after the fault, more than {:?}",
                        run.recovery_bound
                    ));
                }
            }
            None => violations.push(format!("{n} leaders never returned after a fault")),
        }
    }

    // Availability: the longest stretch below N believers, from the first time N led until
    // the candidates were told to stop.
    let stopped = run.reports.iter().filter(|r| matches!(r.event, Event::Stopped { .. }));
    let end = stopped.map(|r| r.event.at()).min().unwrap_or(u64::MAX);
    if let Some(first) = first_covered(acting.iter().copied(), 0, n) {
        verdict.longest_short = longest_short(&acting, first, end, n);
    }
    if let Some(bound) = run.shortfall_bound
        && verdict.longest_short > bound
    {
        violations.push(format!(
            "fewer than {n} leaders for {:?} at a stretch, more than {bound:?}: a slow network \
             must not leave the role short for longer than a lease, a retry and a round trip",
            verdict.longest_short
        ));
    }
    let lapsed = run
        .reports
        .iter()
        .filter(|r| matches!(&r.event, Event::Ended { reason, .. } if reason == LAPSED))
        .count();
    verdict.terms_lapsed = lapsed;
    if run.terms_must_not_lapse && lapsed > 0 {
        violations
            .push(format!("{lapsed} terms ran out although the network left time to renew them"));
    }

    if run.leaked > 0 {
        violations.push(format!("{} slots still live after everyone stopped", run.leaked));
    }
    if !run.unclean_exits.is_empty() {
        violations.push(format!("candidates {:?} did not exit cleanly", run.unclean_exits));
    }
    verdict
}
