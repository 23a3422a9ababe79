//! Observation across processes: 1,000 `GroupObserver`s of one group in a child process
//! (this binary run as `--observer URL KEY COUNT`), the candidate in this one, on real Redis
//! and PostgreSQL servers. Measured: from a grant's (or release's) reply here to the child's
//! `changed()`, on the machine's one wall clock; from a crashed holder's expiry on the
//! store's clock (the same machine's) to the child seeing it; the state reads the child made
//! per change, and while idle; on Redis, the commands the server ran while nothing changed
//! and the child's pub/sub connections.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use leader::store::author::{Layered, StoreLayer};
use leader::store::{AcquireOutcome, AcquireRequest, GroupSnapshot};
use leader::{
    Error, KeyOptions, LeaderGroupElectionOptions, LeaderGroupElector, LeaseStore, LeaseToken,
};
use serde_json::{Value, json};

use crate::stats::{ms, percentile};

/// The observers the child makes, all of one group and one store handle.
pub const OBSERVERS: usize = 1_000;

/// The child: `count` observers of `key` on `url`; prints `ready`, then one line per change
/// seen by the first observer: `change <unix ns> <fences, comma-separated, or ->
/// <state reads so far>`. Every other observer consumes its changes too.
pub async fn observer_process(url: &str, key: &str, count: usize) {
    let inner = leader::store::connect(url).await.expect("the observer's store");
    let store = Layered::new(CountReads::default(), inner);
    let reads = store.layer().0.clone();
    let options = LeaderGroupElectionOptions::new(1).keys(KeyOptions::new().exact_key(key));
    let elector = LeaderGroupElector::new(store, options).unwrap();
    let mut observers = Vec::with_capacity(count);
    for _ in 0..count {
        observers.push(elector.observe("observed").await.expect("an observer"));
    }
    let mut first = observers.remove(0);
    for mut observer in observers {
        tokio::spawn(async move {
            loop {
                let _ = observer.changed().await;
            }
        });
    }
    println!("ready {}", reads.load(Ordering::SeqCst));
    loop {
        let state = first.changed().await;
        let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let fences = match &state {
            Ok(state) if state.leaders.is_empty() => "-".to_owned(),
            Ok(state) => {
                state.leaders.iter().map(|s| s.fence.to_string()).collect::<Vec<_>>().join(",")
            }
            Err(_) => "error".to_owned(),
        };
        println!("change {at} {fences} {}", reads.load(Ordering::SeqCst));
    }
}

/// One change line from the child.
struct Change {
    at: SystemTime,
    fences: String,
    reads: u64,
}

/// The child process and its lines.
struct Observers {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Observers {
    fn start(url: &str, key: &str) -> Observers {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--observer", url, key, &OBSERVERS.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("the observer process");
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
        let ready = lines.recv_timeout(Duration::from_secs(60)).expect("the observers are ready");
        assert!(ready.starts_with("ready"), "{ready}");
        Observers { child, lines }
    }

    /// The next change line, within 10 s.
    fn next(&self) -> Change {
        let line = self.lines.recv_timeout(Duration::from_secs(10)).expect("a change in 10 s");
        let parts: Vec<&str> = line.split(' ').collect();
        let [_, at, fences, reads] = parts.as_slice() else { panic!("{line}") };
        let nanos: u64 = at.parse().unwrap();
        Change {
            at: UNIX_EPOCH + Duration::from_nanos(nanos),
            fences: (*fences).to_owned(),
            reads: reads.parse().unwrap(),
        }
    }

    /// Changes until one shows `fences`.
    fn until(&self, fences: &str) -> Change {
        loop {
            let change = self.next();
            if change.fences == fences {
                return change;
            }
        }
    }
}

impl Drop for Observers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request(key: &str, token: LeaseToken, lease: Duration) -> AcquireRequest<'_> {
    AcquireRequest::new(key, std::num::NonZeroU32::MIN, token, "bench", lease)
}

async fn granted(
    store: &dyn LeaseStore,
    key: &str,
    token: LeaseToken,
    lease: Duration,
) -> leader::store::Grant {
    match store.acquire(request(key, token, lease)).await.unwrap() {
        AcquireOutcome::Granted(grant) => grant,
        other => panic!("not granted: {other:?}"),
    }
}

