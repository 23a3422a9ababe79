//! The acquires this store has sent and the server may still run: each runs to its end in
//! a task of its own, and a release or revocation of the same token waits for it.

use deadpool_postgres::tokio_postgres::Row;
use deadpool_postgres::tokio_postgres::types::ToSql;
use tokio::sync::watch;

use super::PostgresStore;
use super::rows::millis;
use super::statement::Call;
use crate::error::Error;
use crate::store::AcquireRequest;
use crate::token::LeaseToken;

impl PostgresStore {
    /// Runs an acquire's statement to its end in a task of its own, so a caller that gives
    /// up (a dropped future) does not leave it running unseen on the server: a release or
    /// revocation of the same token waits for it ([`after_acquiring`](Self::after_acquiring))
    /// instead of overtaking it on another connection and finding nothing, which left the
    /// slot the statement granted next held by nobody for its whole lease.
    pub(super) async fn acquire_to_the_end(
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
        let claim = request
            .reservation
            .map(|claim| (millis(claim.waited), millis(claim.hold_for), claim.priority));
        let statement = tokio::spawn(async move {
            let names = &store.inner.names;
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&key, &token, &holder, &lease, &max];
            let sql = match &claim {
                None => &names.acquire_sql,
                Some((waited, hold, priority)) => {
                    params.extend([waited as &(dyn ToSql + Sync), hold, priority]);
                    &names.acquire_claiming_sql
                }
            };
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
    pub(super) async fn after_acquiring(
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
}
