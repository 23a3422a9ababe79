//! A candidate process: stands for a role with [`Leadership`] (or, with `--mode closure` or
//! `--mode guard`, holds per-call slots: see [`per_call`](crate::per_call)), and while it leads, writes
//! to the fenced register every tick with its fence, checking right before each write that
//! it still leads. It reports every check, write and end of term on standard output (see
//! [`Event`]), and every term `wait_for_leadership()` hands it; it resigns now and then so
//! the slot changes hands, and obeys these commands on standard input: `stall` (stop itself
//! with SIGSTOP between its next check and its write, like a GC pause at the worst moment),
//! `stall-renewal` and `stall-grant` (stop itself with the next renewal's or grant's reply in
//! hand, see [`stalling`](crate::stalling)), `disarm` (forget any stall not yet made) and
//! `stop` (release and exit).

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use leader::{KeyOptions, Leadership, LeadershipOptions, Lease};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

use crate::events::{Event, micros, now_micros};
use crate::stalling::{StallPoints, stalling};
use crate::store_spec::StoreSpec;

/// How often a leader checks and writes.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// What a candidate process is told on its command line.
#[derive(Debug, Clone, clap::Args)]
pub struct CandidateArgs {
    /// This candidate's holder id.
    #[arg(long)]
    pub id: String,
    /// The store: a URL `leader::store::connect` opens (redis://…, redis+sentinel://…,
    /// redis+cluster://…, postgres://…)
    #[arg(long)]
    pub store: StoreSpec,
    /// The group's exact key.
    #[arg(long)]
    pub key: String,
    /// Slots in the group.
    #[arg(long, default_value_t = 1)]
    pub max_leaders: u32,
    /// The lease, in milliseconds; renewals every third of it, retries every fifth.
    #[arg(long)]
    pub lease_ms: u64,
    /// The fenced register's address, host:port.
    #[arg(long)]
    pub register: String,
    /// Replicas that must acknowledge a grant (Sentinel scenarios).
    #[arg(long, default_value_t = 0)]
    pub replica_ack: u32,
    /// Resign after holding this long (ms) on average, so the slot changes hands.
    #[arg(long, default_value_t = 700)]
    pub resign_after_ms: u64,
    /// The store's command timeout (ms); a quarter of the lease by default.
    #[arg(long)]
    pub command_timeout_ms: Option<u64>,
    /// How the candidate holds its slot.
    #[arg(long, value_enum, default_value_t = CandidateMode::Leadership)]
    pub mode: CandidateMode,
}

/// How a candidate holds its slot: the three ways in of the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CandidateMode {
    /// Long-lived `Leadership`: terms from the one loop, resigned now and then.
    #[default]
    Leadership,
    /// `LeaderGroupElector::run_if_leader`: a term is one call's closure.
    Closure,
    /// `LeaderGroupElector::acquire`: a term is held by the guard, released or dropped.
    Guard,
    /// `Partitions`: the candidate is a node of a set of partitions, and a term is one
    /// partition's grant (see [`partitioned`](crate::partitioned)).
    Partitions,
    /// `Leadership` with priorities: candidate `c<i>` stands at priority `i + 1` (a later
    /// candidate, such as one started after a kill, is better) with a `step_down_delay` of
    /// half a lease, and never resigns; the lab also checks that the best live candidate
    /// leads after each fault.
    Priority,
}

impl CandidateMode {
    /// The name `--mode` takes.
    pub fn name(self) -> &'static str {
        match self {
            CandidateMode::Leadership => "leadership",
            CandidateMode::Closure => "closure",
            CandidateMode::Guard => "guard",
            CandidateMode::Partitions => "partitions",
            CandidateMode::Priority => "priority",
        }
    }
}

