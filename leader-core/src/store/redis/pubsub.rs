//! The release hub: one pub/sub connection per store that turns release messages into
//! wake-ups of local waiters, so waiting costs no polling.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::RedisError;
use redis::sentinel::SentinelClient;
use tokio::sync::{OnceCell, watch};
use tokio_util::sync::CancellationToken;

use super::scripts::{RELEASE_CHANNEL_PREFIX, release_channel};

/// Where the subscriber connects: a server (or one of a Cluster's nodes, in turn), or the
/// current primary as Sentinel reports it.
pub(crate) enum SubscriberSource {
    Servers(Vec<redis::Client>),
    Sentinel(Box<tokio::sync::Mutex<SentinelClient>>),
}

impl SubscriberSource {
    async fn subscribe(&self, attempt: usize) -> Result<redis::aio::PubSub, RedisError> {
        let client = match self {
            SubscriberSource::Servers(clients) => clients[attempt % clients.len()].clone(),
            SubscriberSource::Sentinel(sentinel) => {
                sentinel.lock().await.async_get_client().await?
            }
        };
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.psubscribe(format!("{RELEASE_CHANNEL_PREFIX}*")).await?;
        Ok(pubsub)
    }
}

/// Wakes local waiters when any process releases a slot.
///
/// The subscription starts with the first waiter and then lives as long as the store. If it
/// drops, it is made again with backoff, and every waiter is woken once it is back, since
/// releases may have been missed meanwhile; waiters also keep their expiry timers.
pub(crate) struct ReleaseHub {
    inner: Arc<HubInner>,
}

struct HubInner {
    source: SubscriberSource,
    channels: Mutex<HashMap<String, watch::Sender<u64>>>,
    running: OnceCell<()>,
    shutdown: CancellationToken,
}

impl ReleaseHub {
    pub(crate) fn new(source: SubscriberSource) -> Self {
        ReleaseHub {
            inner: Arc::new(HubInner {
                source,
                channels: Mutex::new(HashMap::new()),
                running: OnceCell::new(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// A receiver woken by every release of group `key`, and what to keep beside it: the
    /// group's entry is dropped when its last receiver goes, so the hub keeps only the
    /// groups someone waits for. The subscription is confirmed by the server before this
    /// returns, so no later release is missed.
    pub(crate) async fn watch(
        &self,
        key: &str,
    ) -> Result<(watch::Receiver<u64>, Arc<dyn Any + Send + Sync>), RedisError> {
        self.inner.running.get_or_try_init(|| self.start()).await?;
        let channel = release_channel(key);
        let mut channels = self.inner.channels.lock().unwrap_or_else(|p| p.into_inner());
        let sender = channels.entry(channel.clone()).or_insert_with(|| watch::Sender::new(0));
        let forget = ForgetWhenUnwatched { hub: Arc::downgrade(&self.inner), channel };
        Ok((sender.subscribe(), Arc::new(forget)))
    }

    async fn start(&self) -> Result<(), RedisError> {
        let pubsub = self.inner.source.subscribe(0).await?;
        let (hub, shutdown) = (Arc::downgrade(&self.inner), self.inner.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = listen(hub, pubsub) => {}
                () = shutdown.cancelled() => {}
            }
        });
        Ok(())
    }
}

/// Kept beside a waiter's receiver (and dropped after it): drops the group's entry once no
/// receiver is left.
struct ForgetWhenUnwatched {
    hub: Weak<HubInner>,
    channel: String,
}

impl Drop for ForgetWhenUnwatched {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else { return };
        let mut channels = hub.channels.lock().unwrap_or_else(|p| p.into_inner());
        if channels.get(&self.channel).is_some_and(|sender| sender.receiver_count() == 0) {
            channels.remove(&self.channel);
        }
    }
}

impl Drop for ReleaseHub {
    fn drop(&mut self) {
        self.inner.shutdown.cancel();
    }
}

impl HubInner {
    fn wake(&self, channel: &str) {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = channels.get(channel) {
            sender.send_modify(|count| *count = count.wrapping_add(1));
        }
    }

    fn wake_all(&self) {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        for sender in channels.values() {
            sender.send_modify(|count| *count = count.wrapping_add(1));
        }
    }
}

async fn listen(hub: Weak<HubInner>, first: redis::aio::PubSub) {
    let mut pubsub = Some(first);
    let mut attempt = 0;
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Some(subscription) = pubsub.take() {
            let mut messages = subscription.into_on_message();
            while let Some(message) = messages.next().await {
                let Some(hub) = hub.upgrade() else { return };
                hub.wake(message.get_channel_name());
            }
            tracing::warn!(
                "release subscription lost; waiters fall back to expiry timers until it is back"
            );
        }
        let Some(hub) = hub.upgrade() else { return };
        attempt += 1;
        match hub.source.subscribe(attempt).await {
            Ok(subscription) => {
                tracing::info!("release subscription restored");
                hub.wake_all();
                pubsub = Some(subscription);
                backoff = Duration::from_millis(50);
            }
            Err(error) => {
                tracing::debug!(%error, ?backoff, "release subscription: reconnect failed");
                drop(hub);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}
