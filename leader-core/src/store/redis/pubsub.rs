//! The Redis store's part of its [`Listener`]: one pub/sub connection per store that turns
//! release messages into wake-ups of local waiters and observers, and grant messages into
//! wake-ups of observers, so waiting and observing cost no polling.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::RedisError;
use redis::sentinel::SentinelClient;

use super::scripts::{GRANT_CHANNEL_PREFIX, RELEASE_CHANNEL_PREFIX};
use crate::store::GroupWatch;
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
        pubsub.psubscribe(format!("{GRANT_CHANNEL_PREFIX}*")).await?;
        Ok(pubsub)
    }
}

/// The store's part of its [`Listener`]: pattern subscriptions to every release and grant
/// channel, whose messages a task turns into wake-ups.
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
    const NAME: &'static str = "Redis release and grant subscription";

    async fn connect(
        &self,
        attempt: usize,
        waiters: Arc<Watchers>,
    ) -> Result<Subscribed, RedisError> {
        let (sink, mut messages) = self.source.subscribe(attempt).await?.split();
        let reader = tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                let channel = message.get_channel_name();
                if let Some(key) = channel.strip_prefix(RELEASE_CHANNEL_PREFIX) {
                    waiters.wake(key);
                } else if let Some(key) = channel.strip_prefix(GRANT_CHANNEL_PREFIX) {
                    waiters.wake_observers(key);
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
pub(crate) struct Notifications {
    listener: Listener<Subscribe>,
}

impl Notifications {
    /// A hub subscribing through `source`, pinging its connection every `ping_every`.
    pub(crate) fn new(source: SubscriberSource, ping_every: Duration) -> Self {
        Notifications { listener: Listener::new(Subscribe { source }, ping_every) }
    }

    /// A watch woken by every release of group `key`. The subscription is confirmed by the
    /// server before this returns, so no later release is missed.
    pub(crate) async fn watch(&self, key: &str) -> Result<GroupWatch, RedisError> {
        self.listener.start().await?;
        Ok(self.listener.waiters().watch(key))
    }

    /// A watch woken by every grant and release of group `key` published (while the group
    /// is announced as observed), and after every gap in the subscription.
    pub(crate) async fn watch_changes(&self, key: &str) -> Result<GroupWatch, RedisError> {
        self.listener.start().await?;
        Ok(self.listener.waiters().watch_changes(key))
    }

    /// The store's waiters and observers, for the announcements that follow the listener.
    pub(crate) fn watchers(&self) -> &Arc<Watchers> {
        self.listener.waiters()
    }
}
