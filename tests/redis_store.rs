//! `RedisStore` against real `redis-server` processes that the tests start themselves.

mod conformance;
mod support;

use support::redis_server::RedisServer;

use leader::RedisStore;

async fn standalone() -> (RedisStore, RedisServer) {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    (store, server)
}

conformance_suite!(
    #[tokio::test]
    standalone()
);
