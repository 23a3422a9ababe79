//! [`PostgresStoreBuilder`]: what a [`PostgresStore`] talks to and how, set before it is
//! built.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::tokio_postgres;
use deadpool_postgres::{Manager, ManagerConfig, Pool, QueueMode, RecyclingMethod};
use tokio::sync::OnceCell;

use super::notify::Notifications;
use super::schema::Names;
use super::ssl_mode::{self, RootCert, SslMode, TlsParams};
use super::tls;
use super::{Inner, PostgresStore};
use crate::error::Error;
use crate::share::Shares;
use crate::store::url::redact;

use crate::store::DEFAULT_COMMAND_TIMEOUT;

/// Configures a [`PostgresStore`]: made by [`PostgresStore::builder`] (a URL) or
/// [`PostgresStore::pool_builder`] (a pool the application already has); finished by
/// [`build`](Self::build) (no I/O) or [`connect`](Self::connect) (creates or checks the
/// schema). Setters never fail; `build` checks every value and names the first one out of
/// range.
///
/// ```
/// use std::time::Duration;
/// use leader_core::PostgresStore;
///
/// # fn main() -> Result<(), leader_core::Error> {
/// let store = PostgresStore::builder("postgres://app@127.0.0.1:5432/app")
///     .schema("coordination")
///     .table_prefix("leader_")
///     .command_timeout(Duration::from_secs(2))
///     .build()?; // connects and creates the tables on first use
///
/// let err = PostgresStore::builder("postgres://app@127.0.0.1/app")
///     .table_prefix("Leader-")
///     .build()
///     .unwrap_err();
/// assert!(err.to_string().starts_with("invalid `table_prefix` \"Leader-\""));
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build` or `connect`"]
pub struct PostgresStoreBuilder {
    target: Target,
    command_timeout: Duration,
    schema: String,
    table_prefix: String,
    pool_size: usize,
    /// PEM root certificates trusted beside the system's (feature `postgres-tls`).
    tls_roots: Vec<Vec<u8>>,
}

enum Target {
    Url(String),
    Pool(Pool, Box<tokio_postgres::Config>),
}

impl PostgresStore {
    /// Connects with the default settings, creating or checking the schema:
    /// `PostgresStore::builder(url).connect().await`.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::builder(url).connect().await
    }

    /// A builder for the server at `url`: `postgres://user[:password]@host[:port]/database`
    /// (or the `key=value` form).
    ///
    /// TLS (feature `postgres-tls`) follows the URL's `sslmode` as libpq reads it:
    ///
    /// | `sslmode` | encrypts | verifies the server's certificate |
    /// |---|---|---|
    /// | `disable` | never | — |
    /// | `allow`, `prefer` (the default) | when the server offers it | no |
    /// | `require` | always | no; the chain, as `verify-ca`, once a root certificate is given |
    /// | `verify-ca` | always | the chain to a trusted root, not the host's name |
    /// | `verify-full` | always | the chain and the host's name |
    ///
    /// The trusted roots are the system's, or those of the PEM file `sslrootcert=<path>`
    /// names, and any [`tls_root_certificates`](PostgresStoreBuilder::tls_root_certificates)
    /// adds; `sslrootcert=system` (with `verify-full` only, as in libpq) is the system's.
    /// Over a Unix socket nothing is encrypted. Unlike libpq, `allow` is `prefer` here and
    /// neither falls back to plain text when the server refuses TLS (use `disable`); the
    /// differences are listed in docs/postgres-store.md. A certificate that fails
    /// verification is a permanent [`Error::Store`] naming the `sslmode` that would accept
    /// it. Without the feature, connections are in plain text and `require`, `verify-ca`
    /// and `verify-full` are refused by `build`.
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Target::Url(url.into()))
    }

    /// A builder over a deadpool-postgres pool the application already has; `config`
    /// reaches the same server, for the store's one `LISTEN` connection.
    pub fn pool_builder(pool: Pool, config: tokio_postgres::Config) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Target::Pool(pool, Box::new(config)))
    }
}

impl PostgresStoreBuilder {
    fn new(target: Target) -> Self {
        PostgresStoreBuilder {
            target,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            schema: "public".to_owned(),
            table_prefix: "leader_".to_owned(),
            pool_size: 4,
            tls_roots: Vec::new(),
        }
    }

