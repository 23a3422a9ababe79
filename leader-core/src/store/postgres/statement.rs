//! Running one statement: on a pooled connection, within one deadline, retried on a new
//! connection or after a pause when that can help, and cancelled on the server when it
//! outlives its deadline; a candidate's statement makes the schema first.

use deadpool_postgres::tokio_postgres::Row;
use deadpool_postgres::tokio_postgres::types::ToSql;

use super::{PostgresStore, error_class, schema};
use crate::backoff::STATEMENT_RETRY_PAUSE;
use crate::error::Error;
use crate::store::bound::{Bound, Failed, Then, Tries};
use crate::store::class::Class;

/// One operation's statement and what it is called in errors.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    operation: &'static str,
    sql: &'a str,
    /// Whether the operation is a candidate's (acquire, renew, release), which makes the
    /// schema first if it is missing; a read (state, list) never runs DDL.
    makes_schema: bool,
}

impl<'a> Call<'a> {
    /// A candidate's operation: the schema is made first if it is missing.
    pub(super) fn candidate(operation: &'static str, sql: &'a str) -> Self {
        Call { operation, sql, makes_schema: true }
    }

    /// A read: it never runs DDL, and on a database without the schema (no table, function
    /// or schema of that name: no candidate ran there yet) it answers no rows, as for a
    /// group nobody holds.
    pub(super) fn read(operation: &'static str, sql: &'a str) -> Self {
        Call { operation, sql, makes_schema: false }
    }
}

impl PostgresStore {
    pub(super) async fn schema_ready(&self) -> Result<(), Error> {
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
    pub(super) fn bound(&self, operation: &'static str) -> Bound {
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
    pub(super) async fn query(
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
