//! Command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use leader::KeyOptions;
use leader::store::SharedStore;

/// Show, watch, free and steer the slots of leader groups kept in Redis, Valkey, PostgreSQL or etcd
/// (etcd with the `etcd` feature).
#[derive(Debug, Parser)]
#[command(name = "leader", version)]
pub struct Cli {
    /// The store's URL: `redis://…` (or `rediss://` for TLS, `unix://`,
    /// `redis+sentinel://host:port/primary`, `redis+cluster://host:port,…`) for Redis or
    /// Valkey, `postgres://…` for PostgreSQL (user and password go in it; `sslmode` as
    /// libpq reads it: `prefer`, the default, and `require` encrypt without verifying,
    /// `verify-ca` and `verify-full` verify), `etcd://[user:password@]
    /// host:port[,host:port…][/prefix]` for etcd (`etcds://` for TLS; in a `leader` built
    /// with the `etcd` feature). Redis and etcd TLS certificates are always verified.
    #[arg(long, env = "LEADER_STORE_URL", default_value = "redis://127.0.0.1:6379", global = true)]
    pub url: String,
    /// The key namespace the services use.
    #[arg(long, default_value = "", global = true)]
    pub namespace: String,
    /// The key format the services use; `{role}` stands for the group name.
    #[arg(long, default_value = leader::DEFAULT_KEY_FORMAT, global = true)]
    pub key_format: String,
    /// How long one store operation may take (the store's `command_timeout`).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, global = true)]
    pub command_timeout: Duration,
    /// A PEM file of root certificates to trust, beside the system's (or those of the URL's
    /// `sslrootcert`), for a PostgreSQL server's TLS certificate (a private CA); with
    /// `sslmode=require` it verifies the chain, as `verify-ca`. PostgreSQL URLs only.
    #[arg(long, global = true)]
    pub ca_file: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print a group's holders, fences and time to expiry.
    State {
        /// The group's name.
        group: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a group's holders each time they change (a grant, a release, an expiry), with
    /// the time, holder and fence: from the store's events, with no polling.
    Watch {
        /// The group's name.
        group: String,
        /// Stop after this long (default: until Ctrl-C).
        #[arg(long, value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
        /// Print one JSON object per change (with `at`, the time it was seen) instead of a
        /// table.
        #[arg(long)]
        json: bool,
    },
    /// List the groups under the namespace (standalone or Sentinel Redis, PostgreSQL, etcd).
    Groups {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Ask for a named holder to lead a group: its claim on the group's next free slot goes
    /// before every other candidate's, and a leader that announced a priority steps down
    /// for it once it waits (after its step-down delay). A preference for a holder that
    /// never asks moves nobody; it lapses by itself after `--for`.
    Prefer {
        /// The group's name.
        group: String,
        /// The holder id to prefer, as `leader state` shows it.
        #[arg(long, required_unless_present = "clear", conflicts_with = "clear")]
        holder: Option<String>,
        /// How long the preference lives.
        #[arg(long = "for", default_value = "10m", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// Withdraw the group's preference instead.
        #[arg(long)]
        clear: bool,
    },
    /// End a slot its holder cannot release (stuck, or to be moved), named by its token,
    /// its fence or its holder. By default the holder's renewals are refused from now on
    /// (it steps down at its next renewal) and the slot goes to another candidate only
    /// when the holder's deadline can have passed: at the slot's expiry (on etcd one lease
    /// after the next grant). `--now` frees it at once instead.
    Release {
        /// The group's name.
        group: String,
        /// The slot's lease token (32 hex digits), as the holder logged or reported it.
        #[arg(long, group = "slot")]
        token: Option<String>,
        /// The slot's fence, as `leader state` shows it.
        #[arg(long, group = "slot")]
        fence: Option<u64>,
        /// The slot's holder id, as `leader state` shows it (it must hold one slot only).
        #[arg(long, group = "slot")]
        holder: Option<String>,
        /// Free the slot at once. Risky: the holder still believes it leads until its next
        /// renewal is refused (up to a renewal interval, or a whole lease without
        /// auto-extension), so two holders may act at once meanwhile; only work fenced
        /// downstream stays safe.
        #[arg(long)]
        now: bool,
    },
}

/// Boxed errors, for the commands.
pub type Failure = Box<dyn std::error::Error + Send + Sync>;

impl Cli {
    /// How group names become keys, as the services were configured.
    pub fn keys(&self) -> KeyOptions {
        KeyOptions::new().namespace(&self.namespace).format(&self.key_format)
    }

    /// The store the URL names, checked to answer.
    pub async fn store(&self) -> Result<SharedStore, Failure> {
        if leader::store::store_kind_of(&self.url) == Some("memory") {
            return Err("memory:// is a store of one process: this command would see only its \
                        own, empty one; give the URL of the store the services share \
                        (redis://, postgres://, etcd://)"
                .into());
        }
        if let Some(refusal) = refused_without_etcd(&self.url, cfg!(feature = "etcd")) {
            return Err(refusal.into());
        }
        let mut builder = leader::store::builder(&self.url).command_timeout(self.command_timeout);
        if let Some(path) = &self.ca_file {
            if !self.url.starts_with("postgres") {
                return Err(format!(
                    "--ca-file {} applies to postgres:// URLs only (a Redis store verifies \
                     rediss:// against the system's roots)",
                    path.display()
                )
                .into());
            }
            let pem = std::fs::read(path)
                .map_err(|error| format!("cannot read --ca-file {}: {error}", path.display()))?;
            builder = builder.tls_root_certificates(pem);
        }
        // A read that proves the server answers and the URL's credentials work; its error
        // names the store, where it is and the cause.
        Ok(builder.connect().await?)
    }

    /// The store key of `group`.
    pub fn key(&self, group: &str) -> Result<String, Failure> {
        Ok(self.keys().resolve(group)?)
    }
}

/// Why a `leader` built without etcd (`etcd_built_in` false) cannot use `url`, if it is an
/// etcd URL: what to install instead.
fn refused_without_etcd(url: &str, etcd_built_in: bool) -> Option<&'static str> {
    (!etcd_built_in && leader::store::store_kind_of(url) == Some("etcd")).then_some(
        "this `leader` was built without etcd: install it with `cargo install --path \
         leader-cli --features etcd` (building the etcd client needs protoc; Debian: apt \
         install protobuf-compiler)",
    )
}

#[cfg(test)]
mod tests {
    use super::refused_without_etcd;

    /// Built without etcd (its client needs protoc to build), the CLI says how to get it
    /// (tests/cli.rs runs the binary so built, where the feature is off).
    #[test]
    fn an_etcd_url_without_etcd_built_in_says_how_to_install_it() {
        let refusal = refused_without_etcd("etcd://127.0.0.1:2379", false).unwrap();
        assert!(refusal.contains("built without etcd"), "{refusal}");
        assert!(refusal.contains("cargo install --path leader-cli --features etcd"), "{refusal}");
        assert_eq!(refused_without_etcd("etcd://127.0.0.1:2379", true), None);
        assert_eq!(refused_without_etcd("redis://127.0.0.1:6379", false), None);
    }
}
