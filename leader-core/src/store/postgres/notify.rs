//! The release hub: one dedicated `LISTEN` connection per store that turns release
//! notifications into wake-ups of local waiters, re-established when it drops.

use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::tokio_postgres::{self, AsyncMessage, Client};
use futures_util::StreamExt;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::tls::Connector;
use crate::store::ReleaseWatch;
use crate::store::watch::Watchers;

/// Wakes local waiters when any process releases a slot of their group.
///
/// The connection is made with the first waiter and lives as long as the store. If it
/// drops, it is made again with backoff and every waiter is woken once it is back (releases
/// may have been missed meanwhile); waiters keep their expiry timers either way.
pub(crate) struct NotifyHub {
    inner: Arc<HubInner>,
}

struct HubInner {
    config: tokio_postgres::Config,
    connector: Connector,
    channel: String,
    waiters: Arc<Watchers>,
    running: OnceCell<()>,
    shutdown: CancellationToken,
}

impl NotifyHub {
    pub(crate) fn new(
        config: tokio_postgres::Config,
        connector: Connector,
        channel: String,
    ) -> Self {
        NotifyHub {
            inner: Arc::new(HubInner {
                config,
                connector,
                channel,
                waiters: Arc::default(),
                running: OnceCell::new(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// A watch woken by every release of group `key`. `LISTEN` is confirmed by the server
    /// before this returns, so no later release is missed.
    pub(crate) async fn watch(&self, key: &str) -> Result<ReleaseWatch, tokio_postgres::Error> {
        self.inner.running.get_or_try_init(|| self.start()).await?;
        Ok(self.inner.waiters.watch(key))
    }

    async fn start(&self) -> Result<(), tokio_postgres::Error> {
        let listening = listen(&self.inner).await?;
        let (hub, shutdown) = (Arc::downgrade(&self.inner), self.inner.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = keep_listening(hub, listening) => {}
                () = shutdown.cancelled() => {}
            }
        });
        Ok(())
    }
}

impl Drop for NotifyHub {
    fn drop(&mut self) {
        self.inner.shutdown.cancel();
    }
}

/// A listening connection: its client (kept, or the connection closes) and the task that
/// drives it, which ends when the connection does.
struct Listening {
    _client: Client,
    driver: tokio::task::JoinHandle<()>,
}

/// Connects, starts driving the connection (delivering notifications to the hub), and
/// sends `LISTEN`.
async fn listen(hub: &Arc<HubInner>) -> Result<Listening, tokio_postgres::Error> {
    #[allow(clippy::clone_on_copy)] // `NoTls` is Copy; the rustls connector is not
    let (client, mut connection) = hub.config.connect(hub.connector.clone()).await?;
    let weak = Arc::downgrade(hub);
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let (AsyncMessage::Notification(notice), Some(hub)) = (message, weak.upgrade()) {
                hub.waiters.wake(notice.payload());
            }
        }
    });
    client.batch_execute(&format!("LISTEN {}", hub.channel)).await?;
    Ok(Listening { _client: client, driver })
}

async fn keep_listening(hub: Weak<HubInner>, first: Listening) {
    let mut current = Some(first);
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Some(listening) = current.take() {
            let _ = listening.driver.await;
            tracing::warn!(
                "PostgreSQL LISTEN connection lost; waiters fall back to expiry timers until it \
                 is back"
            );
        }
        let Some(strong) = hub.upgrade() else { return };
        match listen(&strong).await {
            Ok(listening) => {
                tracing::info!("PostgreSQL LISTEN connection restored");
                strong.waiters.wake_all();
                current = Some(listening);
                backoff = Duration::from_millis(50);
            }
            Err(error) => {
                tracing::debug!(%error, ?backoff, "PostgreSQL LISTEN: reconnect failed");
                drop(strong);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}
