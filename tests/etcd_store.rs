//! `EtcdStore` against real `etcd` members the tests start themselves: the conformance suite
//! on one member, the keys a group leaves behind, the lock-delay after a takeover, round trips,
//! and bad input as clear errors. Faults of a three-member cluster are in `etcd_faults.rs`.
#![cfg(feature = "etcd")]

mod conformance;
mod support;

use std::time::Duration;

use leader::store::etcd_client::{self, GetOptions};
use leader::store::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use leader::{Error, EtcdStore, LeaseStore};
use support::etcd::EtcdServer;
use support::{granted_fence, request, request_for, token};
use tokio::time::{Instant, timeout};

const SECOND: Duration = Duration::from_secs(1);

/// A store on a new one-member cluster (its minimum lease TTL is 1 s).
async fn solo() -> (EtcdStore, EtcdServer) {
    let server = EtcdServer::start();
    let store = EtcdStore::connect(&server.url()).await.expect("connect");
    (store, server)
}

// Whole-second TTLs, and expired keys deleted within half a second: a 2 s lease, and a
// second of slack after each expiry.
conformance_suite!(
    #[tokio::test]
    solo(),
    lease = Duration::from_secs(2),
    tick = Duration::from_secs(1)
);

/// Every key under `prefix` on the server, as text.
async fn keys_under(server: &EtcdServer, prefix: &str) -> Vec<String> {
    let mut client =
        etcd_client::Client::connect([server.member.endpoint()], None).await.expect("client");
    let reply = client.get(prefix, Some(GetOptions::new().with_prefix())).await.unwrap();
    reply.kvs().iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()).collect()
}

#[tokio::test]
async fn an_idle_group_keeps_only_its_size_and_how_each_slot_was_left() {
    let (store, server) = solo().await;
    let key = "leader:idle";
    let (first, second) = (token(), token());
    store.acquire(request_for(key, 3, first, SECOND)).await.unwrap();
    store.acquire(request_for(key, 3, second, SECOND)).await.unwrap();
    assert_eq!(keys_under(&server, key).await.len(), 1 + 2 * 2, "max, and 2 keys per slot");
    store.release(key, first, Duration::ZERO).await.unwrap();
    // The other one expires (its keys go within about half a second of the lease).
    let deadline = Instant::now() + 10 * SECOND;
    while keys_under(&server, key).await.len() > 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Left: the group's size, and how each of the two slot indices it used was left.
    let left = keys_under(&server, key).await;
    let lasts = left.iter().filter(|key| key.starts_with("leader:idle last ")).count();
    assert!(left.len() == 3 && lasts == 2 && left.contains(&"leader:idle max".into()), "{left:?}");
    // Its leases went too: the cluster keeps none of them.
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    assert!(client.leases().await.unwrap().leases().is_empty(), "a lease was left");
}

#[tokio::test]
async fn a_slot_taken_over_from_a_holder_that_never_released_waits_one_ttl() {
    let (store, _server) = solo().await;
    let key = "leader:takeover";
    let fence = granted_fence(store.acquire(request_for(key, 1, token(), SECOND)).await.unwrap());
    // The holder vanishes without a release; its lease expires within about 1.5 s.
    let started = Instant::now();
    let mut next = token();
    let taken = loop {
        match store.acquire(request_for(key, 1, next, 2 * SECOND)).await.unwrap() {
            AcquireOutcome::Granted(grant) => break grant,
            AcquireOutcome::Full { .. } => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("{other:?}"),
        }
        next = token();
    };
    assert!(taken.fence > fence);
    // The grant came back only after the old holder's TTL (1 s) had passed since the slot
    // was free: at least 1 s of expiry plus 1 s of lock-delay.
    assert!(started.elapsed() >= 2 * SECOND, "returned after {:?}", started.elapsed());
    // Renewed during the delay: still held, with its full lease ahead.
    assert!(taken.expires_in >= 2 * SECOND - Duration::from_millis(100), "{taken:?}");
    assert!(matches!(
        store.renew(key, next, 2 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));

    // A release hands over at once: no lock-delay.
    store.release(key, next, Duration::ZERO).await.unwrap();
    let started = Instant::now();
    granted_fence(store.acquire(request_for(key, 1, token(), 2 * SECOND)).await.unwrap());
    assert!(started.elapsed() < SECOND / 2, "a released slot waited {:?}", started.elapsed());
}

#[tokio::test]
async fn a_lease_time_the_cluster_cannot_keep_is_refused_naming_the_limit() {
    let (store, server) = solo().await;
    // One member with a 500 ms election timeout: its minimum TTL is 1 s, and anything
    // below 1 s rounds up to it; etcd's longest lease is the other limit.
    let too_long = Duration::from_secs(10_000_000_000);
    let err = store.acquire(request_for("leader:long", 1, token(), too_long)).await.unwrap_err();
    assert!(err.to_string().contains("must be at most 9000000000s"), "{err}");
    let fence = granted_fence(
        store
            .acquire(request_for("leader:short", 1, token(), Duration::from_millis(300)))
            .await
            .unwrap(),
    );
    assert!(fence > 0);
    drop((store, server));

    // A cluster with etcd's default timing (1 s election timeout) keeps no lease under 2 s.
    let server =
        EtcdServer::start_with(&["--heartbeat-interval", "100", "--election-timeout", "1000"]);
    let store = EtcdStore::connect(&server.url()).await.unwrap();
    let err = store.acquire(request_for("leader:short", 1, token(), SECOND)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidOption { .. }), "{err:?}");
    assert!(err.to_string().contains("must be at least 2s with this etcd cluster"), "{err}");
    assert!(keys_under(&server, "leader:short").await.is_empty(), "nothing is written");
    // Known from then on: refused before any call.
    let err = store.renew("leader:short", token(), SECOND).await.unwrap_err();
    assert!(err.to_string().contains("at least 2s"), "{err}");
    granted_fence(
        store.acquire(request_for("leader:short", 1, token(), 2 * SECOND)).await.unwrap(),
    );
}

