//! A real `MemoryStore` wrapped to count operations and inject store faults (failed
//! renewals, replies lost after the store acted, a cut-off instance), the way a flaky
//! network would.

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
    failing_states: AtomicUsize,
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
    /// The next `n` state reads fail with a transient error without reaching the store.
    fn fail_states(&self, n: usize);
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

    fn fail_states(&self, n: usize) {
        self.layer().injected.failing_states.store(n, SeqCst);
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
        if take_one(&self.injected.failing_states) {
            return Err(unavailable("state"));
        }
        inner.state(key).await
    }

    /// A batch of reads is cut off like the rest; the single reads' faults are theirs alone.
    async fn state_many(
        &self,
        inner: &dyn LeaseStore,
        keys: &[&str],
    ) -> Result<Vec<GroupSnapshot>, Error> {
        self.reachable("state")?;
        inner.state_many(keys).await
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
