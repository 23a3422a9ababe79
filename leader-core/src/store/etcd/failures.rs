//! What a failed etcd call means, from typed errors only: etcd's own errors ([`EtcdError`]:
//! each a gRPC code with a fixed description, etcd's `rpctypes` table, told apart by the
//! pair as etcd's Go client tells them, the description compared whole), the gRPC code of
//! any other status, the client's error variant, and for a member that could not be
//! reached, the I/O error at the end of the status's source chain. Nothing is decided by
//! searching a message.

use tonic::Code;

use crate::error::Error;
use crate::store::class::Class;

/// One of etcd's own errors (`api/v3rpc/rpctypes`) that the store answers differently from
/// the rest of its gRPC code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EtcdError {
    /// The backend reached its space quota: only an operator helps (compaction, defrag, a
    /// larger quota).
    NoSpace,
    /// The member is overloaded: another, or the same later, may answer.
    TooManyRequests,
    /// The member has no Raft leader: the request was refused before it reached the log.
    NoLeader,
    /// The lease named is gone (expired or revoked).
    LeaseNotFound,
    /// Wrong user or password.
    AuthFailed,
    /// The auth store moved on under the client's token: the next call uses a new one.
    AuthOldRevision,
    /// The client's token expired: it authenticates again on the next call.
    InvalidAuthToken,
}

/// etcd's errors as its server sends them: code and description.
const ETCD_ERRORS: [(Code, &str, EtcdError); 7] = [
    (Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded", EtcdError::NoSpace),
    (Code::ResourceExhausted, "etcdserver: too many requests", EtcdError::TooManyRequests),
    (Code::Unavailable, "etcdserver: no leader", EtcdError::NoLeader),
    (Code::NotFound, "etcdserver: requested lease not found", EtcdError::LeaseNotFound),
    (
        Code::InvalidArgument,
        "etcdserver: authentication failed, invalid user ID or password",
        EtcdError::AuthFailed,
    ),
    (
        Code::InvalidArgument,
        "etcdserver: revision of auth store is old",
        EtcdError::AuthOldRevision,
    ),
    (Code::Unauthenticated, "etcdserver: invalid auth token", EtcdError::InvalidAuthToken),
];

/// The etcd error `status` is, if it is one of [`EtcdError`]'s.
pub(crate) fn etcd_error(status: &tonic::Status) -> Option<EtcdError> {
    ETCD_ERRORS
        .iter()
        .find(|(code, description, _)| status.code() == *code && status.message() == *description)
        .map(|(_, _, error)| *error)
}

/// What a failure of the client means: a member that could not answer (down, unreachable,
/// no leader, overloaded) is [`Class::Unavailable`], and another member, or the same one
/// later, may answer.
pub(crate) fn classify(error: &etcd_client::Error) -> Class {
    use etcd_client::Error as E;
    match error {
        E::TransportError(_) | E::IoError(_) | E::WatchError(_) | E::LeaseKeepAliveError(_) => {
            Class::Unavailable
        }
        E::GRpcStatus(status) => match (etcd_error(status), status.code()) {
            (Some(EtcdError::NoSpace | EtcdError::AuthFailed), _) => Class::Permanent,
            (
                Some(
                    EtcdError::TooManyRequests
                    | EtcdError::NoLeader
                    | EtcdError::AuthOldRevision
                    | EtcdError::InvalidAuthToken,
                ),
                _,
            ) => Class::Unavailable,
            (
                _,
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::Cancelled
                | Code::ResourceExhausted,
            ) => Class::Unavailable,
            // The client's own failures (a connection reset, an HTTP/2 error), and etcd's
            // "request timed out", "leader changed" from versions that send them without a
            // code. etcd's refusals all have a code.
            (_, Code::Unknown | Code::Internal) => Class::Unavailable,
            _ => Class::Permanent,
        },
        _ => Class::Permanent,
    }
}

/// Whether a failed call certainly did not reach the cluster's log: the member could not be
/// reached (a connection refused or a route missing, at the end of the status's source
/// chain), or refused it for want of a leader. (A timeout, a leader change or a connection
/// lost mid-call may still commit.)
pub(crate) fn never_taken(error: &etcd_client::Error) -> bool {
    use std::io::ErrorKind;
    match error {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status)
            if etcd_error(status) == Some(EtcdError::NoLeader) =>
        {
            true
        }
        etcd_client::Error::GRpcStatus(status) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(status);
            while let Some(error) = source {
                if let Some(io) = error.downcast_ref::<std::io::Error>() {
                    return matches!(
                        io.kind(),
                        ErrorKind::ConnectionRefused
                            | ErrorKind::HostUnreachable
                            | ErrorKind::NetworkUnreachable
                            | ErrorKind::AddrNotAvailable
                    );
                }
                source = error.source();
            }
            false
        }
        _ => false,
    }
}

