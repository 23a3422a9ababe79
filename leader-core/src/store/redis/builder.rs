//! [`RedisStoreBuilder`]: what a [`RedisStore`] talks to and how, set before it is built.

use std::fmt;
use std::time::Duration;

use deadpool_redis::Runtime;
use redis::sentinel::SentinelClient;

use super::connection::ConnectionSource;
use super::pubsub::SubscriberSource;
use super::{RedisStore, Timings};
use crate::error::Error;
use crate::store::url;

use crate::store::DEFAULT_COMMAND_TIMEOUT;

/// How long a group's keys outlive its last slot, unless
/// [`RedisStoreBuilder::idle_group_ttl`] says otherwise: one hour.
pub const DEFAULT_IDLE_GROUP_TTL: Duration = Duration::from_secs(3600);

/// Configures a [`RedisStore`]: made by [`RedisStore::builder`] (a standalone server's URL),
/// [`RedisStore::sentinel_builder`], [`RedisStore::cluster_builder`] or
/// [`RedisStore::pool_builder`]; finished by [`build`](Self::build) (no I/O) or
/// [`connect`](Self::connect) (checks that the server answers).
///
/// Setters never fail; `build` and `connect` check every value and name the first one out
/// of range.
///
/// ```
/// use std::time::Duration;
/// use leader_core::RedisStore;
///
/// # fn main() -> Result<(), leader_core::Error> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379")
///     .command_timeout(Duration::from_secs(2))
///     .build()?; // connects on first use
/// assert_eq!(store.topology(), "standalone");
///
/// let err = RedisStore::builder("redis://127.0.0.1:6379")
///     .replica_ack(0, Duration::from_millis(50))
///     .build()
///     .unwrap_err();
/// assert_eq!(err.to_string(), "invalid `replica_ack` 0: must be at least 1 replica");
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build` or `connect`"]
pub struct RedisStoreBuilder {
    target: Target,
    command_timeout: Duration,
    replica_ack: Option<(u32, Duration)>,
    idle_group_ttl: Duration,
}

/// The deployment a store talks to.
enum Target {
    Url(String),
    Pool(deadpool_redis::Pool, redis::Client),
    Sentinel(deadpool_redis::sentinel::Config),
    Cluster(deadpool_redis::cluster::Config),
}

impl RedisStore {
    /// Connects to a standalone Redis or Valkey server with the default settings and checks
    /// that it answers: `RedisStore::builder(url).connect().await`.
    ///
    /// ACL user and password go in the URL (`redis://user:password@host:6379/0`); they never
    /// appear in `Debug` output, errors or logs.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::builder(url).connect().await
    }

    /// A builder for the deployment `url` names: a standalone server
    /// (`redis://[user:password@]host[:port][/db]`, `rediss://…` for TLS with feature
    /// `redis-tls`, or `unix:///path`), Sentinel
    /// (`redis+sentinel://host:port[,host:port…]/primary-name`, without credentials: for
    /// those, [`sentinel_builder`](Self::sentinel_builder)) or a Cluster
    /// (`redis+cluster://[user:password@]host:port[,host:port…]`). A URL that is none of
    /// these fails at [`build`](RedisStoreBuilder::build), naming what was expected.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Target::Url(url.into()))
    }

    /// A builder for a store through Sentinel: connections go to the primary Sentinel names,
    /// and after a failover to the new one.
    pub fn sentinel_builder(config: deadpool_redis::sentinel::Config) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Target::Sentinel(config))
    }

    /// A builder for a store on a Redis Cluster, from the URLs of some of its nodes.
    pub fn cluster_builder(config: deadpool_redis::cluster::Config) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Target::Cluster(config))
    }

    /// A builder over a deadpool-redis pool of a standalone server the application already
    /// has; `subscriber` is a client of the same server, for the release subscription.
    pub fn pool_builder(
        pool: deadpool_redis::Pool,
        subscriber: redis::Client,
    ) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Target::Pool(pool, subscriber))
    }
}

impl RedisStoreBuilder {
    fn new(target: Target) -> Self {
        RedisStoreBuilder {
            target,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            replica_ack: None,
            idle_group_ttl: DEFAULT_IDLE_GROUP_TTL,
        }
    }

