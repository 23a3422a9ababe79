//! The release hub: one dedicated `LISTEN` connection per store that turns release
//! notifications into wake-ups of local waiters, re-established when it drops.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use deadpool_postgres::tokio_postgres::{self, AsyncMessage, Client, NoTls};
use futures_util::StreamExt;
use tokio::sync::{OnceCell, watch};
use tokio_util::sync::CancellationToken;

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
    channel: String,
    waiters: Mutex<HashMap<String, watch::Sender<u64>>>,
    running: OnceCell<()>,
    shutdown: CancellationToken,
}

impl NotifyHub {
    pub(crate) fn new(config: tokio_postgres::Config, channel: String) -> Self {
        NotifyHub {
            inner: Arc::new(HubInner {
                config,
                channel,
                waiters: Mutex::new(HashMap::new()),
                running: OnceCell::new(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// A receiver woken by every release of group `key`, and what to keep beside it (the
    /// group's entry goes with its last waiter). `LISTEN` is confirmed by the server before
    /// this returns, so no later release is missed.
    pub(crate) async fn watch(
        &self,
        key: &str,
    ) -> Result<(watch::Receiver<u64>, Arc<dyn Any + Send + Sync>), tokio_postgres::Error> {
        self.inner.running.get_or_try_init(|| self.start()).await?;
        let mut waiters = self.inner.waiters.lock().unwrap_or_else(|p| p.into_inner());
        let sender = waiters.entry(key.to_owned()).or_insert_with(|| watch::Sender::new(0));
        let forget = ForgetWhenUnwatched { hub: Arc::downgrade(&self.inner), key: key.to_owned() };
        Ok((sender.subscribe(), Arc::new(forget)))
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

impl HubInner {
    fn wake(&self, key: &str) {
        let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = waiters.get(key) {
            sender.send_modify(|count| *count = count.wrapping_add(1));
        }
    }

    fn wake_all(&self) {
        let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        for sender in waiters.values() {
            sender.send_modify(|count| *count = count.wrapping_add(1));
        }
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
    let (client, mut connection) = hub.config.connect(NoTls).await?;
    let weak = Arc::downgrade(hub);
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let (AsyncMessage::Notification(notice), Some(hub)) = (message, weak.upgrade()) {
                hub.wake(notice.payload());
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
                strong.wake_all();
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

/// Kept beside a waiter's receiver (and dropped after it): drops the group's entry once no
/// receiver is left.
struct ForgetWhenUnwatched {
    hub: Weak<HubInner>,
    key: String,
}

impl Drop for ForgetWhenUnwatched {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else { return };
        let mut waiters = hub.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if waiters.get(&self.key).is_some_and(|sender| sender.receiver_count() == 0) {
            waiters.remove(&self.key);
        }
    }
}
