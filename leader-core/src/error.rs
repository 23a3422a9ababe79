//! The one error type of the crate.

mod chain;
mod duplicate;
#[cfg(test)]
mod duplicate_tests;

use std::time::Duration;

pub use self::chain::error_chain;

/// A boxed error from a store's client library, kept as the [`source`](std::error::Error::source).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in `leader`.
///
/// Contention is never an error: a call that finds no free slot returns
/// [`LeaderRunResult::Skipped`](crate::LeaderRunResult::Skipped).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option was given a value outside what it allows; the message names both.
    #[error("invalid `{option}` {value}: {allowed}")]
    InvalidOption {
        /// The option's name, as its setter is called.
        option: &'static str,
        /// The value that was given, rendered for humans.
        value: String,
        /// What the option allows.
        allowed: String,
    },

    /// A group or role name that cannot be used to build a key.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// Why it was refused and what is allowed.
        reason: String,
    },

    /// A resolved or exact store key that the store cannot use.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The key as resolved.
        key: String,
        /// Why it was refused and what is allowed.
        reason: String,
    },

    /// The group already holds slots granted under another `max_leaders`.
    #[error(
        "max_leaders {requested} requested but group `{group}` holds slots granted with \
         max_leaders {existing}; stop the old replicas or use the same value"
    )]
    MaxLeadersMismatch {
        /// The group's store key.
        group: String,
        /// The `max_leaders` of this caller.
        requested: u32,
        /// The `max_leaders` the live slots were granted under.
        existing: u32,
    },

    /// The store could not be reached or dropped the connection; retrying may succeed.
    ///
    /// The message names the store, its endpoint (any password hidden), the operation and
    /// the client's root cause, once; [`client_error`](Error::client_error) gives the
    /// client library's error itself.
    #[error("{store} store{} unavailable during {operation}: {}", at(.endpoint), root_cause(.cause.as_ref()))]
    Unavailable {
        /// The store's kind, such as `memory` or `redis`.
        store: &'static str,
        /// Where the store is (a URL, hosts and ports; never a password), or empty where
        /// it is not known.
        endpoint: String,
        /// The operation that failed: `connect`, `acquire`, `renew`, `release`, `state`,
        /// `watch`, `list` or `migrate`.
        operation: &'static str,
        /// The client library's error.
        cause: BoxError,
    },

    /// The store did not answer in time; retrying may succeed.
    #[error("{store} store{} did not answer {operation} within {after:?}", at(.endpoint))]
    Timeout {
        /// The store's kind.
        store: &'static str,
        /// Where the store is, as for [`Error::Unavailable`].
        endpoint: String,
        /// The operation that timed out.
        operation: &'static str,
        /// How long the caller waited.
        after: Duration,
    },

    /// The key holds data that is not a leader group (someone else's data); nothing was changed.
    #[error(
        "key {key:?} holds data that is not a leader group ({found}); choose another key or namespace"
    )]
    WrongType {
        /// The offending key.
        key: String,
        /// What the store found there.
        found: String,
    },

    /// The store refused the call for a reason only a change of configuration or input
    /// helps (credentials, a permission, a table of another shape), or answered with an
    /// error it should never give (a script error, a protocol error).
    #[error("{store} store{} failed during {operation}: {message}", at(.endpoint))]
    Store {
        /// The store's kind.
        store: &'static str,
        /// Where the store is, as for [`Error::Unavailable`].
        endpoint: String,
        /// The operation that failed.
        operation: &'static str,
        /// The store's own message.
        message: String,
    },

    /// Fewer replicas than required acknowledged a grant or a renewal in time: a grant was
    /// released; a renewal is not counted (the holder keeps its earlier deadline).
    #[error(
        "only {acknowledged} of {required} replicas acknowledged the {} within {timeout:?}; \
         {} (replica acknowledgement is best-effort, see RedisStoreBuilder::replica_ack)",
        not_replicated_what(operation),
        not_replicated_then(operation)
    )]
    NotReplicated {
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas required.
        required: u32,
        /// How long the store waited.
        timeout: Duration,
        /// What was not replicated: `"acquire"` (a grant) or `"renew"`/`"renew_many"`.
        operation: &'static str,
    },

    /// A partition set has as many live nodes as it may have: no other can join until one
    /// leaves (or its announcement expires).
    #[error(
        "partition set `{set}` has {max_nodes} live nodes already (key {key:?}), the most it \
         may have; this node cannot join until one leaves"
    )]
    SetFull {
        /// The set's name.
        set: String,
        /// The members' group's store key.
        key: String,
        /// The most live nodes a set may have.
        max_nodes: u32,
    },

    /// The live nodes of a partition set were started with another partition count: the two
    /// counts would split the partitions two ways and leave some unowned.
    #[error(
        "partition set `{set}` has live nodes of {existing} partitions, and this node was \
         started with {requested}; give every node the same count (to change it, stop every \
         node first, or start a set of another name)"
    )]
    PartitionCountMismatch {
        /// The set's name.
        set: String,
        /// This node's count.
        requested: u32,
        /// The count the live nodes announced.
        existing: u32,
    },

    /// Another live node of a partition set announced itself under this node's holder id:
    /// the two would compute the same share and compete for it.
    #[error(
        "holder id {holder:?} is taken by another live node of partition set `{set}`; give \
         each node its own holder_id (if that node was this one before a crash, its \
         announcement expires within its lease_time)"
    )]
    HolderInUse {
        /// The set's name.
        set: String,
        /// The holder id both nodes gave.
        holder: String,
    },

    /// The leadership was stopped: it will not lead again (start a new one to stand again).
    #[error(
        "leadership of role `{role}` is stopped and will not lead again; start a new Leadership to stand again"
    )]
    Stopped {
        /// The role.
        role: String,
    },

    /// A background task of `leader` (a leadership's loop, a partitions node) ended
    /// abnormally, found when it was stopped; what it held expires at the end of its lease.
    #[error("the {what} ended abnormally: {reason}")]
    BackgroundTaskFailed {
        /// The task, for humans.
        what: String,
        /// Why, as the runtime reported it (a panic's message).
        reason: String,
    },

    /// A registry was given the same role twice.
    #[error("role `{role}` is already in the registry; each role can be added once")]
    RoleAlreadyAdded {
        /// The repeated role.
        role: String,
    },

    /// Two roles of a registry resolve to the same store key, so they would be one election.
    #[error(
        "roles `{first}` and `{second}` both resolve to key {key:?}; give them distinct keys \
         (an exact key or a format with `{{role}}`)"
    )]
    RolesShareKey {
        /// The role added first.
        first: String,
        /// The role added later.
        second: String,
        /// The key they share.
        key: String,
    },

    /// A macro-wrapped function was called with no `store = …` and no process-wide default.
    #[error(
        "no lease store: pass `store = <expr>` to the macro, or install a process-wide default \
         at start-up with `leader::install_default_store(store)`"
    )]
    NoDefaultStore,

    /// The store's server is too old (or otherwise unable) to run what the store needs.
    #[error("{store} server version {found} is not supported: {required}")]
    UnsupportedServer {
        /// The store's kind.
        store: &'static str,
        /// The version the server reported.
        found: String,
        /// What the store needs.
        required: &'static str,
    },

    /// The store cannot do this at all (it is no failure of this call): for example listing
    /// groups on a store that keeps no index of them.
    #[error("the {store} store cannot {operation}")]
    Unsupported {
        /// The store's kind.
        store: &'static str,
        /// What was asked.
        operation: &'static str,
    },

    /// The operating system's random number generator failed, so no lease token could be made.
    #[error("the operating system's random number generator failed; cannot make a lease token")]
    Random(#[source] std::io::Error),
}

