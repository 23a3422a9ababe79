//! `leader::store::connect(url)`: the URL's scheme picks the store, against real servers
//! the test starts; and group listing through the trait, on every store that lists.

mod support;

use std::time::Duration;

use leader::store::{AcquireOutcome, AcquireRequest, SharedStore};
use leader::{Error, LeaseStore, LeaseToken};
use support::postgres_server::PostgresServer;
use support::redis_server::RedisServer;

async fn grant_and_list(store: &SharedStore, kind: &str) {
    assert_eq!(store.kind(), kind);
    for key in ["jobs:a:x", "jobs:b:x", "other:c:x", "jobs:d:y"] {
        let request = AcquireRequest::new(
            key,
            std::num::NonZeroU32::MIN,
            LeaseToken::generate().unwrap(),
            "by-url",
            Duration::from_secs(10),
        );
        assert!(matches!(store.acquire(request).await.unwrap(), AcquireOutcome::Granted(_)));
    }
    let listed = store.list_groups("jobs:", ":x").await.unwrap();
    assert_eq!(listed, ["jobs:a:x", "jobs:b:x"], "{kind}");
}

#[tokio::test]
async fn each_scheme_opens_its_store_and_lists_its_groups() {
    let memory = leader::store::connect("memory://").await.unwrap();
    grant_and_list(&memory, "memory").await;

    let redis = RedisServer::start();
    let store = leader::store::connect(&redis.url()).await.unwrap();
    grant_and_list(&store, "redis").await;

    let postgres = PostgresServer::start();
    let store = leader::store::builder(postgres.url().replace("postgres://", "postgresql://"))
        .command_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    grant_and_list(&store, "postgres").await;

    #[cfg(feature = "etcd")]
    {
        let etcd = support::etcd::EtcdServer::start();
        let store = leader::store::connect(&format!("{}/by-url/", etcd.url())).await.unwrap();
        grant_and_list(&store, "etcd").await;
    }
}

#[tokio::test]
async fn an_unreachable_server_or_an_unknown_scheme_is_a_clear_error() {
    let port = support::redis_server::free_port();
    let url = format!("redis://app:s3cret@127.0.0.1:{port}");
    let err = leader::store::builder(&url)
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("s3cret"));
    let err = leader::store::connect("zookeeper://127.0.0.1:2181").await.unwrap_err();
    assert!(matches!(err, Error::InvalidOption { option: "url", .. }), "{err:?}");
    assert!(err.to_string().contains("unknown scheme; expected memory://"), "{err}");
}

/// A store that keeps no index of its groups says so, rather than listing none.
#[tokio::test]
async fn a_store_that_cannot_list_says_so() {
    let err = leader::DisabledStore.list_groups("", "").await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { store: "disabled", .. }), "{err:?}");
    assert_eq!(err.to_string(), "the disabled store cannot list groups");
}
