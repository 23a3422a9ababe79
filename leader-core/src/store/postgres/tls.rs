//! How the store's connections are made: in plain text, or (feature `postgres-tls`) over
//! TLS with rustls, verifying the server's certificate against the system's roots and any
//! the builder adds.

use deadpool_postgres::tokio_postgres;
#[cfg(not(feature = "postgres-tls"))]
use deadpool_postgres::tokio_postgres::config::SslMode;

use crate::error::Error;

/// What the store's connections (its pool and its `LISTEN` connection) are made with.
#[cfg(feature = "postgres-tls")]
pub(crate) type Connector = tokio_postgres_rustls::MakeRustlsConnect;
/// What the store's connections (its pool and its `LISTEN` connection) are made with.
#[cfg(not(feature = "postgres-tls"))]
pub(crate) type Connector = tokio_postgres::NoTls;

/// The connector for `config`: TLS is used as its `sslmode` says (`prefer`, the default,
/// uses it when the server offers it; `require` insists; `disable` never).
#[cfg(feature = "postgres-tls")]
pub(crate) fn connector(
    _config: &tokio_postgres::Config,
    _shown: &str,
    extra_roots: &[Vec<u8>],
) -> Result<Connector, Error> {
    use std::sync::Arc;

    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let mut roots = rustls::RootCertStore::empty();
    // The system's roots; one that does not parse is skipped, as browsers do.
    for certificate in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(certificate);
    }
    for pem in extra_roots {
        let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|error| bad_root(format!("not PEM: {error}")))?;
        if certificates.is_empty() {
            return Err(bad_root("no `-----BEGIN CERTIFICATE-----` block".to_owned()));
        }
        for certificate in certificates {
            roots.add(certificate).map_err(|error| bad_root(error.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| bad_root(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

#[cfg(feature = "postgres-tls")]
fn bad_root(reason: String) -> Error {
    Error::invalid_option("tls_root_certificates", "<PEM>", reason)
}

/// Plain-text connections; a URL that requires TLS is refused here rather than failing on
/// every connection.
#[cfg(not(feature = "postgres-tls"))]
pub(crate) fn connector(
    config: &tokio_postgres::Config,
    shown: &str,
    _extra_roots: &[Vec<u8>],
) -> Result<Connector, Error> {
    if config.get_ssl_mode() == SslMode::Require {
        return Err(Error::invalid_option(
            "url",
            shown,
            "sslmode=require needs the `postgres-tls` feature",
        ));
    }
    Ok(tokio_postgres::NoTls)
}
