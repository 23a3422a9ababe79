//! `EtcdStore` against real `etcd` members the tests start themselves: the conformance suite
//! on one member, the keys a group leaves behind, the lock-delay after a takeover, round trips,
//! and bad input as clear errors. Faults of a three-member cluster are in `etcd_faults.rs`.
#![cfg(feature = "etcd")]

use leader_testkit::conformance_suite;
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

#[tokio::test]
async fn a_kept_lease_revoked_meanwhile_is_replaced() {
    let (store, server) = solo().await;
    let key = "leader:kept";
    let first = token();
    granted_fence(store.acquire(request(key, 1, first)).await.unwrap());
    store.release(key, first, Duration::ZERO).await.unwrap();
    // The released slot's lease is kept for the next grant (beside the marker lease, of ten
    // TTLs); revoke it behind the store's back.
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let leases = client.leases().await.unwrap();
    let mut kept = Vec::new();
    for lease in leases.leases() {
        let life = client.lease_time_to_live(lease.id(), None).await.unwrap();
        if life.granted_ttl() < 20 {
            kept.push(lease.id());
        }
    }
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

/// Waits for a grant of `key` (a group of one) under a new token, retrying a full group
/// every 50 ms; the grant and its token.
async fn granted_when_free(
    store: &EtcdStore,
    key: &str,
    lease: Duration,
) -> (leader::store::Grant, leader::LeaseToken) {
    let next = token();
    loop {
        match store.acquire(request_for(key, 1, next, lease)).await.unwrap() {
            AcquireOutcome::Granted(grant) => return (grant, next),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A release by a process that was not granted the slot (another store, with the holder's
/// token, as `leader release` from an operator's shell does) keeps the lock-delay: the
/// holder's next renewal is refused, and nobody else is granted the slot before the
/// holder's deadline has passed.
#[tokio::test]
async fn a_release_by_another_process_keeps_the_lock_delay() {
    let (holder, server) = solo().await;
    let lease = 3 * SECOND;
    let key = "leader:released-by-another";
    let held = token();
    let sent = Instant::now();
    granted_fence(holder.acquire(request_for(key, 1, held, lease)).await.unwrap());
    let operator = EtcdStore::connect(&server.url()).await.unwrap();
    // Even one that renewed the slot first (which a token's other holder may do): renewing
    // it does not make its release the grantee's own.
    let renewed = operator.renew(key, held, lease).await.unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed { .. }), "{renewed:?}");
    let released = operator.release(key, held, Duration::ZERO).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Kept { .. }), "{released:?}");
    assert_eq!(holder.renew(key, held, lease).await.unwrap(), RenewOutcome::NotHeld);
    let third = EtcdStore::connect(&server.url()).await.unwrap();
    timeout(20 * SECOND, granted_when_free(&third, key, lease)).await.expect("granted in the end");
    assert!(sent.elapsed() >= lease, "granted {:?} after the holder's request", sent.elapsed());
}

/// A group of one whose holder's lease was revoked early is not grown beside it: its holder
/// believes it is alone until its deadline, so a grant under a larger size waits it out
/// (elsewhere the larger size is refused while the slot lives).
#[tokio::test]
async fn growing_a_group_waits_for_a_holder_that_believes_it_is_alone() {
    let (store, server) = solo().await;
    let key = "leader:grown";
    let lease = 3 * SECOND;
    granted_fence(store.acquire(request_for(key, 1, token(), lease)).await.unwrap());
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let slots =
        client.get(format!("{key} slot "), Some(GetOptions::new().with_prefix())).await.unwrap();
    client.lease_revoke(slots.kvs()[0].lease()).await.unwrap();
    let revoked_at = Instant::now();
    let other = EtcdStore::connect(&server.url()).await.unwrap();
    let grown = timeout(20 * SECOND, other.acquire(request_for(key, 3, token(), lease))).await;
    assert!(matches!(grown, Ok(Ok(AcquireOutcome::Granted(_)))), "{grown:?}");
    assert!(
        revoked_at.elapsed() >= lease - Duration::from_millis(100),
        "{:?}",
        revoked_at.elapsed()
    );
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

/// A grant under a new size waits for the holders the new size leaves out: a holder of
/// index 3 of a group of 4 whose lease was revoked early may still act, so a group of 1
/// taken meanwhile waits its TTL before it is acted on.
#[tokio::test]
async fn a_change_of_size_waits_for_every_holder_that_may_still_act() {
    let (store, server) = solo().await;
    let key = "leader:resized";
    let lease = 3 * SECOND;
    for _ in 0..4 {
        granted_fence(store.acquire(request_for(key, 4, token(), lease)).await.unwrap());
    }
    // Every slot but the one of index 3 is released; that one has its lease revoked behind
    // its holder's back (as a resumed, stale Raft leader does).
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let slots =
        client.get(format!("{key} slot "), Some(GetOptions::new().with_prefix())).await.unwrap();
    let mut last = None;
    for kv in slots.kvs() {
        let name = String::from_utf8_lossy(kv.key()).into_owned();
        let value = String::from_utf8_lossy(kv.value()).into_owned();
        let held: leader::LeaseToken = value.split(' ').next().unwrap().parse().unwrap();
        if name.ends_with(" 3") {
            last = Some(kv.lease());
        } else {
            assert_eq!(
                store.release(key, held, Duration::ZERO).await.unwrap(),
                ReleaseOutcome::Released
            );
        }
    }
    client.lease_revoke(last.expect("index 3 was granted")).await.unwrap();
    let revoked_at = Instant::now();
    let (grant, _) = timeout(20 * SECOND, granted_when_free(&store, key, lease)).await.unwrap();
    assert!(grant.fence > 0);
    assert!(
        revoked_at.elapsed() >= lease - Duration::from_millis(100),
        "a group of one acted on {:?} after the revocation",
        revoked_at.elapsed()
    );
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

/// During a takeover's lock-delay the new slot is pending: `state()` and observers in other
/// stores never name its candidate as a leader until the delay is over (the slot is then
/// confirmed, and the grant returns at once); then they do. A candidate dropped during the
/// delay leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_in_its_lock_delay_is_pending_not_a_leader() {
    let (store, server) = solo().await;
    let key = "leader:pending";
    let lease = 2 * SECOND;
    granted_fence(store.acquire(request_for(key, 1, token(), lease)).await.unwrap());
    // The holder vanishes without a release; a candidate on another store takes over.
    let watcher: leader::store::SharedStore =
        std::sync::Arc::new(EtcdStore::connect(&server.url()).await.unwrap());
    let keys = leader::KeyOptions::new().exact_key(key);
    let observer =
        leader::GroupObserver::start_with_keys(&watcher, "pending", &keys).await.unwrap();
    let taker = |store: EtcdStore| async move {
        let held = token();
        loop {
            let mut request = request_for(key, 1, held, lease);
            request.holder = "taker";
            match store.acquire(request).await.unwrap() {
                AcquireOutcome::Granted(grant) => return (grant, store),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    };
    let mut taking = tokio::spawn(taker(EtcdStore::connect(&server.url()).await.unwrap()));
    let names_taker = |slots: &[leader::SlotInfo]| slots.iter().any(|slot| slot.holder == "taker");
    let mut saw_pending = false;
    let (grant, candidate) = loop {
        let (state, current) = (watcher.state(key).await.unwrap(), observer.current());
        if taking.is_finished() {
            break taking.await.unwrap();
        }
        if names_taker(&state.leaders) || names_taker(&current.leaders) {
            // Read between the slot's confirmation and the grant's return: the grant is on
            // its way back. Named a leader during the delay (2 s), it would not be.
            match timeout(Duration::from_millis(500), &mut taking).await {
                Ok(taken) => break taken.unwrap(),
                Err(_) => panic!("a pending slot was named a leader: {state:?}, {current:?}"),
            }
        }
        saw_pending |= names_taker(&state.pending);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(saw_pending, "the takeover's slot was never seen pending");
    let after = watcher.state(key).await.unwrap();
    assert_eq!(after.leaders.iter().map(|slot| slot.fence).collect::<Vec<_>>(), [grant.fence]);
    assert!(after.pending.is_empty());

    // A candidate dropped during its delay leaves nothing behind it.
    let revoked = watcher
        .revoke(
            key,
            leader::store::SlotRef::Fence(grant.fence),
            leader::store::Revocation::AtExpiry,
        )
        .await
        .unwrap();
    assert!(matches!(revoked, ReleaseOutcome::Kept { .. }), "{revoked:?}");
    drop(candidate);
    let quitter = EtcdStore::connect(&server.url()).await.unwrap();
    let dropped = timeout(SECOND, quitter.acquire(request_for(key, 1, token(), lease))).await;
    assert!(dropped.is_err(), "granted during its lock-delay: {dropped:?}");
    support::eventually(5 * SECOND, "the abandoned slot is gone", || async {
        let state = watcher.state(key).await.unwrap();
        state.leaders.is_empty() && state.pending.is_empty()
    })
    .await;
}

/// Renewals use one keep-alive stream per lease, not one per renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_share_one_keep_alive_stream() {
    let (store, server) = solo().await;
    let streams = || {
        server
            .member
            .metric_with("grpc_server_started_total", "grpc_method=\"LeaseKeepAlive\"")
            .unwrap_or(0.0)
    };
    let before = streams();
    let options = leader::LeaderElectionOptions::new().lease_time(3 * SECOND).auto_extend(true);
    let elector = leader::LeaderElector::new(store, options).unwrap();
    let ran = elector
        .run_if_leader("streamed", |lease| async move {
            tokio::time::sleep(6 * SECOND).await;
            lease.is_lost()
        })
        .await
        .unwrap();
    assert_eq!(ran.elected(), Some(false), "renewed throughout");
    let opened = streams() - before;
    assert!(opened <= 2.0, "{opened} keep-alive streams for one slot's renewals");
}

/// The keep-alive stream of a lease the store let go (a kept lease that expired unused) is
/// closed, not left open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_of_a_lease_let_go_is_closed() {
    let (store, server) = solo().await;
    let metric = |name: &str| {
        server.member.metric_with(name, "grpc_method=\"LeaseKeepAlive\"").unwrap_or(0.0)
    };
    let open = || metric("grpc_server_started_total") - metric("grpc_server_handled_total");
    for round in 0..2 {
        for i in 0..10 {
            let key = format!("leader:let-go-{round}-{i}");
            let held = token();
            granted_fence(store.acquire(request_for(&key, 1, held, 2 * SECOND)).await.unwrap());
            assert!(matches!(
                store.renew(&key, held, 2 * SECOND).await.unwrap(),
                RenewOutcome::Renewed { .. }
            ));
            store.release(&key, held, Duration::ZERO).await.unwrap();
        }
        // The kept leases expire unused; the next round's grants let them go.
        tokio::time::sleep(3 * SECOND).await;
    }
    granted_fence(
        store.acquire(request_for("leader:let-go-last", 1, token(), 2 * SECOND)).await.unwrap(),
    );
    support::eventually(5 * SECOND, "the streams of the leases let go are closed", || async {
        open() <= 10.0
    })
    .await;
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

/// A renewal under another group's key (a caller's mix-up) answers "not held" and leaves
/// the slot's own renewals as they were: the full lease, not a time to live of zero.
#[tokio::test]
async fn a_renewal_under_another_key_leaves_the_slots_own_renewals_whole() {
    let (store, _server) = solo().await;
    let held = token();
    let lease = 10 * SECOND;
    granted_fence(store.acquire(request_for("leader:mine", 1, held, lease)).await.unwrap());
    for other in ["leader:other", "leader:mine-not"] {
        assert_eq!(store.renew(other, held, lease).await.unwrap(), RenewOutcome::NotHeld);
        match store.renew("leader:mine", held, lease).await.unwrap() {
            RenewOutcome::Renewed { expires_in, .. } => {
                assert!(expires_in > lease / 2, "after a renewal under {other}: {expires_in:?}")
            }
            other => panic!("the holder's renewal got {other:?}"),
        }
    }
}

/// A renewal dropped between its keep-alive request and the reply (a caller's timeout while
/// the member is stopped) leaves no stream behind: the next renewal opens a new one, so no
/// reply ever answers the request before it.
#[tokio::test]
async fn a_renewal_dropped_mid_keep_alive_leaves_no_stream_behind() {
    let (store, server) = solo().await;
    let streams = || {
        server
            .member
            .metric_with("grpc_server_started_total", "grpc_method=\"LeaseKeepAlive\"")
            .unwrap_or(0.0)
    };
    let (key, held, lease) = ("leader:dropped-renewal", token(), 3 * SECOND);
    granted_fence(store.acquire(request_for(key, 1, held, lease)).await.unwrap());
    // The lease's stream, opened by this renewal.
    let first = store.renew(key, held, lease).await.unwrap();
    assert!(matches!(first, RenewOutcome::Renewed { .. }), "{first:?}");
    server.member.pause();
    let dropped = timeout(Duration::from_millis(300), store.renew(key, held, lease)).await;
    server.member.resume();
    assert!(dropped.is_err(), "the renewal was to be dropped before its reply: {dropped:?}");
    tokio::time::sleep(Duration::from_millis(200)).await; // the dropped request's reply
    let before = streams();
    let next = store.renew(key, held, lease).await.unwrap();
    assert!(matches!(next, RenewOutcome::Renewed { .. }), "{next:?}");
    assert_eq!(streams() - before, 1.0, "the next renewal opens a stream of its own");
}