impl Error {
    /// Whether the same call may succeed if retried: the store was unreachable or slow.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_core::Error;
    ///
    /// let timeout = Error::Timeout {
    ///     store: "redis",
    ///     endpoint: "redis://cache:6379".into(),
    ///     operation: "acquire",
    ///     after: Duration::from_secs(1),
    /// };
    /// assert_eq!(timeout.to_string(), "redis store at redis://cache:6379 did not answer acquire within 1s");
    /// assert!(timeout.is_transient());
    /// let mismatch = Error::MaxLeadersMismatch { group: "g".into(), requested: 3, existing: 5 };
    /// assert!(!mismatch.is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. } | Error::Timeout { .. } | Error::NotReplicated { .. }
        )
    }

    /// Whether the store failed (unreachable, slow, wrong data, a script error, too few
    /// replicas), as opposed to a mistake in the caller's options, names or set-up.
    ///
    /// This is what the macros' `on_store_error = "skip"` turns into `Skipped`.
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. }
                | Error::Timeout { .. }
                | Error::WrongType { .. }
                | Error::Store { .. }
                | Error::NotReplicated { .. }
        )
    }

    /// The client library's own error behind an [`Error::Unavailable`] (a `redis::RedisError`,
    /// a `tokio_postgres::Error`, an `etcd_client::Error`), for code that needs more than the
    /// message; `None` for every other error.
    pub fn client_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            Error::Unavailable { cause, .. } => Some(cause.as_ref()),
            _ => None,
        }
    }

    /// This error, located at `endpoint` if it names a store but no endpoint yet.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "etcd")),
        allow(dead_code)
    )]
    pub(crate) fn at(mut self, located: &str) -> Self {
        if let Error::Unavailable { endpoint, .. }
        | Error::Timeout { endpoint, .. }
        | Error::Store { endpoint, .. } = &mut self
            && endpoint.is_empty()
        {
            located.clone_into(endpoint);
        }
        self
    }

    /// This error, as of `operation` (the one the caller asked for, which made the failed
    /// call: `connect` for its check of the server).
    pub(crate) fn during(mut self, asked: &'static str) -> Self {
        if let Error::Unavailable { operation, .. }
        | Error::Timeout { operation, .. }
        | Error::Store { operation, .. } = &mut self
        {
            *operation = asked;
        }
        self
    }

    pub(crate) fn invalid_option(
        option: &'static str,
        value: impl std::fmt::Debug,
        allowed: impl Into<String>,
    ) -> Self {
        Error::InvalidOption { option, value: format!("{value:?}"), allowed: allowed.into() }
    }
}

/// ` at {endpoint}`, or nothing for an unknown endpoint.
fn at(endpoint: &str) -> String {
    match endpoint {
        "" => String::new(),
        endpoint => format!(" at {endpoint}"),
    }
}

/// The innermost cause of `error`: what went wrong in the end ("Connection refused (os
/// error 111)"), without the layers of client libraries around it, each of which often
/// repeats it.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(cause) = innermost.source() {
        innermost = cause;
    }
    // One line: a client's message may span several (a reply it could not parse).
    innermost.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What an [`Error::NotReplicated`] operation wrote, in words.
fn not_replicated_what(operation: &str) -> &'static str {
    match operation {
        "acquire" => "grant",
        _ => "renewal",
    }
}

/// What became of an [`Error::NotReplicated`] operation's write.
fn not_replicated_then(operation: &str) -> &'static str {
    match operation {
        "acquire" => "the slot was released",
        _ => "the renewal is not counted: the holder keeps its earlier deadline",
    }
}
