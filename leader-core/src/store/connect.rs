//! Opening a store from a URL: [`connect`] and [`builder`]; the URL's scheme picks the store.

use std::sync::Arc;
use std::time::Duration;

use super::{LeaseStore, MemoryStore, SharedStore};
use crate::error::Error;

/// Opens the store `url` names and checks that it answers, with one read that writes
/// nothing (a PostgreSQL store makes its schema on a candidate's first operation, or with
/// `PostgresStore::migrate`): `builder(url).connect().await`.
///
/// | URL | store | feature |
/// |---|---|---|
/// | `memory://` | a new [`MemoryStore`] (this process only) | |
/// | `redis://[user:password@]host[:port][/db]`, `unix:///path` | `RedisStore`, standalone | `redis` |
/// | `rediss://…` | `RedisStore` over TLS | `redis-tls` |
/// | `redis+sentinel://host:port[,host:port…]/primary-name` | `RedisStore` through Sentinel | `redis` |
/// | `redis+cluster://[user:password@]host:port[,host:port…]` | `RedisStore` on a Cluster | `redis` |
/// | `postgres://…`, `postgresql://…` | `PostgresStore` | `postgres` |
/// | `etcd://[user:password@]host:port[,host:port…][/prefix]` | `EtcdStore` | `etcd` |
/// | `etcds://…` | `EtcdStore` over TLS | `etcd-tls` |
///
/// A scheme whose feature is off is a clear error naming the feature. For settings a URL
/// cannot carry (a pool of your own, Sentinel credentials, replica acknowledgement), use
/// the store's own builder.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// use leader_core::{LeaderElectionOptions, LeaderElector};
///
/// let store = leader_core::store::connect("memory://").await?;
/// let elector = LeaderElector::new(store, LeaderElectionOptions::new())?;
/// assert!(elector.run_if_leader("report", |_| async {}).await?.is_elected());
///
/// let err = leader_core::store::connect("mysql://db/app").await.unwrap_err();
/// assert!(err.to_string().starts_with("invalid `url` \"mysql://db/app\""));
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<SharedStore, Error> {
    builder(url).connect().await
}

/// `url` as it may be shown in logs and errors: any password replaced by `***`.
///
/// ```
/// let shown = leader_core::store::redact_url("redis://app:s3cret@cache:6379/0");
/// assert_eq!(shown, "redis://app:***@cache:6379/0");
/// ```
pub fn redact_url(url: &str) -> String {
    super::url::redact(url)
}

/// A [`StoreBuilder`] for the store `url` names (see [`connect`] for the schemes).
pub fn builder(url: impl Into<String>) -> StoreBuilder {
    StoreBuilder {
        url: url.into(),
        command_timeout: None,
        tls_roots: Vec::new(),
        replica_ack: None,
    }
}

/// Settings every store takes, for a store chosen by URL: made by [`builder`], finished by
/// [`build`](Self::build) (no I/O) or [`connect`](Self::connect). Its `Debug` shows the URL
/// with its password replaced.
#[must_use = "a builder does nothing until `build` or `connect`"]
pub struct StoreBuilder {
    url: String,
    command_timeout: Option<Duration>,
    tls_roots: Vec<Vec<u8>>,
    replica_ack: Option<(u32, Duration)>,
}

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("url", &super::url::redact(&self.url))
            .field("command_timeout", &self.command_timeout)
            .field("tls_roots", &self.tls_roots.len())
            .field("replica_ack", &self.replica_ack)
            .finish()
    }
}

/// Which store a URL names, among those this build has.
enum Kind {
    Memory,
    #[cfg(feature = "redis")]
    Redis,
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "etcd")]
    Etcd,
}

