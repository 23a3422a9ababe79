//! Slot releases that run in the background, and [`wait_for_releases`] to wait for them.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Background releases started and not yet finished, process-wide.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Woken when the last pending release finishes.
static IDLE: Notify = Notify::const_new();

/// Counts one pending release from creation until dropped: when it finished, or when its
/// task was dropped without running (its runtime shut down).
struct Pending;

impl Pending {
    fn new() -> Self {
        PENDING.fetch_add(1, Ordering::AcqRel);
        Pending
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if PENDING.fetch_sub(1, Ordering::AcqRel) == 1 {
            IDLE.notify_waiters();
        }
    }
}

/// Spawns `release` on `runtime`, counted until it finishes.
pub(crate) fn spawn_release<F>(runtime: &tokio::runtime::Handle, release: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let pending = Pending::new();
    runtime.spawn(async move {
        release.await;
        drop(pending);
    });
}

/// Waits until every slot release running in the background has finished.
///
/// Dropping a `run_if_leader` future while its body runs (a cancelled task, a `select!`
/// that took another branch, a timeout) releases the slot in a background task, so the
/// future's owner is not held up. A program that shuts down calls this after stopping its
/// work, so it does not exit with a release still in flight (the slot would then stay held
/// until its lease ran out). A release the store does not answer is tried again for a
/// minute (or a lease, if longer), since a store that was paused may still grant what it
/// was sent before; wrap the call in `tokio::time::timeout` for a bound of your own.
///
/// ```
/// use std::time::Duration;
/// use leader_core::{LeaderElectionOptions, LeaderElector, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let elector = LeaderElector::new(MemoryStore::new(), LeaderElectionOptions::new())?;
/// let work = elector.run_if_leader("outbox", |_| std::future::pending::<()>());
/// // Shutting down: the work is abandoned, its slot released in the background...
/// let _ = tokio::time::timeout(Duration::from_millis(10), work).await;
/// // ...and the program waits for that release before it exits.
/// leader_core::wait_for_releases().await;
/// # Ok(()) }
/// ```
pub async fn wait_for_releases() {
    loop {
        let idle = IDLE.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if PENDING.load(Ordering::Acquire) == 0 {
            return;
        }
        idle.await;
    }
}
