//! [`Listener`]: the one reconnecting notification connection of a store (Redis pub/sub,
//! PostgreSQL `LISTEN`), which wakes local waiters when a slot of their group is released.
//! A store supplies only how to make its connection ([`Connect`]); noticing a connection
//! that went silent is here, and making it again and waking every waiter after a gap are the
//! one subscription driver's ([`keep`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::resubscribe::{Subscription, keep};
use super::watch::Watchers;

/// How a store makes its notification connection.
pub(crate) trait Connect: Send + Sync + 'static {
    /// A live connection, delivering its notifications (to the `waiters` it was made with)
    /// for as long as it lives.
    type Connection: Connection;
    /// Why a connection could not be made.
    type Error: std::error::Error + Send + Sync + 'static;

    /// What the connection is called in logs: "PostgreSQL LISTEN connection".
    const NAME: &'static str;

    /// Makes the connection (the `attempt`-th since the store began, for a store that
    /// tries its servers in turn), ready to deliver when it returns: subscribed, and any
    /// announcement the store keeps on it made again.
    fn connect(
        &self,
        attempt: usize,
        waiters: Arc<Watchers>,
    ) -> impl Future<Output = Result<Self::Connection, Self::Error>> + Send;

    /// The connection was lost (before a new one is made).
    fn lost(&self) {}
}

/// A live notification connection.
pub(crate) trait Connection: Send + 'static {
    /// Resolves when the connection has ended.
    fn closed(&mut self) -> impl Future<Output = ()> + Send;

    /// One round trip on the connection: `true` when the server answered.
    fn ping(&mut self) -> impl Future<Output = bool> + Send;
}

/// Wakes a store's local waiters when any process releases a slot of their group.
///
/// The connection is made with the first waiter and lives as long as the store. It is
/// pinged every `ping_every` (the store's command timeout), and one that does not answer
/// within half of it (a connection a firewall or NAT dropped without a word) counts as
/// lost, so that is noticed within about one and a half times `ping_every`. A lost
/// connection is made again by the subscription driver ([`keep`]: at once after a quiet
/// period, else after a jittered pause of 50 ms doubling to 2 s), and every waiter is woken
/// once it is back, since releases may have been missed meanwhile; waiters keep their
/// expiry timers throughout.
pub(crate) struct Listener<C: Connect> {
    inner: Arc<Inner<C>>,
}

struct Inner<C: Connect> {
    connect: C,
    waiters: Arc<Watchers>,
    started: OnceCell<()>,
    ping_every: Duration,
    shutdown: CancellationToken,
}

impl<C: Connect> Listener<C> {
    /// A listener whose connections `connect` makes, pinged every `ping_every`.
    pub(crate) fn new(connect: C, ping_every: Duration) -> Self {
        Listener {
            inner: Arc::new(Inner {
                connect,
                waiters: Arc::default(),
                started: OnceCell::new(),
                ping_every,
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// The store's part.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // the Redis store keeps no state there
    pub(crate) fn part(&self) -> &C {
        &self.inner.connect
    }

    /// The groups waited on here, each with the channel that wakes its waiters.
    pub(crate) fn waiters(&self) -> &Arc<Watchers> {
        &self.inner.waiters
    }

    /// Makes the first connection, if none was made yet, and from then on keeps one.
    pub(crate) async fn start(&self) -> Result<(), C::Error> {
        self.inner.started.get_or_try_init(|| self.first()).await.map(drop)
    }

    async fn first(&self) -> Result<(), C::Error> {
        let connection = self.inner.connect.connect(0, self.inner.waiters.clone()).await?;
        let (inner, shutdown) = (self.inner.clone(), self.inner.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                biased;
                () = keep(&*inner, connection) => {}
                () = shutdown.cancelled() => {}
            }
        });
        Ok(())
    }
}

impl<C: Connect> Drop for Listener<C> {
    fn drop(&mut self) {
        self.inner.shutdown.cancel();
    }
}

/// The listener's connections, as the one subscription driver follows them.
impl<C: Connect> Subscription for Inner<C> {
    type Live = C::Connection;
    type Error = C::Error;

    fn name(&self) -> String {
        C::NAME.to_owned()
    }

    async fn open(&self, attempt: usize) -> Result<C::Connection, C::Error> {
        self.connect.connect(attempt, self.waiters.clone()).await
    }

    async fn until_lost(&self, connection: &mut C::Connection) -> String {
        until_lost(connection, self.ping_every).await
    }

    fn lost(&self) {
        self.connect.lost();
        // Observers read the state now, and again after each failed reconnect: a change
        // while the listener is down is seen (or the store's failure reported) within one
        // pause, never hidden behind a silent state.
        self.waiters.wake_observers_all();
    }

    fn failed(&self) {
        self.waiters.wake_observers_all();
    }

    fn restored(&self) {
        self.waiters.wake_all();
    }
}

/// Returns when `connection` has ended, or has not answered a ping within half of
/// `ping_every`; says which.
async fn until_lost<T: Connection>(connection: &mut T, ping_every: Duration) -> String {
    loop {
        tokio::select! {
            biased;
            () = connection.closed() => return "the connection closed".to_owned(),
            () = tokio::time::sleep(ping_every) => {}
        }
        let ping = tokio::time::timeout(ping_every / 2, connection.ping());
        if !matches!(ping.await, Ok(true)) {
            return format!("no answer to a ping within {:?}", ping_every / 2);
        }
    }
}
