//! [`PostgresStore`]: leader groups in PostgreSQL, with durable grants and NOTIFY wake-ups.

mod builder;
mod error_class;
mod notify;
mod schema;
mod ssl_mode;
mod tls;

pub use self::builder::PostgresStoreBuilder;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use deadpool_postgres::tokio_postgres::types::ToSql;
use deadpool_postgres::tokio_postgres::{self, Row};
use tokio::sync::{OnceCell, watch};

use self::notify::Notifications;
use self::schema::{MAX_KEY_BYTES, Names};
use self::tls::Connector;
use super::answer::{Answer, Decode};
use super::bound::{Bound, Failed, Then, Tries};
use super::class::Class;
use super::{
    AcquireOutcome, AcquireRequest, GroupSnapshot, GroupWatch, HeldSlot, LeaseStore,
    RENEW_BATCH_LEN, ReleaseOutcome, RenewOutcome, Revocation, SlotInfo, SlotRef,
};
use crate::backoff::STATEMENT_RETRY_PAUSE;
use crate::error::Error;
use crate::share::Shares;
use crate::token::LeaseToken;

/// Leader groups kept in PostgreSQL.
///
/// - Two tables: one row per group (its `max_leaders` and last fence) and one row per live
///   slot (token, holder, fence, acquired-at, expires-at). Names are configurable; the
///   schema is created by a candidate's first operation (acquire, renew, release, a watch
///   for releases; idempotently, under an advisory lock), by [`migrate`](Self::migrate)
///   or by [`connect`](Self::connect), and an existing table of another shape is an error.
///   Reads (`state`, `list_groups`, observers) never run DDL: without the schema they
///   answer as for groups nobody holds.
/// - Every operation is **one** round trip: one prepared statement that reads
///   `clock_timestamp()` (client clocks do not matter) and answers as the Redis scripts do.
///   Acquire looks at the group in plain SQL and refuses a full group from that snapshot,
///   writing nothing; only when a slot looks free does it call the server-side grant
///   function. Renew, release and state are one function call each. A group's writers
///   take turns under its advisory lock; a grant deletes the expired slots it sees and
///   moves the group's fence only from the value it counted under.
/// - A committed grant survives a crash of the server (WAL) and, with synchronous
///   replication, a failover.
/// - Fences are `max(last + 1, server time in µs)`, kept with the group.
/// - A release (or a shortening renewal) sends `NOTIFY` when some store announced waiters
///   of the group; one `LISTEN` connection per store announces its waiters' groups and
///   wakes them, and they also wake at the nearest expiry.
///
/// ```no_run
/// use leader_core::{LeaderGroupElectionOptions, LeaderGroupElector, PostgresStore};
///
/// # async fn run() -> Result<(), leader_core::Error> {
/// let store = PostgresStore::connect("postgres://app@10.0.0.5:5432/app").await?;
/// let workers = LeaderGroupElector::new(store, LeaderGroupElectionOptions::new(3))?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: deadpool_postgres::Pool,
    /// What the pool's connections are made with, for the cancel request of a statement
    /// that timed out.
    connector: Connector,
    names: Names,
    command_timeout: Duration,
    /// Made once per store, on first use (or by `migrate`).
    schema_ready: OnceCell<()>,
    releases: Notifications,
    /// The acquires this store has sent and the server may still run, by token: each ends
    /// (`true`) once its statement has, whether or not its caller still waits.
    acquiring: Shares<LeaseToken, watch::Receiver<bool>>,
    /// Host, port and database, for `Debug` and errors (never the password).
    description: String,
    /// The same without the store's kind, for errors.
    endpoint: String,
}

/// One operation's statement and what it is called in errors.
#[derive(Clone, Copy)]
struct Call<'a> {
    operation: &'static str,
    sql: &'a str,
    /// Whether the operation is a candidate's (acquire, renew, release), which makes the
    /// schema first if it is missing; a read (state, list) never runs DDL.
    makes_schema: bool,
}

impl<'a> Call<'a> {
    /// A candidate's operation: the schema is made first if it is missing.
    fn candidate(operation: &'static str, sql: &'a str) -> Self {
        Call { operation, sql, makes_schema: true }
    }

    /// A read: it never runs DDL, and on a database without the schema (no table, function
    /// or schema of that name: no candidate ran there yet) it answers no rows, as for a
    /// group nobody holds.
    fn read(operation: &'static str, sql: &'a str) -> Self {
        Call { operation, sql, makes_schema: false }
    }
}