/// Whether `error` says the lease is gone (expired or revoked): etcd's "lease not found"
/// (the only `NotFound` of its lease and key-value calls), or etcd-client's keep-alive
/// error, which it makes when a new stream's first reply has no time to live left (its
/// other cause, a request that could not enter the channel it had just made, cannot
/// happen there).
pub(crate) fn lease_not_found(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::LeaseKeepAliveError(_) => true,
        etcd_client::Error::GRpcStatus(status) => status.code() == Code::NotFound,
        _ => false,
    }
}

/// The error of a call etcd refused for good, saying what to do where it knows.
pub(crate) fn permanent(operation: &'static str, error: &etcd_client::Error) -> Error {
    let message = match error {
        etcd_client::Error::GRpcStatus(status) => match (etcd_error(status), status.code()) {
            (Some(EtcdError::AuthFailed), _) | (_, Code::Unauthenticated) => {
                format!("authentication refused: {}", status.message())
            }
            (_, Code::PermissionDenied) => format!(
                "permission denied: {} (the user's role needs read and write on the store's prefix)",
                status.message()
            ),
            (Some(EtcdError::NoSpace), _) => format!(
                "{} (the cluster reached its space quota: compact and defragment it, or raise --quota-backend-bytes)",
                status.message()
            ),
            _ => status.message().to_owned(),
        },
        other => other.to_string(),
    };
    Error::Store { store: "etcd", endpoint: String::new(), operation, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    /// Each of etcd's errors is told by its code and whole description; the same words
    /// under another code, or inside a longer message, are not it.
    #[test]
    fn etcd_errors_are_told_by_code_and_description() {
        for (code, description, error) in ETCD_ERRORS {
            assert_eq!(etcd_error(&tonic::Status::new(code, description)), Some(error));
            assert_eq!(etcd_error(&tonic::Status::new(Code::Internal, description)), None);
            let longer = format!("proxy: {description}");
            assert_eq!(etcd_error(&tonic::Status::new(code, longer)), None);
        }
    }

    /// One class per failure: what another member or a later call may answer, and what
    /// only an operator mends.
    #[test]
    fn each_failure_has_its_class() {
        let cases = [
            (
                status(Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded"),
                Class::Permanent,
            ),
            (status(Code::ResourceExhausted, "etcdserver: too many requests"), Class::Unavailable),
            (status(Code::Unavailable, "etcdserver: no leader"), Class::Unavailable),
            (
                status(
                    Code::InvalidArgument,
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                Class::Permanent,
            ),
            (
                status(Code::InvalidArgument, "etcdserver: revision of auth store is old"),
                Class::Unavailable,
            ),
            (status(Code::Unauthenticated, "etcdserver: invalid auth token"), Class::Unavailable),
            (status(Code::Unauthenticated, "etcdserver: user name is empty"), Class::Permanent),
            (status(Code::PermissionDenied, "etcdserver: permission denied"), Class::Permanent),
            (status(Code::InvalidArgument, "etcdserver: key is not provided"), Class::Permanent),
            (status(Code::DeadlineExceeded, "etcdserver: request timed out"), Class::Unavailable),
            (status(Code::Unknown, "h2 protocol error"), Class::Unavailable),
            (etcd_client::Error::LeaseKeepAliveError("lease not found".into()), Class::Unavailable),
            (etcd_client::Error::InvalidArgs("bad".into()), Class::Permanent),
        ];
        for (error, class) in cases {
            assert_eq!(classify(&error), class, "{error}");
        }
    }

    #[test]
    fn a_lease_is_gone_by_code_or_by_the_keep_alive_variant() {
        assert!(lease_not_found(&status(Code::NotFound, "etcdserver: requested lease not found")));
        assert!(lease_not_found(&etcd_client::Error::LeaseKeepAliveError(String::new())));
        assert!(!lease_not_found(&status(Code::Unavailable, "lease not found")));
    }

    #[test]
    fn permanent_errors_say_what_to_do() {
        let space = status(Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded");
        assert!(permanent("txn", &space).to_string().contains("--quota-backend-bytes"));
        let denied = status(Code::PermissionDenied, "etcdserver: permission denied");
        assert!(permanent("txn", &denied).to_string().contains("read and write"));
        let user = status(
            Code::InvalidArgument,
            "etcdserver: authentication failed, invalid user ID or password",
        );
        assert!(permanent("txn", &user).to_string().contains("authentication refused"));
    }

    /// A member nobody listens on: the call never reached a log (its connection was
    /// refused, at the end of the status's source chain), and another member may answer.
    #[tokio::test]
    async fn a_member_that_refuses_the_connection_never_took_the_call() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut client = etcd_client::Client::connect([format!("127.0.0.1:{port}")], None)
            .await
            .expect("a lazy connection");
        let error = client.get("key", None).await.unwrap_err();
        assert_eq!(classify(&error), Class::Unavailable, "{error}");
        assert!(never_taken(&error), "{error:?}");
        let timed_out = status(Code::Unavailable, "tcp connect error");
        assert!(!never_taken(&timed_out), "no source chain: perhaps taken");
    }
}
