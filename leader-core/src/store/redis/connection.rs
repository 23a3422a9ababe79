//! One shared multiplexed connection, made by a deadpool-redis pool and replaced when it
//! breaks, and script calls over it: one EVALSHA per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, ToRedisArgs, Value};
use tokio::sync::Mutex;

use super::scripts::{LuaScript, SCRIPT_COUNT};
use super::version;

/// Where connections come from.
#[derive(Clone)]
pub(crate) enum ConnectionSource {
    Standalone(deadpool_redis::Pool),
    Sentinel(deadpool_redis::sentinel::Pool),
    Cluster(deadpool_redis::cluster::Pool),
}

impl ConnectionSource {
    pub(crate) fn topology(&self) -> &'static str {
        match self {
            ConnectionSource::Standalone(_) => "standalone",
            ConnectionSource::Sentinel(_) => "sentinel",
            ConnectionSource::Cluster(_) => "cluster",
        }
    }

    /// A new connection, taken out of the pool for good: pooled connections are checked with
    /// a PING on every checkout, a round trip each operation would pay.
    ///
    /// A multiplexed connection's own response timeout (redis-rs: 500 ms) is raised to
    /// `response_timeout` (the store's command timeout, which bounds every call anyway):
    /// otherwise a reply slower than 500 ms counts as a broken connection, whatever the
    /// command timeout says, and the call is retried on a new one.
    async fn connect(&self, response_timeout: Duration) -> Result<SharedConnection, PoolFailure> {
        let multiplexed = |mut connection: MultiplexedConnection| {
            connection.set_response_timeout(response_timeout);
            SharedConnection::Multiplexed(connection)
        };
        Ok(match self {
            ConnectionSource::Standalone(pool) => {
                multiplexed(deadpool_redis::Connection::take(pool.get().await?))
            }
            ConnectionSource::Sentinel(pool) => {
                multiplexed(deadpool_redis::sentinel::Connection::take(pool.get().await?))
            }
            ConnectionSource::Cluster(pool) => SharedConnection::Cluster(
                deadpool_redis::cluster::Connection::take(pool.get().await?),
            ),
        })
    }

    /// Drops the pool's idle connections, for example after a failover made them stale.
    fn forget_idle(&self) {
        match self {
            ConnectionSource::Standalone(pool) => drop(pool.retain(|_, _| false)),
            ConnectionSource::Sentinel(pool) => drop(pool.retain(|_, _| false)),
            ConnectionSource::Cluster(pool) => drop(pool.retain(|_, _| false)),
        }
    }
}

/// Why the pool gave no connection.
pub(crate) type PoolFailure = deadpool_redis::PoolError;

