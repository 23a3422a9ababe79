//! [`GroupWatch`]: how a waiter learns that a slot may have become free, and an observer
//! that a group's holders may have changed.

use std::any::Any;
use std::sync::Arc;

use tokio::sync::watch;

use crate::share::Shares;

/// Wakes whoever waits on one group: a candidate when a slot is released or shortened
/// ([`watch_releases`](super::LeaseStore::watch_releases)), an observer on every change of
/// its holders ([`watch_changes`](super::LeaseStore::watch_changes)).
///
/// Stores make one per waiter from a shared `tokio::sync::watch` channel per group, so an
/// event wakes every waiter at once without polling the store.
#[derive(Debug)]
pub struct GroupWatch {
    receiver: watch::Receiver<u64>,
    _subscription: Option<Arc<dyn Any + Send + Sync>>,
}

impl GroupWatch {
    /// This watch, also keeping `guard` alive until the watch is dropped: a store's way to
    /// learn when this waiter has gone (to withdraw a subscription, say), by `guard`'s
    /// `Drop`.
    ///
    /// ```
    /// use leader_core::store::author::GroupSignal;
    ///
    /// struct Gone;
    /// impl Drop for Gone {
    ///     fn drop(&mut self) { println!("the waiter has gone") }
    /// }
    /// let signal = GroupSignal::new();
    /// let watch = signal.watch().holding(Gone);
    /// assert_eq!(signal.watchers(), 1);
    /// drop(watch); // prints
    /// assert_eq!(signal.watchers(), 0);
    /// ```
    pub fn holding(self, guard: impl Send + Sync + 'static) -> Self {
        let subscription = Arc::new((self._subscription, guard));
        GroupWatch { receiver: self.receiver, _subscription: Some(subscription) }
    }

    /// Resolves at the next release after the watch was made or last woke.
    ///
    /// If the store drops the channel (it shut down), this never resolves, so a waiter falls
    /// back to its timer.
    pub async fn woken(&mut self) {
        if self.receiver.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What a store keeps for one group to wake its waiters: each [`watch`](Self::watch) is a
/// [`GroupWatch`] that [`wake`](Self::wake) wakes, in this process. A store of your own
/// keeps one per group that has waiters, and wakes it on every release or shortening of a
/// slot it learns of (its own, or another process's through its server's notifications).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use leader_core::store::author::GroupSignal;
///
/// let signal = GroupSignal::new();
/// let mut watch = signal.watch();
/// signal.wake();
/// watch.woken().await; // resolves at once: woken since it was made
/// # }
/// ```
#[derive(Debug)]
pub struct GroupSignal {
    sender: watch::Sender<u64>,
}

impl GroupSignal {
    /// A signal nobody watches yet.
    pub fn new() -> Self {
        GroupSignal { sender: watch::Sender::new(0) }
    }

    /// A watch woken by every [`wake`](Self::wake) from now on. If the signal is dropped,
    /// the watch never wakes again, so its waiter falls back to its timer.
    pub fn watch(&self) -> GroupWatch {
        GroupWatch { receiver: self.sender.subscribe(), _subscription: None }
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

impl Default for GroupSignal {
    fn default() -> Self {
        Self::new()
    }
}

/// The groups waiters and observers of one store watch, each with the channel that wakes
/// them: what the memory store's operations and a store's notification listener (Redis
/// pub/sub, PostgreSQL LISTEN) wake. A group's entry goes with its last watch, so the maps
/// hold only the groups someone waits for or observes.
#[derive(Default)]
pub(crate) struct Watchers {
    /// Candidates waiting for a release.
    releases: Signals,
    /// Observers of every change.
    changes: Signals,
    /// Woken when the listener is back after a gap, for what a store must redo then.
    #[cfg(feature = "redis")]
    restored: GroupSignal,
}

/// One signal per group, while it has watches.
#[derive(Default)]
struct Signals {
    by_key: Shares<String, GroupSignal>,
}

/// What a watch of a group is woken by: the one distinction every store's watches make.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Interest {
    /// A candidate, woken by releases.
    Releases,
    /// An observer, woken by every change.
    Changes,
}

impl Signals {
    fn wake(&self, key: &str) {
        self.by_key.with(key, GroupSignal::wake);
    }

    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    fn wake_all(&self) {
        self.by_key.for_each(GroupSignal::wake);
    }
}

impl Watchers {
    fn signals(&self, interest: Interest) -> &Signals {
        match interest {
            Interest::Releases => &self.releases,
            Interest::Changes => &self.changes,
        }
    }

    /// A watch of `key` for a candidate; it forgets the group when it is the last to go.
    pub(crate) fn watch(self: &Arc<Self>, key: &str) -> GroupWatch {
        self.watch_for(Interest::Releases, key)
    }

    /// A watch of `key` for an observer; it forgets the group when it is the last to go.
    pub(crate) fn watch_changes(self: &Arc<Self>, key: &str) -> GroupWatch {
        self.watch_for(Interest::Changes, key)
    }

    fn watch_for(self: &Arc<Self>, interest: Interest, key: &str) -> GroupWatch {
        let signal =
            self.signals(interest).by_key.get_or_start(&key.to_owned(), |_| true, GroupSignal::new);
        signal.watch().holding(signal)
    }

    /// A slot of `key` was released or shortened: wakes its waiters and observers.
    pub(crate) fn wake(&self, key: &str) {
        self.releases.wake(key);
        self.changes.wake(key);
    }

    /// A slot of `key` was granted: wakes its observers.
    pub(crate) fn wake_observers(&self, key: &str) {
        self.changes.wake(key);
    }

    /// Wakes every waiter and observer (after the listener was lost, events may have been
    /// missed).
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn wake_all(&self) {
        #[cfg(feature = "redis")]
        self.restored.wake();
        self.releases.wake_all();
        self.changes.wake_all();
    }

    /// Wakes every observer (the listener is down: they read the state themselves).
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn wake_observers_all(&self) {
        self.changes.wake_all();
    }

    /// A watch woken each time the listener is back after a gap.
    #[cfg(feature = "redis")]
    pub(crate) fn restorations(&self) -> GroupWatch {
        self.restored.watch()
    }
}
