//! `EtcdStore` against real `etcd` members the tests start themselves: the conformance suite
//! on one member, the keys a group leaves behind, the lock-delay after a takeover, round trips,
//! and bad input as clear errors. Faults of a three-member cluster are in `etcd_faults.rs`.
#![cfg(feature = "etcd")]

use leader_testkit::conformance_suite;
#[path = "etcd_store/keep_alive.rs"]
mod keep_alive;
#[path = "etcd_store/lock_delay.rs"]
mod lock_delay;
#[path = "etcd_store/preferences.rs"]
mod preferences;
mod support;

use std::time::Duration;

use leader::store::etcd_client::{self, GetOptions};
use leader::store::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use leader::{Error, EtcdStore, LeaseStore};
use support::etcd::EtcdServer;
use support::etcd_store::solo;
use support::{granted_fence, request, request_for, token};
use tokio::time::{Instant, timeout};

const SECOND: Duration = Duration::from_secs(1);

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

/// A group nobody uses leaves nothing: a release deletes its slot and marker at once; a
/// holder that never released leaves its marker (and the group's size) on a marker lease,
/// which runs out ten TTLs later (ten seconds at least); and no lease is left behind.
#[tokio::test]
async fn an_idle_group_leaves_nothing_once_its_markers_ran_out() {
    let (store, server) = solo().await;
    let key = "leader:idle";
    let (first, second) = (token(), token());
    store.acquire(request_for(key, 3, first, SECOND)).await.unwrap();
    store.acquire(request_for(key, 3, second, SECOND)).await.unwrap();
    assert_eq!(keys_under(&server, key).await.len(), 1 + 2 * 2, "max, and 2 keys per slot");
    store.release(key, first, Duration::ZERO).await.unwrap();
    let left = keys_under(&server, key).await;
    assert_eq!(left.len(), 3, "a release takes its slot and its marker: {left:?}");
    // The other one expires (its slot goes within about half a second of the lease); its
    // marker and the size stay until their marker lease runs out.
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let deadline = Instant::now() + 30 * SECOND;
    loop {
        let (left, leases) = (keys_under(&server, key).await, client.leases().await.unwrap());
        if left.is_empty() && leases.leases().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left after 30 s: {left:?}, {} leases",
            leases.leases().len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    assert!(
        err.to_string().starts_with("invalid `lease_time` 1s: must be more than 1s with this etcd"),
        "{err}"
    );
    assert!(keys_under(&server, "leader:short").await.is_empty(), "nothing is written");
    // Known from then on: refused before any call.
    let err = store.renew("leader:short", token(), SECOND).await.unwrap_err();
    assert!(err.to_string().contains("more than 1s with this etcd cluster"), "{err}");
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

/// On a cluster with etcd's default election timeout (1 s: leases of 2 s at least), a
/// claim of 1 s (what a fair waiter sends) is written on a lease of the cluster's minimum, even once the store knows that minimum; and
/// a claim whose value holds back for 1 ms never makes the others spin: they are told to
/// look again once its lease can have lapsed.
#[tokio::test]
async fn claims_live_on_the_clusters_shortest_lease_at_least() {
    let server =
        EtcdServer::start_with(&["--heartbeat-interval", "100", "--election-timeout", "1000"]);
    let store = EtcdStore::connect(&server.url()).await.unwrap();
    let key = "leader:default-cluster";
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    // Claims of 1 s: the first teaches the store the minimum TTL (2 s), the next two are
    // written after that (a takeover by an earlier arrival), and kept alive.
    for waited in [5, 20, 20] {
        let claim = request(key, 1, token()).reserving(waited * SECOND, SECOND);
        let outcome = store.acquire(claim).await.expect("a claim on the shortest lease");
        assert!(matches!(outcome, AcquireOutcome::Full { .. }), "{outcome:?}");
    }
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let lease = client.lease_grant(30, None).await.unwrap().id();
    let options = etcd_client::PutOptions::new().with_lease(lease);
    let short = format!("{} 0 1 0 operator", token());
    client.put(format!("{key} last claim"), short, Some(options)).await.unwrap();
    match store.acquire(request(key, 1, token())).await.unwrap() {
        AcquireOutcome::Full { nearest_expiry } => {
            assert!(nearest_expiry >= 2 * SECOND, "asked to look again after {nearest_expiry:?}")
        }
        granted => panic!("a slot held back was granted: {granted:?}"),
    }
}

/// A claim whose holder went away frees the last slot it held back when its lease lapses:
/// the group's waiters are woken then, as by a release (etcd says nothing else).
#[tokio::test]
async fn a_lapsed_claim_wakes_the_waiters_it_held_back() {
    let (store, server) = solo().await;
    let other = EtcdStore::connect(&server.url()).await.unwrap();
    let key = "leader:lapsing-claim";
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    let claim = request(key, 1, token()).reserving(20 * SECOND, 2 * SECOND);
    assert!(matches!(store.acquire(claim).await.unwrap(), AcquireOutcome::Full { .. }));
    store.release(key, held, Duration::ZERO).await.unwrap();
    let mut watch = other.watch_releases(key).await.unwrap();
    let held_back = other.acquire(request(key, 1, token())).await.unwrap();
    assert!(matches!(held_back, AcquireOutcome::Full { .. }), "{held_back:?}");
    timeout(6 * SECOND, watch.woken()).await.expect("woken when the claim lapsed");
    granted_fence(other.acquire(request(key, 1, token())).await.unwrap());
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

/// A `Leadership` whose lease the cluster cannot keep never leads, and says why: its start
/// fails with the refusal, naming the lease and the cluster's minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_with_a_lease_the_cluster_cannot_keep_reports_the_refusal() {
    let server =
        EtcdServer::start_with(&["--heartbeat-interval", "100", "--election-timeout", "1000"]);
    let store = EtcdStore::builder(server.url()).build().unwrap();
    let options = leader::LeadershipOptions::new().lease_time(SECOND);
    let refused = timeout(10 * SECOND, leader::Leadership::start("short", store, options))
        .await
        .expect("ends with the refusal")
        .expect_err("a lease under the cluster's minimum TTL");
    assert!(matches!(refused, Error::InvalidOption { option: "lease_time", .. }), "{refused:?}");
    assert!(refused.to_string().contains("more than 1s with this etcd cluster"), "{refused}");
}

/// Durations beyond what any option allows are refused naming the option, on every store
/// a caller reaches directly: never a panic, never a false answer.
#[tokio::test]
async fn durations_beyond_the_limit_are_refused_naming_them() {
    let (etcd, _server) = solo().await;
    let stores: [std::sync::Arc<dyn LeaseStore>; 2] =
        [std::sync::Arc::new(etcd), std::sync::Arc::new(leader::MemoryStore::new())];
    for store in stores {
        let key = "leader:huge";
        let err = store.acquire(request_for(key, 1, token(), Duration::MAX)).await.unwrap_err();
        assert!(err.to_string().contains("`lease_time`"), "{}: {err}", store.kind());
        let held = token();
        granted_fence(store.acquire(request_for(key, 1, held, 2 * SECOND)).await.unwrap());
        let err = store.renew(key, held, Duration::MAX).await.unwrap_err();
        assert!(err.to_string().contains("`lease_time`"), "{}: {err}", store.kind());
        let err = store.release(key, held, Duration::MAX).await.unwrap_err();
        assert!(err.to_string().contains("`min_lease_time`"), "{}: {err}", store.kind());
        assert_eq!(
            store.release(key, held, Duration::ZERO).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
}

/// A marker the store did not write is refused naming its key; nothing waits on it.
#[tokio::test]
async fn a_marker_the_store_did_not_write_is_refused_naming_it() {
    let (store, server) = solo().await;
    let key = "leader:tampered";
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    client.put(format!("{key} last 0"), "held 1x", None).await.unwrap();
    let started = Instant::now();
    let err = store.acquire(request(key, 1, token())).await.unwrap_err();
    assert!(started.elapsed() < 5 * SECOND, "waited {:?}", started.elapsed());
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert!(err.to_string().contains("leader:tampered last 0"), "{err}");
    client.put(format!("{key} last 0"), "held 99999999999", None).await.unwrap();
    let err = store.acquire(request(key, 1, token())).await.unwrap_err();
    assert!(err.to_string().contains("last 0"), "{err}");
    assert!(store.state(key).await.is_err(), "a read refuses it too");
}

/// A claim key the store did not write (text that is no claim, or a claim on no lease,
/// which would never lapse) holds no slot back, and the next claim replaces it.
#[tokio::test]
async fn a_claim_the_store_did_not_write_holds_nothing_back() {
    let (store, server) = solo().await;
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let forever = format!("{} {} 1000 0 operator", token(), u64::MAX);
    for (group, value) in [("leader:claimed-a", "no claim"), ("leader:claimed-b", &forever)] {
        let claim_key = format!("{group} last claim");
        client.put(claim_key.as_str(), value, None).await.unwrap();
        // The last free slot goes to whoever asks.
        granted_fence(store.acquire(request(group, 1, token())).await.unwrap());
        let claim = request(group, 1, token()).reserving(20 * SECOND, 10 * SECOND);
        let outcome = store.acquire(claim).await.unwrap();
        assert!(matches!(outcome, AcquireOutcome::Full { .. }), "{outcome:?}");
        let written = client.get(claim_key.as_str(), None).await.unwrap();
        let written = written.kvs().first().expect("a claim");
        assert!(written.value_str().unwrap() != value && written.lease() != 0, "not replaced");
    }
}

/// Smaller: a grant's `expires_in` never exceeds its TTL; a prefix without a separator gets
/// one, so `ap` + `px` is never `app` + `x`; `state()` never reports more time than is left.
#[tokio::test]
async fn a_grant_a_prefix_and_a_state_report_no_more_than_is_true() {
    let (store, server) = solo().await;
    for _ in 0..3 {
        let grant = store.acquire(request_for("leader:ttl", 3, token(), 2 * SECOND)).await.unwrap();
        let AcquireOutcome::Granted(grant) = grant else { panic!("{grant:?}") };
        assert!(grant.expires_in <= 2 * SECOND, "{grant:?}");
    }
    let state = store.state("leader:ttl").await.unwrap();
    assert!(state.leaders.iter().all(|slot| slot.expires_in <= 2 * SECOND), "{state:?}");
    let app = EtcdStore::connect(&format!("{}/ap", server.url())).await.unwrap();
    assert_eq!(app.prefix(), "ap/");
    let other = EtcdStore::builder(server.url()).prefix("app").build().unwrap();
    granted_fence(other.acquire(request("x", 1, token())).await.unwrap());
    assert!(app.state("px").await.unwrap().leaders.is_empty(), "another store's group");
    assert!(app.list_groups("", "").await.unwrap().is_empty());
}

/// Past etcd's space quota (its NOSPACE alarm), a holder's release still frees its slot:
/// the release writes nothing, only deletes. A grant is refused meanwhile, naming the
/// cause (only an operator helps: compaction, defragmentation, a larger quota).
#[tokio::test]
async fn a_release_frees_its_slot_past_the_space_quota() {
    let server = EtcdServer::start_with(&["--quota-backend-bytes", "524288"]);
    let store = EtcdStore::connect(&server.url()).await.unwrap();
    let key = "leader:quota";
    let held = token();
    granted_fence(store.acquire(request_for(key, 2, held, 10 * SECOND)).await.unwrap());
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let filler = vec![b'x'; 64 * 1024];
    let mut full = false;
    for i in 0..200 {
        if let Err(error) = client.put(format!("filler {i}"), filler.clone(), None).await {
            assert!(error.to_string().contains("space exceeded"), "{error}");
            full = true;
            break;
        }
    }
    assert!(full, "the quota was never reached");
    let refused = store.acquire(request_for(key, 2, token(), 10 * SECOND)).await.unwrap_err();
    assert!(refused.to_string().contains("space exceeded"), "{refused}");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert!(store.state(key).await.unwrap().leaders.is_empty());
}
