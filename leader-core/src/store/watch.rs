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
    /// A watch on `receiver`, whose sender a store bumps on every release of the group;
    /// `subscription` lives as long as the watch.
    pub(crate) fn new(
        receiver: watch::Receiver<u64>,
        subscription: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Self {
        ReleaseWatch { receiver, _subscription: subscription }
    }

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
#[derive(Debug, Clone)]
pub struct ReleaseSignal {
    sender: Arc<watch::Sender<u64>>,
}

impl ReleaseSignal {
    /// A signal nobody watches yet.
    pub fn new() -> Self {
        ReleaseSignal { sender: Arc::new(watch::Sender::new(0)) }
    }

    /// A watch woken by every [`wake`](Self::wake) from now on.
    pub fn watch(&self) -> ReleaseWatch {
        ReleaseWatch::new(self.sender.subscribe(), None)
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
    by_key: Mutex<HashMap<String, watch::Sender<u64>>>,
}

#[cfg(any(feature = "redis", feature = "postgres"))]
impl Watchers {
    fn by_key(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        self.by_key.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A watch of `key`; it forgets the group when it is the last to go.
    pub(crate) fn watch(self: &Arc<Self>, key: &str) -> ReleaseWatch {
        let receiver = self
            .by_key()
            .entry(key.to_owned())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe();
        let forget = ForgetWhenUnwatched { watchers: Arc::downgrade(self), key: key.to_owned() };
        ReleaseWatch::new(receiver, Some(Arc::new(forget)))
    }

    /// Wakes the waiters of `key`, if any.
    pub(crate) fn wake(&self, key: &str) {
        if let Some(sender) = self.by_key().get(key) {
            sender.send_modify(|count| *count = count.wrapping_add(1));
        }
    }

    /// Wakes every waiter (after the listener was lost, releases may have been missed).
    pub(crate) fn wake_all(&self) {
        for sender in self.by_key().values() {
            sender.send_modify(|count| *count = count.wrapping_add(1));
        }
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
        if by_key.get(&self.key).is_some_and(|sender| sender.receiver_count() == 0) {
            by_key.remove(&self.key);
        }
    }
}
