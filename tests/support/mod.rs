//! Test support: requests and tokens, a faulty view of a `MemoryStore` (faulty.rs), log
//! capture, waiting for a condition, and contests of several candidates.

#![allow(dead_code)] // each test file uses part of it

#[allow(unused_imports)] // each test file uses part of it
pub use leader_testkit::{
    certificates, etcd, postgres_server, proxy, redis_cluster, redis_sentinel, redis_server,
};

#[cfg(feature = "etcd")]
pub mod etcd_store;
mod faulty;
pub mod observing;
#[cfg(feature = "redis")]
pub mod redis;

#[allow(unused_imports)] // each test file uses part of it
pub use faulty::{Faulty, FaultyStore};

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{Error, LeaseStore, LeaseToken};

/// A fresh lease token.
pub fn token() -> LeaseToken {
    LeaseToken::generate().expect("the operating system's random numbers")
}

/// A request for a slot of `key` (a group of `max_leaders`) under `token`, for holder
/// `test`, living 10 s.
pub fn request(key: &str, max_leaders: u32, token: LeaseToken) -> AcquireRequest<'_> {
    request_for(key, max_leaders, token, Duration::from_secs(10))
}

/// [`request`], living `lease_time`.
pub fn request_for(
    key: &str,
    max_leaders: u32,
    token: LeaseToken,
    lease_time: Duration,
) -> AcquireRequest<'_> {
    let max_leaders = NonZeroU32::new(max_leaders).expect("a test asks for at least one slot");
    AcquireRequest::new(key, max_leaders, token, "test", lease_time)
}

/// The fence of a grant; a test's failure if the outcome is anything else.
pub fn granted_fence(outcome: AcquireOutcome) -> u64 {
    match outcome {
        AcquireOutcome::Granted(grant) => grant.fence,
        other => panic!("not granted: {other:?}"),
    }
}

/// Starts a leadership of `role` (once the store answered its first attempt); the options
/// must be valid and the store must not refuse them (a test's own mistake if not).
pub async fn start(
    role: &str,
    store: impl LeaseStore + 'static,
    options: leader::LeadershipOptions,
) -> leader::Leadership {
    leader::Leadership::start(role, store, options).await.expect("valid options, not refused")
}

/// Polls `check` every few milliseconds until it holds, for at most `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

thread_local! {
    static CAPTURING: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Log lines written on this thread while the returned guard lives (so, in a current-thread
/// runtime, by every task of the test): for asserting what was logged, and how often.
///
/// One global subscriber serves every test of the binary and writes each line to the
/// capture of the thread that logged it; per-test scoped subscribers would race over
/// tracing's process-wide caches when tests run in parallel.
pub fn capture_logs() -> (CaptureGuard, Logs) {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(|| ThreadCapture)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
    });
    let logs = Logs::default();
    CAPTURING.with(|capturing| *capturing.borrow_mut() = Some(logs.clone()));
    (CaptureGuard, logs)
}

/// Stops capturing on drop.
pub struct CaptureGuard;

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURING.with(|capturing| *capturing.borrow_mut() = None);
    }
}

/// Writes to the capture of the current thread, if any.
struct ThreadCapture;

impl std::io::Write for ThreadCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURING.with(|capturing| {
            if let Some(logs) = &mut *capturing.borrow_mut() {
                logs.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `capture_logs` collected.
#[derive(Clone, Default)]
pub struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    /// The lines that contain `text`.
    pub fn lines_with(&self, text: &str) -> Vec<String> {
        let bytes = self.0.lock().unwrap();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_owned)
            .collect()
    }
}

/// A contest for one group: candidates on each of some stores call `run_if_leader` in a
/// loop, holding a slot for `hold` each time they are elected.
#[derive(Debug, Clone)]
pub struct Contest {
    /// The group's name.
    pub group: String,
    /// Its `max_leaders`.
    pub max_leaders: u32,
    /// Candidates per store.
    pub per_store: usize,
    /// How long each call waits for a slot.
    pub wait_time: Duration,
    /// How long an elected body holds its slot.
    pub hold: Duration,
    /// When each candidate stops.
    pub until: Until,
}

/// When a [`Contest`]'s candidates stop.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// After this many calls each.
    Rounds(usize),
    /// Once this long has passed.
    Elapsed(Duration),
}

impl Contest {
    /// `per_store` candidates per store for group `group` of `max_leaders`, waiting up to
    /// 1 s, holding 1 ms, 10 rounds each.
    pub fn new(group: &str, max_leaders: u32, per_store: usize) -> Self {
        Contest {
            group: group.to_owned(),
            max_leaders,
            per_store,
            wait_time: Duration::from_secs(1),
            hold: Duration::from_millis(1),
            until: Until::Rounds(10),
        }
    }

    /// Runs the contest on `stores`; fails after a minute.
    pub async fn run<S: LeaseStore + Clone + 'static>(self, stores: &[S]) -> Contention {
        use leader::{LeaderGroupElectionOptions, LeaderGroupElector};

        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let elected = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
        let started = tokio::time::Instant::now();
        let mut candidates = Vec::new();
        for store in stores {
            for _ in 0..self.per_store {
                let options = LeaderGroupElectionOptions::new(self.max_leaders)
                    .wait_time(self.wait_time)
                    .lease_time(Duration::from_secs(30));
                let elector = LeaderGroupElector::new(store.clone(), options).unwrap();
                let (running, most, elected, errors) =
                    (running.clone(), most.clone(), elected.clone(), errors.clone());
                let (group, until, hold) = (self.group.clone(), self.until, self.hold);
                candidates.push(tokio::spawn(async move {
                    for round in 0.. {
                        let done = match until {
                            Until::Rounds(rounds) => round >= rounds,
                            Until::Elapsed(span) => started.elapsed() >= span,
                        };
                        if done {
                            break;
                        }
                        let result = elector
                            .run_if_leader(&group, |_| async {
                                let now = running.fetch_add(1, SeqCst) + 1;
                                most.fetch_max(now, SeqCst);
                                tokio::task::yield_now().await;
                                tokio::time::sleep(hold).await;
                                running.fetch_sub(1, SeqCst);
                            })
                            .await;
                        match result {
                            Ok(result) if result.is_elected() => drop(elected.fetch_add(1, SeqCst)),
                            Ok(_) => {}
                            Err(error) => errors.lock().unwrap().push(error),
                        }
                    }
                }));
            }
        }
        for candidate in candidates {
            let finished = tokio::time::timeout(Duration::from_secs(60), candidate).await;
            finished.expect("candidates finish").unwrap();
        }
        let errors = std::mem::take(&mut *errors.lock().unwrap());
        Contention { most_at_once: most.load(SeqCst), elected: elected.load(SeqCst), errors }
    }
}

/// What a [`Contest`] saw.
#[derive(Debug)]
pub struct Contention {
    /// The most bodies that ran at the same time.
    pub most_at_once: usize,
    /// The `run_if_leader` calls that were elected.
    pub elected: usize,
    /// Every error a `run_if_leader` call returned.
    pub errors: Vec<Error>,
}