    /// How long one operation may take before it fails with [`Error::Timeout`] (and its
    /// connection is closed). Default: 5 s; at least 1 ms.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The schema of the store's tables and functions, created if missing. Default:
    /// `public`. Lowercase ASCII letters, digits and `_`.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The prefix of the store's tables (`{prefix}groups`, `{prefix}slots`), functions and
    /// NOTIFY channel. Default: `leader_`. Lowercase ASCII letters, digits and `_`, at most
    /// 40 bytes.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// How many connections the store's own pool keeps (not used with `pool_builder`); it
    /// hands out the most recently used one first, whose server process is the least cold.
    /// Default: 4; at least 1.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Trusts the certificate authorities in `pem` (one or more `-----BEGIN CERTIFICATE-----`
    /// blocks) beside the system's roots (or `sslrootcert`'s), for a server whose
    /// certificate a private CA signed. Feature `postgres-tls`. What is verified is the
    /// URL's `sslmode` (see [`PostgresStore::builder`]): `verify-full` checks the chain and
    /// the host's name; `require` and `verify-ca` the chain alone; `prefer` and `allow`
    /// nothing.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leader_core::Error> {
    /// let ca = std::fs::read("/etc/ssl/private-ca.pem").expect("the CA");
    /// let store = leader_core::PostgresStore::builder("postgres://app@db.internal/app?sslmode=verify-full")
    ///     .tls_root_certificates(ca)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "postgres-tls")]
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_roots.push(pem.into());
        self
    }

    /// Checks every setting and makes the store, without connecting: the first operation
    /// connects and creates or checks the schema.
    pub fn build(self) -> Result<PostgresStore, Error> {
        let command_timeout = crate::duration::positive("command_timeout", self.command_timeout)?;
        if self.pool_size == 0 {
            return Err(Error::invalid_option("pool_size", 0, "must be at least 1"));
        }
        let names = Names::new(&self.schema, &self.table_prefix)?;
        let (pool, config, connector, description) = match self.target {
            Target::Url(url) => {
                let invalid = |reason: String| Error::invalid_option("url", redact(&url), reason);
                let (client_url, params) = ssl_mode::take_tls_params(&url).map_err(invalid)?;
                let mut config: tokio_postgres::Config = client_url.parse().map_err(|error| {
                    invalid(format!(
                        "{error}; expected postgres://user[:password]@host[:port]/database"
                    ))
                })?;
                let connector = tls::connector(&params, &redact(&url), &self.tls_roots)?;
                plain_on_unix_sockets(&mut config);
                pin_session(&mut config, command_timeout);
                #[allow(clippy::clone_on_copy)] // `NoTls` is Copy; the rustls connector is not
                let manager = Manager::from_config(
                    config.clone(),
                    connector.clone(),
                    ManagerConfig { recycling_method: RecyclingMethod::Fast },
                );
                let pool = Pool::builder(manager)
                    .max_size(self.pool_size)
                    .queue_mode(QueueMode::Lifo)
                    .build()
                    .map_err(|error| {
                        Error::invalid_option("url", redact(&url), error.to_string())
                    })?;
                let description = format!("postgres {}", describe_config(&config));
                (pool, config, connector, description)
            }
            Target::Pool(pool, mut config) => {
                let description = format!("postgres pool ({})", describe_config(&config));
                // tokio-postgres's configuration has no verifying modes: a root certificate
                // given for the application's pool means its name is checked too.
                let mode = match SslMode::of_client(config.get_ssl_mode()) {
                    SslMode::Require if !self.tls_roots.is_empty() => SslMode::VerifyFull,
                    mode => mode,
                };
                let params = TlsParams { mode, root_cert: RootCert::Default };
                let connector = tls::connector(&params, &description, &self.tls_roots)?;
                // Only the LISTEN connection is the store's own here; the pool's sessions
                // keep the application's settings (a serialization failure is retried).
                pin_session(&mut config, command_timeout);
                (pool, *config, connector, description)
            }
        };
        // Half the command timeout, so a silent LISTEN connection leaves the waiter time to
        // make its first attempt within the store's own timeout for the watch.
        #[allow(clippy::clone_on_copy)] // `NoTls` is Copy; the rustls connector is not
        let releases = Notifications::new(config, connector.clone(), &names, command_timeout);
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                pool,
                connector,
                names,
                command_timeout,
                schema_ready: OnceCell::new(),
                releases,
                acquiring: Shares::new(),
                // "postgres host:port/database": what follows the store's kind.
                endpoint: description.split_once(' ').map_or("", |(_, at)| at).to_owned(),
                description,
            }),
        })
    }

    /// [`build`](Self::build), then connects and creates or checks the schema.
    pub async fn connect(self) -> Result<PostgresStore, Error> {
        let store = self.build()?;
        store.migrate().await?;
        Ok(store)
    }
}