    /// How long one operation may take before it fails with [`Error::Timeout`] (and the
    /// connection is replaced). Default: 5 s; at least 1 ms. It is the only reply timeout of
    /// standalone and Sentinel connections (the client's own 500 ms one is raised to it), so
    /// a network whose round trip takes longer than 500 ms works with a command timeout above
    /// its round trip.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Require `replicas` replicas to acknowledge every grant and every renewal within
    /// `timeout` (Redis `WAIT`, sent in the same round trip). A grant that too few acknowledge
    /// is released and the acquire fails with [`Error::NotReplicated`]; a renewal that too
    /// few acknowledge fails with it too, and is not counted: the holder keeps its earlier
    /// deadline (which the replicas acknowledged) and tries again, so a failover to a replica
    /// cannot end a slot before the deadline its holder was given. Default: off. `replicas`
    /// at least 1, `timeout` at least 1 ms.
    ///
    /// This is best-effort: it narrows, but does not close, the window in which a failover
    /// loses a grant, since an acknowledged write can still be lost by an unlucky failover.
    /// `WAIT` holds the store's shared connection until the replicas answer, so keep the
    /// timeout short.
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_ack = Some((replicas, timeout));
        self
    }

    /// How long a group's keys outlive its last slot: every key the store writes carries a
    /// TTL, at least this long past the group's longest live slot, so a group that is no
    /// longer used (a per-tenant or per-job name) disappears this long after its last
    /// slot ended. Default: 1 hour; at least 1 ms.
    ///
    /// A new group's first fence is the server clock in microseconds, above every fence
    /// the vanished group handed out as long as the server clock has not gone back by more
    /// than this since; keep it well above any clock step your servers may take.
    pub fn idle_group_ttl(mut self, ttl: Duration) -> Self {
        self.idle_group_ttl = ttl;
        self
    }

    /// Checks every setting and makes the store, without connecting: the first operation
    /// connects.
    pub fn build(self) -> Result<RedisStore, Error> {
        let command_timeout = crate::duration::positive("command_timeout", self.command_timeout)?;
        let replica_ack = match self.replica_ack {
            None => None,
            Some((0, _)) => {
                return Err(Error::invalid_option("replica_ack", 0, "must be at least 1 replica"));
            }
            Some((replicas, timeout)) => {
                Some((replicas, crate::duration::positive("replica_ack", timeout)?))
            }
        };
        let idle_group_ttl = crate::duration::positive("idle_group_ttl", self.idle_group_ttl)?;
        let (source, subscriber, description) = self.target.open()?;
        Ok(RedisStore::new(
            source,
            subscriber,
            description,
            Timings { command_timeout, replica_ack, idle_group_ttl },
        ))
    }

    /// [`build`](Self::build), then checks that the server answers within the command
    /// timeout.
    pub async fn connect(self) -> Result<RedisStore, Error> {
        let store = self.build()?;
        store.check_reachable().await?;
        Ok(store)
    }
}

impl Target {
    /// The connection pool, the subscriber and a redacted description of the deployment.
    fn open(self) -> Result<(ConnectionSource, SubscriberSource, String), Error> {
        match self {
            Target::Url(url) if has_scheme(&url, "redis+sentinel") => sentinel_url(&url)?.open(),
            Target::Url(url) if has_scheme(&url, "redis+cluster") => cluster_url(&url)?.open(),
            Target::Url(url) => {
                let client = redis::Client::open(url.as_str()).map_err(|e| invalid_url(&url, e))?;
                let mut config = deadpool_redis::Config::from_url(url.as_str());
                config.pool = Some(deadpool_redis::PoolConfig::new(4));
                let pool =
                    config.create_pool(Some(Runtime::Tokio1)).map_err(|e| invalid_url(&url, e))?;
                Ok((
                    ConnectionSource::Standalone(pool),
                    SubscriberSource::Servers(vec![client]),
                    format!("redis standalone {}", url::redact(&url)),
                ))
            }
            Target::Pool(pool, subscriber) => {
                let description =
                    format!("redis standalone pool ({})", subscriber.get_connection_info().addr());
                Ok((
                    ConnectionSource::Standalone(pool),
                    SubscriberSource::Servers(vec![subscriber]),
                    description,
                ))
            }
            Target::Sentinel(config) => {
                let shown = redacted_list(config.urls.as_deref());
                let sentinel = SentinelClient::build(
                    config.urls.iter().flatten().map(String::as_str).collect(),
                    config.master_name.clone(),
                    config.node_connection_info.clone().map(Into::into),
                    config.server_type.into(),
                )
                .map_err(|e| invalid_url(&shown, e))?;
                let pool = config
                    .create_pool(Some(Runtime::Tokio1))
                    .map_err(|e| invalid_url(&shown, e))?;
                Ok((
                    ConnectionSource::Sentinel(pool),
                    SubscriberSource::Sentinel(Box::new(tokio::sync::Mutex::new(sentinel))),
                    format!("redis sentinel {shown} master {}", config.master_name),
                ))
            }
            Target::Cluster(config) => {
                let shown = redacted_list(config.urls.as_deref());
                let clients = config
                    .urls
                    .iter()
                    .flatten()
                    .map(|u| redis::Client::open(u.as_str()).map_err(|e| invalid_url(u, e)))
                    .collect::<Result<Vec<_>, _>>()?;
                if clients.is_empty() {
                    return Err(invalid_url("", "no cluster node URL given"));
                }
                let pool = config
                    .create_pool(Some(Runtime::Tokio1))
                    .map_err(|e| invalid_url(&shown, e))?;
                Ok((
                    ConnectionSource::Cluster(pool),
                    SubscriberSource::Servers(clients),
                    format!("redis cluster {shown}"),
                ))
            }
        }
    }
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.target {
            Target::Url(url) => url::redact(url),
            Target::Pool(_, subscriber) => {
                format!("pool ({})", subscriber.get_connection_info().addr())
            }
            Target::Sentinel(config) => {
                format!("sentinel {}", redacted_list(config.urls.as_deref()))
            }
            Target::Cluster(config) => format!("cluster {}", redacted_list(config.urls.as_deref())),
        };
        f.debug_struct("RedisStoreBuilder")
            .field("target", &target)
            .field("command_timeout", &self.command_timeout)
            .field("replica_ack", &self.replica_ack)
            .field("idle_group_ttl", &self.idle_group_ttl)
            .finish()
    }
}

