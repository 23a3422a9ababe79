//! The release hub: one dedicated `LISTEN` connection per store that turns release
//! notifications into wake-ups of local waiters, re-established when it drops. It also
//! announces the groups it has waiters of (a shared advisory lock per group, held by that
//! connection), so that releases nobody waits for send no `NOTIFY`.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::tokio_postgres::{self, AsyncMessage, Client};
use futures_util::StreamExt;
use tokio::sync::{Mutex, OnceCell};
use tokio_util::sync::CancellationToken;

use super::schema::Names;
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
    announce_sql: String,
    withdraw_sql: String,
    /// How long an announcement or withdrawal may take before the hub gives up on it.
    announce_timeout: Duration,
    waiters: Arc<Watchers>,
    /// Made with the first waiter: the listening connection and the groups announced on
    /// it, under one lock, so announcements, withdrawals and a reconnection's
    /// re-announcements never interleave.
    listening: OnceCell<Mutex<Announced>>,
    shutdown: CancellationToken,
}

/// The current listening connection, and how many local waiters each announced group has.
struct Announced {
    client: Arc<Client>,
    waiters: HashMap<String, usize>,
}

impl NotifyHub {
    /// `announce_timeout` bounds each announcement: a listening connection that does not
    /// answer only slows waiters (they wake at the nearest expiry), never fails them.
    pub(crate) fn new(
        config: tokio_postgres::Config,
        connector: Connector,
        names: &Names,
        announce_timeout: Duration,
    ) -> Self {
        NotifyHub {
            inner: Arc::new(HubInner {
                config,
                connector,
                channel: names.channel.clone(),
                announce_sql: names.announce_sql.clone(),
                withdraw_sql: names.withdraw_sql.clone(),
                announce_timeout,
                waiters: Arc::default(),
                listening: OnceCell::new(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// A watch woken by every release of group `key`. `LISTEN`, and the announcement that
    /// the group has a waiter here, are confirmed by the server before this returns, so no
    /// later release is missed.
    ///
    /// If the connection is being made again, the watch still works: its waiter wakes at the
    /// nearest expiry until the new connection announces the group and wakes every waiter.
    pub(crate) async fn watch(&self, key: &str) -> Result<ReleaseWatch, tokio_postgres::Error> {
        let listening = self.inner.listening.get_or_try_init(|| self.start()).await?;
        let watch = self.inner.waiters.watch(key);
        let mut announced = listening.lock().await;
        let count = announced.waiters.entry(key.to_owned()).or_default();
        *count += 1;
        let first = *count == 1;
        // Made before the announcement's await: if the caller gives up waiting (a timeout),
        // dropping it counts the waiter out again.
        let withdraw = Withdraw { hub: Arc::downgrade(&self.inner), key: key.to_owned() };
        if first {
            let client = announced.client.clone();
            self.inner.run(&client, &self.inner.announce_sql, key).await;
        }
        drop(announced);
        Ok(watch.holding(withdraw))
    }

    async fn start(&self) -> Result<Mutex<Announced>, tokio_postgres::Error> {
        let listening = listen(&self.inner).await?;
        let announced =
            Mutex::new(Announced { client: listening.client.clone(), waiters: HashMap::new() });
        let (hub, shutdown) = (Arc::downgrade(&self.inner), self.inner.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = keep_listening(hub, listening) => {}
                () = shutdown.cancelled() => {}
            }
        });
        Ok(announced)
    }
}

impl Drop for NotifyHub {
    fn drop(&mut self) {
        self.inner.shutdown.cancel();
    }
}

impl HubInner {
    /// Announces or withdraws the waiters of `key` (`sql`) on `client`, within
    /// `announce_timeout`. A failure is only logged: waiters still wake at the nearest
    /// expiry, and a new connection announces every watched group again.
    async fn run(&self, client: &Client, sql: &str, key: &str) {
        let outcome =
            tokio::time::timeout(self.announce_timeout, client.execute(sql, &[&key])).await;
        match outcome {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, group = key, sql, "PostgreSQL LISTEN connection")
            }
            Err(_) => tracing::debug!(group = key, sql, "PostgreSQL LISTEN connection: no answer"),
        }
    }
}

/// Kept by a [`ReleaseWatch`]: when the last local waiter of a group goes, the group's
/// announcement is withdrawn (in a task, since a drop cannot wait for the server).
struct Withdraw {
    hub: Weak<HubInner>,
    key: String,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let (Some(hub), Ok(runtime)) = (self.hub.upgrade(), tokio::runtime::Handle::try_current())
        else {
            return; // the store (or the runtime) is gone, and the connection with it
        };
        let key = std::mem::take(&mut self.key);
        runtime.spawn(async move {
            let Some(listening) = hub.listening.get() else { return };
            let mut announced = listening.lock().await;
            let Some(count) = announced.waiters.get_mut(&key) else { return };
            *count -= 1;
            if *count > 0 {
                return;
            }
            announced.waiters.remove(&key);
            let client = announced.client.clone();
            hub.run(&client, &hub.withdraw_sql, &key).await;
        });
    }
}

/// A listening connection: its client (kept, or the connection closes) and the task that
/// drives it, which ends when the connection does.
struct Listening {
    client: Arc<Client>,
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
    Ok(Listening { client: Arc::new(client), driver })
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
                // The announcements went with the old connection's session.
                if let Some(announced) = strong.listening.get() {
                    let mut announced = announced.lock().await;
                    for key in announced.waiters.keys() {
                        strong.run(&listening.client, &strong.announce_sql, key).await;
                    }
                    announced.client = listening.client.clone();
                }
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