/// A renewal's answer, from a row of the `renew` function.
fn renewal(row: &Row) -> Result<RenewOutcome, Error> {
    let get = |column: &str| row.try_get::<_, Option<i64>>(column).map_err(|e| decode("renew", e));
    let outcome: i32 = row.try_get("outcome").map_err(|e| decode("renew", e))?;
    let (expires, now) = (get("expires_us")?, get("now_us")?);
    let answer = Answer {
        code: outcome.into(),
        expires_at: expires.map(time_of),
        expires_in: expires.zip(now).map(|(expires, now)| between(now, expires)),
        ..Answer::default()
    };
    Decode { store: "postgres", operation: "renew" }.renew(answer)
}

impl PostgresStore {
    /// Creates the tables and functions if they are missing (idempotent; safe when many
    /// processes start at once), and checks that existing tables have the expected shape.
    /// A candidate's first operation does it too; reads never do.
    pub async fn migrate(&self) -> Result<(), Error> {
        self.schema_ready().await
    }

    /// [`LeaseStore::list_groups`]: every group that ever had a slot keeps its row (its
    /// `max_leaders` and last fence), live or idle.
    async fn select_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        let sql = &self.inner.names.list_sql;
        let params: [&(dyn ToSql + Sync); 2] = [&prefix, &suffix];
        let rows = self.query(Call::read("list", sql), &params).await?;
        rows.iter().map(|row| row.try_get::<_, String>(0).map_err(|e| decode("list", e))).collect()
    }

    async fn schema_ready(&self) -> Result<(), Error> {
        self.inner
            .schema_ready
            .get_or_try_init(|| async {
                let bound = Bound::new("postgres", "migrate", self.inner.command_timeout * 4);
                let client = bound.run(self.inner.pool.get()).await?;
                let client = client.map_err(|error| pool_error("migrate", error))?;
                let migrate =
                    schema::migrate(&client, &self.inner.names, self.inner.command_timeout * 4);
                bound.run(migrate).await.unwrap_or_else(|timed_out| {
                    self.cancel(&client, "migrate");
                    drop(deadpool_postgres::Object::take(client));
                    Err(timed_out)
                })
            })
            .await
            .map(drop)
    }

    /// The deadline of one `operation`: the command timeout from now.
    fn bound(&self, operation: &'static str) -> Bound {
        Bound::new("postgres", operation, self.inner.command_timeout)
    }

    /// Runs one statement within one deadline of the command timeout, retries included (a
    /// candidate's operation makes the schema first if it is missing; see [`Call`]):
    /// once on a new connection if the one it used was broken, and again (after
    /// [`STATEMENT_RETRY_PAUSE`], doubling) while the server rolled it back for a reason
    /// that passes by itself (see [`Class::Retry`]). Every statement is idempotent for its
    /// token.
    ///
    /// A statement that outlives the deadline is cancelled on the server (a cancel request)
    /// and its connection closed, so it never grants a slot after its caller gave up; the
    /// store's own connections also carry a `statement_timeout` below the command timeout.
    /// One statement of [`renew_many`](LeaseStore::renew_many): the answers for `keys`
    /// held under `tokens`, in order.
    async fn renew_part(
        &self,
        keys: &[&str],
        tokens: &[String],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        let sql = &self.inner.names.renew_many_sql;
        let lease = millis(lease_time);
        let params: [&(dyn ToSql + Sync); 3] = [&keys, &tokens, &lease];
        let rows = self.query(Call::candidate("renew", sql), &params).await?;
        if rows.len() != keys.len() {
            return Err(unexpected(
                "renew",
                &format!("{} rows for {} slots", rows.len(), keys.len()),
            ));
        }
        rows.iter().map(renewal).collect()
    }

    async fn query(
        &self,
        call: Call<'_>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        if call.makes_schema && self.inner.schema_ready.get().is_none() {
            self.schema_ready().await?;
        }
        let bound = self.bound(call.operation);
        bound.retry(STATEMENT_RETRY_PAUSE, |tries| self.attempt(&bound, call, params, tries)).await
    }

    /// One attempt of [`query`](Self::query): the statement on a pooled connection, and
    /// what its failure leaves to do.
    async fn attempt(
        &self,
        bound: &Bound,
        call: Call<'_>,
        params: &[&(dyn ToSql + Sync)],
        tries: Tries,
    ) -> Result<Vec<Row>, Failed> {
        let client = match bound.run(self.inner.pool.get()).await? {
            Ok(client) => client,
            Err(error) => return Err(Failed::stop(pool_error(call.operation, error))),
        };
        let run = async {
            let statement = client.prepare_cached(call.sql).await?;
            client.query(&statement, params).await
        };
        let error = match bound.run(run).await {
            Ok(Ok(rows)) => return Ok(rows),
            Ok(Err(error)) => error,
            Err(timed_out) => {
                self.cancel(&client, call.operation);
                // A connection that does not answer is not given back to the pool.
                drop(deadpool_postgres::Object::take(client));
                return Err(Failed::stop(timed_out));
            }
        };
        let broken = error.is_closed() || client.is_closed();
        if broken {
            drop(deadpool_postgres::Object::take(client));
        }
        if !call.makes_schema && error_class::names_a_missing_object(&error) {
            return Ok(Vec::new()); // a read on a database without the schema
        }
        let then = match error_class::class(&error) {
            Class::Retry => Then::AfterPause,
            // Once on a new connection: the pool may hold others the server dropped too.
            _ if broken && tries.at_once == 0 => Then::AtOnce,
            _ => Then::Stop,
        };
        Err(Failed { error: error_class::to_error(call.operation, error), then })
    }

    /// Runs an acquire's statement to its end in a task of its own, so a caller that gives
    /// up (a dropped future) does not leave it running unseen on the server: a release or
    /// revocation of the same token waits for it ([`after_acquiring`](Self::after_acquiring))
    /// instead of overtaking it on another connection and finding nothing, which left the
    /// slot the statement granted next held by nobody for its whole lease.
    async fn acquire_to_the_end(
        &self,
        request: AcquireRequest<'_>,
        max: i32,
    ) -> Result<Vec<Row>, Error> {
        let (ended, acquiring) = watch::channel(false);
        let flight = self.inner.acquiring.get_or_start(&request.token, |_| false, || acquiring);
        let store = self.clone();
        let (key, token, holder) =
            (request.key.to_owned(), request.token.to_string(), request.holder.to_owned());
        let lease = millis(request.lease_time);
        let statement = tokio::spawn(async move {
            let params: [&(dyn ToSql + Sync); 5] = [&key, &token, &holder, &lease, &max];
            let sql = &store.inner.names.acquire_sql;
            let rows = store.query(Call::candidate("acquire", sql), &params).await;
            ended.send_replace(true);
            drop(flight);
            rows
        });
        match statement.await {
            Ok(rows) => rows,
            Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
            Err(cancelled) => Err(Error::Unavailable {
                store: "postgres",
                endpoint: String::new(),
                operation: "acquire",
                cause: Box::new(cancelled),
            }),
        }
    }

    /// Waits, within `operation`'s deadline, for an acquire of `token` this store sent and
    /// the server may still run.
    async fn after_acquiring(
        &self,
        token: LeaseToken,
        operation: &'static str,
    ) -> Result<(), Error> {
        let mut acquiring = None;
        self.inner.acquiring.with(&token, |ended| acquiring = Some(ended.clone()));
        if let Some(mut ended) = acquiring {
            let _ = self.bound(operation).run(ended.wait_for(|ended| *ended)).await?;
        }
        Ok(())
    }

    /// Asks the server to cancel what `client` runs (in a task: the caller has given up
    /// already), so a statement waiting for a group's lock does not grant a slot later.
    fn cancel(&self, client: &deadpool_postgres::Object, operation: &'static str) {
        #[allow(clippy::clone_on_copy)] // `NoTls` is Copy; the rustls connector is not
        let (token, connector) = (client.cancel_token(), self.inner.connector.clone());
        let bound = self.inner.command_timeout;
        tokio::spawn(async move {
            match tokio::time::timeout(bound, token.cancel_query(connector)).await {
                Ok(Ok(())) => tracing::debug!(operation, "cancelled a statement that timed out"),
                Ok(Err(error)) => {
                    tracing::debug!(operation, %error, "could not cancel a statement that timed out")
                }
                Err(_) => tracing::debug!(operation, "no answer to the cancel request"),
            }
        });
    }
}

