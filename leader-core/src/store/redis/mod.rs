//! [`RedisStore`]: leader groups in Redis or Valkey, standalone, Sentinel or Cluster.

mod connection;
mod pubsub;
mod reply;
mod scripts;
mod url;

pub use self::url::redact as redact_url;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::Runtime;
use redis::sentinel::SentinelClient;

use self::connection::{CallFailure, ConnectionSource, Connections, ToRedisArgsDyn};
use self::pubsub::{ReleaseHub, SubscriberSource};
use self::scripts::{ACQUIRE, GroupKeys, LuaScript, RELEASE, RENEW, STATE};
pub use self::scripts::{GRANT_CHANNEL_PREFIX, RELEASE_CHANNEL_PREFIX};
use super::{
    AcquireOutcome, AcquireRequest, GroupSnapshot, LeaseStore, ReleaseOutcome, ReleaseWatch,
    RenewOutcome,
};
use crate::{Error, LeaseToken};

/// How long a store operation may take before it fails with [`Error::Timeout`], unless
/// [`RedisStore::with_command_timeout`] says otherwise.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Leader groups kept in Redis or Valkey.
///
/// - Every operation is one EVALSHA of a Lua script (a second round trip, EVAL, only after
///   the server lost its script cache), over one shared multiplexed connection that the
///   deadpool-redis pool makes and that is replaced when it breaks.
/// - Time comes from the server's `TIME` inside the scripts, so client clocks do not matter.
/// - A group is one hash, `{key}:group` (a hash tag, so a Cluster keeps it on one slot),
///   without a TTL: each slot expires by its own record, so holders with different leases
///   never lose slots to a key expiry, and the last fence outlives every slot. While the
///   group is full, `{key}:full` marks it until just before its nearest expiry, so a
///   failed attempt is refused without reading the clock or the records.
/// - Fences are `max(last + 1, server time in µs)`: strictly increasing, even after the
///   server restarts without its data.
/// - Releases are published; waiters in every process are woken by one pub/sub connection
///   per store, and also wake at the nearest expiry.
///
/// ```no_run
/// use leader_core::{LeaderGroupElectionOptions, LeaderGroupElector, RedisStore};
///
/// # async fn run() -> Result<(), leader_core::Error> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let workers = LeaderGroupElector::new(store, LeaderGroupElectionOptions::new(3))?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connections: Connections,
    releases: ReleaseHub,
    /// Replicas that must acknowledge a grant, and how long to wait for them.
    replica_ack: Option<(u32, Duration)>,
    /// Redacted addresses, for `Debug` and logs.
    description: String,
}

fn invalid_url(url: &str, error: impl fmt::Display) -> Error {
    Error::invalid_option(
        "url",
        url::redact(url),
        format!(
            "{error}; expected redis://[user:password@]host[:port][/db], rediss://… for TLS, or \
             unix:///path"
        ),
    )
}

fn pool_config(max_size: usize) -> deadpool_redis::PoolConfig {
    deadpool_redis::PoolConfig::new(max_size)
}

