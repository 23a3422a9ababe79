//! How the store's connections are made: in plain text, or (feature `postgres-tls`) over
//! TLS with rustls, verifying the server's certificate as the connection string's `sslmode`
//! says (`ssl_mode.rs`): nothing in `allow`, `prefer` and `require`, the chain in
//! `verify-ca` (and in `require` once a root certificate is given), the chain and the host's
//! name in `verify-full`.

#[cfg(not(feature = "postgres-tls"))]
use deadpool_postgres::tokio_postgres;

use super::ssl_mode::TlsParams;
#[cfg(feature = "postgres-tls")]
use super::ssl_mode::{RootCert, Verify};
use crate::error::Error;

/// What the store's connections (its pool and its `LISTEN` connection) are made with.
#[cfg(feature = "postgres-tls")]
pub(crate) type Connector = tokio_postgres_rustls::MakeRustlsConnect;
/// What the store's connections (its pool and its `LISTEN` connection) are made with.
#[cfg(not(feature = "postgres-tls"))]
pub(crate) type Connector = tokio_postgres::NoTls;

/// The connector for `params`: it encrypts as tokio-postgres negotiates (the mode
/// `ssl_mode.rs` handed it) and verifies what `params.mode` asks.
#[cfg(feature = "postgres-tls")]
pub(crate) fn connector(
    params: &TlsParams,
    _shown: &str,
    extra_roots: &[Vec<u8>],
) -> Result<Connector, Error> {
    use std::sync::Arc;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots_given = params.root_cert != RootCert::Default || !extra_roots.is_empty();
    let verify = params.mode.verify(roots_given);
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| bad_root(error.to_string()))?;
    let config = match verify {
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier::Unverified(provider)))
            .with_no_client_auth(),
        Verify::Chain | Verify::ChainAndName => {
            let roots = Arc::new(roots(&params.root_cert, extra_roots)?);
            let webpki =
                rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|error| bad_root(error.to_string()))?;
            let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> =
                if verify == Verify::Chain {
                    Arc::new(verifier::ChainOnly(webpki))
                } else {
                    webpki
                };
            builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth()
        }
    };
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The roots a verifying connection trusts: the `sslrootcert` file's (or, without one, the
/// system's), and the builder's.
#[cfg(feature = "postgres-tls")]
fn roots(root_cert: &RootCert, extra_roots: &[Vec<u8>]) -> Result<rustls::RootCertStore, Error> {
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        RootCert::File(path) => {
            let pem = std::fs::read(path).map_err(|error| {
                Error::invalid_option("sslrootcert", path.display(), format!("unreadable: {error}"))
            })?;
            add_pem(&mut roots, &pem, &format!("{}", path.display()))
                .map_err(|_| not_pem("sslrootcert", &path.display().to_string()))?;
        }
        RootCert::Default | RootCert::System => {
            // The system's roots; one that does not parse is skipped, as browsers do.
            for certificate in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(certificate);
            }
        }
    }
    for pem in extra_roots {
        add_pem(&mut roots, pem, "a root certificate")?;
    }
    Ok(roots)
}

/// Adds the certificates of `pem` (from `named`) to `roots`.
#[cfg(feature = "postgres-tls")]
fn add_pem(roots: &mut rustls::RootCertStore, pem: &[u8], named: &str) -> Result<(), Error> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|error| bad_root(format!("{named}: not PEM: {error}")))?;
    if certificates.is_empty() {
        return Err(bad_root(format!("{named}: no `-----BEGIN CERTIFICATE-----` block")));
    }
    for certificate in certificates {
        roots.add(certificate).map_err(|error| bad_root(format!("{named}: {error}")))?;
    }
    Ok(())
}

/// `option`'s file `shown` holds no PEM certificate.
#[cfg(feature = "postgres-tls")]
fn not_pem(option: &'static str, shown: &str) -> Error {
    Error::invalid_option(option, shown, "holds no `-----BEGIN CERTIFICATE-----` block")
}

#[cfg(feature = "postgres-tls")]
fn bad_root(reason: String) -> Error {
    Error::invalid_option("tls_root_certificates", "<PEM>", reason)
}

/// Plain-text connections; a connection string that requires TLS is refused here rather
/// than failing on every connection.
#[cfg(not(feature = "postgres-tls"))]
pub(crate) fn connector(
    params: &TlsParams,
    shown: &str,
    _extra_roots: &[Vec<u8>],
) -> Result<Connector, Error> {
    if params.mode.client_mode() == tokio_postgres::config::SslMode::Require {
        return Err(Error::invalid_option(
            "url",
            shown,
            format!("sslmode={} needs the `postgres-tls` feature", params.mode),
        ));
    }
    Ok(tokio_postgres::NoTls)
}

/// The two certificate verifiers rustls does not have: none at all (the handshake's
/// signatures are still checked against the certificate's key), and the chain alone.
#[cfg(feature = "postgres-tls")]
mod verifier {
    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

    /// `allow`, `prefer` and `require` without a root: encrypted, not authenticated.
    #[derive(Debug)]
    pub(super) struct Unverified(pub(super) Arc<CryptoProvider>);

    impl ServerCertVerifier for Unverified {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    /// `verify-ca`: webpki's verification, less the name check (webpki checks the name only
    /// after the chain, so a name error means the chain held).
    #[derive(Debug)]
    pub(super) struct ChainOnly(pub(super) Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for ChainOnly {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            match self.0.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }
}
