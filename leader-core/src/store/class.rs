//! [`Class`]: what a failed store call means for its caller; every store sorts its client's
//! errors into it (PostgreSQL by SQLSTATE, etcd by gRPC code, Redis by reply code), and
//! decides from it whether [`Bound::retry`](super::bound::Bound::retry) tries again.

/// How a store treats a failure of its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// The server rolled the call back for a reason that passes by itself (a serialization
    /// failure, a deadlock, a lock or statement timeout): the same call may be made again.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Retry,
    /// The server cannot answer now (down, starting, a replica, overloaded, without a
    /// leader, the connection lost): a transient [`Error::Unavailable`](crate::Error::Unavailable);
    /// another server, or the same one later, may answer.
    Unavailable,
    /// Only a change of configuration or input helps (credentials refused, a permission or
    /// a table missing, a request the server refuses): a permanent
    /// [`Error::Store`](crate::Error::Store) naming the cause.
    Permanent,
}