/// Runs the candidate until told to stop or its input closes.
pub async fn run(args: CandidateArgs) -> Result<(), String> {
    let lease = Duration::from_millis(args.lease_ms);
    let command_timeout = args.command_timeout_ms.map_or(lease / 4, Duration::from_millis);
    let store = args.store.connect(command_timeout, args.replica_ack).map_err(|e| e.to_string())?;
    if args.mode == CandidateMode::Partitions {
        return crate::partitioned::run(args, store).await;
    }
    let stall_points = Arc::new(StallPoints::default());
    let store = stalling(store, stall_points.clone());
    if !matches!(args.mode, CandidateMode::Leadership | CandidateMode::Priority) {
        let mode = args.mode;
        return crate::per_call::run(args, mode, store, stall_points).await;
    }
    let mut options = LeadershipOptions::new()
        .lease_time(lease)
        .renew_interval(lease / 3)
        .retry_interval(lease / 5)
        .retry_jitter(lease / 20)
        .max_leaders(args.max_leaders)
        .holder_id(args.id.clone())
        .keys(KeyOptions::new().exact_key(args.key.clone()));
    let by_priority = args.mode == CandidateMode::Priority;
    if by_priority {
        options = options
            .priority(priority_of(&args.id)?)
            .step_down_delay((lease / 2).max(Duration::from_millis(1)));
    }
    let leadership = Leadership::start("chaos", store, options).await.map_err(|e| e.to_string())?;
    tokio::spawn(report_terms(leadership.clone(), by_priority));
    let mut register = Register::new(args.register.clone());
    let mut commands = read_commands();
    let mut stall_next = false;
    let mut term: Option<(Lease, Instant)> = None; // the term's lease, when it began here
    let mut random = Random::seeded(std::process::id() as u64 ^ now_micros());
    let mut hold_for = random.around(args.resign_after_ms);
    loop {
        while let Ok(command) = commands.try_recv() {
            match command.as_str() {
                "stall" => stall_next = true,
                "stall-renewal" => stall_points.renewal.store(true, Ordering::Release),
                "stall-grant" => stall_points.grant.store(true, Ordering::Release),
                "disarm" => {
                    stall_next = false;
                    stall_points.renewal.store(false, Ordering::Release);
                    stall_points.grant.store(false, Ordering::Release);
                }
                _ => return stop(&leadership).await,
            }
        }
        if commands.is_closed() && commands.is_empty() {
            return stop(&leadership).await;
        }
        // The check, right before acting. The time left is read first: a library that says
        // "leading" after the deadline passed is then caught (time left zero), while a
        // deadline that passes during the check itself cannot look like one.
        let lease = leadership.lease();
        let (at, remaining) =
            (now_micros(), lease.as_ref().map_or(Duration::ZERO, Lease::remaining));
        let lease = lease.filter(|_| leadership.is_leader());
        if let Some((ended, _)) =
            term.take_if(|(held, _)| lease.as_ref().map(Lease::token) != Some(held.token()))
        {
            let reason = ended.loss_reason().map_or("ended".to_owned(), |r| r.to_string());
            report(&Event::Ended { at: now_micros(), fence: ended.fence(), reason });
        }
        // A stall before the write, or during a renewal, needs a term: decline without one
        // (it resigned or lost the slot since the lab saw it leading).
        let renewal_armed = lease.is_none() && StallPoints::take(&stall_points.renewal);
        if (stall_next || renewal_armed) && lease.is_none() {
            stall_next = false;
            report(&Event::StallDeclined { at: now_micros() });
        }
        if let Some(lease) = lease {
            let fence = lease.fence();
            report_leading(&lease, at, remaining);
            let began = term.get_or_insert_with(|| (lease, Instant::now())).1;
            if std::mem::take(&mut stall_next) {
                let _ = std::io::stdout().flush();
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
            }
            let at = now_micros();
            let accepted = register.write(&args.key, &args.id, fence).await;
            report(&Event::Wrote { at, fence, accepted });
            if !by_priority && began.elapsed() >= hold_for {
                report(&Event::Resigning { at: now_micros(), fence });
                leadership.resign().await;
                report(&Event::Ended { at: now_micros(), fence, reason: "resigned".into() });
                term = None;
                hold_for = random.around(args.resign_after_ms);
            }
        }
        sleep(TICK).await;
    }
}

async fn stop(leadership: &Leadership) -> Result<(), String> {
    let _ = leadership.stop().await;
    report(&Event::Stopped { at: now_micros() });
    Ok(())
}