#[tokio::test]
async fn bad_input_is_a_clear_error_and_writes_nothing() {
    for (url, says) in [
        ("etcd://", "is not host:port"),
        ("etcd://127.0.0.1", "is not host:port"),
        ("etcd://127.0.0.1:99999", "is not host:port"),
        ("http://127.0.0.1:2379", "expected etcd://"),
    ] {
        let err = EtcdStore::builder(url).build().unwrap_err().to_string();
        assert!(err.contains(says), "{url}: {err}");
    }
    // Nobody listens: a transient error naming the endpoints, within the command timeout.
    let port = support::redis_server::free_port();
    let started = Instant::now();
    let err = EtcdStore::builder(format!("etcd://127.0.0.1:{port}"))
        .command_timeout(SECOND)
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(started.elapsed() < 3 * SECOND, "{:?}", started.elapsed());

    let (store, server) = solo().await;
    let long = "k".repeat(5000);
    let err = store.acquire(request(&long, 1, token())).await.unwrap_err();
    assert!(err.to_string().contains("at most 4096 bytes with EtcdStore"), "{err}");
    let err = store.acquire(request("leader:a b", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::InvalidKey { .. }), "{err:?}");
    assert!(keys_under(&server, "").await.is_empty(), "nothing was written");
}

#[tokio::test]
async fn authentication_refused_is_a_permanent_error() {
    let (_store, server) = solo().await;
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    client.user_add("root", "rootpw", None).await.unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    client.user_add("app", "s3cret", None).await.unwrap();
    client.role_add("app").await.unwrap();
    let permission = etcd_client::Permission::read_write("apps/").with_prefix();
    client.role_grant_permission("app", permission).await.unwrap();
    client.user_grant_role("app", "app").await.unwrap();
    client.auth_enable().await.unwrap();

    let endpoint = server.member.endpoint();
    let err = EtcdStore::connect(&format!("etcd://app:wrong@{endpoint}/apps/")).await.unwrap_err();
    assert!(!err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("authentication refused"), "{err}");
    assert!(!format!("{err} {err:?}").contains("wrong"), "the password is shown: {err:?}");
    // The right password, outside its prefix: refused, naming the permission.
    let outside = EtcdStore::connect(&format!("etcd://app:s3cret@{endpoint}/other/")).await;
    let err = outside.unwrap_err();
    assert!(err.to_string().contains("permission denied"), "{err}");
    // Inside it: a working store.
    let store = EtcdStore::connect(&format!("etcd://app:s3cret@{endpoint}/apps/")).await.unwrap();
    granted_fence(store.acquire(request("leader:authed", 1, token())).await.unwrap());
}

