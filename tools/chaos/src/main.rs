//! `leader-chaos`: runs the fault scenarios and prints the table (see the crate docs), or,
//! as `leader-chaos candidate …`, one candidate process of a scenario.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use leader_chaos::candidate::{self, CandidateArgs, CandidateMode};
use leader_chaos::lab::run_scenario;
use leader_chaos::report;
use leader_chaos::scenario::{SCENARIOS, Timing};

#[derive(Parser)]
#[command(about = "Fault-injection scenarios for leader, judged by an external checker")]
struct Cli {
    #[command(subcommand)]
    command: Option<Mode>,
    /// Repeat every fault 20 times (minutes) instead of once (seconds).
    #[arg(long)]
    soak: bool,
    /// Run only these scenarios (by name; repeatable).
    #[arg(long, value_name = "NAME")]
    only: Vec<String>,
    /// Print JSON lines instead of the table.
    #[arg(long)]
    json: bool,
    /// How the candidates hold their slots: `leadership` (long-lived terms), `closure`
    /// (`run_if_leader`) or `guard` (`acquire`).
    #[arg(long, value_enum, default_value_t = CandidateMode::Leadership)]
    mode: CandidateMode,
    /// Write each failed scenario's reports, register log and samples to DIR/<name>.txt.
    #[arg(long, value_name = "DIR")]
    dump: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum Mode {
    /// One candidate process (started by the harness).
    #[command(hide = true)]
    Candidate(CandidateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Mode::Candidate(args)) = cli.command {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let result =
            runtime.map_err(|e| e.to_string()).and_then(|r| r.block_on(candidate::run(args)));
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("candidate: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let unknown: Vec<&String> =
        cli.only.iter().filter(|name| !SCENARIOS.iter().any(|s| s.name == *name)).collect();
    if !unknown.is_empty() {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        eprintln!("unknown scenario {unknown:?}; the scenarios are {}", names.join(", "));
        return ExitCode::from(2);
    }
    let timing = if cli.soak { Timing::SOAK } else { Timing::SHORT };
    let program = std::env::current_exe().expect("the path of this program");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut failed = false;
    if !cli.json {
        println!(
            "lease {:?}, {} fault(s) per scenario, candidates in {} mode\n\n{}",
            timing.lease,
            timing.rounds,
            cli.mode.name(),
            report::HEADER
        );
    }
    let chosen = |s: &&leader_chaos::scenario::Scenario| {
        (cli.only.is_empty() || cli.only.iter().any(|n| n == s.name)) && s.supports(cli.mode)
    };
    for scenario in SCENARIOS.iter().filter(chosen) {
        match runtime.block_on(run_scenario(&program, scenario, timing, cli.mode)) {
            Ok(outcome) => {
                failed |= !outcome.verdict.violations.is_empty();
                if cli.json {
                    println!("{}", report::json(&outcome));
                } else {
                    println!("{}", report::row(&outcome));
                }
                for violation in &outcome.verdict.violations {
                    eprintln!("  {}: {violation}", scenario.name);
                }
                if let (Some(dir), false) = (&cli.dump, outcome.verdict.violations.is_empty()) {
                    let path = dir.join(format!("{}.txt", scenario.name));
                    if let Err(error) = std::fs::write(&path, format!("{:#?}", outcome.run)) {
                        eprintln!("  could not write {}: {error}", path.display());
                    }
                }
            }
            Err(error) => {
                failed = true;
                eprintln!("{}: could not run: {error}", scenario.name);
            }
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
