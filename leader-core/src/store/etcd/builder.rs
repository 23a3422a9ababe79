//! [`EtcdStoreBuilder`]: which etcd members a [`EtcdStore`] talks to and how, set before it
//! is built.

use std::fmt;
use std::time::Duration;

use etcd_client::ConnectOptions;

use super::EtcdStore;
use crate::error::Error;
use crate::store::{DEFAULT_COMMAND_TIMEOUT, url};

/// Configures an [`EtcdStore`]: made by [`EtcdStore::builder`], finished by
/// [`build`](Self::build) (no I/O) or [`connect`](Self::connect) (checks that a member
/// answers).
///
/// ```
/// use std::time::Duration;
/// use leader_core::EtcdStore;
///
/// # fn main() -> Result<(), leader_core::Error> {
/// let store = EtcdStore::builder("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/apps/")
///     .command_timeout(Duration::from_secs(2))
///     .build()?; // connects on first use
/// assert_eq!(store.prefix(), "apps/");
///
/// let err = EtcdStore::builder("etcd:///apps").build().unwrap_err();
/// assert!(err.to_string().contains("expected etcd://[user:password@]host:port"), "{err}");
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build` or `connect`"]
pub struct EtcdStoreBuilder {
    url: String,
    command_timeout: Duration,
    prefix: Option<String>,
    credentials: Option<(String, String)>,
}

/// What a URL says.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    tls: bool,
    credentials: Option<(String, String)>,
    endpoints: Vec<String>,
    prefix: String,
}

impl EtcdStore {
    /// Connects to an etcd cluster with the default settings and checks that a member
    /// answers: `EtcdStore::builder(url).connect().await`.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::builder(url).connect().await
    }

    /// A builder for the cluster `url` names:
    /// `etcd://[user:password@]host:port[,host:port…][/prefix]`, or `etcds://…` for TLS
    /// (feature `etcd-tls`). Every key the store writes starts with `prefix` (default: none).
    pub fn builder(url: impl Into<String>) -> EtcdStoreBuilder {
        EtcdStoreBuilder {
            url: url.into(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            prefix: None,
            credentials: None,
        }
    }
}

impl EtcdStoreBuilder {
    /// How long one store operation (its calls to every member it tries included) may take
    /// before it fails with [`Error::Timeout`]. Default: 5 s. A takeover's lock-delay (see
    /// [`EtcdStore`]) is not counted.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Every key the store writes starts with `prefix`, instead of the URL's path; a `/` is
    /// added if it does not end with one, so no two prefixes' keys run into each other.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Authenticates as `user` (instead of the URL's user and password).
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Makes the store without touching the cluster: its first operation connects.
    pub fn build(self) -> Result<EtcdStore, Error> {
        let parsed = parse(&self.url)
            .map_err(|allowed| Error::invalid_option("url", url::redact(&self.url), allowed))?;
        if self.command_timeout.is_zero() {
            return Err(Error::invalid_option(
                "command_timeout",
                format!("{:?}", self.command_timeout),
                "must be more than zero",
            ));
        }
        if parsed.tls && !cfg!(feature = "etcd-tls") {
            return Err(Error::invalid_option(
                "url",
                url::redact(&self.url),
                "etcds:// URLs need the `etcd-tls` feature of leader",
            ));
        }
        // A prefix ends with a separator, so one store's groups never read as another's
        // (`ap` + `px` would be `app` + `x`).
        let mut prefix = self.prefix.unwrap_or(parsed.prefix);
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        if let Some(bad) = prefix.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::invalid_option(
                "prefix",
                &prefix,
                format!("must not contain whitespace or control characters (found {bad:?})"),
            ));
        }
        let scheme = if parsed.tls { "https" } else { "http" };
        let endpoints: Vec<String> =
            parsed.endpoints.iter().map(|endpoint| format!("{scheme}://{endpoint}")).collect();
        let mut options = ConnectOptions::new()
            .with_require_leader(true)
            .with_connect_timeout(self.command_timeout)
            .with_keep_alive(self.command_timeout, self.command_timeout / 2)
            .with_keep_alive_while_idle(true);
        #[cfg(feature = "etcd-tls")]
        if parsed.tls {
            options = options.with_tls(etcd_client::TlsOptions::new().with_enabled_roots());
        }
        if let Some((user, password)) = self.credentials.or(parsed.credentials) {
            options = options.with_user(user, password).with_auto_token_refresh(true);
        }
        let description = format!("{scheme}://{}/{prefix}", parsed.endpoints.join(","));
        Ok(EtcdStore::new(endpoints, options, prefix, self.command_timeout, description))
    }

    /// [`build`](Self::build), then checks that a member answers and the credentials work.
    pub async fn connect(self) -> Result<EtcdStore, Error> {
        let store = self.build()?;
        store.check().await?;
        Ok(store)
    }
}

const EXPECTED: &str =
    "expected etcd://[user:password@]host:port[,host:port…][/prefix] (or etcds://)";

fn parse(url: &str) -> Result<Parsed, String> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("etcd://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("etcds://") {
        (true, rest)
    } else {
        return Err(EXPECTED.to_owned());
    };
    let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((user_info, hosts)) => {
            let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
            if user.is_empty() {
                return Err(format!("{EXPECTED}: a user is needed before the `@`"));
            }
            (Some((user.to_owned(), password.to_owned())), hosts)
        }
        None => (None, authority),
    };
    let mut endpoints = Vec::new();
    for endpoint in hosts.split(',') {
        let port = endpoint.rsplit_once(':').map(|(host, port)| (host, port.parse::<u16>()));
        match port {
            Some((host, Ok(port))) if !host.is_empty() && port > 0 => {
                endpoints.push(endpoint.to_owned())
            }
            _ => return Err(format!("{EXPECTED}: {endpoint:?} is not host:port")),
        }
    }
    Ok(Parsed { tls, credentials, endpoints, prefix: prefix.to_owned() })
}

impl fmt::Debug for EtcdStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStoreBuilder")
            .field("url", &url::redact(&self.url))
            .field("command_timeout", &self.command_timeout)
            .field("prefix", &self.prefix)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_members_credentials_and_a_prefix() {
        let parsed = parse("etcd://app:s3cret@10.0.0.1:2379,[::1]:2380/apps/leader/").unwrap();
        assert_eq!(
            parsed,
            Parsed {
                tls: false,
                credentials: Some(("app".into(), "s3cret".into())),
                endpoints: vec!["10.0.0.1:2379".into(), "[::1]:2380".into()],
                prefix: "apps/leader/".into(),
            }
        );
        assert!(parse("etcds://h:1").unwrap().tls);
        for bad in
            ["etcd://", "etcd://host", "etcd://h:0", "etcd://h:1,", "etcd://:p@h:1", "http://h:1"]
        {
            let err = parse(bad).unwrap_err();
            assert!(err.starts_with("expected etcd://"), "{bad}: {err}");
        }
        let err = EtcdStore::builder("etcd://u:s3cret@h").build().unwrap_err().to_string();
        assert!(!err.contains("s3cret") && err.contains("\"h\" is not host:port"), "{err}");
    }
}
