//! Helpers for the etcd suites: a store on a new one-member cluster.

use leader::EtcdStore;

use super::etcd::EtcdServer;

/// A store on a new one-member cluster (its minimum lease TTL is 1 s).
pub async fn solo() -> (EtcdStore, EtcdServer) {
    let server = EtcdServer::start();
    let store = EtcdStore::connect(&server.url()).await.expect("connect");
    (store, server)
}