/// Settings every connection the store makes starts its session with, whatever the role
/// or database sets (startup options take precedence over `ALTER ROLE … SET`):
/// - `READ COMMITTED`: each operation is one statement that must see the latest commit
///   once it holds the group's lock (a `REPEATABLE READ` or `SERIALIZABLE` default would
///   make contention a serialization failure);
/// - a `statement_timeout` below the command timeout, so a statement whose caller gave up
///   ends on the server too, even when the cancel request is lost;
/// - unless the URL sets one, a connect timeout of the command timeout.
fn pin_session(config: &mut tokio_postgres::Config, command_timeout: Duration) {
    let statement_timeout = (command_timeout.as_millis() * 9 / 10).max(1);
    let mut options = config.get_options().unwrap_or_default().to_owned();
    if !options.is_empty() {
        options.push(' ');
    }
    options.push_str(&format!(
        "-c default_transaction_isolation=read\\ committed -c statement_timeout={statement_timeout}"
    ));
    config.options(&options);
    // A connection attempt that gets no answer (a black hole) fails like a statement would,
    // rather than after the system's TCP timeout (minutes).
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(command_timeout);
    }
}

/// Connections over Unix sockets only are never encrypted, whatever `sslmode` says, as libpq
/// does (a socket has no TLS, and no host name to verify).
fn plain_on_unix_sockets(config: &mut tokio_postgres::Config) {
    let hosts = config.get_hosts();
    if !hosts.is_empty()
        && hosts.iter().all(|host| matches!(host, tokio_postgres::config::Host::Unix(_)))
    {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
}

/// `user@host:port/database`, never the password.
fn describe_config(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{}@{host}:{port}/{}",
        config.get_user().unwrap_or("?"),
        config.get_dbname().unwrap_or("?")
    )
}

impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.target {
            Target::Url(url) => redact(url),
            Target::Pool(_, config) => format!("pool ({})", describe_config(config)),
        };
        f.debug_struct("PostgresStoreBuilder")
            .field("target", &target)
            .field("schema", &self.schema)
            .field("table_prefix", &self.table_prefix)
            .field("command_timeout", &self.command_timeout)
            .field("tls_root_certificates", &self.tls_roots.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::redact;
    use deadpool_postgres::tokio_postgres;

    #[cfg(not(feature = "postgres-tls"))]
    #[test]
    fn requiring_tls_without_the_feature_is_refused_at_build() {
        let err = crate::PostgresStore::builder("postgres://app@db/x?sslmode=require")
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("needs the `postgres-tls` feature"), "{err}");
    }

    #[test]
    fn unix_sockets_are_never_encrypted() {
        use deadpool_postgres::tokio_postgres::config::SslMode;
        let mut socket: tokio_postgres::Config =
            "host=/var/run/postgresql user=app sslmode=require".parse().unwrap();
        super::plain_on_unix_sockets(&mut socket);
        assert_eq!(socket.get_ssl_mode(), SslMode::Disable);
        let mut tcp: tokio_postgres::Config = "host=db user=app sslmode=require".parse().unwrap();
        super::plain_on_unix_sockets(&mut tcp);
        assert_eq!(tcp.get_ssl_mode(), SslMode::Require);
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("postgres://app:s3cret@db:5432/x"), "postgres://app:***@db:5432/x");
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
        assert!(!redact("host=db password=s3cret").contains("s3cret"));
    }
}
