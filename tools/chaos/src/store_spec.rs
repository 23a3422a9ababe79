//! Which Redis a candidate (or the harness's monitor) talks to, as one command-line value.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use std::sync::Arc;

use leader::{Error, LeaseStore, PostgresStore, RedisStore};

/// The master name the harness's Sentinel set-up watches.
pub const SENTINEL_MASTER: &str = leader_testkit::redis_sentinel::MASTER_NAME;

/// A Redis deployment: `redis://…` (standalone), `sentinel:redis://…` (through Sentinel, to
/// the master [`SENTINEL_MASTER`]) or `cluster:redis://…,redis://…` (Cluster seed nodes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// One server.
    Standalone(String),
    /// A Sentinel that names the primary.
    Sentinel(String),
    /// Seed nodes of a Cluster.
    Cluster(Vec<String>),
    /// A PostgreSQL server: `postgres://…`.
    Postgres(String),
}

impl StoreSpec {
    /// A store for this deployment whose commands time out after `command_timeout`,
    /// waiting for `replica_ack` replicas on grants when non-zero (Redis only).
    pub fn connect(
        &self,
        command_timeout: Duration,
        replica_ack: u32,
    ) -> Result<Arc<dyn LeaseStore>, Error> {
        let builder = match self {
            StoreSpec::Standalone(url) => RedisStore::builder(url),
            StoreSpec::Sentinel(url) => {
                RedisStore::sentinel_builder(deadpool_redis::sentinel::Config::from_urls(
                    vec![url.clone()],
                    SENTINEL_MASTER.to_owned(),
                    deadpool_redis::sentinel::SentinelServerType::Master,
                ))
            }
            StoreSpec::Cluster(urls) => RedisStore::cluster_builder(
                deadpool_redis::cluster::Config::from_urls(urls.clone()),
            ),
            StoreSpec::Postgres(url) => {
                let store = PostgresStore::builder(url).command_timeout(command_timeout).build()?;
                return Ok(Arc::new(store));
            }
        };
        let builder = builder.command_timeout(command_timeout);
        let store = match replica_ack {
            0 => builder.build()?,
            replicas => builder.replica_ack(replicas, command_timeout).build()?,
        };
        Ok(Arc::new(store))
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Standalone(url) => f.write_str(url),
            StoreSpec::Sentinel(url) => write!(f, "sentinel:{url}"),
            StoreSpec::Cluster(urls) => write!(f, "cluster:{}", urls.join(",")),
            StoreSpec::Postgres(url) => f.write_str(url),
        }
    }
}

impl FromStr for StoreSpec {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        if value.starts_with("postgres://") {
            return Ok(StoreSpec::Postgres(value.to_owned()));
        }
        let spec = if let Some(url) = value.strip_prefix("sentinel:") {
            StoreSpec::Sentinel(url.to_owned())
        } else if let Some(urls) = value.strip_prefix("cluster:") {
            StoreSpec::Cluster(urls.split(',').map(str::to_owned).collect())
        } else {
            StoreSpec::Standalone(value.to_owned())
        };
        let urls = match &spec {
            StoreSpec::Standalone(url) | StoreSpec::Sentinel(url) | StoreSpec::Postgres(url) => {
                vec![url.as_str()]
            }
            StoreSpec::Cluster(urls) => urls.iter().map(String::as_str).collect(),
        };
        match urls.iter().find(|url| !url.starts_with("redis://")) {
            Some(url) => Err(format!(
                "store `{value}`: `{url}` is not a redis:// URL; expected redis://…, \
                 sentinel:redis://… or cluster:redis://…,redis://…"
            )),
            None => Ok(spec),
        }
    }
}
