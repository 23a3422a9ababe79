//! The release hub: one dedicated `LISTEN` connection per store that turns release
//! notifications into wake-ups of local waiters, re-established when it drops or stops
//! answering. It also announces the groups it has waiters of (a shared advisory lock per
//! group, held by that connection), so that releases nobody waits for send no `NOTIFY`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use deadpool_postgres::tokio_postgres::{self, AsyncMessage, Client, Statement};
use futures_util::StreamExt;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, FIRST_PAUSE};

use super::schema::Names;
use super::tls::Connector;
use crate::store::ReleaseWatch;
use crate::store::watch::Watchers;

/// Wakes local waiters when any process releases a slot of their group.
///
/// The connection is made with the first waiter and lives as long as the store. It is
/// pinged every command timeout, so one that a firewall or NAT dropped without a word is
/// noticed within about one and a half times that. If it drops, it is made
/// again with backoff and every waiter is woken once it is back (releases may have been
/// missed meanwhile); waiters keep their expiry timers either way.
pub(crate) struct NotifyHub {
    inner: Arc<HubInner>,
}

struct HubInner {
    config: tokio_postgres::Config,
    connector: Connector,
    channel: String,
    announce_sql: String,
    withdraw_sql: String,
    /// How long an announcement, a withdrawal or a ping may take before the hub gives up
    /// on it: half the command timeout.
    answer_within: Duration,
    /// How often the connection is pinged: the command timeout.
    ping_after: Duration,
    waiters: Arc<Watchers>,
    /// The listening connection is made with the first waiter.
    started: OnceCell<()>,
    /// The current connection and the groups announced on it. A plain mutex, never held
    /// across an await: requests are queued on the connection under it (so announcements,
    /// withdrawals and a new connection's re-announcements reach the server in order) and
    /// their answers awaited after it is let go, so a silent connection holds up nobody.
    announced: std::sync::Mutex<Announced>,
    shutdown: CancellationToken,
}

/// The current listening connection (none while it is made again), and how many local
/// waiters each announced group has.
#[derive(Default)]
struct Announced {
    listener: Option<Arc<Listener>>,
    waiters: HashMap<String, usize>,
}

/// A listening connection's client (kept, or the connection closes) and its two prepared
/// statements.
struct Listener {
    client: Client,
    announce: Statement,
    withdraw: Statement,
}

/// A request already queued on the connection; awaiting it waits for the server's answer.
type Queued = Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send>>;

