//! [`RedisStore`]: leader groups in Redis or Valkey, standalone, Sentinel or Cluster.

mod announcement;
mod builder;
mod call;
mod connection;
mod failures;
mod layout;
mod lease_store;
mod observed;
mod pubsub;
mod reply;
#[cfg(feature = "unstable-script-calls")]
mod script_call;
mod scripts;
mod version;

pub use self::builder::{DEFAULT_IDLE_GROUP_TTL, RedisStoreBuilder};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use self::connection::{ConnectionSource, Connections};
use self::failures::{connect_failure, unavailable};
pub use self::layout::RedisGroupLayout;
use self::pubsub::{Notifications, SubscriberSource};
#[cfg(feature = "unstable-script-calls")]
pub use self::script_call::ScriptCall;
use super::bound::Bound;
use crate::duration::ceil_millis as millis;
use crate::error::Error;

/// Leader groups kept in Redis or Valkey.
///
/// - Every operation is one EVALSHA of a Lua script (a second round trip, EVAL, only after
///   the server lost its script cache), over one shared multiplexed connection that the
///   deadpool-redis pool makes and that is replaced when it breaks.
/// - Time comes from the server's `TIME` inside the scripts, so client clocks do not matter.
/// - A group is one hash, `{key}:group` (a hash tag, so a Cluster keeps it on one slot):
///   each slot expires by its own record, so holders with different leases never lose
///   slots to a key expiry, and the hash expires
///   [`idle_group_ttl`](RedisStoreBuilder::idle_group_ttl) after its longest live slot, so
///   an unused group disappears. While the group is full and a candidate was refused,
///   `{key}:full` (a value only the store writes) marks it until just before its nearest
///   expiry, so a failed attempt is refused without reading the clock or the records.
/// - The server must be Redis 7.0 or later, or Valkey: an older one is refused with
///   [`Error::UnsupportedServer`] when a connection is made.
/// - Fences are `max(last + 1, server time in µs)`: strictly increasing, even after the
///   server restarts without its data.
/// - A release is published when someone may listen: a candidate refused since the last
///   release (a refusal marks the group) or a tool that announced itself with
///   [`announce_watcher`](Self::announce_watcher). Waiters in every process are woken by
///   one pub/sub connection per store, and also wake at the nearest expiry. A cycle nobody
///   waits for publishes nothing.
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
    releases: Notifications,
    /// The groups announced as observed here.
    observed: observed::Observed,
    /// This store's id in the groups it announces (`watcher:<id>`), made at the first.
    watcher_id: std::sync::OnceLock<String>,
    /// Replicas that must acknowledge a grant, and how long to wait for them.
    replica_ack: Option<(u32, Duration)>,
    /// How long a group's keys outlive its last slot, in ms.
    idle_group_ttl_ms: u64,
    /// Redacted addresses, for `Debug` and logs.
    description: String,
    /// The addresses alone, for errors.
    endpoint: String,
}

/// A store's checked timings.
struct Timings {
    command_timeout: Duration,
    replica_ack: Option<(u32, Duration)>,
    idle_group_ttl: Duration,
}

impl RedisStore {
    fn new(
        source: ConnectionSource,
        subscriber: SubscriberSource,
        description: String,
        timings: Timings,
    ) -> Self {
        let Timings { command_timeout, replica_ack, idle_group_ttl } = timings;
        install_tls_provider();
        RedisStore {
            inner: Arc::new(Inner {
                connections: Connections::new(
                    source,
                    command_timeout,
                    replica_ack.map_or(Duration::ZERO, |(_, wait)| wait),
                ),
                releases: Notifications::new(subscriber, command_timeout),
                observed: observed::Observed::default(),
                watcher_id: std::sync::OnceLock::new(),
                replica_ack,
                idle_group_ttl_ms: millis(idle_group_ttl),
                // "redis standalone redis://…": what follows the deployment's kind.
                endpoint: description.splitn(3, ' ').nth(2).unwrap_or_default().to_owned(),
                description,
            }),
        }
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
        let bound = self.bound("connect", self.command_timeout());
        let connected = async {
            match bound.run(self.inner.connections.get()).await? {
                Ok(_connection) => Ok(()),
                Err(failure) => Err(connect_failure("connect", failure)),
            }
        };
        crate::store::located(&self.inner.endpoint, connected).await
    }

    /// The deadline of one `operation`.
    fn bound(&self, operation: &'static str, limit: Duration) -> Bound {
        Bound::new("redis", operation, limit)
    }
}

/// Makes ring the process's rustls provider unless the application chose one, so `rediss://`
/// works whichever other rustls providers the dependency tree enables.
fn install_tls_provider() {
    #[cfg(feature = "redis-tls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The deployment, with any password redacted: `redis standalone redis://app:***@cache:6379`.
impl fmt::Display for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.description)
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