impl RedisStore {
    /// Connects to a standalone Redis or Valkey server and checks that it answers.
    ///
    /// ACL user and password go in the URL (`redis://user:password@host:6379/0`); they never
    /// appear in `Debug` output, errors or logs.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let store = Self::from_url(url)?;
        store.check_reachable().await?;
        Ok(store)
    }

    /// A store for a standalone server, without connecting yet.
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let client = redis::Client::open(url).map_err(|e| invalid_url(url, e))?;
        let mut config = deadpool_redis::Config::from_url(url);
        config.pool = Some(pool_config(4));
        let pool = config.create_pool(Some(Runtime::Tokio1)).map_err(|e| invalid_url(url, e))?;
        Ok(Self::new(
            ConnectionSource::Standalone(pool),
            SubscriberSource::Servers(vec![client]),
            format!("redis standalone {}", url::redact(url)),
        ))
    }

    /// A store over a deadpool-redis pool of a standalone server; `subscriber` is a client of
    /// the same server, for the release subscription.
    pub fn from_pool(pool: deadpool_redis::Pool, subscriber: redis::Client) -> Self {
        let description = format!("redis standalone pool ({})", redacted_client(&subscriber));
        Self::new(
            ConnectionSource::Standalone(pool),
            SubscriberSource::Servers(vec![subscriber]),
            description,
        )
    }

    /// A store through Sentinel: connections go to the primary Sentinel names, and after a
    /// failover to the new one.
    pub fn from_sentinel_config(config: deadpool_redis::sentinel::Config) -> Result<Self, Error> {
        let urls = config.urls.clone().unwrap_or_default();
        let shown = urls.iter().map(|u| url::redact(u)).collect::<Vec<_>>().join(",");
        let sentinel = SentinelClient::build(
            urls.iter().map(String::as_str).collect(),
            config.master_name.clone(),
            config.node_connection_info.clone().map(Into::into),
            config.server_type.into(),
        )
        .map_err(|e| invalid_url(&shown, e))?;
        let pool = config.create_pool(Some(Runtime::Tokio1)).map_err(|e| invalid_url(&shown, e))?;
        Ok(Self::new(
            ConnectionSource::Sentinel(pool),
            SubscriberSource::Sentinel(Box::new(tokio::sync::Mutex::new(sentinel))),
            format!("redis sentinel {shown} master {}", config.master_name),
        ))
    }

    /// A store on a Redis Cluster, from the URLs of some of its nodes.
    pub fn from_cluster_config(config: deadpool_redis::cluster::Config) -> Result<Self, Error> {
        let urls = config.urls.clone().unwrap_or_default();
        let shown = urls.iter().map(|u| url::redact(u)).collect::<Vec<_>>().join(",");
        let clients = urls
            .iter()
            .map(|u| redis::Client::open(u.as_str()).map_err(|e| invalid_url(u, e)))
            .collect::<Result<Vec<_>, _>>()?;
        if clients.is_empty() {
            return Err(invalid_url("", "no cluster node URL given"));
        }
        let pool = config.create_pool(Some(Runtime::Tokio1)).map_err(|e| invalid_url(&shown, e))?;
        Ok(Self::new(
            ConnectionSource::Cluster(pool),
            SubscriberSource::Servers(clients),
            format!("redis cluster {shown}"),
        ))
    }

    fn new(source: ConnectionSource, subscriber: SubscriberSource, description: String) -> Self {
        install_tls_provider();
        RedisStore {
            inner: Arc::new(Inner {
                connections: Connections::new(source, DEFAULT_COMMAND_TIMEOUT),
                releases: ReleaseHub::new(subscriber),
                replica_ack: None,
                description,
            }),
        }
    }

    /// How long one operation may take before it fails with [`Error::Timeout`] (and the
    /// connection is replaced). Default: 5 s; at least 1 ms. Set it before cloning the store.
    /// It is the only reply timeout of standalone and Sentinel connections (the client's own
    /// 500 ms one is raised to it), so a network whose round trip takes longer than 500 ms
    /// works with a command timeout above its round trip.
    pub fn with_command_timeout(self, timeout: Duration) -> Result<Self, Error> {
        let timeout = crate::duration::positive("command_timeout", timeout)?;
        self.reconfigured("command_timeout", timeout, |inner| {
            inner.connections.set_command_timeout(timeout)
        })
    }

    /// Require `replicas` replicas to acknowledge every grant within `timeout` (Redis `WAIT`,
    /// sent in the same round trip as the grant). A grant that too few acknowledge is released
    /// and the acquire fails with [`Error::NotReplicated`]. Default: off.
    ///
    /// This is best-effort: it narrows, but does not close, the window in which a failover
    /// loses a grant, since an acknowledged write can still be lost by an unlucky failover.
    /// `WAIT` holds the store's shared connection until the replicas answer, so keep the
    /// timeout short. Set it before cloning the store.
    pub fn with_replica_ack(self, replicas: u32, timeout: Duration) -> Result<Self, Error> {
        if replicas == 0 {
            return Err(Error::invalid_option("replicas", replicas, "must be at least 1"));
        }
        let timeout = crate::duration::positive("replica_ack timeout", timeout)?;
        self.reconfigured("replica_ack", (replicas, timeout), |inner| {
            inner.replica_ack = Some((replicas, timeout))
        })
    }

    fn reconfigured(
        self,
        option: &'static str,
        value: impl fmt::Debug,
        change: impl FnOnce(&mut Inner),
    ) -> Result<Self, Error> {
        let mut inner = Arc::try_unwrap(self.inner).map_err(|_| {
            Error::invalid_option(option, &value, "must be set before the store is cloned or used")
        })?;
        change(&mut inner);
        Ok(RedisStore { inner: Arc::new(inner) })
    }

    /// How long one operation may take: kept by the connections, whose reply timeout it is.
    fn command_timeout(&self) -> Duration {
        self.inner.connections.command_timeout()
    }

    /// Which deployment the store talks to: `standalone`, `sentinel` or `cluster`.
    pub fn topology(&self) -> &'static str {
        self.inner.connections.topology()
    }

    async fn check_reachable(&self) -> Result<(), Error> {
        let connect = self.inner.connections.get();
        match tokio::time::timeout(self.command_timeout(), connect).await {
            Ok(Ok(_connection)) => Ok(()),
            Ok(Err(error)) => Err(unavailable("connect", error)),
            Err(_) => Err(Error::Timeout {
                store: "redis",
                operation: "connect",
                after: self.command_timeout(),
            }),
        }
    }

    /// Runs one script for `operation` on group `key`, within the command timeout.
    async fn call(
        &self,
        operation: &'static str,
        key: &str,
        lua: &LuaScript,
        keys: &[&dyn ToRedisArgsDyn],
        args: &[&dyn ToRedisArgsDyn],
    ) -> Result<redis::Value, Error> {
        self.call_then_wait(operation, key, lua, keys, args, None).await.map(|(value, _)| value)
    }

    /// [`call`](Self::call), with `WAIT replicas timeout` in the same round trip if given.
    async fn call_then_wait(
        &self,
        operation: &'static str,
        key: &str,
        lua: &LuaScript,
        keys: &[&dyn ToRedisArgsDyn],
        args: &[&dyn ToRedisArgsDyn],
        wait: Option<(u32, Duration)>,
    ) -> Result<(redis::Value, Option<i64>), Error> {
        let wait = wait.map(|(replicas, timeout)| (replicas, millis(timeout)));
        let limit = self.command_timeout()
            + wait.map_or(Duration::ZERO, |(_, ms)| Duration::from_millis(ms));
        let call = self.inner.connections.eval_then_wait(lua, keys, args, wait);
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(CallFailure::Pool(error))) => Err(unavailable(operation, error)),
            Ok(Err(CallFailure::Redis(error))) => Err(self.classify(operation, key, error).await),
            Err(_) => {
                // A black-holed connection never answers: replace it.
                self.inner.connections.discard_current();
                Err(Error::Timeout { store: "redis", operation, after: limit })
            }
        }
    }

    async fn classify(
        &self,
        operation: &'static str,
        key: &str,
        error: redis::RedisError,
    ) -> Error {
        if error.code() == Some("WRONGTYPE") {
            let found = self.describe_types(key).await;
            return Error::WrongType { key: key.to_owned(), found };
        }
        let transient_code = matches!(
            error.code(),
            Some("READONLY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "BUSY")
        );
        if transient_code
            || error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_timeout()
            || error.is_cluster_error()
        {
            return unavailable(operation, error);
        }
        Error::Store { store: "redis", operation, message: error.to_string() }
    }

    /// What the group's keys hold, for a wrong-type error: `{k}:group is a string, …`.
    async fn describe_types(&self, key: &str) -> String {
        let mut found = Vec::new();
        let keys =
            GroupKeys::new(key).map(|keys| [keys.group(), keys.full()].map(|k| k.to_string()));
        if let (Ok(keys), Ok((_, mut connection, _))) = (keys, self.inner.connections.get().await) {
            for key in &keys {
                let kind: Result<String, _> =
                    redis::cmd("TYPE").arg(key).query_async(&mut connection).await;
                if let Ok(kind) = kind {
                    found.push(format!("{key} is a {kind}"));
                }
            }
        }
        if found.is_empty() { "a value of another type".to_owned() } else { found.join(", ") }
    }
}

