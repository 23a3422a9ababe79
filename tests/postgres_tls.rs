//! `PostgresStore` over TLS (feature `postgres-tls`), against private PostgreSQL servers
//! that serve a certificate signed by the test's own certificate authority: one for
//! 127.0.0.1, and one for another host (as Debian's default server's names the machine).
#![cfg(feature = "postgres-tls")]

use leader_testkit::conformance;
mod support;

use leader::{Error, LeaseStore, PostgresStore};
use support::certificates;
use support::postgres_server::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_over_tls_and_verifies_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    certificates::make(dir.path());
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    let server = PostgresServer::start_with_tls(dir.path());
    let url = format!("{}?sslmode=verify-full", server.url());

    // The system's roots do not know the test's CA: refused for good, naming the
    // certificate and what would accept it.
    let err = PostgresStore::connect(&url).await.unwrap_err();
    assert!(matches!(err, Error::Store { .. }) && !err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("certificate is not trusted"), "{err}");

    // Trusting the CA: the rules hold, and every connection of the store (its pool, and the
    // LISTEN connection the release-wakes-watchers rule starts) is encrypted.
    let store = PostgresStore::builder(&url).tls_root_certificates(ca).connect().await.unwrap();
    conformance::run_all(&store, "tls").await;
    let (encrypted, plain) = connections(&server, "");
    assert_eq!(plain, 0, "plain-text connections");
    assert!(encrypted >= 2, "{encrypted} encrypted connections");

    let err = PostgresStore::builder(&url)
        .tls_root_certificates("not a certificate")
        .build()
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid `tls_root_certificates`"), "{err}");
}

/// Each `sslmode` means what it means to libpq, against a server whose certificate a
/// trusted authority signed for another host's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sslmode_means_what_it_means_to_libpq() {
    let dir = tempfile::tempdir().unwrap();
    certificates::make_for(dir.path(), "DNS:db.elsewhere.test");
    let ca_path = dir.path().join("ca.crt");
    let ca = std::fs::read(&ca_path).unwrap();
    let server = PostgresServer::start_with_tls(dir.path());
    let url = |params: &str| format!("{}?application_name={}&{params}", server.url(), name(params));

    // Encrypted without verifying: no sslmode (libpq's `prefer`), `allow`, `prefer`,
    // `require`; `require` with a root given verifies the chain alone (`verify-ca`), and so
    // do `verify-ca` with the root given by the builder or by `sslrootcert`.
    let accepted = [
        ("", false),
        ("sslmode=allow", false),
        ("sslmode=prefer", false),
        ("sslmode=require", false),
        ("sslmode=require", true),
        ("sslmode=verify-ca", true),
        (&*format!("sslmode=verify-ca&sslrootcert={}", ca_path.display()), false),
    ];
    for (params, with_ca) in accepted {
        let mut builder = PostgresStore::builder(url(params));
        if with_ca {
            builder = builder.tls_root_certificates(ca.clone());
        }
        let store = builder.connect().await.unwrap_or_else(|e| panic!("{params}: {e}"));
        store.state("k").await.unwrap();
        let (encrypted, plain) = connections(&server, &name(params));
        assert!(encrypted >= 1 && plain == 0, "{params}: {encrypted} encrypted, {plain} plain");
    }
    let store = PostgresStore::connect(&url("sslmode=disable")).await.unwrap();
    store.state("k").await.unwrap();
    let (encrypted, plain) = connections(&server, &name("sslmode=disable"));
    assert!(encrypted == 0 && plain >= 1, "disable: {encrypted} encrypted, {plain} plain");

    // Verified and refused, for good, with the sslmode that would accept the server.
    let name_refused =
        PostgresStore::builder(url("sslmode=verify-full")).tls_root_certificates(ca.clone());
    let err = name_refused.connect().await.unwrap_err();
    assert!(matches!(err, Error::Store { .. }) && !err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("does not name the host"), "{err}");
    assert!(err.to_string().contains("sslmode=verify-ca accepts"), "{err}");
    let err = PostgresStore::connect(&url("sslmode=verify-ca")).await.unwrap_err();
    assert!(matches!(err, Error::Store { .. }) && !err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("sslmode=require without a root certificate"), "{err}");

    // What libpq does not know is refused when the store is built, naming what it knows.
    let err = PostgresStore::builder(url("sslmode=verify_full")).build().unwrap_err();
    assert!(err.to_string().contains("sslmode \"verify_full\" is not one of disable, allow, prefer, require, verify-ca, verify-full"), "{err}");
    let err = PostgresStore::builder(url("sslmode=verify-ca&sslrootcert=/nonexistent.pem"))
        .build()
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid `sslrootcert` \"/nonexistent.pem\""), "{err}");
}

/// An `application_name` for the URL parameters `params`.
fn name(params: &str) -> String {
    let name: String =
        params.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).take(40).collect();
    if name.is_empty() { "none".to_owned() } else { name }
}

/// The encrypted and plain-text client connections of the server (those named
/// `application_name` when it is not empty), but the query's own.
fn connections(server: &PostgresServer, application_name: &str) -> (u32, u32) {
    let only = if application_name.is_empty() {
        String::new()
    } else {
        format!("AND a.application_name = '{application_name}'")
    };
    let counts = server.psql(&format!(
        "SELECT count(*) FILTER (WHERE s.ssl) || ' ' || count(*) FILTER (WHERE NOT s.ssl) \
         FROM pg_stat_ssl AS s JOIN pg_stat_activity AS a USING (pid) \
         WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid() {only}"
    ));
    let (encrypted, plain) = counts.split_once(' ').expect("two counts");
    (encrypted.trim().parse().unwrap(), plain.trim().parse().unwrap())
}

/// A server without TLS: `prefer` connects in plain text; `require` and stricter modes are
/// refused for good, naming the mode that would connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tls_is_refused_for_good_by_require() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    store.state("k").await.unwrap();
    for mode in ["require", "verify-ca", "verify-full"] {
        let err =
            PostgresStore::connect(&format!("{}?sslmode={mode}", server.url())).await.unwrap_err();
        assert!(matches!(err, Error::Store { .. }) && !err.is_transient(), "{mode}: {err:?}");
        assert!(err.to_string().contains("sslmode=prefer (the default) or disable"), "{err}");
    }
}
