//! The Redis store's part of its [`Listener`]: one pub/sub connection per store that turns
//! release messages into wake-ups of local waiters, so waiting costs no polling.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::RedisError;
use redis::sentinel::SentinelClient;

use super::scripts::RELEASE_CHANNEL_PREFIX;
use crate::store::ReleaseWatch;
use crate::store::listener::{Connect, Connection, Listener};
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

/// The store's part of its [`Listener`]: a pattern subscription to every release channel,
/// whose messages a task turns into wake-ups.
pub(crate) struct Subscribe {
    source: SubscriberSource,
}

/// A live subscription: the sink it is pinged through, and the task that reads its
/// messages (ending when the subscription does).
pub(crate) struct Subscribed {
    sink: redis::aio::PubSubSink,
    reader: tokio::task::JoinHandle<()>,
}

impl Connect for Subscribe {
    type Connection = Subscribed;
    type Error = RedisError;
    const NAME: &'static str = "release subscription";

    async fn connect(
        &self,
        attempt: usize,
        waiters: Arc<Watchers>,
    ) -> Result<Subscribed, RedisError> {
        let (sink, mut messages) = self.source.subscribe(attempt).await?.split();
        let reader = tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                if let Some(key) = message.get_channel_name().strip_prefix(RELEASE_CHANNEL_PREFIX) {
                    waiters.wake(key);
                }
            }
        });
        Ok(Subscribed { sink, reader })
    }
}

impl Connection for Subscribed {
    async fn closed(&mut self) {
        let _ = (&mut self.reader).await;
    }

    async fn ping(&mut self) -> bool {
        self.sink.ping::<redis::Value>().await.is_ok()
    }
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Wakes local waiters when any process releases a slot: the store's [`Listener`].
pub(crate) struct ReleaseHub {
    listener: Listener<Subscribe>,
}

impl ReleaseHub {
    /// A hub subscribing through `source`, pinging its connection every `ping_every`.
    pub(crate) fn new(source: SubscriberSource, ping_every: Duration) -> Self {
        ReleaseHub { listener: Listener::new(Subscribe { source }, ping_every) }
    }

    /// A watch woken by every release of group `key`. The subscription is confirmed by the
    /// server before this returns, so no later release is missed.
    pub(crate) async fn watch(&self, key: &str) -> Result<ReleaseWatch, RedisError> {
        self.listener.start().await?;
        Ok(self.listener.waiters().watch(key))
    }
}