/// Why no connection could be had: the server's answer is classed as any other (a wrong
/// password or a missing database is permanent), a failure to reach it is transient.
fn pool_error(operation: &'static str, error: deadpool_postgres::PoolError) -> Error {
    if let deadpool_postgres::PoolError::Backend(error) = error {
        return error_class::to_error(operation, error);
    }
    Error::Unavailable {
        store: "postgres",
        endpoint: String::new(),
        operation,
        cause: Box::new(error),
    }
}

/// Microseconds since the Unix epoch, as the functions return times.
fn time_of(micros: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(micros.max(0) as u64)
}

/// From `from` to `to`, in microseconds; zero if `to` is not later.
fn between(from: i64, to: i64) -> Duration {
    Duration::from_micros(to.saturating_sub(from).max(0) as u64)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(crate::duration::ceil_millis(duration)).unwrap_or(i64::MAX)
}

fn fence_of(fence: i64) -> u64 {
    fence.max(0) as u64
}

#[async_trait]
impl LeaseStore for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", request.lease_time)?;
            let Ok(max) = i32::try_from(request.max_leaders.get()) else {
                return Err(Error::invalid_option(
                    "max_leaders",
                    request.max_leaders,
                    format!("must be at most {} with PostgresStore", i32::MAX),
                ));
            };
            if let Some(bad) = request.key.chars().find(|c| c.is_whitespace() || c.is_control()) {
                return Err(Error::InvalidKey {
                    key: request.key.to_owned(),
                    reason: format!(
                        "must not contain whitespace or control characters (found {bad:?}): \
                     PostgresStore notifies with the key as the payload"
                    ),
                });
            }
            if request.key.len() > MAX_KEY_BYTES {
                return Err(Error::invalid_option(
                    "key",
                    format!(
                        "{}… ({} bytes)",
                        request.key.chars().take(32).collect::<String>(),
                        request.key.len()
                    ),
                    format!(
                        "must be at most {MAX_KEY_BYTES} bytes with PostgresStore (a slot's index \
                     entry and a release's NOTIFY payload hold the key)"
                    ),
                ));
            }
            let rows = self.acquire_to_the_end(request, max).await?;
            let row = rows.first().ok_or_else(|| unexpected("acquire", "no row"))?;
            // [outcome, fence, acquired_us, expires_us, now_us, existing_max]
            let fields: Vec<Option<i64>> = row.try_get(0).map_err(|e| decode("acquire", e))?;
            let field = |i: usize| fields.get(i).copied().flatten();
            let (expires, now) = (field(3), field(4));
            let answer = Answer {
                code: field(0).unwrap_or(-1),
                fence: field(1).map(fence_of),
                acquired_at: field(2).map(time_of),
                expires_at: expires.map(time_of),
                expires_in: expires.zip(now).map(|(expires, now)| between(now, expires)),
                existing_max: field(5).map(|max| max.clamp(0, u32::MAX as i64) as u32),
            };
            Decode { store: "postgres", operation: "acquire" }.acquire(answer, request)
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
            let sql = &self.inner.names.renew_sql;
            let (token, lease) = (token.to_string(), millis(lease_time));
            let params: [&(dyn ToSql + Sync); 3] = [&key, &token, &lease];
            let rows = self.query(Call::candidate("renew", sql), &params).await?;
            renewal(rows.first().ok_or_else(|| unexpected("renew", "no row"))?)
        })
        .await
    }

    /// Up to [`RENEW_BATCH_LEN`] slots per statement, each renewed by the `renew` function
    /// in one transaction. Its advisory locks are taken in the order of the keys, sorted
    /// here, so two batches never wait on each other in a cycle.
    async fn renew_many(
        &self,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", lease_time)?;
            let mut order: Vec<usize> = (0..slots.len()).collect();
            order.sort_by_key(|&i| slots[i].key);
            let mut answers = vec![RenewOutcome::NotHeld; slots.len()];
            for part in order.chunks(RENEW_BATCH_LEN) {
                let keys: Vec<&str> = part.iter().map(|&i| slots[i].key).collect();
                let tokens: Vec<String> =
                    part.iter().map(|&i| slots[i].token.to_string()).collect();
                for (&i, answer) in
                    part.iter().zip(self.renew_part(&keys, &tokens, lease_time).await?)
                {
                    answers[i] = answer;
                }
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
            self.after_acquiring(token, "release").await?;
            let sql = &self.inner.names.release_sql;
            let (token, min_lease) = (token.to_string(), millis(min_lease_time));
            let params: [&(dyn ToSql + Sync); 3] = [&key, &token, &min_lease];
            let rows = self.query(Call::candidate("release", sql), &params).await?;
            let row = rows.first().ok_or_else(|| unexpected("release", "no row"))?;
            let outcome: i32 = row.try_get("outcome").map_err(|e| decode("release", e))?;
            let left: Option<i64> =
                row.try_get("expires_in_us").map_err(|e| decode("release", e))?;
            let answer = Answer {
                code: outcome.into(),
                expires_in: left.map(|left| between(0, left)),
                ..Answer::default()
            };
            Decode { store: "postgres", operation: "release" }.release(answer)
        })
        .await
    }

    /// One function call: the slot, named by its token or its fence, is deleted now or moved
    /// to a fresh token nobody holds (so it lapses at its expiry).
    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            if let SlotRef::Token(token) = slot {
                self.after_acquiring(token, "revoke").await?;
            }
            let sql = &self.inner.names.revoke_sql;
            let (token, fence) = match slot {
                SlotRef::Token(token) => (Some(token.to_string()), None),
                SlotRef::Fence(fence) => (None, Some(i64::try_from(fence).unwrap_or(i64::MAX))),
            };
            let now = how == Revocation::Now;
            let nobody = LeaseToken::generate()?.to_string();
            let params: [&(dyn ToSql + Sync); 5] = [&key, &token, &fence, &now, &nobody];
            let rows = self.query(Call::candidate("revoke", sql), &params).await?;
            let row = rows.first().ok_or_else(|| unexpected("revoke", "no row"))?;
            let outcome: i32 = row.try_get("outcome").map_err(|e| decode("revoke", e))?;
            let left: Option<i64> =
                row.try_get("expires_in_us").map_err(|e| decode("revoke", e))?;
            let answer = Answer {
                code: outcome.into(),
                expires_in: left.map(|left| between(0, left)),
                ..Answer::default()
            };
            Decode { store: "postgres", operation: "revoke" }.release(answer)
        })
        .await
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let sql = &self.inner.names.state_sql;
            let params: [&(dyn ToSql + Sync); 1] = [&key];
            let rows = self.query(Call::read("state", sql), &params).await?;
            let mut snapshot = GroupSnapshot::default();
            for row in &rows {
                let get = |column: &str| -> Result<i64, Error> {
                    row.try_get::<_, i64>(column).map_err(|e| decode("state", e))
                };
                let max: i32 = row.try_get("max_leaders").map_err(|e| decode("state", e))?;
                let holder: String = row.try_get("holder").map_err(|e| decode("state", e))?;
                snapshot.max_leaders = Some(max.max(0) as u32);
                snapshot.leaders.push(SlotInfo {
                    holder,
                    fence: fence_of(get("fence")?),
                    acquired_at: time_of(get("acquired_us")?),
                    expires_in: between(get("now_us")?, get("expires_us")?),
                });
            }
            Ok(snapshot)
        })
        .await
    }

    /// Every group that ever had a slot keeps its row (its `max_leaders` and last fence),
    /// so idle groups are listed too.
    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            self.select_groups(prefix, suffix).await
        })
        .await
    }

    /// A candidate's watch: it makes the schema first if it is missing, as the acquire that
    /// follows would.
    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            if self.inner.schema_ready.get().is_none() {
                self.schema_ready().await?;
            }
            let watched = self.bound("watch").run(self.inner.releases.watch(key)).await?;
            watched.map_err(|error| error_class::to_error("watch", error))
        })
        .await
    }

    /// `LISTEN`, and the announcement that the group is observed here (so its grants and
    /// releases notify), confirmed before this returns; withdrawn after the last watch of
    /// the group on this store goes, or with the `LISTEN` connection's session.
    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let watched = self.bound("watch").run(self.inner.releases.watch_changes(key)).await?;
            watched.map_err(|error| error_class::to_error("watch", error))
        })
        .await
    }
}

fn decode(operation: &'static str, error: tokio_postgres::Error) -> Error {
    unexpected(operation, &error.to_string())
}

fn unexpected(operation: &'static str, what: &str) -> Error {
    Decode { store: "postgres", operation }.unexpected(what)
}

/// The server and database, with any password redacted.
impl fmt::Display for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.description)
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.inner.description)
            .field("tables", &self.inner.names.describe())
            .field("command_timeout", &self.inner.command_timeout)
            .finish()
    }
}
