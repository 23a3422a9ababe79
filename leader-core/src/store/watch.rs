//! [`ReleaseWatch`]: how a waiter learns that a slot may have become free.

use std::any::Any;
#[cfg(any(feature = "redis", feature = "postgres"))]
use std::collections::HashMap;
use std::sync::Arc;
#[cfg(any(feature = "redis", feature = "postgres"))]
use std::sync::{Mutex, Weak};

use tokio::sync::watch;

/// Wakes a waiter when a slot of one group is released or shortened.
///
/// Stores make one per waiter from a shared `tokio::sync::watch` channel per group, so a
/// release wakes every waiter at once without polling the store.
#[derive(Debug)]
pub struct ReleaseWatch {
    receiver: watch::Receiver<u64>,
    _subscription: Option<Arc<dyn Any + Send + Sync>>,
}

impl ReleaseWatch {
    /// This watch, also keeping `guard` alive until the watch is dropped: a store's way to
    /// learn when this waiter has gone (to withdraw a subscription, say), by `guard`'s
    /// `Drop`.
    ///
    /// ```
    /// use leader_core::store::ReleaseSignal;
    ///
    /// struct Gone;
    /// impl Drop for Gone {
    ///     fn drop(&mut self) { println!("the waiter has gone") }
    /// }
    /// let signal = ReleaseSignal::new();
    /// let watch = signal.watch().holding(Gone);
    /// assert_eq!(signal.watchers(), 1);
    /// drop(watch); // prints
    /// assert_eq!(signal.watchers(), 0);
    /// ```
    pub fn holding(self, guard: impl Send + Sync + 'static) -> Self {
        let subscription = Arc::new((self._subscription, guard));
        ReleaseWatch { receiver: self.receiver, _subscription: Some(subscription) }
    }

    /// Resolves at the next release after the watch was made or last woke.
    ///
    /// If the store drops the channel (it shut down), this never resolves, so a waiter falls
    /// back to its timer.
    pub async fn released(&mut self) {
        if self.receiver.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What a store keeps for one group to wake its waiters: each [`watch`](Self::watch) is a
/// [`ReleaseWatch`] that [`wake`](Self::wake) wakes, in this process. A store of your own
/// keeps one per group that has waiters, and wakes it on every release or shortening of a
/// slot it learns of (its own, or another process's through its server's notifications).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use leader_core::store::ReleaseSignal;
///
/// let signal = ReleaseSignal::new();
/// let mut watch = signal.watch();
/// signal.wake();
/// watch.released().await; // resolves at once: woken since it was made
/// # }
/// ```
#[derive(Debug)]
pub struct ReleaseSignal {
    sender: watch::Sender<u64>,
}

impl ReleaseSignal {
    /// A signal nobody watches yet.
    pub fn new() -> Self {
        ReleaseSignal { sender: watch::Sender::new(0) }
    }

    /// A watch woken by every [`wake`](Self::wake) from now on. If the signal is dropped,
    /// the watch never wakes again, so its waiter falls back to its timer.
    pub fn watch(&self) -> ReleaseWatch {
        ReleaseWatch { receiver: self.sender.subscribe(), _subscription: None }
    }

    /// Wakes every watch made so far.
    pub fn wake(&self) {
        self.sender.send_modify(|count| *count = count.wrapping_add(1));
    }

    /// How many watches are alive.
    pub fn watchers(&self) -> usize {
        self.sender.receiver_count()
    }
}

impl Default for ReleaseSignal {
    fn default() -> Self {
        Self::new()
    }
}

/// The groups waiters of one store watch, each with the channel that wakes them: what a
/// store's notification listener (Redis pub/sub, PostgreSQL LISTEN) wakes. A group's entry
/// goes with its last waiter, so the map holds only the groups someone waits for.
#[cfg(any(feature = "redis", feature = "postgres"))]
#[derive(Default)]
pub(crate) struct Watchers {
    by_key: Mutex<HashMap<String, ReleaseSignal>>,
}

#[cfg(any(feature = "redis", feature = "postgres"))]
impl Watchers {
    fn by_key(&self) -> std::sync::MutexGuard<'_, HashMap<String, ReleaseSignal>> {
        self.by_key.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A watch of `key`; it forgets the group when it is the last to go.
    pub(crate) fn watch(self: &Arc<Self>, key: &str) -> ReleaseWatch {
        let watch = self.by_key().entry(key.to_owned()).or_default().watch();
        watch.holding(ForgetWhenUnwatched { watchers: Arc::downgrade(self), key: key.to_owned() })
    }

    /// Wakes the waiters of `key`, if any.
    pub(crate) fn wake(&self, key: &str) {
        if let Some(signal) = self.by_key().get(key) {
            signal.wake();
        }
    }

    /// Wakes every waiter (after the listener was lost, releases may have been missed).
    pub(crate) fn wake_all(&self) {
        self.by_key().values().for_each(ReleaseSignal::wake);
    }
}

/// Kept by a [`ReleaseWatch`] (and dropped after its receiver): forgets the group once no
/// receiver is left.
#[cfg(any(feature = "redis", feature = "postgres"))]
struct ForgetWhenUnwatched {
    watchers: Weak<Watchers>,
    key: String,
}

#[cfg(any(feature = "redis", feature = "postgres"))]
impl Drop for ForgetWhenUnwatched {
    fn drop(&mut self) {
        let Some(watchers) = self.watchers.upgrade() else { return };
        let mut by_key = watchers.by_key();
        if by_key.get(&self.key).is_some_and(|signal| signal.watchers() == 0) {
            by_key.remove(&self.key);
        }
    }
}
