//! The release hub: one pub/sub connection per store that turns release messages into
//! wake-ups of local waiters, so waiting costs no polling.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::RedisError;
use redis::sentinel::SentinelClient;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, FIRST_PAUSE};

use super::scripts::RELEASE_CHANNEL_PREFIX;
use crate::store::ReleaseWatch;
use crate::store::watch::Watchers;

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
/// The subscription starts with the first waiter and then lives as long as the store. It is
/// pinged every command timeout, so a connection dropped without a word is noticed within
/// about one and a half times that. If it drops, it is made again with backoff, and every
/// waiter is woken once it is back, since releases may have been missed meanwhile; waiters
/// also keep their expiry timers.
pub(crate) struct ReleaseHub {
    inner: Arc<HubInner>,
}

struct HubInner {
    source: SubscriberSource,
    /// How often the subscription is pinged: the store's command timeout.
    ping_every: Duration,
    /// The watched groups, by group key.
    waiters: Arc<Watchers>,
    running: OnceCell<()>,
    shutdown: CancellationToken,
}

impl ReleaseHub {
    /// A hub subscribing through `source`, pinging its connection every `ping_every`.
    pub(crate) fn new(source: SubscriberSource, ping_every: Duration) -> Self {
        ReleaseHub {
            inner: Arc::new(HubInner {
                source,
                ping_every,
                waiters: Arc::default(),
                running: OnceCell::new(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// A watch woken by every release of group `key`. The subscription is confirmed by the
    /// server before this returns, so no later release is missed.
    pub(crate) async fn watch(&self, key: &str) -> Result<ReleaseWatch, RedisError> {
        self.inner.running.get_or_try_init(|| self.start()).await?;
        Ok(self.inner.waiters.watch(key))
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

impl Drop for ReleaseHub {
    fn drop(&mut self) {
        self.inner.shutdown.cancel();
    }
}

async fn listen(hub: Weak<HubInner>, first: redis::aio::PubSub) {
    let mut pubsub = Some(first);
    let mut attempt = 0;
    let mut backoff = Backoff::new(FIRST_PAUSE, Duration::from_secs(2));
    loop {
        if let Some(subscription) = pubsub.take() {
            let Some(ping_every) = hub.upgrade().map(|hub| hub.ping_every) else { return };
            follow(&hub, subscription, ping_every).await;
            tracing::warn!(
                "release subscription lost; waiters fall back to expiry timers until it is back"
            );
        }
        let Some(hub) = hub.upgrade() else { return };
        attempt += 1;
        match hub.source.subscribe(attempt).await {
            Ok(subscription) => {
                tracing::info!("release subscription restored");
                hub.waiters.wake_all();
                pubsub = Some(subscription);
                backoff.reset();
            }
            Err(error) => {
                tracing::debug!(%error, ?backoff, "release subscription: reconnect failed");
                drop(hub);
                tokio::time::sleep(backoff.next_pause()).await;
            }
        }
    }
}

/// Wakes the waiters of every release the subscription delivers, until it ends or does not
/// answer a ping (sent every `ping_every`, answered within half that): a connection that a
/// firewall or NAT dropped without a word delivers nothing and never ends by itself.
async fn follow(hub: &Weak<HubInner>, subscription: redis::aio::PubSub, ping_every: Duration) {
    let (mut sink, mut messages) = subscription.split();
    let mut next_ping = tokio::time::Instant::now() + ping_every;
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else { return };
                let Some(hub) = hub.upgrade() else { return };
                if let Some(key) = message.get_channel_name().strip_prefix(RELEASE_CHANNEL_PREFIX) {
                    hub.waiters.wake(key);
                }
            }
            () = tokio::time::sleep_until(next_ping) => {
                // Messages that arrive meanwhile wait in the stream's buffer.
                let ping = tokio::time::timeout(ping_every / 2, sink.ping::<redis::Value>());
                if !matches!(ping.await, Ok(Ok(_))) {
                    tracing::debug!("release subscription did not answer a ping");
                    return;
                }
                next_ping = tokio::time::Instant::now() + ping_every;
            }
        }
    }
}