/// Makes ring the process's rustls provider unless the application chose one, so `rediss://`
/// works whichever other rustls providers the dependency tree enables.
fn install_tls_provider() {
    #[cfg(feature = "tls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn unavailable(
    operation: &'static str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::Unavailable { store: "redis", operation, source: Box::new(error) }
}

fn redacted_client(client: &redis::Client) -> String {
    let info = client.get_connection_info();
    format!("{}", info.addr())
}

fn millis(duration: Duration) -> u64 {
    let whole = duration.as_millis() as u64;
    if duration.subsec_nanos() % 1_000_000 == 0 { whole } else { whole + 1 }
}

#[async_trait]
impl LeaseStore for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        if request.max_leaders == 0 {
            return Err(Error::invalid_option("max_leaders", 0, "must be at least 1"));
        }
        let keys = GroupKeys::new(request.key)?;
        let lease = millis(request.lease_time);
        let (reply, acknowledged) = self
            .call_then_wait(
                "acquire",
                request.key,
                &ACQUIRE,
                &[&keys.group(), &keys.full()],
                &[
                    &request.token,
                    &request.holder,
                    &lease,
                    &request.max_leaders,
                    &keys.grant_channel(),
                ],
                self.inner.replica_ack,
            )
            .await?;
        let outcome = reply::acquire(reply, request)?;
        if let (AcquireOutcome::Granted(_), Some((required, timeout)), Some(acknowledged)) =
            (outcome, self.inner.replica_ack, acknowledged)
        {
            if acknowledged < i64::from(required) {
                self.release(request.key, request.token, Duration::ZERO).await?;
                let acknowledged = acknowledged.max(0) as u32;
                return Err(Error::NotReplicated { acknowledged, required, timeout });
            }
        }
        Ok(outcome)
    }

    async fn renew(
        &self,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        let keys = GroupKeys::new(key)?;
        let lease = millis(lease_time);
        let reply = self
            .call("renew", key, &RENEW, &[&keys.group(), &keys.full()], &[&token, &lease])
            .await?;
        reply::renew(reply)
    }

    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        let keys = GroupKeys::new(key)?;
        let min_lease = millis(min_lease_time);
        let channel = keys.release_channel();
        let reply = self
            .call(
                "release",
                key,
                &RELEASE,
                &[&keys.group(), &keys.full()],
                &[&token, &min_lease, &channel],
            )
            .await?;
        reply::release(reply)
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        let keys = GroupKeys::new(key)?;
        let reply = self.call("state", key, &STATE, &[&keys.group()], &[]).await?;
        reply::state(reply)
    }

    async fn watch_releases(&self, key: &str) -> Result<ReleaseWatch, Error> {
        GroupKeys::new(key)?;
        let watch = self.inner.releases.watch(key);
        match tokio::time::timeout(self.command_timeout(), watch).await {
            Ok(Ok(receiver)) => Ok(ReleaseWatch::new(receiver, None)),
            Ok(Err(error)) => Err(unavailable("watch", error)),
            Err(_) => Err(Error::Timeout {
                store: "redis",
                operation: "watch",
                after: self.command_timeout(),
            }),
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.inner.description)
            .field("command_timeout", &self.command_timeout())
            .field("replica_ack", &self.inner.replica_ack)
            .finish()
    }
}
