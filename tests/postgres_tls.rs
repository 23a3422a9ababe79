//! `PostgresStore` over TLS (feature `postgres-tls`), against a private PostgreSQL server
//! that serves a certificate signed by the test's own certificate authority.
#![cfg(feature = "postgres-tls")]

use leader_testkit::conformance;
mod support;

use leader::PostgresStore;
use support::certificates;
use support::postgres_server::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_over_tls_and_verifies_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    certificates::make(dir.path());
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    let server = PostgresServer::start_with_tls(dir.path());
    let url = format!("{}?sslmode=require", server.url());

    // The system's roots do not know the test's CA: refused, naming the certificate.
    let err = PostgresStore::connect(&url).await.unwrap_err();
    let chain = format!("{err}: {:?}", std::error::Error::source(&err));
    assert!(err.is_transient() && chain.to_lowercase().contains("certificate"), "{chain}");

    // Trusting the CA: the rules hold, and every connection of the store (its pool, and the
    // LISTEN connection the release-wakes-watchers rule starts) is encrypted.
    let store = PostgresStore::builder(&url).tls_root_certificates(ca).connect().await.unwrap();
    conformance::run_all(&store, "tls").await;
    let connections = server.psql(
        "SELECT count(*) FILTER (WHERE s.ssl) || ' ' || count(*) FILTER (WHERE NOT s.ssl) \
         FROM pg_stat_ssl AS s JOIN pg_stat_activity AS a USING (pid) \
         WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()",
    );
    let (encrypted, plain) = connections.split_once(' ').expect("two counts");
    assert_eq!(plain, "0", "plain-text connections");
    assert!(encrypted.parse::<u32>().unwrap() >= 2, "{encrypted} encrypted connections");

    let err = PostgresStore::builder(&url)
        .tls_root_certificates("not a certificate")
        .build()
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid `tls_root_certificates`"), "{err}");
}
