//! [`ReleaseWatch`]: how a waiter learns that a slot may have become free.

use std::any::Any;
use std::sync::Arc;

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
    /// A watch on `receiver`, whose sender a store bumps on every release of the group.
    ///
    /// `subscription` is kept alive as long as the watch; a store uses it to learn when the
    /// last waiter of a group has gone (for example to unsubscribe from a pub/sub channel).
    pub fn new(
        receiver: watch::Receiver<u64>,
        subscription: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Self {
        ReleaseWatch { receiver, _subscription: subscription }
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
