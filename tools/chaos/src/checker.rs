//! The checker: judges a finished run from the candidates' reports, the register's log and
//! the store's samples, independently of the library's own bookkeeping.

use std::collections::BTreeMap;
use std::time::Duration;

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
    /// Accepted writes sent after a newer grant: zero unless the store forgot grants, when
    /// fencing alone keeps the register's order.
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

/// One term (one grant) as the reports show it.
#[derive(Debug, Clone, Copy)]
struct Term {
    candidate: usize,
    fence: u64,
    /// Store clock.
    acquired_at: u64,
    /// Store clock: the latest expiry the holder was told of.
    expires_at: u64,
    /// Wall clock: first check that found it leading.
    first_check: u64,
    /// Wall clock: the latest local deadline a check saw.
    believes_until: u64,
    /// Wall clock: when the holder started to resign, or the library sent the release of
    /// the slot (whichever came first).
    resigning_at: Option<u64>,
    /// Wall clock: when the holder found the term over.
    ended_at: Option<u64>,
}

impl Term {
    /// Believed from the first check until the local deadline, or until it knew better.
    fn belief(&self) -> (u64, u64) {
        let end = self.ended_at.map_or(self.believes_until, |e| e.min(self.believes_until));
        (self.first_check, end.max(self.first_check))
    }

    /// Held by the store's clock: from the grant to the expiry, or the release. The store
    /// keeps time in whole milliseconds, so the release is taken at the millisecond it fell in.
    fn held(&self) -> (u64, u64) {
        let end =
            self.resigning_at.map_or(self.expires_at, |r| (r / 1000 * 1000).min(self.expires_at));
        (self.acquired_at, end.max(self.acquired_at))
    }

