//! The deployment a scenario runs on (Redis, PostgreSQL or etcd), started by the harness
//! itself.

use leader_testkit::etcd::EtcdCluster;
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
    /// Three etcd members.
    Etcd,
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
    /// Three etcd members.
    Etcd(EtcdCluster),
}

impl Backend {
    /// Starts a deployment of `topology` (blocking: it waits for the servers to answer; an
    /// etcd cluster's peer proxies run on the current Tokio runtime).
    pub fn start(topology: Topology) -> Self {
        match topology {
            Topology::Standalone => Backend::Standalone(RedisServer::start()),
            Topology::Sentinel => Backend::Sentinel(RedisSentinel::start()),
            Topology::Cluster => Backend::Cluster(RedisCluster::start()),
            Topology::Postgres => Backend::Postgres(PostgresServer::start()),
            Topology::Etcd => {
                let runtime = tokio::runtime::Handle::current();
                Backend::Etcd(runtime.block_on(EtcdCluster::start(3)))
            }
        }
    }

    /// How clients reach it directly.
    pub fn spec(&self) -> StoreSpec {
        match self {
            Backend::Standalone(server) => StoreSpec::standalone(server.url()),
            Backend::Sentinel(set_up) => StoreSpec::sentinel(&set_up.sentinel_url()),
            Backend::Cluster(cluster) => StoreSpec::cluster(&cluster.urls()),
            Backend::Postgres(server) => StoreSpec::postgres(server.url()),
            Backend::Etcd(cluster) => StoreSpec::etcd(cluster.url()),
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