fn since(earlier: SystemTime, later: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

/// The section on one store (`candidate`, on its own connections), with the child
/// observing `url`. `idle_commands` counts the commands the server ran over a window.
pub async fn run(
    label: &str,
    url: &str,
    candidate: &dyn LeaseStore,
    samples: usize,
    idle_commands: Option<&dyn Fn(Duration) -> (String, u64)>,
    say: &dyn Fn(String),
) -> Value {
    let key = format!("bench:observed:{label}");
    let observers = Observers::start(url, &key);
    let mut figures = serde_json::Map::new();

    // A grant and its release, then nothing for a while, then a grant: the reads the child
    // made in between are those of the window (each change costs one).
    let held = LeaseToken::generate().unwrap();
    granted(candidate, &key, held, Duration::from_secs(30)).await;
    observers.next();
    candidate.release(&key, held, Duration::ZERO).await.unwrap();
    let before_idle = observers.until("-").reads;
    let idle_window = if samples < 50 { Duration::from_secs(2) } else { Duration::from_secs(12) };
    let (commands, subscriptions) = match idle_commands {
        Some(count) => count(idle_window),
        None => {
            tokio::time::sleep(idle_window).await;
            (String::new(), 0)
        }
    };
    let held = LeaseToken::generate().unwrap();
    granted(candidate, &key, held, Duration::from_secs(30)).await;
    let idle_reads = observers.next().reads - before_idle - 1;
    candidate.release(&key, held, Duration::ZERO).await.unwrap();
    let released = observers.until("-");

    // Grants and releases: reply here to changed() there.
    let (mut grants, mut releases) = (Vec::new(), Vec::new());
    let (reads_at_start, mut last_reads) = (released.reads, released.reads);
    let mut changes = 0;
    for _ in 0..samples {
        let held = LeaseToken::generate().unwrap();
        let grant = granted(candidate, &key, held, Duration::from_secs(30)).await;
        let replied = SystemTime::now();
        let seen = observers.until(&grant.fence.to_string());
        grants.push(since(replied, seen.at));
        candidate.release(&key, held, Duration::ZERO).await.unwrap();
        let replied = SystemTime::now();
        let seen = observers.until("-");
        releases.push(since(replied, seen.at));
        changes += 2;
        last_reads = seen.reads;
    }
    let reads_per_change = (last_reads - reads_at_start) as f64 / changes as f64;

    // Crashed holders: granted, never renewed nor released.
    let mut expiries = Vec::new();
    for _ in 0..(samples / 4).max(3) {
        let lease = Duration::from_millis(200);
        let grant = granted(candidate, &key, LeaseToken::generate().unwrap(), lease).await;
        observers.until(&grant.fence.to_string());
        let seen = observers.until("-");
        expiries.push(since(grant.expires_at, seen.at));
    }

    let (g50, g99) = (percentile(&mut grants, 50.0), percentile(&mut grants, 99.0));
    let (r50, r99) = (percentile(&mut releases, 50.0), percentile(&mut releases, 99.0));
    let (e50, emax) = (percentile(&mut expiries, 50.0), *expiries.iter().max().unwrap());
    say(format!(
        "observation on {label} ({OBSERVERS} observers in another process): grant reply to changed() p50 {} ms, p99 {} ms; release p50 {} ms, p99 {} ms; a crashed holder's expiry seen p50 {} ms, worst {} ms after the store's expiry; {reads_per_change:.2} state reads per change",
        ms(g50),
        ms(g99),
        ms(r50),
        ms(r99),
        ms(e50),
        ms(emax)
    ));
    say(format!("  idle {idle_window:?}: the observers made {idle_reads} state reads"));
    if idle_commands.is_some() {
        say(format!(
            "  idle {idle_window:?}: clients sent {commands}; the observers' process holds {subscriptions} pub/sub connection(s)"
        ));
    }
    let ms_of = |d: Duration| d.as_secs_f64() * 1e3;
    figures.insert("grant_to_changed_ms".into(), json!({"p50": ms_of(g50), "p99": ms_of(g99)}));
    figures.insert("release_to_changed_ms".into(), json!({"p50": ms_of(r50), "p99": ms_of(r99)}));
    figures.insert("expiry_seen_after_ms".into(), json!({"p50": ms_of(e50), "worst": ms_of(emax)}));
    figures.insert("state_reads_per_change".into(), json!(reads_per_change));
    figures.insert("idle_state_reads".into(), json!(idle_reads));
    if idle_commands.is_some() {
        figures.insert("idle_commands".into(), json!(commands));
        figures.insert("pubsub_connections".into(), json!(subscriptions));
    }
    Value::Object(figures)
}

/// Counts the state reads made through it.
#[derive(Debug, Clone, Default)]
struct CountReads(Arc<AtomicU64>);

#[async_trait]
impl StoreLayer for CountReads {
    async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
        self.0.fetch_add(1, Ordering::SeqCst);
        inner.state(key).await
    }
}
