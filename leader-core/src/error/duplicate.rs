//! [`Error::duplicate`]: one error, many receivers, each with an equal copy whose cause
//! reads as the original's.

use super::Error;

/// The cause of an error that many receivers share: displays as that error's own cause, and
/// continues its chain.
#[derive(Debug)]
struct SharedCause(std::sync::Arc<Error>);

impl SharedCause {
    fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.0.client_error()
    }
}

impl std::fmt::Display for SharedCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cause() {
            Some(cause) => std::fmt::Display::fmt(cause, f),
            None => f.write_str("no cause"),
        }
    }
}

impl std::error::Error for SharedCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause()?.source()
    }
}

impl Error {
    /// An error equal to `shared` for each of the many that receive it (observers of one
    /// group share one read): the same variant and fields, and a cause that reads as the
    /// original's.
    pub(crate) fn duplicate(shared: &std::sync::Arc<Error>) -> Error {
        use Error::*;
        match &**shared {
            InvalidOption { option, value, allowed } => {
                InvalidOption { option, value: value.clone(), allowed: allowed.clone() }
            }
            InvalidName { name, reason } => {
                InvalidName { name: name.clone(), reason: reason.clone() }
            }
            InvalidKey { key, reason } => InvalidKey { key: key.clone(), reason: reason.clone() },
            MaxLeadersMismatch { group, requested, existing } => MaxLeadersMismatch {
                group: group.clone(),
                requested: *requested,
                existing: *existing,
            },
            Unavailable { store, endpoint, operation, .. } => Unavailable {
                store,
                endpoint: endpoint.clone(),
                operation,
                cause: Box::new(SharedCause(shared.clone())),
            },
            Timeout { store, endpoint, operation, after } => {
                Timeout { store, endpoint: endpoint.clone(), operation, after: *after }
            }
            WrongType { key, found } => WrongType { key: key.clone(), found: found.clone() },
            Store { store, endpoint, operation, message } => {
                Store { store, endpoint: endpoint.clone(), operation, message: message.clone() }
            }
            NotReplicated { acknowledged, required, timeout, operation } => NotReplicated {
                acknowledged: *acknowledged,
                required: *required,
                timeout: *timeout,
                operation,
            },
            SetFull { set, key, max_nodes } => {
                SetFull { set: set.clone(), key: key.clone(), max_nodes: *max_nodes }
            }
            HolderInUse { set, holder } => HolderInUse { set: set.clone(), holder: holder.clone() },
            PartitionCountMismatch { set, requested, existing } => PartitionCountMismatch {
                set: set.clone(),
                requested: *requested,
                existing: *existing,
            },
            Stopped { role } => Stopped { role: role.clone() },
            BackgroundTaskFailed { what, reason } => {
                BackgroundTaskFailed { what: what.clone(), reason: reason.clone() }
            }
            RoleAlreadyAdded { role } => RoleAlreadyAdded { role: role.clone() },
            RolesShareKey { first, second, key } => {
                RolesShareKey { first: first.clone(), second: second.clone(), key: key.clone() }
            }
            NoDefaultStore => NoDefaultStore,
            UnsupportedServer { store, found, required } => {
                UnsupportedServer { store, found: found.clone(), required }
            }
            Unsupported { store, operation } => Unsupported { store, operation },
            Random(_) => Random(std::io::Error::other(SharedCause(shared.clone()))),
        }
    }
}