/// Lines from standard input, as commands.
pub(crate) fn read_commands() -> mpsc::UnboundedReceiver<String> {
    let (send, receive) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if send.send(line.trim().to_owned()).is_err() {
                return;
            }
        }
    });
    receive
}

/// Reports every term `wait_for_leadership()` hands over, with its deadline as the term's
/// lease shows it right then: a term handed over already over shows no time left.
///
/// With `ends_too` (priority mode), a term's end is reported the moment its token is
/// cancelled: a step-down for a better candidate is decided inside the library, and the
/// better one may lead a round trip later, before the main loop's next check. (The checker
/// then also flags a check that found the term leading after that end.)
async fn report_terms(leadership: Leadership, ends_too: bool) {
    loop {
        let term = match leadership.wait_for_leadership().await {
            Ok(term) => term,
            Err(leader::Error::Stopped { .. }) => return,
            Err(error) => {
                // A refusal only a change of configuration helps: the lab's own mistake.
                eprintln!("candidate: cannot stand for election: {error}");
                return;
            }
        };
        let at = now_micros();
        let lease = leadership.lease();
        let (fence, remaining) =
            lease.map_or((0, Duration::ZERO), |lease| (lease.fence(), lease.remaining()));
        let believes_until = at + remaining.as_micros() as u64;
        report(&Event::TermBegan { at, fence, believes_until });
        term.cancelled().await;
        if ends_too {
            let reason = "the term's token was cancelled".to_owned();
            report(&Event::Ended { at: now_micros(), fence, reason });
        }
    }
}

/// Reports a check at `at` that found `lease` leading with `remaining` left.
pub(crate) fn report_leading(lease: &Lease, at: u64, remaining: Duration) {
    report(&Event::Leading {
        at,
        fence: lease.fence(),
        acquired_at: micros(lease.acquired_at()),
        expires_at: micros(lease.expires_at()),
        believes_until: at + remaining.as_micros() as u64,
    });
}

/// Writes `event` as one line on standard output.
pub fn report(event: &Event) {
    write_line(serde_json::to_string(event).expect("events serialize"));
}

/// Writes `event` about `partition` as one line on standard output: the event's fields and
/// `partition`.
pub fn report_partition(partition: u32, event: &Event) {
    let mut value = serde_json::to_value(event).expect("events serialize");
    value["partition"] = partition.into();
    write_line(value.to_string());
}

fn write_line(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The register connection, opened on first use and again after an error.
pub(crate) struct Register {
    address: String,
    connection: Option<BufReader<TcpStream>>,
}

impl Register {
    pub(crate) fn new(address: String) -> Self {
        Register { address, connection: None }
    }

    /// Writes with `fence`; whether the register accepted it (false if unreachable).
    pub(crate) async fn write(&mut self, key: &str, id: &str, fence: u64) -> bool {
        let request = format!("W {key} {id} {fence}\n");
        for _ in 0..2 {
            if self.connection.is_none() {
                self.connection = TcpStream::connect(&self.address).await.ok().map(BufReader::new);
            }
            let Some(connection) = self.connection.as_mut() else { return false };
            let mut reply = String::new();
            let sent = connection.get_mut().write_all(request.as_bytes()).await.is_ok()
                && connection.read_line(&mut reply).await.is_ok_and(|n| n > 0);
            if sent {
                return reply.starts_with("OK");
            }
            self.connection = None;
        }
        false
    }
}

/// The priority of candidate `c<i>` in priority mode: `i + 1`.
pub fn priority_of(id: &str) -> Result<i32, String> {
    id.strip_prefix('c')
        .and_then(|index| index.parse::<i32>().ok())
        .map(|index| index + 1)
        .ok_or_else(|| format!("a candidate id in priority mode is c<number>, not {id:?}"))
}

/// A small xorshift generator: resignation times need no more.
pub(crate) struct Random(u64);

impl Random {
    pub(crate) fn seeded(seed: u64) -> Self {
        Random(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A duration uniformly within ±50% of `mean_ms`.
    pub(crate) fn around(&mut self, mean_ms: u64) -> Duration {
        Duration::from_millis(mean_ms / 2 + self.next() % (mean_ms + 1))
    }

    /// Heads or tails.
    pub(crate) fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}
