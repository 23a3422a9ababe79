//! `RedisStore` over TLS (`rediss://`), against a `redis-server` with a certificate made by
//! the test's own certificate authority.
#![cfg(feature = "redis-tls")]

use leader_testkit::conformance;
mod support;

use std::time::Duration;

use leader::{LeaderElectionOptions, LeaderElector, RedisStore};
use support::redis_server::{RedisServer, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_over_tls_and_verifies_the_certificate() {
    let certificates = tempfile::tempdir().unwrap();
    support::certificates::make(certificates.path());
    let file = |name: &str| certificates.path().join(name).display().to_string();
    let tls_port = free_port();
    let (tls_port_text, cert, key, ca) =
        (tls_port.to_string(), file("server.crt"), file("server.key"), file("ca.crt"));
    let _server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port_text,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}");

    // The system's roots do not know the test's CA: refused, with a clear error.
    let err = RedisStore::connect(&url).await.unwrap_err();
    let chain = format!("{err}: {:?}", std::error::Error::source(&err));
    assert!(err.is_transient() && chain.to_lowercase().contains("certificate"), "{chain}");

    // Trusting the CA explicitly, through a deadpool-redis pool of the caller's making.
    let root_cert = Some(std::fs::read(certificates.path().join("ca.crt")).unwrap());
    let client = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates { client_tls: None, root_cert },
    )
    .unwrap();
    let manager = deadpool_redis::Manager::new(client.get_connection_info().clone()).unwrap();
    let pool = deadpool_redis::Pool::builder(manager).build().unwrap();
    let store = RedisStore::pool_builder(pool, client).build().unwrap();

    let elector = LeaderElector::new(
        store.clone(),
        LeaderElectionOptions::new().lease_time(Duration::from_secs(5)),
    )
    .unwrap();
    let fence =
        elector.run_if_leader("over-tls", |lease| async move { lease.fence() }).await.unwrap();
    assert!(fence.is_elected());
    // The scripts floor the server's clock to whole milliseconds.
    conformance::set_timing(Duration::from_secs(1), Duration::from_millis(1));
    conformance::run_all(&store, "tls").await;
}
