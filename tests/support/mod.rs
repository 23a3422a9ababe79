//! Test support: a real `MemoryStore` wrapped to count operations and inject store faults
//! (failed renewals, replies lost after the store acted), the way a flaky network would.

#![allow(dead_code)] // each test file uses part of it

#[allow(unused_imports)] // each test file uses part of it
pub use leader_testkit::{
    certificates, etcd, postgres_server, proxy, redis_cluster, redis_sentinel, redis_server,
};

#[cfg(feature = "etcd")]
pub mod etcd_store;
pub mod observing;
#[cfg(feature = "redis")]
pub mod redis;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use async_trait::async_trait;
use leader::store::author::{GroupWatch, HeldSlot, Layered, StoreLayer};
use leader::store::{
    AcquireOutcome, AcquireRequest, GroupSnapshot, ReleaseOutcome, RenewOutcome, Revocation,
    SlotRef,
};
use leader::{Error, LeaseStore, LeaseToken, MemoryStore};
use std::num::NonZeroU32;

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

#[derive(Debug, Default)]
pub struct Counts {
    pub acquire: AtomicUsize,
    pub renew: AtomicUsize,
    pub release: AtomicUsize,
    pub state: AtomicUsize,
    pub watch: AtomicUsize,
}

#[derive(Debug, Default)]
struct Injected {
    failing_renewals: AtomicUsize,
    lost_acquire_replies: AtomicUsize,
    panicking_acquires: AtomicUsize,
    blocking_renewal_ms: AtomicUsize,
    unreachable: std::sync::atomic::AtomicBool,
    renewed_at: std::sync::Mutex<Vec<tokio::time::Instant>>,
    late_acquire_replies: std::sync::Mutex<Vec<Duration>>,
    late_renewal_replies: std::sync::Mutex<Vec<Duration>>,
    late_release_replies: std::sync::Mutex<Vec<Duration>>,
    renewal_started: tokio::sync::Notify,
}

/// The layer of a [`FaultyStore`]: counts calls and injects the faults asked for.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    pub counts: Arc<Counts>,
    injected: Arc<Injected>,
}

/// A `MemoryStore` that counts calls and fails on request ([`Faulty`]). Several
/// `FaultyStore`s can wrap one `MemoryStore` (`FaultyStore::over`), each a separate
/// instance's view of it.
pub type FaultyStore = Layered<Faults, MemoryStore>;

/// What a test asks of a [`FaultyStore`].
pub trait Faulty {
    /// An instance's own faulty view of a shared store.
    fn over(inner: MemoryStore) -> Self;
    /// The next `n` renewals fail with a transient error without reaching the store.
    fn fail_renewals(&self, n: usize);
    /// The next `n` acquires reach the store, which acts, but the reply is lost.
    fn lose_acquire_replies(&self, n: usize);
    /// While set, every operation fails with a transient error without reaching the store,
    /// as if the network to it were cut.
    fn cut_off(&self, cut: bool);
    /// The next `n` acquires panic, as a buggy store might.
    fn panic_on_acquires(&self, n: usize);
    /// The next renewal blocks its thread for `duration` (a wedged runtime), then goes on.
    fn block_next_renewal(&self, duration: Duration);
    /// The next acquire reaches the store, which acts at once, but its reply arrives `late`
    /// later (a slow network on the way back). Calls queue: each takes the next delay.
    fn delay_acquire_reply(&self, late: Duration);
    /// The next renewal reaches the store, which acts at once, but its reply arrives `late`
    /// later.
    fn delay_renewal_reply(&self, late: Duration);
    /// The next release reaches the store, which acts at once, but its reply arrives `late`
    /// later.
    fn delay_release_reply(&self, late: Duration);
    /// Resolves once a renewal has reached the store (its reply may still be on the way).
    fn renewal_started(&self) -> impl Future<Output = ()> + Send;
    /// When each renewal was attempted.
    fn renewal_times(&self) -> Vec<tokio::time::Instant>;
    /// Acquires asked so far.
    fn acquires(&self) -> usize;
    /// Renewals asked so far.
    fn renewals(&self) -> usize;
    /// Releases asked so far.
    fn releases(&self) -> usize;
    /// Release watches asked so far.
    fn watches(&self) -> usize;
}

impl Faulty for FaultyStore {
    fn over(inner: MemoryStore) -> Self {
        Layered::new(Faults::default(), inner)
    }

    fn fail_renewals(&self, n: usize) {
        self.layer().injected.failing_renewals.store(n, SeqCst);
    }

    fn lose_acquire_replies(&self, n: usize) {
        self.layer().injected.lost_acquire_replies.store(n, SeqCst);
    }

    fn cut_off(&self, cut: bool) {
        self.layer().injected.unreachable.store(cut, SeqCst);
    }

    fn panic_on_acquires(&self, n: usize) {
        self.layer().injected.panicking_acquires.store(n, SeqCst);
    }

