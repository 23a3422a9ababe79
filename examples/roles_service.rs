//! A long-running service with two roles, `scheduler` and `outbox`, kept by a
//! `LeadershipRegistry`. Start it in two terminals against one Redis: one instance leads
//! each role, the other stands by; Ctrl-C in the leading one hands over at once.
//!
//! Each instance also serves writes on its own address (`--listen`, which is its holder id:
//! what followers learn of the leader). Only the scheduler's leader applies a write; a
//! follower forwards it to the leader's address, which it knows from an observer of the
//! role, kept current by the store's events. Every two seconds the instance sends itself a
//! write and prints who applied it.
//!
//! ```text
//! cargo run --example roles_service -- --store redis://127.0.0.1:6379 --listen 127.0.0.1:7001
//! cargo run --example roles_service -- --store redis://127.0.0.1:6379 --listen 127.0.0.1:7002
//! cargo run --example roles_service -- --store postgres://postgres@127.0.0.1:5432/test
//! cargo run --example roles_service --features etcd -- --store etcd://127.0.0.1:2379 --listen 127.0.0.1:7001
//! cargo run --example roles_service                      # in-memory: leads both roles alone
//! cargo run --example roles_service -- --run-for 3       # stop by itself after 3 s
//! cargo run --example roles_service -- redis://127.0.0.1:6379   # the URL alone, as the demo takes it
//! ```

mod common;

use std::time::Duration;

use leader::{
    GroupObserver, LeaderChannel, LeaderChannelOptions, Leadership, LeadershipOptions,
    LeadershipRegistry,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{interval, sleep};

/// The scheduler: while leading, fires a job every second, fenced by the term's fence.
///
/// Each job is gated on `leadership.fence()`, which checks the term's deadline right then:
/// after a pause of the process this timer can fire before the term token is cancelled, and
/// the check, not the token, is what keeps a job from running under a term that is over.
async fn scheduler(leadership: Leadership) {
    loop {
        let term = match leadership.wait_for_leadership().await {
            Ok(term) => term,
            Err(leader::Error::Stopped { .. }) => return,
            Err(error) => {
                eprintln!("scheduler: cannot stand for election: {error}");
                return;
            }
        };
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

/// Serves writes on `listener`: one line in, one line out. The scheduler's leader applies
/// a write; a follower forwards it to the leader's address, as the observer last saw it.
async fn serve_writes(listener: TcpListener, me: String, leadership: Leadership) {
    let observer = match leadership.observe().await {
        Ok(observer) => std::sync::Arc::new(observer),
        Err(error) => return eprintln!("writes: cannot observe the scheduler role: {error}"),
    };
    tokio::spawn(announce_changes(leadership.observe().await.ok()));
    while let Ok((socket, _)) = listener.accept().await {
        let (observer, me, leadership) = (observer.clone(), me.clone(), leadership.clone());
        tokio::spawn(async move {
            let (reader, mut writer) = socket.into_split();
            let mut line = String::new();
            if BufReader::new(reader).read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let reply = match (leadership.fence(), observer.current().leaders.first()) {
                (Some(fence), _) => format!("applied by {me} under fence {fence}"),
                (None, Some(leader)) => match ask(&leader.holder, line.trim()).await {
                    Ok(answer) => format!("{answer} (forwarded by {me})"),
                    Err(error) => format!("the leader {} did not answer: {error}", leader.holder),
                },
                (None, None) => "no leader now; try again".to_owned(),
            };
            let _ = writer.write_all(format!("{reply}\n").as_bytes()).await;
        });
    }
}

/// Prints each change of the scheduler's leader, as followers learn of it.
async fn announce_changes(observer: Option<GroupObserver>) {
    let Some(mut observer) = observer else { return };
    let mut seen = Ok(observer.current());
    loop {
        match seen {
            Ok(state) => match state.leaders.first() {
                Some(leader) => println!(
                    "writes: the scheduler's leader is now {} (fence {})",
                    leader.holder, leader.fence
                ),
                None => println!("writes: the scheduler has no leader"),
            },
            Err(error) => println!("writes: cannot read the scheduler role now: {error}"),
        }
        seen = observer.changed().await;
    }
}

/// Sends one write to `address` and returns the answer line.
async fn ask(address: &str, request: &str) -> std::io::Result<String> {
    let socket = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(address))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect"))??;
    let (reader, mut writer) = socket.into_split();
    writer.write_all(format!("{request}\n").as_bytes()).await?;
    let mut answer = String::new();
    BufReader::new(reader).read_line(&mut answer).await?;
    Ok(answer.trim().to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    const FLAGS: &[(&str, &str)] = &[("--listen", "HOST:PORT"), ("--run-for", "SECONDS")];
    let args = common::Args::parse("roles_service", FLAGS);
    let run_for = args.parsed("roles_service", FLAGS, "--run-for").map(Duration::from_secs);
    let store = common::connect(&args.url).await;
    let listen = args.value("--listen").unwrap_or("127.0.0.1:0").to_owned();
    let listener = TcpListener::bind(&listen).await?;
    // The holder id is what followers learn of the leader: here, where it takes writes.
    let me = listener.local_addr()?.to_string();

    let mut registry = LeadershipRegistry::new(store).defaults(
        LeadershipOptions::new().lease_time(Duration::from_secs(6)).holder_id(me.clone()),
    );
    registry.add_role("scheduler")?.add_role("outbox")?;
    let roles = registry.start().await?;
    for role in roles.iter() {
        println!("{}", role.describe());
    }
    let scheduler_role = roles.get("scheduler").ok_or("scheduler role")?.clone();
    let outbox_role = roles.get("outbox").ok_or("outbox role")?.clone();
    tokio::spawn(serve_writes(listener, me.clone(), scheduler_role.clone()));
    tokio::spawn(scheduler(scheduler_role));
    tokio::spawn(outbox(outbox_role));
    tokio::spawn(async move {
        let mut every = interval(Duration::from_secs(2));
        for write in 0u64.. {
            every.tick().await;
            match ask(&me, &format!("write {write}")).await {
                Ok(answer) => println!("client: write {write}: {answer}"),
                Err(error) => println!("client: write {write}: {error}"),
            }
        }
    });

    match run_for {
        Some(period) => sleep(period).await,
        None => tokio::signal::ctrl_c().await?,
    }
    println!("shutting down: releasing every role");
    roles.stop().await?;
    leader::wait_for_releases().await;
    Ok(())
}