#[tokio::test]
async fn a_retried_grant_whose_reply_was_lost_takes_no_second_slot() {
    let (store, _server) = solo().await;
    let key = "leader:retried";
    let held = token();
    let fence = granted_fence(store.acquire(request(key, 3, held)).await.unwrap());
    // A second store (no memory of the first grant) retries the same token.
    let other = EtcdStore::connect(&_server.url()).await.unwrap();
    assert_eq!(granted_fence(other.acquire(request(key, 3, held)).await.unwrap()), fence);
    assert_eq!(other.state(key).await.unwrap().leaders.len(), 1);
    // It can renew and release the slot too.
    assert!(matches!(
        other.renew(key, held, 10 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(other.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(store.renew(key, held, 10 * SECOND).await.unwrap(), RenewOutcome::NotHeld);
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_of_another_process() {
    let (store, server) = solo().await;
    let other = EtcdStore::connect(&server.url()).await.unwrap();
    let key = "leader:woken";
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    let mut watch = other.watch_releases(key).await.unwrap();
    assert!(matches!(
        other.acquire(request(key, 1, token())).await.unwrap(),
        AcquireOutcome::Full { .. }
    ));
    store.release(key, held, Duration::ZERO).await.unwrap();
    timeout(5 * SECOND, watch.woken()).await.expect("woken by the release");
}

#[tokio::test]
async fn a_kept_lease_revoked_meanwhile_is_replaced() {
    let (store, server) = solo().await;
    let key = "leader:kept";
    let first = token();
    granted_fence(store.acquire(request(key, 1, first)).await.unwrap());
    store.release(key, first, Duration::ZERO).await.unwrap();
    // The released slot's lease is kept for the next grant; revoke it behind the store's back.
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let leases = client.leases().await.unwrap();
    let kept: Vec<i64> = leases.leases().iter().map(|lease| lease.id()).collect();
    assert_eq!(kept.len(), 1, "one kept lease: {kept:?}");
    client.lease_revoke(kept[0]).await.unwrap();
    // The next grant (which would use it) takes a new lease instead.
    let next = token();
    granted_fence(store.acquire(request(key, 1, next)).await.unwrap());
    assert!(matches!(
        store.renew(key, next, 10 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1);
}

#[tokio::test]
async fn a_grant_whose_reply_was_lost_is_found_by_the_retry_not_doubled() {
    use support::proxy::{Fault, Proxy};

    let server = EtcdServer::start();
    let proxy = Proxy::start(server.member.client_port).await;
    let store = EtcdStore::builder(format!("etcd://127.0.0.1:{}", proxy.port))
        .command_timeout(SECOND)
        .connect()
        .await
        .unwrap();
    let key = "leader:lost-reply";
    let (first, second) = (token(), token());
    granted_fence(store.acquire(request(key, 3, first)).await.unwrap());
    granted_fence(store.acquire(request(key, 3, second)).await.unwrap());
    // A release: the store's next acquire of the group guesses the freed index, with no read.
    store.release(key, second, Duration::ZERO).await.unwrap();
    proxy.set(Fault::DropReplies);
    let retried = token();
    let lost = store.acquire(request(key, 3, retried)).await;
    assert!(lost.as_ref().is_err_and(Error::is_transient), "{lost:?}");
    proxy.set(Fault::None);
    // Granted at etcd, its reply lost. Another slot is freed, and the retry with the same
    // token must find its grant rather than guess that index.
    store.release(key, first, Duration::ZERO).await.unwrap();
    granted_fence(store.acquire(request(key, 3, retried)).await.unwrap());
    let state = store.state(key).await.unwrap();
    assert_eq!(state.leaders.len(), 1, "the retried token holds one slot: {state:?}");
}

#[tokio::test]
async fn a_grant_after_a_release_is_one_round_trip_and_a_refusal_writes_nothing() {
    let (store, server) = solo().await;
    let messages = || server.member.metric("grpc_server_msg_received_total").unwrap();
    let fsyncs = || server.member.metric("etcd_disk_wal_fsync_duration_seconds_count").unwrap();
    let key = "leader:warm";
    let warm = token();
    granted_fence(store.acquire(request(key, 1, warm)).await.unwrap());
    store.release(key, warm, Duration::ZERO).await.unwrap();
    // The released slot's lease is kept, and the release tells the next acquire where to go.
    let (before, held) = (messages(), token());
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    assert_eq!(messages() - before, 1.0, "one transaction");
    let (before, written) = (messages(), fsyncs());
    let refused = store.acquire(request(key, 1, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");
    assert_eq!((messages() - before, fsyncs() - written), (1.0, 0.0), "one read, no write");
}

/// A `Leadership` whose lease the cluster cannot keep never leads, and says why where the
/// application looks: `wait_for_leadership` ends with the refusal, which the status and
/// the health carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_with_a_lease_the_cluster_cannot_keep_reports_the_refusal() {
    let server =
        EtcdServer::start_with(&["--heartbeat-interval", "100", "--election-timeout", "1000"]);
    let store = EtcdStore::builder(server.url()).build().unwrap();
    let options = leader::LeadershipOptions::new().lease_time(SECOND);
    let leadership = leader::Leadership::start("short", store, options).unwrap();
    let refused = timeout(10 * SECOND, leadership.wait_for_leadership())
        .await
        .expect("ends with the refusal")
        .expect_err("a lease under the cluster's minimum TTL");
    assert!(matches!(refused, Error::InvalidOption { option: "lease_time", .. }), "{refused:?}");
    assert!(refused.to_string().contains("at least 2s"), "{refused}");
    assert!(leadership.status().failure.is_some() && !leadership.is_leader());
    assert!(!leadership.health().is_healthy(), "{:?}", leadership.health());
    leadership.stop().await;
}
