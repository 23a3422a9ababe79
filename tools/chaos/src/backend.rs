//! The deployment a scenario runs on (Redis or PostgreSQL), started by the harness itself.

use leader_testkit::postgres_server::PostgresServer;
use leader_testkit::redis_cluster::RedisCluster;
use leader_testkit::redis_sentinel::RedisSentinel;
use leader_testkit::redis_server::RedisServer;

use crate::store_spec::StoreSpec;

/// Which deployment a scenario needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One server.
    Standalone,
    /// A primary, a replica and a Sentinel.
    Sentinel,
    /// Three primaries.
    Cluster,
    /// One PostgreSQL server.
    Postgres,
}

/// A running deployment, stopped on drop.
pub enum Backend {
    /// One server.
    Standalone(RedisServer),
    /// A primary, a replica and a Sentinel.
    Sentinel(RedisSentinel),
    /// Three primaries.
    Cluster(RedisCluster),
    /// One PostgreSQL server.
    Postgres(PostgresServer),
}

impl Backend {
    /// Starts a deployment of `topology` (blocking: it waits for the servers to answer).
    pub fn start(topology: Topology) -> Self {
        match topology {
            Topology::Standalone => Backend::Standalone(RedisServer::start()),
            Topology::Sentinel => Backend::Sentinel(RedisSentinel::start()),
            Topology::Cluster => Backend::Cluster(RedisCluster::start()),
            Topology::Postgres => Backend::Postgres(PostgresServer::start()),
        }
    }

    /// How clients reach it directly.
    pub fn spec(&self) -> StoreSpec {
        match self {
            Backend::Standalone(server) => StoreSpec::standalone(server.url()),
            Backend::Sentinel(set_up) => StoreSpec::sentinel(&set_up.sentinel_url()),
            Backend::Cluster(cluster) => StoreSpec::cluster(&cluster.urls()),
            Backend::Postgres(server) => StoreSpec::postgres(server.url()),
        }
    }

    /// The single server, for faults that act on it.
    pub fn server(&mut self) -> Option<&mut RedisServer> {
        match self {
            Backend::Standalone(server) => Some(server),
            _ => None,
        }
    }
}
