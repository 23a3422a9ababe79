//! [`Listener`]: the one reconnecting notification connection of a store (Redis pub/sub,
//! PostgreSQL `LISTEN`), which wakes local waiters when a slot of their group is released.
//! A store supplies only how to make its connection ([`Connect`]); making it again with
//! backoff, noticing a connection that went silent, and waking every waiter after a gap
//! are here, once.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::watch::Watchers;
use crate::backoff::{Backoff, FIRST_PAUSE};

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
/// connection is made again with backoff (50 ms doubling to 2 s), and every waiter is woken
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
        let (inner, shutdown) = (Arc::downgrade(&self.inner), self.inner.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = follow(inner, connection) => {}
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

/// Keeps a connection: waits until it ends or stops answering, then makes a new one with
/// backoff and wakes every waiter; ends with the store.
async fn follow<C: Connect>(inner: Weak<Inner<C>>, first: C::Connection) {
    let mut current = Some(first);
    let mut attempt = 0;
    let mut backoff = Backoff::new(FIRST_PAUSE, Duration::from_secs(2));
    loop {
        if let Some(mut connection) = current.take() {
            let Some(ping_every) = inner.upgrade().map(|inner| inner.ping_every) else { return };
            until_lost(&mut connection, ping_every).await;
            drop(connection);
            tracing::warn!("{} lost; waiters fall back to expiry timers until it is back", C::NAME);
            if let Some(inner) = inner.upgrade() {
                inner.connect.lost();
                // Observers read the state now, and again after each failed reconnect: a
                // change while the listener is down is seen (or the store's failure
                // reported) within one pause, never hidden behind a silent state.
                inner.waiters.wake_observers_all();
            }
        }
        let Some(strong) = inner.upgrade() else { return };
        attempt += 1;
        match strong.connect.connect(attempt, strong.waiters.clone()).await {
            Ok(connection) => {
                tracing::info!("{} restored", C::NAME);
                strong.waiters.wake_all();
                current = Some(connection);
                backoff.reset();
            }
            Err(error) => {
                let pause = backoff.next_pause();
                tracing::debug!(%error, ?pause, "{}: reconnect failed", C::NAME);
                strong.waiters.wake_observers_all();
                drop(strong);
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Returns when `connection` has ended, or has not answered a ping within half of
/// `ping_every`.
async fn until_lost<T: Connection>(connection: &mut T, ping_every: Duration) {
    loop {
        tokio::select! {
            () = connection.closed() => return,
            () = tokio::time::sleep(ping_every) => {}
        }
        let ping = tokio::time::timeout(ping_every / 2, connection.ping());
        if !matches!(ping.await, Ok(true)) {
            tracing::debug!("the store's notification connection did not answer a ping");
            return;
        }
    }
}
