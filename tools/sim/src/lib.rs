//! A deterministic simulation of `leader`: every way in (per-call holders through
//! `run_if_leader` and `acquire` guards, `Leadership` roles, `Partitions` nodes, observers)
//! at once, over the memory store behind a seeded fault layer, in virtual time on one
//! thread, with an oracle that checks the store's truth at every step. A seed replays the
//! same run: the scenario's draws, the library's own randomness (seeded per thread) and
//! tokio's scheduling (one thread, a paused clock, `select!`s biased) all follow from it.
//!
//! See docs/reliability.md for what it simulates and what it cannot.

mod actors;
mod faults;
mod oracle;
mod rng;
mod scenario;
mod world;

pub use scenario::{Outcome, replays, run};
pub use world::Mutant;

/// Runs seeds `first..first + count` on `threads` threads; the failures, in seed order.
pub fn run_many(first: u64, count: u64, threads: usize, mutant: Option<Mutant>) -> Summary {
    let next = std::sync::atomic::AtomicU64::new(first);
    let end = first + count;
    let results = std::sync::Mutex::new(Summary::default());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if seed >= end {
                        break;
                    }
                    let outcome = run(seed, mutant, false);
                    let mut summary = results.lock().unwrap();
                    summary.runs += 1;
                    summary.checks += outcome.checks;
                    if let Some(recovered) = outcome.recovered_after {
                        summary.slowest_recovery = summary.slowest_recovery.max(recovered);
                    }
                    if !outcome.passed() {
                        summary.failed.push((seed, outcome.violations[0].clone()));
                    }
                }
            });
        }
    });
    let mut summary = results.into_inner().unwrap();
    summary.failed.sort();
    summary
}

/// What a batch of seeds found.
#[derive(Debug, Default)]
pub struct Summary {
    /// How many seeds ran.
    pub runs: u64,
    /// The oracle's checks over every run.
    pub checks: u64,
    /// The longest time any run took to be led again after its faults.
    pub slowest_recovery: std::time::Duration,
    /// Each failed seed and its first violation.
    pub failed: Vec<(u64, String)>,
}

/// The command that replays `seed` (with `mutant`) with its trace.
pub fn replay_command(seed: u64, mutant: Option<Mutant>) -> String {
    let mutant = mutant.map(|m| format!(" --mutant {}", m.name())).unwrap_or_default();
    format!("cargo run -p leader-sim -- --seed {seed}{mutant} --trace")
}
