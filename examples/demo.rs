//! The demo: six candidates compete for a group of three slots, and a live table shows
//! saturation, release, expiry and re-admission.
//!
//! ```text
//! cargo run --example demo                                      # in-memory store
//! cargo run --example demo -- redis://127.0.0.1:6379             # Redis
//! cargo run --example demo -- postgres://postgres@127.0.0.1:5432/test
//! cargo run --example demo --features etcd -- --etcd etcd://127.0.0.1:2379   # etcd
//! ```
//!
//! A store can also be named by its kind: `--redis URL`, `--postgres URL`, `--etcd URL`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{
    LeaderGroupElectionOptions, LeaderGroupElector, LeaderRunResult, LeaseStore, LeaseToken,
};
use tokio::time::{Instant, sleep};

const GROUP: &str = "thumbnail-workers";
const SLOTS: u32 = 3;
const LEASE: Duration = Duration::from_millis(2_000);

/// Prints one row per event, timed from the start of the demo.
#[derive(Clone)]
struct Table {
    started: Instant,
}

impl Table {
    fn header(&self) {
        println!(
            "{:>7}  {:<10} {:<9} {:>16}  {:>10}  outcome",
            "tick", "candidate", "operation", "fence", "expires in"
        );
        println!("{}", "-".repeat(90));
    }

    fn row(
        &self,
        candidate: &str,
        operation: &str,
        fence: Option<u64>,
        expires_in: Option<Duration>,
        outcome: &str,
    ) {
        let tick = self.started.elapsed().as_millis();
        let fence = fence.map_or("-".to_owned(), |f| f.to_string());
        let expires = expires_in.map_or("-".to_owned(), |d| format!("{:.1}s", d.as_secs_f64()));
        println!(
            "{tick:>5}ms  {candidate:<10} {operation:<9} {fence:>16}  {expires:>10}  {outcome}"
        );
    }
}

/// One candidate: waits up to `wait`, then works for `work` while holding a slot.
async fn candidate(
    table: Table,
    store: Arc<dyn LeaseStore>,
    name: &'static str,
    wait: Duration,
    work: Duration,
    auto_extend: bool,
) -> Result<(), leader::Error> {
    let options = LeaderGroupElectionOptions::new(SLOTS)
        .wait_time(wait)
        .lease_time(LEASE)
        .auto_extend(auto_extend)
        .holder_id(name);
    let elector = LeaderGroupElector::new(store, options)?;
    let outcome =
        if wait.is_zero() { "trying once".to_owned() } else { format!("waiting up to {wait:?}") };
    table.row(name, "acquire", None, None, &outcome);
    let body_table = table.clone();
    let result = elector
        .run_if_leader(GROUP, |lease| async move {
            let extend = if auto_extend { ", auto-extend" } else { "" };
            body_table.row(
                name,
                "elected",
                Some(lease.fence()),
                Some(lease.remaining()),
                &format!("working for {work:?}{extend}"),
            );
            let finish = Instant::now() + work;
            let mut expires_at = lease.expires_at();
            while Instant::now() < finish {
                tokio::select! {
                    () = sleep(Duration::from_millis(50)) => {}
                    () = lease.lost() => {}
                }
                // The gate before each step of work: the loss signal alone can be late after
                // a pause of the process; `live_fence()` checks the deadline here and now.
                if lease.live_fence().is_none() {
                    body_table.row(name, "lost", Some(lease.fence()), None, "stopping work");
                    return;
                }
                if lease.expires_at() != expires_at {
                    expires_at = lease.expires_at();
                    body_table.row(
                        name,
                        "renew",
                        Some(lease.fence()),
                        Some(lease.remaining()),
                        "lease extended",
                    );
                }
            }
            body_table.row(
                name,
                "release",
                Some(lease.fence()),
                None,
                "work done; slot freed, waiters woken",
            );
        })
        .await?;
    match result {
        LeaderRunResult::Elected(()) => {}
        LeaderRunResult::Skipped => table.row(name, "skipped", None, None, "group full"),
    }
    Ok(())
}

