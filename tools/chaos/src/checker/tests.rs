//! The checker's verdicts on small hand-made runs.

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
    assert_eq!((verdict.max_holders, verdict.max_believers, verdict.writes_accepted), (1, 1, 2));
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
    let reports = vec![leading(0, 0, 10, 2_000), leading(1, 1_000, 11, 3_000), stopped(0, 1_100)];
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
    assert_eq!(verdict.violations, ["c1 was handed term 11 already over (deadline 0 µs before)"]);
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
    let reports =
        vec![leading(0, 0, 10, 1_000), leading(1, 1_500, 11, 3_000), leading(2, 3_400, 12, 5_000)];
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

#[test]
fn a_write_checked_before_a_newer_grant_that_arrives_after_it_is_counted_not_failed() {
    // c0 checked at 900, within its term; its write reached the register after c1's grant
    // (at 1,200) and before c1's first write: fencing keeps the register's order.
    let reports = vec![leading(0, 0, 10, 1_000), leading(0, 900, 10, 1_000)];
    let reports = [reports, vec![leading(1, 1_200, 1_200, 2_000)]].concat();
    let writes = vec![write("c0", 1_300, 10, true), write("c1", 1_400, 1_200, true)];
    let verdict = check(&run(reports, writes));
    assert_eq!(verdict.superseded_accepted, 1);
    assert_eq!(verdict.violations, Vec::<String>::new());
}

#[test]
fn a_write_checked_after_a_newer_grant_is_caught() {
    // c0 still found itself leading at 1,250, after c1's grant at 1,200.
    let reports = vec![leading(0, 0, 10, 1_300), leading(1, 1_200, 1_200, 2_000)];
    let reports = [reports, vec![leading(0, 1_250, 10, 1_300)]].concat();
    let writes = vec![write("c0", 1_260, 10, true)];
    let verdict = check(&run(reports, writes));
    assert_eq!(verdict.superseded_accepted, 1);
    let superseded = "write accepted from a superseded term: c0 with fence 10 after fence 1200";
    assert!(verdict.violations.iter().any(|v| v.contains(superseded)), "{:?}", verdict.violations);
}
