//! [`PostgresStore`]: leader groups in PostgreSQL, with durable grants and NOTIFY wake-ups.

mod acquiring;
mod builder;
mod error_class;
mod lease_store;
mod notify;
mod rows;
mod schema;
mod ssl_mode;
mod statement;
mod tls;

pub use self::builder::PostgresStoreBuilder;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OnceCell, watch};

use self::notify::Notifications;
use self::schema::Names;
use self::tls::Connector;
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

impl PostgresStore {
    /// Creates the tables and functions if they are missing (idempotent; safe when many
    /// processes start at once), and checks that existing tables have the expected shape.
    /// A candidate's first operation does it too; reads never do.
    pub async fn migrate(&self) -> Result<(), Error> {
        self.schema_ready().await
    }
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
