//! `leader-sim`: runs seeds of the deterministic simulation.
//!
//! - `leader-sim --seeds 1000000` runs a million seeds (a night's run) on every core;
//! - `leader-sim --seed 42 --trace` replays one seed, printing its trace;
//! - `--mutant NAME` plays a deliberately broken variant, which must fail.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use leader_sim::{Mutant, replay_command, run, run_many};

#[derive(Parser)]
#[command(about = "Deterministic simulation of leader under seeded faults")]
struct Args {
    /// Replay this one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// How many seeds to run, from --first.
    #[arg(long, default_value_t = 10_000)]
    seeds: u64,
    /// The first seed of --seeds.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Print the trace of --seed as it runs.
    #[arg(long)]
    trace: bool,
    /// A broken variant: act-past-deadline, renew-past-expiry, release-any-token,
    /// partition-without-grant or observer-sees-pending.
    #[arg(long, value_parser = parse_mutant)]
    mutant: Option<Mutant>,
}

fn parse_mutant(name: &str) -> Result<Mutant, String> {
    Mutant::by_name(name).ok_or_else(|| {
        let names: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
        format!("`{name}` is not one of {}", names.join(", "))
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let outcome = run(seed, args.mutant, args.trace);
        if std::env::var_os("LEADER_SIM_DUMP").is_some() {
            outcome.trace.iter().for_each(|line| println!("{line}"));
        }
        for violation in &outcome.violations {
            println!("VIOLATION {violation}");
        }
        println!(
            "seed {seed}: {} ({} checks, led again after {:?})",
            if outcome.passed() { "passed" } else { "FAILED" },
            outcome.checks,
            outcome.recovered_after
        );
        return if outcome.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map(usize::from).unwrap_or(1));
    let began = Instant::now();
    let summary = run_many(args.first, args.seeds, threads, args.mutant);
    println!(
        "{} seeds from {} in {:.1?} on {threads} threads: {} failed; {} checks; slowest \
         recovery after the faults {:?}",
        summary.runs,
        args.first,
        began.elapsed(),
        summary.failed.len(),
        summary.checks,
        summary.slowest_recovery
    );
    for (seed, violation) in summary.failed.iter().take(10) {
        println!("seed {seed}: {violation}\n  replay: {}", replay_command(*seed, args.mutant));
    }
    if summary.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