/// A holder that takes a slot and dies without releasing it: the slot lapses at lease end.
async fn crashed_holder(table: Table, store: Arc<dyn LeaseStore>) -> Result<(), leader::Error> {
    let key = leader::KeyOptions::new().resolve(GROUP)?;
    let request = AcquireRequest::new(
        &key,
        std::num::NonZeroU32::new(SLOTS).expect("at least one slot"),
        LeaseToken::generate()?,
        "crashed",
        LEASE,
    );
    let AcquireOutcome::Granted(grant) = store.acquire(request).await? else {
        return Ok(());
    };
    let outcome = "then the process dies: no release";
    table.row("crashed", "elected", Some(grant.fence), Some(grant.expires_in), outcome);
    // Reported when the store drops the slot, as an observer sees it: at the lease's end on
    // memory, Redis and PostgreSQL; up to a second later on etcd (whole-second TTLs).
    let elector = LeaderGroupElector::new(store.clone(), LeaderGroupElectionOptions::new(SLOTS))?;
    let mut observer = elector.observe(GROUP).await?;
    let etcd = store.kind() == "etcd";
    tokio::spawn(async move {
        while observer.current().leaders.iter().any(|slot| slot.fence == grant.fence) {
            if observer.changed().await.is_err() {
                sleep(Duration::from_millis(50)).await;
            }
        }
        let outcome = match etcd {
            false => "lease ran out; the store freed the slot",
            true => {
                "lease ran out; the store freed the slot, and its next holder waits one \
                     lease more before it acts (etcd's lock-delay)"
            }
        };
        table.row("crashed", "expire", Some(grant.fence), None, outcome);
    });
    Ok(())
}

async fn print_state(
    table: &Table,
    store: Arc<dyn LeaseStore>,
    when: &str,
) -> Result<(), leader::Error> {
    let elector = LeaderGroupElector::new(store, LeaderGroupElectionOptions::new(SLOTS))?;
    let state = elector.state(GROUP).await?;
    let holders: Vec<String> = state
        .leaders
        .iter()
        .map(|slot| {
            format!("{}#{} ({:.1}s)", slot.holder, slot.fence, slot.expires_in.as_secs_f64())
        })
        .collect();
    // The store knows a group's size only while a slot is live; a slot in its lock-delay
    // (etcd, after a takeover) is taken, but its holder does not lead yet.
    let max = state.max_leaders.unwrap_or(SLOTS);
    let pending = match state.pending.len() {
        0 => String::new(),
        n => format!(", {n} pending (waiting out a lock-delay)"),
    };
    let taken = state.active_count + state.pending.len() as u32;
    let summary = format!(
        "{when}: {}/{max} held{pending}, {} free [{}]",
        state.active_count,
        max.saturating_sub(taken),
        holders.join(", ")
    );
    table.row("-", "state", None, None, &summary);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = common::connect(&common::Args::parse("demo", &[]).url).await;
    println!("group `{GROUP}`: {SLOTS} slots, lease {LEASE:?}, store: {}\n", store.kind());
    let table = Table { started: Instant::now() };
    table.header();

    // Saturation: three holders fill the group; one of them will crash.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(candidate(
        table.clone(),
        store.clone(),
        "alpha",
        Duration::ZERO,
        Duration::from_millis(1_200),
        false,
    ));
    tasks.spawn(candidate(
        table.clone(),
        store.clone(),
        "bravo",
        Duration::ZERO,
        Duration::from_millis(4_000),
        true,
    ));
    sleep(Duration::from_millis(100)).await;
    crashed_holder(table.clone(), store.clone()).await?;
    sleep(Duration::from_millis(100)).await;
    print_state(&table, store.clone(), "saturated").await?;

    // A candidate that will not wait is skipped; two that wait are re-admitted, one when
    // alpha releases, one when the crashed holder's slot expires.
    tasks.spawn(candidate(
        table.clone(),
        store.clone(),
        "charlie",
        Duration::ZERO,
        Duration::ZERO,
        false,
    ));
    sleep(Duration::from_millis(100)).await;
    tasks.spawn(candidate(
        table.clone(),
        store.clone(),
        "delta",
        Duration::from_secs(5),
        Duration::from_millis(1_500),
        false,
    ));
    tasks.spawn(candidate(
        table.clone(),
        store.clone(),
        "echo",
        Duration::from_secs(5),
        Duration::from_millis(1_000),
        false,
    ));
    sleep(Duration::from_millis(2_000)).await;
    print_state(&table, store.clone(), "after release and expiry").await?;

    while let Some(done) = tasks.join_next().await {
        done??;
    }
    print_state(&table, store, "at the end").await?;
    Ok(())
}