fn redacted_list(urls: Option<&[String]>) -> String {
    urls.unwrap_or_default().iter().map(|u| url::redact(u)).collect::<Vec<_>>().join(",")
}

/// Whether `url` starts with `scheme://`, in any case.
fn has_scheme(url: &str, scheme: &str) -> bool {
    url.split_once("://").is_some_and(|(found, _)| found.eq_ignore_ascii_case(scheme))
}

/// A Sentinel deployment from `redis+sentinel://host:port[,host:port…]/primary-name`.
fn sentinel_url(url: &str) -> Result<Target, Error> {
    let rest = &url["redis+sentinel://".len()..];
    let (nodes, primary) = rest.split_once('/').unwrap_or((rest, ""));
    let primary_ok = !primary.is_empty()
        && primary.chars().all(|c| c.is_ascii_graphic() && !"/@?#:".contains(c));
    if !primary_ok || nodes.contains('@') || nodes.split(',').any(str::is_empty) {
        return Err(Error::invalid_option(
            "url",
            url::redact(url),
            "expected redis+sentinel://host:port[,host:port…]/primary-name (a name of visible \
             characters without / @ ? # :), without credentials (for those, use \
             RedisStore::sentinel_builder)",
        ));
    }
    let urls = nodes.split(',').map(|node| format!("redis://{node}")).collect();
    Ok(Target::Sentinel(deadpool_redis::sentinel::Config::from_urls::<Vec<String>>(
        urls,
        primary.to_owned(),
        deadpool_redis::sentinel::SentinelServerType::Master,
    )))
}

/// A Cluster from `redis+cluster://[user:password@]host:port[,host:port…]`.
fn cluster_url(url: &str) -> Result<Target, Error> {
    let rest = &url["redis+cluster://".len()..];
    let (user_info, nodes) = match rest.rsplit_once('@') {
        Some((user_info, nodes)) => (format!("{user_info}@"), nodes),
        None => (String::new(), rest),
    };
    if nodes.split(',').any(str::is_empty) || nodes.contains('/') {
        return Err(Error::invalid_option(
            "url",
            url::redact(url),
            "expected redis+cluster://[user:password@]host:port[,host:port…]",
        ));
    }
    let urls: Vec<String> =
        nodes.split(',').map(|node| format!("redis://{user_info}{node}")).collect();
    Ok(Target::Cluster(deadpool_redis::cluster::Config::from_urls(urls)))
}

fn invalid_url(url: &str, error: impl fmt::Display) -> Error {
    Error::invalid_option(
        "url",
        url::redact(url),
        format!(
            "{error}; expected redis://[user:password@]host[:port][/db], rediss://… for TLS, \
             unix:///path, redis+sentinel://… or redis+cluster://…"
        ),
    )
}
