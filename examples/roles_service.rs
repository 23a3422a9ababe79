//! A long-running service with two roles, `scheduler` and `outbox`, kept by a
//! `LeadershipRegistry`. Start it in two terminals against one Redis: one instance leads
//! each role, the other stands by; Ctrl-C in the leading one hands over at once.
//!
//! ```text
//! cargo run --example roles_service -- --store redis://127.0.0.1:6379
//! cargo run --example roles_service -- --store postgres://postgres@127.0.0.1:5432/test
//! cargo run --example roles_service                      # in-memory: leads both roles alone
//! cargo run --example roles_service -- --run-for 3       # stop by itself after 3 s
//! ```

use std::time::Duration;

use leader::store::SharedStore;
use leader::{
    LeaderChannel, LeaderChannelOptions, Leadership, LeadershipOptions, LeadershipRegistry,
};
use tokio::time::{interval, sleep};

/// The scheduler: while leading, fires a job every second, fenced by the term's fence.
///
/// Each job is gated on `leadership.fence()`, which checks the term's deadline right then:
/// after a pause of the process this timer can fire before the term token is cancelled, and
/// the check, not the token, is what keeps a job from running under a term that is over.
async fn scheduler(leadership: Leadership) {
    loop {
        let term = leadership.wait_for_leadership().await;
        if term.is_cancelled() {
            return; // stopped
        }
        println!("scheduler: leading (term {}, fence {:?})", leadership.term(), leadership.fence());
        let mut ticks = interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = ticks.tick() => match leadership.fence() {
                    Some(fence) => println!("scheduler: job fired under fence {fence}"),
                    None => break, // the term ended; the token may not know yet
                },
                () = term.cancelled() => break,
            }
        }
        println!("scheduler: term over");
    }
}

/// The outbox: every instance produces events; only the leader's reach the relay.
async fn outbox(leadership: Leadership) -> Result<(), leader::Error> {
    let channel = LeaderChannel::new(
        "outbox-events",
        &leadership,
        LeaderChannelOptions::new().drain_on_loss(true),
    )?;
    let writer = channel.writer();
    tokio::spawn(async move {
        for event in 0u64.. {
            writer.send(event).await;
            sleep(Duration::from_millis(700)).await;
        }
    });
    let reader = channel.reader();
    while let Some(event) = reader.recv().await {
        println!("outbox: relayed event {event} (dropped so far: {:?})", channel.drops());
    }
    Ok(())
}

/// The store `--store URL` names (`redis://…`, `postgres://…`), in-memory without one.
async fn store_from_args(args: &[String]) -> Result<SharedStore, leader::Error> {
    let url = match args.iter().position(|arg| arg == "--store") {
        Some(i) => args.get(i + 1).map(String::as_str).unwrap_or_default(),
        None => "memory://",
    };
    leader::store::connect(url).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run_for = match args.iter().position(|arg| arg == "--run-for") {
        Some(i) => Some(Duration::from_secs(
            args.get(i + 1).and_then(|s| s.parse().ok()).ok_or("--run-for SECONDS")?,
        )),
        None => None,
    };
    let store = store_from_args(&args).await?;

    let mut registry = LeadershipRegistry::new(store)
        .defaults(LeadershipOptions::new().lease_time(Duration::from_secs(6)));
    registry.add_role("scheduler")?.add_role("outbox")?;
    let roles = registry.start()?;
    for role in roles.iter() {
        println!("{}", role.describe());
    }
    let scheduler_role = roles.get("scheduler").ok_or("scheduler role")?.clone();
    let outbox_role = roles.get("outbox").ok_or("outbox role")?.clone();
    tokio::spawn(scheduler(scheduler_role));
    tokio::spawn(outbox(outbox_role));

    match run_for {
        Some(period) => sleep(period).await,
        None => tokio::signal::ctrl_c().await?,
    }
    println!("shutting down: releasing every role");
    roles.stop().await;
    leader::wait_for_releases().await;
    Ok(())
}
