//! [`RedisStore`]: leader groups in Redis or Valkey, standalone, Sentinel or Cluster.

mod builder;
mod connection;
mod layout;
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

use async_trait::async_trait;

use self::connection::{CallFailure, ConnectionSource, Connections, ToRedisArgsDyn};
pub use self::layout::RedisGroupLayout;
use self::pubsub::{Notifications, SubscriberSource};
#[cfg(feature = "unstable-script-calls")]
pub use self::script_call::ScriptCall;
use self::scripts::{
    ACQUIRE, GroupKeys, LuaScript, RELEASE, RELEASE_CHANNEL_PREFIX, RENEW, RENEW_MANY, REVOKE,
    STATE, TokenArg, WATCH,
};
use super::bound::{Bound, Failed, Then};
use super::class::Class;
use super::{
    AcquireOutcome, AcquireRequest, GroupSnapshot, GroupWatch, HeldSlot, LeaseStore,
    RENEW_BATCH_LEN, ReleaseOutcome, RenewOutcome, Revocation, SlotRef,
};
use crate::error::Error;
use crate::token::LeaseToken;

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

    /// One script call of [`renew_many`](LeaseStore::renew_many): `part` holds at most
    /// [`RENEW_BATCH_LEN`] slots.
    async fn renew_part(
        &self,
        part: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        let Some(first) = part.first() else { return Ok(Vec::new()) };
        let groups =
            part.iter().map(|slot| GroupKeys::new(slot.key)).collect::<Result<Vec<_>, _>>()?;
        let named: Vec<_> = groups.iter().map(|keys| keys.group()).collect();
        let tokens: Vec<_> = part.iter().map(|slot| TokenArg(slot.token)).collect();
        let lease = millis(lease_time);
        let keys: Vec<&dyn ToRedisArgsDyn> = named.iter().map(|name| name as _).collect();
        let mut args: Vec<&dyn ToRedisArgsDyn> =
            vec![&lease, &self.inner.idle_group_ttl_ms, &RELEASE_CHANNEL_PREFIX];
        args.extend(tokens.iter().map(|token| token as &dyn ToRedisArgsDyn));
        let (reply, acknowledged) = self
            .call_then_wait(
                "renew_many",
                first.key,
                &RENEW_MANY,
                &keys,
                &args,
                self.inner.replica_ack,
            )
            .await?;
        let outcomes = reply::renew_many(reply, part.len())?;
        self.renewal_replicated("renew_many", acknowledged)?;
        Ok(outcomes)
    }

    /// With `replica_ack`, an error unless enough replicas acknowledged a renewal: the new
    /// expiry is on the primary only, and a failover to a replica would end the slot before
    /// it, so the holder must not count on it (it keeps its earlier deadline, which the
    /// replicas acknowledged, and tries again).
    fn renewal_replicated(
        &self,
        operation: &'static str,
        acknowledged: Option<i64>,
    ) -> Result<(), Error> {
        match (self.inner.replica_ack, acknowledged) {
            (Some((required, timeout)), Some(acknowledged))
                if acknowledged < i64::from(required) =>
            {
                let acknowledged = acknowledged.max(0) as u32;
                Err(Error::NotReplicated { acknowledged, required, timeout, operation })
            }
            _ => Ok(()),
        }
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
        // One deadline for the whole operation: the call, its one retry on a new
        // connection after a stale one, and the diagnosis of a wrong-type key.
        let bound = self.bound(operation, limit);
        let call = bound.retry(Duration::ZERO, |tries| async move {
            match self.inner.connections.eval_then_wait(lua, keys, args, wait).await {
                Ok(reply) => Ok(reply),
                Err(CallFailure::Stale(error)) if tries.made == 0 => {
                    tracing::warn!(script = lua.name, %error, "stale Redis connection; retrying on a new one");
                    Err(Failed { error: unavailable(operation, error), then: Then::AtOnce })
                }
                Err(CallFailure::Redis(error) | CallFailure::Stale(error)) => {
                    Err(Failed::stop(self.classify(operation, key, error).await))
                }
                Err(failure) => Err(Failed::stop(connect_failure(operation, failure))),
            }
        });
        bound.run(call).await.unwrap_or_else(|timed_out| {
            // A black-holed connection never answers: replace it.
            self.inner.connections.discard_current();
            Err(timed_out)
        })
    }

    async fn classify(
        &self,
        operation: &'static str,
        key: &str,
        error: redis::RedisError,
    ) -> Error {
        if error.code() == Some("WRONGTYPE") {
            let found = Box::pin(self.describe_types(key)).await; // rare: kept out of every call's future
            return Error::WrongType { key: key.to_owned(), found };
        }
        match class(&error) {
            Class::Permanent => Error::Store {
                store: "redis",
                endpoint: String::new(),
                operation,
                message: error.to_string(),
            },
            Class::Retry | Class::Unavailable => unavailable(operation, error),
        }
    }

    /// Has the group's grants and releases published for the next `duration`, as a
    /// [`GroupObserver`](crate::GroupObserver) of this store has them published while it
    /// lives; for the tests of the announcement and for a program that subscribes to the
    /// group's [channels](RedisGroupLayout) itself. Not a stable API: watch a group with a
    /// `GroupObserver` (or `leader watch`). Without an announcement a grant publishes
    /// nothing, and a release only when a refused candidate may be waiting. `duration`
    /// must be between 1 ms and one day. Each store announces for itself: an announcement
    /// never shortens another store's, and [`withdraw_watcher`](Self::withdraw_watcher)
    /// withdraws only this store's (a `GroupObserver`'s announcement is its own, apart from
    /// this one).
    #[doc(hidden)]
    pub async fn announce_watcher(&self, key: &str, duration: Duration) -> Result<(), Error> {
        if duration < Duration::from_millis(1) || duration > Duration::from_secs(86_400) {
            return Err(Error::invalid_option(
                "duration",
                duration,
                "must be between 1ms and 1 day",
            ));
        }
        self.watch_script(key, millis(duration), "tool").await
    }

    /// Withdraws this store's [announcement](Self::announce_watcher) of group `key`: once no
    /// other store's is live, the group's grants are no longer published. Not a stable API.
    #[doc(hidden)]
    pub async fn withdraw_watcher(&self, key: &str) -> Result<(), Error> {
        self.watch_script(key, 0, "tool").await
    }

    /// This store's observers' announcement of `key` for `duration` (zero: withdrawn), kept
    /// apart from a tool's ([`announce_watcher`](Self::announce_watcher)).
    pub(super) async fn observe_announcement(
        &self,
        key: &str,
        duration: Duration,
    ) -> Result<(), Error> {
        self.watch_script(key, millis(duration), "observers").await
    }

    async fn watch_script(&self, key: &str, duration_ms: u64, who: &str) -> Result<(), Error> {
        let keys = GroupKeys::new(key)?;
        let id = format!("{}:{who}", self.watcher_id()?);
        self.call(
            "watch",
            key,
            &WATCH,
            &[&keys.group()],
            &[&duration_ms, &self.inner.idle_group_ttl_ms, &id],
        )
        .await?;
        Ok(())
    }

    /// This store's id in the groups it announces: random, made once.
    fn watcher_id(&self) -> Result<&str, Error> {
        if let Some(id) = self.inner.watcher_id.get() {
            return Ok(id);
        }
        let id = LeaseToken::generate()?.to_string();
        Ok(self.inner.watcher_id.get_or_init(|| id))
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
    #[cfg(feature = "redis-tls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// What a failed call means: a server that is loading, without its primary, busy, out of
/// memory or read-only, and a connection that failed, are [`Class::Unavailable`]; any other
/// reply is [`Class::Permanent`].
fn class(error: &redis::RedisError) -> Class {
    let transient_code = matches!(
        error.code(),
        Some("READONLY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "BUSY" | "OOM")
    );
    if transient_code
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_cluster_error()
    {
        Class::Unavailable
    } else {
        Class::Permanent
    }
}

/// A failure to get a connection: unreachable, or a server too old for the scripts.
fn connect_failure(operation: &'static str, failure: CallFailure) -> Error {
    match failure {
        CallFailure::Pool(deadpool_redis::PoolError::Backend(error))
            if refused_credentials(&error) =>
        {
            refused(operation, &error)
        }
        CallFailure::Redis(error) if refused_credentials(&error) => refused(operation, &error),
        CallFailure::Pool(error) => unavailable(operation, error),
        CallFailure::Redis(error) | CallFailure::Stale(error) => unavailable(operation, error),
        CallFailure::Unsupported(found) => {
            Error::UnsupportedServer { store: "redis", found, required: version::REQUIRED }
        }
    }
}

/// Whether the server refused the connection's credentials: only a change of them helps.
fn refused_credentials(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

/// A permanent failure naming the server's refusal.
fn refused(operation: &'static str, error: &redis::RedisError) -> Error {
    Error::Store {
        store: "redis",
        endpoint: String::new(),
        operation,
        message: format!("authentication refused: {error}"),
    }
}

fn unavailable(
    operation: &'static str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::Unavailable {
        store: "redis",
        endpoint: String::new(),
        operation,
        cause: Box::new(error),
    }
}

use crate::duration::ceil_millis as millis;

#[async_trait]
impl LeaseStore for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", request.lease_time)?;
            let keys = GroupKeys::new(request.key)?;
            let lease = millis(request.lease_time);
            let (reply, acknowledged) = self
                .call_then_wait(
                    "acquire",
                    request.key,
                    &ACQUIRE,
                    &[&keys.group(), &keys.full()],
                    &[
                        &TokenArg(request.token),
                        &request.holder,
                        &lease,
                        &request.max_leaders.get(),
                        &keys.grant_channel(),
                        &lease.saturating_add(self.inner.idle_group_ttl_ms),
                    ],
                    self.inner.replica_ack,
                )
                .await?;
            let outcome = reply::acquire(reply, request)?;
            if let (AcquireOutcome::Granted(_), Some((required, timeout)), Some(acknowledged)) =
                (outcome, self.inner.replica_ack, acknowledged)
                && acknowledged < i64::from(required)
            {
                // Give the grant back; if that fails too, the slot expires with its lease.
                // Either way the caller learns what happened to its grant: NotReplicated.
                if let Err(error) = self.release(request.key, request.token, Duration::ZERO).await {
                    tracing::warn!(
                        group = request.key,
                        %error,
                        "could not release a grant too few replicas acknowledged; it expires \
                         with its lease"
                    );
                }
                let acknowledged = acknowledged.max(0) as u32;
                let operation = "acquire";
                return Err(Error::NotReplicated { acknowledged, required, timeout, operation });
            }
            Ok(outcome)
        })
        .await
    }

    async fn renew(
        &self,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", lease_time)?;
            let keys = GroupKeys::new(key)?;
            let lease = millis(lease_time);
            let (reply, acknowledged) = self
                .call_then_wait(
                    "renew",
                    key,
                    &RENEW,
                    &[&keys.group(), &keys.full()],
                    &[
                        &TokenArg(token),
                        &lease,
                        &self.inner.idle_group_ttl_ms,
                        &keys.release_channel(),
                    ],
                    self.inner.replica_ack,
                )
                .await?;
            let outcome = reply::renew(reply)?;
            self.renewal_replicated("renew", acknowledged)?;
            Ok(outcome)
        })
        .await
    }

    /// Up to [`RENEW_BATCH_LEN`] slots per script call (`renew_many.lua`, renew.lua's
    /// work for each slot). A Cluster keeps each group on the server of its own hash slot, so
    /// there the slots are renewed one by one.
    async fn renew_many(
        &self,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        if self.topology() == "cluster" {
            return crate::store::renew_each(self, slots, lease_time).await;
        }
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", lease_time)?;
            let mut answers = Vec::with_capacity(slots.len());
            for part in slots.chunks(RENEW_BATCH_LEN) {
                answers.extend(self.renew_part(part, lease_time).await?);
            }
            Ok(answers)
        })
        .await
    }

    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::within_limit("min_lease_time", min_lease_time)?;
            let keys = GroupKeys::new(key)?;
            let min_lease = millis(min_lease_time);
            let channel = keys.release_channel();
            let reply = self
                .call(
                    "release",
                    key,
                    &RELEASE,
                    &[&keys.group(), &keys.full()],
                    &[&TokenArg(token), &min_lease, &channel],
                )
                .await?;
            reply::release(reply)
        })
        .await
    }

    /// One script call: the slot, named by its token or its fence, is freed now or moved to
    /// a fresh token nobody holds (so it lapses at its expiry).
    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = GroupKeys::new(key)?;
            let (token, fence) = match slot {
                SlotRef::Token(token) => (token.to_string(), String::new()),
                SlotRef::Fence(fence) => (String::new(), fence.to_string()),
            };
            let now = if how == Revocation::Now { "1" } else { "0" };
            let nobody = LeaseToken::generate()?.to_string();
            let channel = keys.release_channel();
            let reply = self
                .call(
                    "revoke",
                    key,
                    &REVOKE,
                    &[&keys.group(), &keys.full()],
                    &[&token, &fence, &now, &nobody, &channel],
                )
                .await?;
            reply::release(reply)
        })
        .await
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = GroupKeys::new(key)?;
            let reply = self.call("state", key, &STATE, &[&keys.group()], &[]).await?;
            reply::state(reply)
        })
        .await
    }

    /// Found with `SCAN`, which never blocks the server; a group is listed while its hash
    /// exists (an idle group for `idle_group_ttl`). Standalone and Sentinel only: on a
    /// Cluster this is an error (name the group instead).
    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            self.scan_groups(prefix, suffix).await
        })
        .await
    }

    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            GroupKeys::new(key)?;
            let bound = self.bound("watch", self.command_timeout());
            bound.run(self.inner.releases.watch(key)).await?.map_err(|e| unavailable("watch", e))
        })
        .await
    }

    /// Subscribed (grant and release channels) and announced: the group's grants and
    /// releases are published while the watch lives, and withdrawn after the last watch of
    /// the group on this store goes (a crashed process's announcement lapses after 15
    /// minutes). The announcement is renewed every 5 minutes, and after every gap in the
    /// subscription.
    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            GroupKeys::new(key)?;
            let bound = self.bound("watch", self.command_timeout());
            let watch = bound
                .run(self.inner.releases.watch_changes(key))
                .await?
                .map_err(|e| unavailable("watch", e))?;
            let announcement = observed::announce(self, key).await?;
            Ok(watch.holding(announcement))
        })
        .await
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