impl StoreBuilder {
    /// How long one store operation may take before it fails with [`Error::Timeout`].
    /// Default: the store's own (5 s for Redis and PostgreSQL); `MemoryStore` has none.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = Some(timeout);
        self
    }

    /// Trusts the certificate authorities in `pem` beside the system's roots, for a server
    /// whose certificate a private CA signed. PostgreSQL URLs only (feature
    /// `postgres-tls`); with any other URL, `build` fails naming the scheme.
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_roots.push(pem.into());
        self
    }

    /// Requires `replicas` replicas to acknowledge every grant within `timeout`, as
    /// `RedisStore`'s builder's `replica_ack` does. Redis URLs only; with any other URL,
    /// `build` fails naming the scheme.
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_ack = Some((replicas, timeout));
        self
    }

    /// Makes the store without touching the server: its first operation connects.
    pub fn build(self) -> Result<SharedStore, Error> {
        let kind = self.kind()?;
        if !self.tls_roots.is_empty() && super::url::store_kind_of(&self.url) != Some("postgres") {
            return Err(self.invalid(
                "tls_root_certificates apply to postgres:// URLs only (a Redis store verifies \
                 rediss:// against the system's roots)",
            ));
        }
        if self.replica_ack.is_some() && super::url::store_kind_of(&self.url) != Some("redis") {
            return Err(self.invalid(
                "replica_ack applies to Redis URLs only (redis://, rediss://, unix://, \
                 redis+sentinel://, redis+cluster://)",
            ));
        }
        match kind {
            Kind::Memory => Ok(Arc::new(MemoryStore::new())),
            #[cfg(feature = "redis")]
            Kind::Redis => self.redis(),
            #[cfg(feature = "postgres")]
            Kind::Postgres => self.postgres(),
            #[cfg(feature = "etcd")]
            Kind::Etcd => self.etcd(),
        }
    }

    /// [`build`](Self::build), then checks that the server answers and the URL's
    /// credentials work, with one read that writes nothing.
    pub async fn connect(self) -> Result<SharedStore, Error> {
        let store = self.build()?;
        // A read of a group nobody uses: one round trip that proves the server answers and
        // the URL's credentials work. Reads run no DDL, so an operator's role without
        // CREATE (or a read-only database) connects too.
        store.state("leader:connection-check").await.map_err(|e| e.during("connect"))?;
        Ok(store)
    }

    /// The store the URL's scheme names, if this build has it (and the scheme's TLS).
    fn kind(&self) -> Result<Kind, Error> {
        let Some((scheme, kind, feature)) = super::url::scheme_of(&self.url) else {
            return Err(self.invalid(format!("unknown scheme; expected {}", super::url::listed())));
        };
        let built = match feature {
            None => true,
            Some("redis") => cfg!(feature = "redis"),
            Some("redis-tls") => cfg!(feature = "redis-tls"),
            Some("postgres") => cfg!(feature = "postgres"),
            Some("etcd") => cfg!(feature = "etcd"),
            Some("etcd-tls") => cfg!(feature = "etcd-tls"),
            Some(_) => false,
        };
        let feature = feature.unwrap_or_default();
        let needs = || {
            self.invalid(format!(
                "{scheme}:// URLs need the `{feature}` feature of leader: build with \
                 `--features {feature}`, or `features = [\"{feature}\"]` in Cargo.toml"
            ))
        };
        if !built {
            return Err(needs());
        }
        match kind {
            "memory" => Ok(Kind::Memory),
            #[cfg(feature = "redis")]
            "redis" => Ok(Kind::Redis),
            #[cfg(feature = "postgres")]
            "postgres" => Ok(Kind::Postgres),
            #[cfg(feature = "etcd")]
            "etcd" => Ok(Kind::Etcd),
            _ => Err(needs()),
        }
    }

    fn invalid(&self, allowed: impl Into<String>) -> Error {
        Error::invalid_option("url", super::url::redact(&self.url), allowed)
    }

    #[cfg(feature = "redis")]
    fn redis(self) -> Result<SharedStore, Error> {
        let builder = super::redis::RedisStore::builder(self.url);
        let builder = match self.command_timeout {
            Some(timeout) => builder.command_timeout(timeout),
            None => builder,
        };
        let builder = match self.replica_ack {
            Some((replicas, timeout)) => builder.replica_ack(replicas, timeout),
            None => builder,
        };
        Ok(Arc::new(builder.build()?))
    }

    #[cfg(feature = "postgres")]
    fn postgres(self) -> Result<SharedStore, Error> {
        let mut builder = super::postgres::PostgresStore::builder(self.url);
        if let Some(timeout) = self.command_timeout {
            builder = builder.command_timeout(timeout);
        }
        #[cfg(feature = "postgres-tls")]
        for pem in self.tls_roots {
            builder = builder.tls_root_certificates(pem);
        }
        #[cfg(not(feature = "postgres-tls"))]
        if !self.tls_roots.is_empty() {
            return Err(Error::invalid_option(
                "tls_root_certificates",
                "<PEM>",
                "needs the `postgres-tls` feature",
            ));
        }
        Ok(Arc::new(builder.build()?))
    }

    #[cfg(feature = "etcd")]
    fn etcd(self) -> Result<SharedStore, Error> {
        let mut builder = super::etcd::EtcdStore::builder(self.url);
        if let Some(timeout) = self.command_timeout {
            builder = builder.command_timeout(timeout);
        }
        Ok(Arc::new(builder.build()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(url: &str) -> String {
        builder(url).build().err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn a_builder_shows_no_password() {
        for url in ["postgres://u:s3cret@h/db", "postgresql://h/db?password=s3cret"] {
            let shown = format!("{:?}", builder(url));
            assert!(!shown.contains("s3cret") && shown.contains("***"), "{shown}");
        }
    }

    #[test]
    fn the_scheme_picks_the_store_and_a_wrong_one_is_named() {
        assert_eq!(builder("memory://").build().unwrap().kind(), "memory");
        assert!(refusal("mysql://db/app").contains("unknown scheme"), "{}", refusal("mysql://x"));
        assert!(refusal("127.0.0.1:6379").contains("expected memory://, redis://"));
        assert!(!refusal("ftp://app:s3cret@db").contains("s3cret"));
        let tls = builder("memory://").tls_root_certificates(b"pem".to_vec()).build();
        assert!(tls.unwrap_err().to_string().contains("postgres:// URLs only"));
        let ack = builder("memory://").replica_ack(1, Duration::from_millis(50)).build();
        assert!(ack.unwrap_err().to_string().contains("Redis URLs only"));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_urls_of_each_topology() {
        assert_eq!(builder("redis://127.0.0.1:6379").build().unwrap().kind(), "redis");
        let cluster = builder("redis+cluster://a:s3cret@10.0.0.1:7000,10.0.0.2:7000").build();
        assert_eq!(cluster.unwrap().kind(), "redis");
        assert!(builder("redis+sentinel://10.0.0.7:26379/mymaster").build().is_ok());
        let refused = [
            "redis+sentinel://10.0.0.7:26379",
            "redis+sentinel://u:p@h:1/m",
            "redis+sentinel://10.0.0.7:26379,/m",
            "redis+sentinel:///m",
            "redis+sentinel://h:1/my master",
            "redis+sentinel://h:1/u:s3cret@m",
        ];
        for url in refused {
            let refusal = refusal(url);
            assert!(refusal.contains("expected redis+sentinel://"), "{url}: {refusal}");
            assert!(!refusal.contains("s3cret"), "{refusal}");
        }
        for url in ["redis+cluster://h:1,", "redis+cluster://@", "redis+cluster://u:s3cret@h:1,"] {
            let refusal = refusal(url);
            assert!(refusal.contains("expected redis+cluster://"), "{url}: {refusal}");
            assert!(!refusal.contains("s3cret"), "{refusal}");
        }
        assert_eq!(builder("REDIS://127.0.0.1:6379").build().unwrap().kind(), "redis");
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn a_scheme_whose_feature_is_off_names_the_feature() {
        let err = refusal("postgres://app@db/app");
        assert!(err.contains("need the `postgres` feature"), "{err}");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_urls() {
        let store = builder("etcd://10.0.0.1:2379,10.0.0.2:2379/apps/").build().unwrap();
        assert_eq!(store.kind(), "etcd");
        assert!(refusal("etcd://10.0.0.1").contains("is not host:port"), "{}", refusal("etcd://x"));
    }

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn an_etcd_url_without_the_feature_names_it() {
        let err = refusal("etcd://127.0.0.1:2379");
        assert!(err.contains("need the `etcd` feature"), "{err}");
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn a_redis_url_without_the_feature_names_it() {
        let err = refusal("redis://127.0.0.1");
        assert!(err.contains("need the `redis` feature"), "{err}");
    }
}
