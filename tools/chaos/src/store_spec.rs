//! Which store a candidate (or the harness's monitor) talks to, as one command-line value:
//! a URL of the library's own schemes, opened by `leader::store::builder`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use leader::Error;
use leader::store::SharedStore;

/// The master name the harness's Sentinel set-up watches.
pub const SENTINEL_MASTER: &str = leader_testkit::redis_sentinel::MASTER_NAME;

/// A store URL: `redis://…`, `redis+sentinel://…/primary`, `redis+cluster://…`,
/// `postgres://…` or `etcd://…` (see `leader::store::connect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSpec(String);

impl StoreSpec {
    /// One Redis server at `url` (`redis://host:port`).
    pub fn standalone(url: impl Into<String>) -> Self {
        StoreSpec(url.into())
    }

    /// The primary [`SENTINEL_MASTER`] named by the Sentinel at `url` (`redis://host:port`).
    pub fn sentinel(url: &str) -> Self {
        StoreSpec(format!("redis+sentinel://{}/{SENTINEL_MASTER}", host_port(url)))
    }

    /// A Cluster with these seed nodes (`redis://host:port` each).
    pub fn cluster(urls: &[String]) -> Self {
        let nodes: Vec<&str> = urls.iter().map(|url| host_port(url)).collect();
        StoreSpec(format!("redis+cluster://{}", nodes.join(",")))
    }

    /// A PostgreSQL server at `url` (`postgres://…`).
    pub fn postgres(url: impl Into<String>) -> Self {
        StoreSpec(url.into())
    }

    /// An etcd cluster at `url` (`etcd://host:port,…`).
    pub fn etcd(url: impl Into<String>) -> Self {
        StoreSpec(url.into())
    }

    /// A store for this URL whose commands time out after `command_timeout`, waiting for
    /// `replica_ack` replicas on grants when non-zero (Redis only).
    pub fn connect(
        &self,
        command_timeout: Duration,
        replica_ack: u32,
    ) -> Result<SharedStore, Error> {
        let builder = leader::store::builder(&self.0).command_timeout(command_timeout);
        match replica_ack {
            0 => builder.build(),
            replicas => builder.replica_ack(replicas, command_timeout).build(),
        }
    }
}

/// `host:port` of a `redis://host:port` URL.
fn host_port(url: &str) -> &str {
    url.trim_start_matches("redis://")
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for StoreSpec {
    type Err = String;

    /// Any URL the library opens; checked by building the store (no I/O).
    fn from_str(value: &str) -> Result<Self, String> {
        leader::store::builder(value).build().map_err(|e| e.to_string())?;
        Ok(StoreSpec(value.to_owned()))
    }
}
