//! What a failed Redis call means: an unavailable server, refused credentials, a server
//! too old for the scripts, or a permanent error, as the store's [`Error`].

use super::connection::CallFailure;
use super::version;
use crate::error::Error;
use crate::store::class::Class;

/// What a failed call means: a server that is loading, without its primary, busy, out of
/// memory or read-only, and a connection that failed, are [`Class::Unavailable`]; any other
/// reply is [`Class::Permanent`].
pub(super) fn class(error: &redis::RedisError) -> Class {
    let transient_code = matches!(
        error.code(),
        Some("READONLY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "BUSY" | "OOM")
    );
    if transient_code
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_cluster_error()
    {
        Class::Unavailable
    } else {
        Class::Permanent
    }
}

/// A failure to get a connection: unreachable, or a server too old for the scripts.
pub(super) fn connect_failure(operation: &'static str, failure: CallFailure) -> Error {
    match failure {
        CallFailure::Pool(deadpool_redis::PoolError::Backend(error))
            if refused_credentials(&error) =>
        {
            refused(operation, &error)
        }
        CallFailure::Redis(error) if refused_credentials(&error) => refused(operation, &error),
        CallFailure::Pool(error) => unavailable(operation, error),
        CallFailure::Redis(error) | CallFailure::Stale(error) => unavailable(operation, error),
        CallFailure::Unsupported(found) => {
            Error::UnsupportedServer { store: "redis", found, required: version::REQUIRED }
        }
    }
}

/// Whether the server refused the connection's credentials: only a change of them helps.
fn refused_credentials(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

/// A permanent failure naming the server's refusal.
fn refused(operation: &'static str, error: &redis::RedisError) -> Error {
    Error::Store {
        store: "redis",
        endpoint: String::new(),
        operation,
        message: format!("authentication refused: {error}"),
    }
}

pub(super) fn unavailable(
    operation: &'static str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::Unavailable {
        store: "redis",
        endpoint: String::new(),
        operation,
        cause: Box::new(error),
    }
}
