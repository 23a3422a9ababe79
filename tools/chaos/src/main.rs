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
    /// (`run_if_leader`), `guard` (`acquire`), `partitions` (nodes of a partition set) or
    /// `priority` (long-lived terms with priorities: the best live candidate must lead).
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

/// A candidate's log: what `LEADER_CHAOS_LOG` asks for (targets and levels, as in
/// `leader_core=debug,warn`), on stderr; nothing without it.
fn log_to_stderr() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let Ok(wanted) = std::env::var("LEADER_CHAOS_LOG") else { return };
    match wanted.parse::<tracing_subscriber::filter::Targets>() {
        Ok(filter) => {
            // Each line names the process: the candidates share the harness's stderr.
            let pid = std::process::id();
            let log = tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || Prefixed(pid, std::io::stderr()));
            tracing_subscriber::registry().with(log).with(filter).init();
        }
        Err(error) => eprintln!("candidate: LEADER_CHAOS_LOG={wanted:?} is not a filter: {error}"),
    }
}

/// Says on stderr when the candidate's runtime woke a timer more than 50 ms late (its one
/// thread was blocked meanwhile).
async fn report_stalls() {
    let tick = std::time::Duration::from_millis(10);
    loop {
        let asked = std::time::Instant::now();
        tokio::time::sleep(tick).await;
        let late = asked.elapsed().saturating_sub(tick);
        if late > std::time::Duration::from_millis(50) {
            eprintln!("[pid {}] runtime stalled: a timer woke {late:?} late", std::process::id());
        }
    }
}

/// Stderr with each write (one event's line) led by the candidate's process id.
struct Prefixed(u32, std::io::Stderr);

impl std::io::Write for Prefixed {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let mut whole = format!("[pid {}] ", self.0).into_bytes();
        whole.extend_from_slice(line);
        self.1.write_all(&whole)?;
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.1.flush()
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Mode::Candidate(args)) = cli.command {
        log_to_stderr();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let result = runtime.map_err(|e| e.to_string()).and_then(|r| {
            r.block_on(async {
                if std::env::var_os("LEADER_CHAOS_LOG").is_some() {
                    tokio::spawn(report_stalls());
                }
                candidate::run(args).await
            })
        });
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