    /// When the store granted the term, as precisely as known: the store reports grant times
    /// in milliseconds, and the fence is the server's clock in microseconds unless it had to
    /// be raised above an earlier fence; otherwise the latest instant of that millisecond.
    fn granted_at(&self) -> u64 {
        let millisecond = self.acquired_at..self.acquired_at + 1000;
        if millisecond.contains(&self.fence) { self.fence } else { millisecond.end - 1 }
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

/// The terms by (candidate, fence).
fn terms(reports: &[Reported]) -> BTreeMap<(usize, u64), Term> {
    let mut terms: BTreeMap<(usize, u64), Term> = BTreeMap::new();
    for Reported { candidate, event, .. } in reports {
        let candidate = *candidate;
        match *event {
            Event::Leading { at, fence, acquired_at, expires_at, believes_until } => {
                let term = terms.entry((candidate, fence)).or_insert(Term {
                    candidate,
                    fence,
                    acquired_at,
                    expires_at,
                    first_check: at,
                    believes_until,
                    resigning_at: None,
                    ended_at: None,
                });
                term.expires_at = term.expires_at.max(expires_at);
                term.believes_until = term.believes_until.max(believes_until);
            }
            Event::Resigning { at, fence } => {
                if let Some(term) = terms.get_mut(&(candidate, fence)) {
                    term.resigning_at.get_or_insert(at);
                    term.ended_at.get_or_insert(at);
                }
            }
            Event::Ended { at, fence, .. } => {
                if let Some(term) = terms.get_mut(&(candidate, fence)) {
                    term.ended_at.get_or_insert(at);
                }
            }
            Event::Releasing { at, fence } => {
                if let Some(term) = terms.get_mut(&(candidate, fence)) {
                    term.resigning_at = Some(term.resigning_at.map_or(at, |r| r.min(at)));
                }
            }
            Event::Stopped { at } => {
                // A candidate that stopped believes nothing more: a term its stop dropped
                // (a guard dropped with the wait it was won in) ends with it at the latest.
                for (_, term) in terms.range_mut((candidate, 0)..=(candidate, u64::MAX)) {
                    term.ended_at.get_or_insert(at);
                }
            }
            Event::Wrote { .. }
            | Event::StallDeclined { .. }
            | Event::TermBegan { .. }
            | Event::Stalling { .. } => {}
        }
    }
    terms
}

/// The most intervals `[start, end)` covering one instant.
fn most_overlapping(intervals: impl Iterator<Item = (u64, u64)>) -> usize {
    let mut edges: Vec<(u64, i32)> =
        intervals.filter(|(s, e)| e > s).flat_map(|(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_unstable(); // an end (-1) sorts before a start (+1) at the same instant
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// The longest stretch within `[from, to)` that fewer than `n` intervals cover.
fn longest_short(intervals: &[(u64, u64)], from: u64, to: u64, n: usize) -> Duration {
    let mut edges: Vec<(u64, i32)> =
        intervals.iter().filter(|(s, e)| e > s).flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_unstable();
    let (mut now, mut short_since, mut longest) = (0i32, None, 0u64);
    for (at, step) in edges {
        let was_short = now < n as i32;
        now += step;
        let is_short = now < n as i32;
        if !was_short && is_short {
            short_since = Some(at);
        } else if was_short
            && !is_short
            && let Some(since) = short_since.take()
        {
            let (since, until) = (since.max(from), at.min(to));
            longest = longest.max(until.saturating_sub(since));
        }
    }
    Duration::from_micros(longest)
}

/// The first instant at or after `from` that `n` intervals cover.
fn first_covered(intervals: impl Iterator<Item = (u64, u64)>, from: u64, n: usize) -> Option<u64> {
    let mut edges: Vec<(u64, i32)> = intervals
        .filter(|(_, e)| *e > from)
        .map(|(s, e)| (s.max(from), e))
        .filter(|(s, e)| e > s)
        .flat_map(|(s, e)| [(s, 1), (e, -1)])
        .collect();
    edges.sort_unstable();
    let mut now = 0i32;
    for (at, step) in edges {
        now += step;
        if now >= n as i32 {
            return Some(at);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leading(candidate: usize, at: u64, fence: u64, until: u64) -> Reported {
        Reported {
            candidate,
            partition: None,
            event: Event::Leading {
                at,
                fence,
                acquired_at: at,
                expires_at: until + 100,
                believes_until: until,
            },
        }
    }

    fn run(reports: Vec<Reported>, writes: Vec<RegisterWrite>) -> Run {
        Run {
            max_leaders: 1,
            reports,
            writes,
            samples: Vec::new(),
            faults: Vec::new(),
            killed: Vec::new(),
            leaked: 0,
            unclean_exits: Vec::new(),
            recovery_bound: Duration::from_secs(1),
            store_forgets_grants: false,
            expects_rejected_write: false,
            shortfall_bound: None,
            terms_must_not_lapse: false,
        }
    }

    fn write(holder: &str, at: u64, fence: u64, accepted: bool) -> RegisterWrite {
        RegisterWrite { at, key: "k".to_owned(), holder: holder.to_owned(), fence, accepted }
    }

    #[test]
    fn a_clean_hand_over_passes() {
        let reports = vec![leading(0, 0, 10, 1_000), leading(1, 1_200, 11, 2_000)];
        let writes = vec![write("c0", 500, 10, true), write("c1", 1_500, 11, true)];
        let verdict = check(&run(reports, writes));
        assert_eq!(verdict.violations, Vec::<String>::new());
        assert_eq!(
            (verdict.max_holders, verdict.max_believers, verdict.writes_accepted),
            (1, 1, 2)
        );
    }

    #[test]
    fn overlapping_beliefs_and_a_stale_write_are_caught() {
        let reports = vec![leading(0, 0, 10, 2_000), leading(1, 1_000, 11, 3_000)];
        let writes = vec![write("c1", 1_100, 11, true), write("c0", 1_500, 10, true)];
        let verdict = check(&run(reports, writes));
        assert_eq!(verdict.max_believers, 2);
        assert_eq!(verdict.stale_accepted, 1);
        assert_eq!(verdict.violations.len(), 3, "{:?}", verdict.violations);
    }

    #[test]
    fn a_term_ends_at_its_candidates_stop_at_the_latest() {
        let stopped =
            |candidate, at| Reported { candidate, partition: None, event: Event::Stopped { at } };
        // c0's stop dropped its guard (no end reported): c1, granted after, overlaps nothing.
        let reports = vec![leading(0, 0, 10, 2_000), stopped(0, 900), leading(1, 1_000, 11, 3_000)];
        assert_eq!(check(&run(reports, Vec::new())).max_believers, 1);
        // Stopped after c1 began: both believed at once.
        let reports =
            vec![leading(0, 0, 10, 2_000), leading(1, 1_000, 11, 3_000), stopped(0, 1_100)];
        assert_eq!(check(&run(reports, Vec::new())).max_believers, 2);
    }

    #[test]
    fn a_check_past_the_local_deadline_is_caught() {
        let mut reports = vec![leading(0, 0, 10, 1_000)];
        reports.push(leading(0, 1_500, 10, 1_500)); // woke from a pause, still "leading"
        let verdict = check(&run(reports, Vec::new()));
        assert_eq!(verdict.checks_past_deadline, 1);
        assert!(verdict.violations[0].contains("0 µs after its local deadline"));
    }

    #[test]
    fn a_term_handed_over_already_over_is_caught() {
        let reports = vec![
            leading(0, 0, 10, 1_000),
            Reported {
                candidate: 0,
                partition: None,
                event: Event::TermBegan { at: 5, fence: 10, believes_until: 1_000 },
            },
            Reported {
                candidate: 1,
                partition: None,
                event: Event::TermBegan { at: 2_000, fence: 11, believes_until: 2_000 },
            },
        ];
        let verdict = check(&run(reports, Vec::new()));
        assert_eq!(verdict.terms_handed_over_expired, 1);
        assert_eq!(
            verdict.violations,
            ["c1 was handed term 11 already over (deadline 0 µs before)"]
        );
    }

    #[test]
    fn a_long_shortfall_is_caught_where_the_fault_must_not_cause_one() {
        let reports = vec![leading(0, 0, 10, 1_000), leading(1, 3_000, 11, 4_000)];
        let mut run = run(reports, Vec::new());
        assert_eq!(check(&run).violations, Vec::<String>::new(), "measured, not judged");
        run.shortfall_bound = Some(Duration::from_micros(1_500));
        let verdict = check(&run);
        assert_eq!(verdict.longest_short, Duration::from_micros(2_000));
        assert!(
            verdict.violations[0].starts_with("fewer than 1 leaders for 2ms"),
            "{:?}",
            verdict.violations
        );
    }

    #[test]
    fn a_lapsed_term_is_caught_where_the_network_leaves_time_to_renew() {
        let ended = |reason: &str| Reported {
            candidate: 0,
            partition: None,
            event: Event::Ended { at: 900, fence: 10, reason: reason.to_owned() },
        };
        let reports = vec![leading(0, 0, 10, 1_000), ended(LAPSED), ended("resigned")];
        let mut run = run(reports, Vec::new());
        assert_eq!(check(&run).terms_lapsed, 1);
        assert!(check(&run).violations.is_empty());
        run.terms_must_not_lapse = true;
        assert_eq!(
            check(&run).violations,
            ["1 terms ran out although the network left time to renew them"]
        );
    }

    #[test]
    fn fences_out_of_grant_order_are_caught() {
        let reports = vec![leading(0, 0, 11, 1_000), leading(1, 1_200, 10, 2_000)];
        let verdict = check(&run(reports, Vec::new()));
        assert!(verdict.violations[0].starts_with("fence 10 (c1) granted after fence 11"));
    }

    #[test]
    fn each_kill_is_recovered_from_by_the_next_leader() {
        let reports = vec![
            leading(0, 0, 10, 1_000),
            leading(1, 1_500, 11, 3_000),
            leading(2, 3_400, 12, 5_000),
        ];
        let mut run = run(reports, vec![]);
        run.faults = vec![
            FaultWindow { start: 900, end: 900, out: vec![0] },
            FaultWindow { start: 2_900, end: 2_900, out: vec![1] },
        ];
        run.killed = vec![0, 1];
        let verdict = check(&run);
        assert_eq!(verdict.violations, Vec::<String>::new());
        assert_eq!(verdict.recovery, Duration::from_micros(600));
        assert_eq!(verdict.longest_short, Duration::from_micros(600));
    }

    #[test]
    fn recovery_is_measured_from_the_fault_end() {
        let mut run = run(vec![leading(0, 0, 10, 1_000), leading(1, 5_000, 11, 9_000)], vec![]);
        run.faults = vec![FaultWindow { start: 1_000, end: 2_000, out: vec![0] }];
        run.recovery_bound = Duration::from_micros(2_000);
        let verdict = check(&run);
        assert_eq!(verdict.recovery, Duration::from_micros(3_000));
        assert_eq!(verdict.violations.len(), 1, "{:?}", verdict.violations);
    }
}