    fn block_next_renewal(&self, duration: Duration) {
        let ms = duration.as_millis() as usize;
        self.layer().injected.blocking_renewal_ms.store(ms, SeqCst);
    }

    fn delay_acquire_reply(&self, late: Duration) {
        self.layer().injected.late_acquire_replies.lock().unwrap().push(late);
    }

    fn delay_renewal_reply(&self, late: Duration) {
        self.layer().injected.late_renewal_replies.lock().unwrap().push(late);
    }

    fn delay_release_reply(&self, late: Duration) {
        self.layer().injected.late_release_replies.lock().unwrap().push(late);
    }

    fn renewal_started(&self) -> impl Future<Output = ()> + Send {
        let injected = self.layer().injected.clone();
        async move { injected.renewal_started.notified().await }
    }

    fn renewal_times(&self) -> Vec<tokio::time::Instant> {
        self.layer().injected.renewed_at.lock().unwrap().clone()
    }

    fn acquires(&self) -> usize {
        self.layer().counts.acquire.load(SeqCst)
    }

    fn renewals(&self) -> usize {
        self.layer().counts.renew.load(SeqCst)
    }

    fn releases(&self) -> usize {
        self.layer().counts.release.load(SeqCst)
    }

    fn watches(&self) -> usize {
        self.layer().counts.watch.load(SeqCst)
    }
}

impl Faults {
    fn reachable(&self, operation: &'static str) -> Result<(), Error> {
        if self.injected.unreachable.load(SeqCst) { Err(unavailable(operation)) } else { Ok(()) }
    }
}

/// Sleeps the first queued delay, if any.
async fn reply_late(delays: &std::sync::Mutex<Vec<Duration>>) {
    let late = {
        let mut delays = delays.lock().unwrap();
        if delays.is_empty() { None } else { Some(delays.remove(0)) }
    };
    if let Some(late) = late {
        tokio::time::sleep(late).await;
    }
}

fn take_one(counter: &AtomicUsize) -> bool {
    counter.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok()
}

fn unavailable(operation: &'static str) -> Error {
    let source = io::Error::new(io::ErrorKind::ConnectionReset, "injected fault");
    Error::Unavailable {
        store: "faulty",
        endpoint: String::new(),
        operation,
        cause: Box::new(source),
    }
}

#[async_trait]
impl StoreLayer for Faults {
    fn kind(&self, _: &dyn LeaseStore) -> &'static str {
        "faulty"
    }

    async fn acquire(
        &self,
        inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        self.counts.acquire.fetch_add(1, SeqCst);
        self.reachable("acquire")?;
        if take_one(&self.injected.panicking_acquires) {
            panic!("injected panic in acquire");
        }
        let outcome = inner.acquire(request).await?;
        if take_one(&self.injected.lost_acquire_replies) {
            return Err(unavailable("acquire"));
        }
        reply_late(&self.injected.late_acquire_replies).await;
        Ok(outcome)
    }

    async fn renew(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<RenewOutcome, Error> {
        self.counts.renew.fetch_add(1, SeqCst);
        self.injected.renewed_at.lock().unwrap().push(tokio::time::Instant::now());
        self.reachable("renew")?;
        let block_ms = self.injected.blocking_renewal_ms.swap(0, SeqCst);
        if block_ms > 0 {
            std::thread::sleep(Duration::from_millis(block_ms as u64));
        }
        if take_one(&self.injected.failing_renewals) {
            return Err(unavailable("renew"));
        }
        let outcome = inner.renew(key, token, lease).await;
        self.injected.renewal_started.notify_one();
        reply_late(&self.injected.late_renewal_replies).await;
        outcome
    }

    /// A batch is cut off like the rest; the single renewals' faults are theirs alone.
    async fn renew_many(
        &self,
        inner: &dyn LeaseStore,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        self.reachable("renew")?;
        inner.renew_many(slots, lease_time).await
    }

    async fn release(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        min: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        self.counts.release.fetch_add(1, SeqCst);
        self.reachable("release")?;
        let outcome = inner.release(key, token, min).await;
        reply_late(&self.injected.late_release_replies).await;
        outcome
    }

    async fn revoke(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        self.reachable("revoke")?;
        inner.revoke(key, slot, how).await
    }

    async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
        self.counts.state.fetch_add(1, SeqCst);
        self.reachable("state")?;
        inner.state(key).await
    }

    async fn watch_releases(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupWatch, Error> {
        self.counts.watch.fetch_add(1, SeqCst);
        self.reachable("watch")?;
        inner.watch_releases(key).await
    }

    async fn watch_changes(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupWatch, Error> {
        self.reachable("watch")?;
        inner.watch_changes(key).await
    }

    async fn list_groups(
        &self,
        inner: &dyn LeaseStore,
        prefix: &str,
        suffix: &str,
    ) -> Result<Vec<String>, Error> {
        self.reachable("list groups")?;
        inner.list_groups(prefix, suffix).await
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
