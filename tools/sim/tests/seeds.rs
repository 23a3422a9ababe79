//! The simulation in the test command: 10,000 seeds pass, a seed replays its trace, and
//! every deliberately broken variant is caught within a few seeds.

use leader_sim::{Mutant, replay_command, replays, run, run_many};

/// How many seeds the test command runs (`leader-sim --seeds N` runs more).
const SEEDS: u64 = 10_000;
/// Every broken variant must fail one of its first this many seeds.
const CAUGHT_WITHIN: u64 = 10;

#[test]
fn ten_thousand_seeds_pass() {
    let began = std::time::Instant::now();
    let summary = run_many(0, SEEDS, 2, None);
    println!(
        "{} seeds in {:.1?}: {} checks, slowest recovery after the faults {:?}",
        summary.runs,
        began.elapsed(),
        summary.checks,
        summary.slowest_recovery
    );
    assert_eq!(summary.runs, SEEDS);
    let failures: Vec<String> = summary
        .failed
        .iter()
        .take(5)
        .map(|(seed, violation)| {
            format!("seed {seed}: {violation}\n  replay: {}", replay_command(*seed, None))
        })
        .collect();
    assert!(failures.is_empty(), "{} seeds failed:\n{}", summary.failed.len(), failures.join("\n"));
}

/// Seeds beyond the test command's range that a longer run found failing, each fixed since
/// (21519: an operator who kept revoking slots after the faults ended, so a partition was
/// never led again).
const FOUND_BY_LONGER_RUNS: &[u64] = &[21_519];

#[test]
fn seeds_longer_runs_found_pass() {
    for &seed in FOUND_BY_LONGER_RUNS {
        let outcome = run(seed, None, false);
        assert!(outcome.passed(), "seed {seed}: {:?}", outcome.violations.first());
    }
}

#[test]
fn a_seed_replays_the_same_trace() {
    assert!(
        replays(),
        "tokio's random numbers are seeded only with --cfg tokio_unstable, which the \
         workspace's .cargo/config.toml sets; a RUSTFLAGS of your own replaces it"
    );
    for seed in 0..20 {
        let first = run(seed, None, false);
        let again = run(seed, None, false);
        assert!(first.trace.len() > 50, "seed {seed} traced only {} lines", first.trace.len());
        if let Some(line) = first.trace.iter().zip(&again.trace).position(|(a, b)| a != b) {
            panic!(
                "seed {seed} diverged at trace line {line}:\n  {}\n  {}",
                first.trace[line], again.trace[line]
            );
        }
        assert_eq!(first.trace.len(), again.trace.len(), "seed {seed}");
    }
}

#[test]
fn every_broken_variant_is_caught() {
    for mutant in Mutant::ALL {
        let caught = (0..CAUGHT_WITHIN).find(|&seed| !run(seed, Some(mutant), false).passed());
        match caught {
            Some(seed) => println!("{} caught at seed {seed}", mutant.name()),
            None => {
                panic!("{} passed seeds 0..{CAUGHT_WITHIN}: the oracle misses it", mutant.name())
            }
        }
    }
}
