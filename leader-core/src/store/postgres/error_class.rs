//! What a PostgreSQL failure means for the caller (a [`Class`]), decided by its SQLSTATE in
//! one table.

use deadpool_postgres::tokio_postgres::{self, error::SqlState};

use crate::error::Error;
use crate::store::class::Class;

/// The SQLSTATEs (and classes, by their first two characters) that are not permanent.
/// Everything else the server answers is [`Class::Permanent`].
const TABLE: &[(&str, Class)] = &[
    // Class 40: the transaction was rolled back (40001 serialization_failure, for
    // REPEATABLE READ and SERIALIZABLE sessions; 40P01 deadlock_detected).
    ("40001", Class::Retry),
    ("40P01", Class::Retry),
    // A `lock_timeout` or `statement_timeout` the role or database set: contention.
    ("55P03", Class::Retry),
    ("57014", Class::Retry),
    // Class 08: connection exceptions.
    ("08", Class::Unavailable),
    // A read-only transaction: a hot standby, or a primary being demoted.
    ("25006", Class::Unavailable),
    // Class 53: insufficient resources (too many connections, out of memory, disk full).
    ("53", Class::Unavailable),
    // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now (starting up),
    // 57P05 idle_session_timeout.
    ("57P01", Class::Unavailable),
    ("57P02", Class::Unavailable),
    ("57P03", Class::Unavailable),
    ("57P05", Class::Unavailable),
    // Class 58: system errors (I/O) outside PostgreSQL.
    ("58", Class::Unavailable),
];

/// The class of SQLSTATE `code`.
pub(crate) fn class_of(code: &SqlState) -> Class {
    let code = code.code();
    TABLE
        .iter()
        .find(|(entry, _)| if entry.len() == 2 { code.starts_with(entry) } else { code == *entry })
        .map_or(Class::Permanent, |(_, class)| *class)
}

/// The class of a failed call: by its SQLSTATE when the server answered, otherwise
/// (the connection failed or closed) unavailable.
pub(crate) fn class(error: &tokio_postgres::Error) -> Class {
    match error.code() {
        Some(code) => class_of(code),
        None => Class::Unavailable,
    }
}

/// Whether the server refused a statement because a table, a function or a schema it names
/// does not exist (42P01, 42883, 3F000): the store's schema was never made there.
pub(crate) fn names_a_missing_object(error: &tokio_postgres::Error) -> bool {
    [SqlState::UNDEFINED_TABLE, SqlState::UNDEFINED_FUNCTION, SqlState::INVALID_SCHEMA_NAME]
        .iter()
        .any(|missing| error.code() == Some(missing))
}

/// The error a failed `operation` returns: transient for [`Class::Retry`] and
/// [`Class::Unavailable`], a store error naming the server's message and SQLSTATE otherwise.
pub(crate) fn to_error(operation: &'static str, error: tokio_postgres::Error) -> Error {
    if let Some(message) = refused_certificate(&error) {
        return Error::Store { store: "postgres", endpoint: String::new(), operation, message };
    }
    if class(&error) == Class::Permanent {
        let message = match error.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => error.to_string(),
        };
        return Error::Store { store: "postgres", endpoint: String::new(), operation, message };
    }
    // The server's own message ("cannot execute INSERT in a read-only transaction") as the
    // source, rather than the client's bare "db error".
    let source: crate::BoxError = match error.as_db_error() {
        Some(_) => error.into_source().unwrap_or_else(|| "db error".into()),
        None => Box::new(error),
    };
    Error::Unavailable { store: "postgres", endpoint: String::new(), operation, cause: source }
}

