//! A small periodic-job service built with the attribute macros: three replicas each tick
//! every 500 ms; the report runs on one of them at most once per 2 s, the thumbnail batch on
//! at most two at a time. Runs for 5 s, then prints what ran where, in time order.
//!
//! ```text
//! cargo run --example periodic_jobs                                   # in-memory store
//! cargo run --example periodic_jobs -- redis://127.0.0.1:6379         # Redis
//! ```

mod common;

use std::time::Duration;

use leader::{LeaderRunResult, leader_election, leader_group_election};
use tokio::time::{Instant, MissedTickBehavior, interval, sleep};

/// One replica of the service.
struct Replica {
    name: &'static str,
}

/// What a replica did, and when (time since the start).
type Log = Vec<(Duration, String)>;

impl Replica {
    /// At most once per 2 s across all replicas, however often they tick.
    #[leader_election(name = "hourly-report", lease_time = "10s", min_lease_time = "2s")]
    async fn report(&self) -> String {
        format!("{}: report written", self.name)
    }

    /// Up to two replicas process thumbnails at once; each batch takes 700 ms, then is
    /// committed under the slot's fence if the lease is still live (checked right then).
    #[leader_group_election(name = "thumbnails", max_leaders = 2, lease_time = "3s", auto_extend)]
    async fn thumbnails(&self) -> Option<u64> {
        sleep(Duration::from_millis(700)).await;
        leader::Lease::current().and_then(|lease| lease.live_fence())
    }

    /// Ticks until `until`.
    async fn run(self, started: Instant, until: Instant) -> Result<Log, leader::Error> {
        let mut log = Log::new();
        let mut ticks = interval(Duration::from_millis(500));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        while Instant::now() < until {
            ticks.tick().await;
            if let LeaderRunResult::Elected(report) = self.report().await? {
                log.push((started.elapsed(), report));
            }
            let entry = match self.thumbnails().await? {
                LeaderRunResult::Elected(Some(fence)) => {
                    format!("{}: thumbnail batch done under fence {fence}", self.name)
                }
                LeaderRunResult::Elected(None) => {
                    format!("{}: thumbnail batch abandoned, its lease was lost", self.name)
                }
                LeaderRunResult::Skipped => {
                    format!("{}: thumbnails skipped, two replicas busy", self.name)
                }
            };
            log.push((started.elapsed(), entry));
        }
        Ok(log)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = common::Args::parse("periodic_jobs", &[]).url;
    drop(leader::install_default_store(common::connect(&url).await));
    let started = Instant::now();
    let until = started + Duration::from_secs(5);
    let replicas = ["replica-a", "replica-b", "replica-c"]
        .map(|name| tokio::spawn(Replica { name }.run(started, until)));
    let mut log = Log::new();
    for replica in replicas {
        log.extend(replica.await??);
    }
    log.sort();
    for (at, entry) in log {
        println!("{:>6}ms  {entry}", at.as_millis());
    }
    Ok(())
}