/// A connection many tasks use at once: both kinds multiplex requests and are cheap to clone.
#[derive(Clone)]
pub(crate) enum SharedConnection {
    Multiplexed(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for SharedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            SharedConnection::Multiplexed(conn) => conn.req_packed_command(cmd),
            SharedConnection::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            SharedConnection::Multiplexed(conn) => {
                conn.req_packed_commands(pipeline, offset, count)
            }
            SharedConnection::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            SharedConnection::Multiplexed(conn) => conn.get_db(),
            SharedConnection::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A failure of a script call.
pub(crate) enum CallFailure {
    /// No connection could be had.
    Pool(PoolFailure),
    /// The server or the connection failed the call.
    Redis(RedisError),
    /// A connection made earlier failed the call in a way a new connection may not: a
    /// READONLY reply (it reached a primary that was since demoted) or a closed connection
    /// (the server restarted, or Sentinel killed clients after a failover). The connection
    /// is discarded (after READONLY, the pool's idle ones too).
    Stale(RedisError),
    /// The server is older than the scripts need: its `redis_version`.
    Unsupported(String),
}

/// The shared connection and how to replace it.
pub(crate) struct Connections {
    source: ConnectionSource,
    /// How long one operation may take, and so how long a connection waits for a reply
    /// before it counts as broken.
    command_timeout: Duration,
    /// How long a connection waits for one reply before it counts as broken: the command
    /// timeout, plus the longest `WAIT` a grant may add.
    reply_timeout: Duration,
    /// The connection in use; a plain mutex, held only to clone it (the hot path).
    current: std::sync::Mutex<Option<(u64, SharedConnection)>>,
    /// Serialises making a new connection, so a broken one is replaced once, not per caller.
    connecting: Mutex<()>,
    generation: AtomicU64,
    /// Serialises refilling the server's script cache, so callers that find it empty
    /// together send one EVAL, not one each.
    reloading: Mutex<()>,
    /// How many times each script was sent with EVAL, so a caller that waited for another's
    /// refill knows to try EVALSHA again.
    reloads: [AtomicU64; SCRIPT_COUNT],
    /// The connection generation each script was last sent on with EVAL: a call that waits
    /// for replicas sends a script's source first on each new connection, since an EVALSHA
    /// the server does not know still runs the `WAIT` piped after it, which then waits (up
    /// to its whole timeout, for a slow replica) for writes made before, and only then is
    /// the source sent, with a `WAIT` of its own.
    sent_on: [AtomicU64; SCRIPT_COUNT],
}

impl Connections {
    pub(crate) fn new(
        source: ConnectionSource,
        command_timeout: Duration,
        longest_wait: Duration,
    ) -> Self {
        Connections {
            source,
            command_timeout,
            reply_timeout: command_timeout + longest_wait,
            current: std::sync::Mutex::new(None),
            connecting: Mutex::new(()),
            generation: AtomicU64::new(0),
            reloading: Mutex::new(()),
            reloads: Default::default(),
            sent_on: Default::default(),
        }
    }

    pub(crate) fn topology(&self) -> &'static str {
        self.source.topology()
    }

    /// How long one operation may take.
    pub(crate) fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<(u64, SharedConnection)>> {
        self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The shared connection, made first if there is none; `true` if it was made just now.
    /// A new connection is used only once its server proved recent enough.
    pub(crate) async fn get(&self) -> Result<(u64, SharedConnection, bool), CallFailure> {
        if let Some((generation, connection)) = &*self.current() {
            return Ok((*generation, connection.clone(), false));
        }
        // Boxed: the making of a connection is a large future, and every call's future
        // would carry (and move) its size otherwise.
        Box::pin(self.make_shared()).await
    }

    /// [`get`](Self::get)'s making of a new shared connection, one caller at a time.
    async fn make_shared(&self) -> Result<(u64, SharedConnection, bool), CallFailure> {
        let _connecting = self.connecting.lock().await;
        if let Some((generation, connection)) = &*self.current() {
            return Ok((*generation, connection.clone(), false)); // another caller made it
        }
        let mut connection =
            self.source.connect(self.reply_timeout).await.map_err(CallFailure::Pool)?;
        if let Some(found) = version::too_old(&mut connection).await.map_err(CallFailure::Redis)? {
            return Err(CallFailure::Unsupported(found));
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *self.current() = Some((generation, connection.clone()));
        Ok((generation, connection, true))
    }

    /// Drops the shared connection if it is still `generation`, so the next call makes a
    /// new one.
    pub(crate) fn discard(&self, generation: u64) {
        let mut current = self.current();
        if current.as_ref().is_some_and(|(held, _)| *held == generation) {
            *current = None;
        }
    }

    /// Drops the shared connection, whichever it is.
    pub(crate) fn discard_current(&self) {
        *self.current() = None;
    }

    /// Runs `script` with one EVALSHA; only if the server lost its script cache (NOSCRIPT)
    /// does a second round trip send the source with EVAL, which caches it again. Callers
    /// that find the cache empty together refill it once: one sends EVAL while the others
    /// wait, then they send EVALSHA again (and EVAL only if that still finds no script, as
    /// on another Cluster node).
    ///
    /// With `wait`, `WAIT replicas timeout_ms` follows the script in the same round trip,
    /// and the replicas that acknowledged are returned with the script's reply; the first
    /// such call of a script on a connection sends its source (EVAL), so a server that does
    /// not know it yet never runs a `WAIT` for a script that did not run. A failure
    /// that a new connection may not meet is a [`CallFailure::Stale`]: every script is safe
    /// to repeat with the same token, so the caller may make the call once more.
    pub(crate) async fn eval_then_wait(
        &self,
        lua: &LuaScript,
        keys: &[&dyn ToRedisArgsDyn],
        args: &[&dyn ToRedisArgsDyn],
        wait: Option<(u32, u64)>,
    ) -> Result<(Value, Option<i64>), CallFailure> {
        let (generation, mut connection, fresh) = self.get().await?;
        let reloads = &self.reloads[lua.index];
        let reloads_before = reloads.load(Ordering::Acquire);
        let sent_on = &self.sent_on[lua.index];
        if wait.is_some() && sent_on.load(Ordering::Acquire) != generation {
            let result = run(&mut connection, lua.source, keys, args, wait, "EVAL").await;
            if result.is_ok() {
                sent_on.store(generation, Ordering::Release);
            }
            return self.failure(generation, fresh, result);
        }
        let mut result = run(&mut connection, &lua.hash, keys, args, wait, "EVALSHA").await;
        if is_noscript(&result) {
            // Boxed, as the rare path it is, so it does not grow every call's future.
            let reload = async {
                let _reloading = self.reloading.lock().await;
                if reloads.load(Ordering::Acquire) != reloads_before {
                    result = run(&mut connection, &lua.hash, keys, args, wait, "EVALSHA").await;
                }
                if is_noscript(&result) || reloads.load(Ordering::Acquire) == reloads_before {
                    tracing::debug!(script = lua.name, "script cache empty; sending the source");
                    result = run(&mut connection, lua.source, keys, args, wait, "EVAL").await;
                    reloads.fetch_add(1, Ordering::AcqRel);
                }
            };
            Box::pin(reload).await;
        }
        self.failure(generation, fresh, result)
    }

    /// `result` of a call on connection `generation` (`fresh`: made for this call), with a
    /// failure classed: a connection that failed is dropped, and a failure a new connection
    /// may not meet is [`CallFailure::Stale`].
    fn failure(
        &self,
        generation: u64,
        fresh: bool,
        result: Result<(Value, Option<i64>), RedisError>,
    ) -> Result<(Value, Option<i64>), CallFailure> {
        let error = match result {
            Ok(reply) => return Ok(reply),
            Err(error) => error,
        };
        let read_only = error.code() == Some("READONLY");
        let broken = error.is_io_error() || error.is_connection_dropped() || error.is_timeout();
        if read_only || broken {
            self.discard(generation);
        }
        if read_only {
            self.source.forget_idle();
        }
        if read_only || (broken && !fresh) {
            return Err(CallFailure::Stale(error));
        }
        Err(CallFailure::Redis(error))
    }
}

fn is_noscript<T>(result: &Result<T, RedisError>) -> bool {
    matches!(result, Err(error) if error.code() == Some("NOSCRIPT"))
}

/// One script call (`EVALSHA sha` or `EVAL source`), pipelined with `WAIT` if asked.
async fn run(
    connection: &mut SharedConnection,
    script: &str,
    keys: &[&dyn ToRedisArgsDyn],
    args: &[&dyn ToRedisArgsDyn],
    wait: Option<(u32, u64)>,
    command: &str,
) -> Result<(Value, Option<i64>), RedisError> {
    let mut call = redis::cmd(command);
    call.arg(script).arg(keys.len());
    for arg in keys.iter().chain(args) {
        arg.push_to(&mut call);
    }
    let Some((replicas, timeout_ms)) = wait else {
        return Ok((call.query_async(connection).await?, None));
    };
    let mut pipeline = redis::pipe();
    pipeline.add_command(call).cmd("WAIT").arg(replicas).arg(timeout_ms);
    let (reply, acknowledged): (Value, i64) = pipeline.query_async(connection).await?;
    Ok((reply, Some(acknowledged)))
}

/// A script argument: `ToRedisArgs` made object safe for a slice of mixed types.
pub(crate) trait ToRedisArgsDyn: Sync {
    fn push_to(&self, cmd: &mut Cmd);
}

impl<T: ToRedisArgs + Sync> ToRedisArgsDyn for T {
    fn push_to(&self, cmd: &mut Cmd) {
        cmd.arg(self);
    }
}