/// What to say when TLS cannot work with this server as the connection string asks (its
/// certificate failed verification, it offers no TLS, or it takes none from here): trying
/// again cannot help, so the failure is permanent, and the message names the `sslmode` that
/// would accept the server.
#[cfg(feature = "postgres-tls")]
fn refused_certificate(error: &tokio_postgres::Error) -> Option<String> {
    use rustls::{CertificateError, OtherError};

    if let Some(db) = error.as_db_error() {
        // pg_hba.conf has `hostnossl` (or no `hostssl`) lines for this client: libpq would
        // try plain text next, tokio-postgres does not.
        let refused_tls = db.code() == &SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            && db.message().contains("SSL encryption");
        return refused_tls.then(|| {
            format!(
                "{} (28000); the server takes no encrypted connection from this client: \
                 sslmode=disable connects in plain text",
                db.message()
            )
        });
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(at) = cause {
        // tokio-rustls wraps the TLS error in an `io::Error`, whose `source()` skips it.
        let inner = at.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        let tls = at
            .downcast_ref::<rustls::Error>()
            .or_else(|| inner.and_then(|inner| inner.downcast_ref::<rustls::Error>()));
        if let Some(rustls::Error::InvalidCertificate(refused)) = tls {
            let unverified = "sslmode=require without a root certificate encrypts without \
                              verifying";
            return Some(match refused {
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => format!(
                    "the server's certificate does not name the host ({refused}); \
                     sslmode=verify-ca accepts a certificate of a trusted authority whatever \
                     it names, and {unverified}"
                ),
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => format!(
                    "the server's certificate is out of its validity period ({refused}); renew \
                     it, or {unverified}"
                ),
                CertificateError::Other(OtherError(other))
                    if format!("{other:?}").contains("CaUsedAsEndEntity") =>
                {
                    format!(
                        "the server's certificate is a CA certificate (basicConstraints \
                         CA:TRUE, as `openssl req -x509` makes by default), which is refused as \
                         a server's own even when trusted as a root; make it with \
                         `-addext basicConstraints=critical,CA:FALSE` or sign it with a CA, or \
                         {unverified}"
                    )
                }
                _ => format!(
                    "the server's certificate is not trusted ({refused}); trust its authority \
                     (sslrootcert=<PEM file> in the URL, or `tls_root_certificates`), or \
                     {unverified}"
                ),
            });
        }
        cause = at.source();
    }
    // `require` or stricter, and the server answered the TLS request with no.
    let refused = std::iter::successors(Some(error as &dyn std::error::Error), |at| at.source())
        .any(|at| at.to_string().contains("server does not support TLS"));
    refused.then(|| {
        "the server does not support TLS; sslmode=prefer (the default) or disable connects in \
         plain text"
            .to_owned()
    })
}

/// Without TLS no certificate is ever refused.
#[cfg(not(feature = "postgres-tls"))]
fn refused_certificate(_error: &tokio_postgres::Error) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sqlstate_has_its_class() {
        let cases = [
            (SqlState::T_R_SERIALIZATION_FAILURE, Class::Retry),
            (SqlState::T_R_DEADLOCK_DETECTED, Class::Retry),
            (SqlState::LOCK_NOT_AVAILABLE, Class::Retry),
            (SqlState::QUERY_CANCELED, Class::Retry),
            (SqlState::CONNECTION_FAILURE, Class::Unavailable),
            (SqlState::CONNECTION_EXCEPTION, Class::Unavailable),
            (SqlState::READ_ONLY_SQL_TRANSACTION, Class::Unavailable),
            (SqlState::TOO_MANY_CONNECTIONS, Class::Unavailable),
            (SqlState::OUT_OF_MEMORY, Class::Unavailable),
            (SqlState::ADMIN_SHUTDOWN, Class::Unavailable),
            (SqlState::CRASH_SHUTDOWN, Class::Unavailable),
            (SqlState::CANNOT_CONNECT_NOW, Class::Unavailable),
            (SqlState::IO_ERROR, Class::Unavailable),
            (SqlState::INVALID_PASSWORD, Class::Permanent),
            (SqlState::INVALID_AUTHORIZATION_SPECIFICATION, Class::Permanent),
            (SqlState::INVALID_CATALOG_NAME, Class::Permanent),
            (SqlState::INSUFFICIENT_PRIVILEGE, Class::Permanent),
            (SqlState::UNDEFINED_TABLE, Class::Permanent),
            (SqlState::SYNTAX_ERROR, Class::Permanent),
            (SqlState::PROGRAM_LIMIT_EXCEEDED, Class::Permanent),
        ];
        for (code, expected) in cases {
            assert_eq!(class_of(&code), expected, "{}", code.code());
        }
    }
}