impl NotifyHub {
    /// `command_timeout` bounds each announcement (by half) and sets how long the
    /// connection may be silent before it is pinged: a listening connection that does not
    /// answer only slows waiters (they wake at the nearest expiry), never fails them.
    pub(crate) fn new(
        config: tokio_postgres::Config,
        connector: Connector,
        names: &Names,
        command_timeout: Duration,
    ) -> Self {
        NotifyHub {
            inner: Arc::new(HubInner {
                config,
                connector,
                channel: names.channel.clone(),
                announce_sql: names.announce_sql.clone(),
                withdraw_sql: names.withdraw_sql.clone(),
                answer_within: command_timeout / 2,
                ping_after: command_timeout,
                waiters: Arc::default(),
                started: OnceCell::new(),
                announced: std::sync::Mutex::default(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// A watch woken by every release of group `key`. `LISTEN`, and the announcement that
    /// the group has a waiter here, are confirmed by the server before this returns (or
    /// given up on after half the command timeout), so no later release is missed.
    ///
    /// If the connection is being made again, the watch still works: its waiter wakes at the
    /// nearest expiry until the new connection announces the group and wakes every waiter.
    pub(crate) async fn watch(&self, key: &str) -> Result<ReleaseWatch, tokio_postgres::Error> {
        self.inner.started.get_or_try_init(|| self.start()).await?;
        let watch = self.inner.waiters.watch(key);
        // Made before the announcement's await: if the caller gives up waiting (a timeout),
        // dropping it counts the waiter out again.
        let withdraw = Withdraw { hub: Arc::downgrade(&self.inner), key: key.to_owned() };
        let queued = {
            let mut announced = self.inner.announced();
            let count = announced.waiters.entry(key.to_owned()).or_default();
            *count += 1;
            let first = *count == 1;
            match (&announced.listener, first) {
                (Some(listener), true) => Some(queue(listener, Request::Announce, key)),
                _ => None,
            }
        };
        if let Some(queued) = queued {
            self.inner.answer(queued, "announce", key).await;
        }
        Ok(watch.holding(withdraw))
    }

    async fn start(&self) -> Result<(), tokio_postgres::Error> {
        let (listener, driver) = listen(&self.inner).await?;
        self.inner.announced().listener = Some(listener.clone());
        let (hub, shutdown) = (Arc::downgrade(&self.inner), self.inner.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = keep_listening(hub, listener, driver) => {}
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

/// Which of the listener's statements to run.
#[derive(Clone, Copy)]
enum Request {
    Announce,
    Withdraw,
}

/// Queues `request` for `key` on the listener's connection and returns its answer to
/// await. The request is written to the connection's queue before this returns (the first
/// poll of a prepared statement's execution sends it), so requests queued one after
/// another under the hub's lock reach the server in that order.
fn queue(listener: &Arc<Listener>, request: Request, key: &str) -> Queued {
    let (listener, key) = (listener.clone(), key.to_owned());
    let mut queued: Queued = Box::pin(async move {
        let statement = match request {
            Request::Announce => &listener.announce,
            Request::Withdraw => &listener.withdraw,
        };
        listener.client.execute(statement, &[&key]).await
    });
    let mut context = Context::from_waker(futures_util::task::noop_waker_ref());
    match queued.as_mut().poll(&mut context) {
        Poll::Ready(done) => Box::pin(std::future::ready(done)),
        Poll::Pending => queued,
    }
}

impl HubInner {
    fn announced(&self) -> std::sync::MutexGuard<'_, Announced> {
        self.announced.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for a queued announcement or withdrawal, at most `answer_within`. A failure is
    /// only logged: waiters still wake at the nearest expiry, and a new connection announces
    /// every watched group again.
    async fn answer(&self, queued: Queued, what: &'static str, key: &str) {
        match tokio::time::timeout(self.answer_within, queued).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, group = key, what, "PostgreSQL LISTEN connection")
            }
            Err(_) => tracing::debug!(group = key, what, "PostgreSQL LISTEN connection: no answer"),
        }
    }
}

/// Kept by a [`ReleaseWatch`]: when the last local waiter of a group goes, the group's
/// announcement is withdrawn (its answer awaited in a task, since a drop cannot wait).
struct Withdraw {
    hub: Weak<HubInner>,
    key: String,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else {
            return; // the store is gone, and the connection with it
        };
        let queued = {
            let mut announced = hub.announced();
            let Some(count) = announced.waiters.get_mut(&self.key) else { return };
            *count -= 1;
            if *count > 0 {
                return;
            }
            announced.waiters.remove(&self.key);
            match &announced.listener {
                Some(listener) => queue(listener, Request::Withdraw, &self.key),
                None => return, // the next connection announces only what is watched
            }
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let key = std::mem::take(&mut self.key);
        runtime.spawn(async move { hub.answer(queued, "withdraw", &key).await });
    }
}

/// Connects, starts driving the connection (delivering notifications to the hub), sends
/// `LISTEN` and prepares the announcement statements. The driver task ends when the
/// connection does.
async fn listen(
    hub: &Arc<HubInner>,
) -> Result<(Arc<Listener>, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
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
    let ready = async {
        client.batch_execute(&format!("LISTEN {}", hub.channel)).await?;
        let announce = client.prepare(&hub.announce_sql).await?;
        let withdraw = client.prepare(&hub.withdraw_sql).await?;
        Ok::<_, tokio_postgres::Error>((announce, withdraw))
    };
    match ready.await {
        Ok((announce, withdraw)) => Ok((Arc::new(Listener { client, announce, withdraw }), driver)),
        Err(error) => {
            driver.abort();
            Err(error)
        }
    }
}

/// Follows the listening connection: waits until it ends or stops answering a ping, then
/// makes a new one (with backoff), announces every watched group on it and wakes every
/// waiter.
async fn keep_listening(
    hub: Weak<HubInner>,
    first: Arc<Listener>,
    driver: tokio::task::JoinHandle<()>,
) {
    let mut current = Some((first, driver));
    let mut backoff = Backoff::new(FIRST_PAUSE, Duration::from_secs(2));
    loop {
        if let Some((listener, driver)) = current.take() {
            let Some(ping_after) = hub.upgrade().map(|hub| hub.ping_after) else { return };
            let answer_within = ping_after / 2;
            watch_connection(&listener, driver, ping_after, answer_within).await;
            tracing::warn!(
                "PostgreSQL LISTEN connection lost; waiters fall back to expiry timers until it \
                 is back"
            );
            if let Some(hub) = hub.upgrade() {
                hub.announced().listener = None;
            }
        }
        let Some(strong) = hub.upgrade() else { return };
        match listen(&strong).await {
            Ok((listener, driver)) => {
                tracing::info!("PostgreSQL LISTEN connection restored");
                // The announcements went with the old connection's session.
                let queued: Vec<(String, Queued)> = {
                    let mut announced = strong.announced();
                    announced.listener = Some(listener.clone());
                    let keys = announced.waiters.keys();
                    keys.map(|key| (key.clone(), queue(&listener, Request::Announce, key)))
                        .collect()
                };
                for (key, queued) in queued {
                    strong.answer(queued, "announce", &key).await;
                }
                strong.waiters.wake_all();
                current = Some((listener, driver));
                backoff.reset();
            }
            Err(error) => {
                tracing::debug!(%error, ?backoff, "PostgreSQL LISTEN: reconnect failed");
                drop(strong);
                tokio::time::sleep(backoff.next_pause()).await;
            }
        }
    }
}

/// Returns when the connection has ended, or has not answered a ping within
/// `answer_within` (then its driver is stopped, which closes it).
async fn watch_connection(
    listener: &Listener,
    mut driver: tokio::task::JoinHandle<()>,
    ping_after: Duration,
    answer_within: Duration,
) {
    loop {
        tokio::select! {
            _ = &mut driver => return,
            () = tokio::time::sleep(ping_after) => {}
        }
        let ping = tokio::time::timeout(answer_within, listener.client.simple_query(""));
        if !matches!(ping.await, Ok(Ok(_))) {
            tracing::debug!("PostgreSQL LISTEN connection did not answer a ping");
            driver.abort();
            return;
        }
    }
}
