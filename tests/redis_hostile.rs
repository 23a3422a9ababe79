//! `RedisStore` under conditions a real deployment can have: a connection that reached a
//! replica, fences beyond what a Lua number holds, a pub/sub connection a firewall dropped
//! without a word, a slow network during a diagnosis. Each test runs its own servers.

mod support;

use std::time::Duration;

use leader::store::{AcquireOutcome, ReleaseOutcome};
use leader::{Error, LeaderElectionOptions, LeaderElector, LeaseStore, RedisStore};
use support::proxy::{Fault, Proxy};
use support::redis_server::RedisServer;
use support::{granted_fence, request, request_for, token};

const SECOND: Duration = Duration::from_secs(1);

/// Scripts run on a replica read first, so a lagging replica answered "not held"
/// to a renewal (a spurious loss for a healthy leader) and "full" to an acquire whose
/// marker writes failed quietly. Declared with a shebang, they are refused whole with
/// READONLY, a transient error; state, which writes nothing, still answers.
#[tokio::test]
async fn scripts_sent_to_a_replica_fail_instead_of_answering_from_its_copy() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    support::eventually(10 * SECOND, "the replica syncs", || async {
        replica.cli(&["INFO", "replication"]).contains("master_link_status:up")
    })
    .await;
    let on_primary = RedisStore::connect(&primary.url()).await.unwrap();
    let held = token();
    granted_fence(on_primary.acquire(request("leader:replicated", 1, held)).await.unwrap());
    let layout = RedisStore::group_layout("leader:replicated").unwrap();
    support::eventually(10 * SECOND, "the grant reaches the replica", || async {
        replica.cli(&["EXISTS", &layout.group]) == "1"
    })
    .await;

    let on_replica = RedisStore::connect(&replica.url()).await.unwrap();
    let refused = on_replica.acquire(request("leader:replicated", 1, token())).await;
    assert!(refused.as_ref().is_err_and(Error::is_transient), "acquire: {refused:?}");
    let renewed = on_replica.renew("leader:replicated", token(), 10 * SECOND).await;
    assert!(renewed.as_ref().is_err_and(Error::is_transient), "renew: {renewed:?}");
    let released = on_replica.release("leader:replicated", token(), Duration::ZERO).await;
    assert!(released.as_ref().is_err_and(Error::is_transient), "release: {released:?}");
    let shown = renewed.unwrap_err().to_string();
    assert!(shown.to_lowercase().contains("read only"), "{shown}");
    let state = on_replica.state("leader:replicated").await.unwrap();
    assert_eq!(state.leaders.len(), 1, "state reads the replica's copy");
}

/// Fences were computed with Lua numbers (doubles), so above 2^53 `last + 1`
/// stopped increasing, and a stored fence of 20 digits came back negative. They are
/// exact over the whole u64 range now, and the end of that range is a clear error.
#[tokio::test]
async fn fences_stay_exact_and_increasing_over_the_whole_u64_range() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let key = "leader:big-fences";
    let layout = RedisStore::group_layout(key).unwrap();
    for last in [9_007_199_254_740_993_u64, 18_446_744_073_709_551_614] {
        let held = token();
        granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
        store.release(key, held, Duration::ZERO).await.unwrap();
        server.cli(&["HSET", &layout.group, "fence", &last.to_string()]);
        let held = token();
        let fence = granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
        assert_eq!(fence, last + 1, "after {last}");
        // The retry of the same token and state give the same fence back.
        assert_eq!(granted_fence(store.acquire(request(key, 1, held)).await.unwrap()), last + 1);
        assert_eq!(store.state(key).await.unwrap().leaders[0].fence, last + 1);
        assert_eq!(
            store.release(key, held, Duration::ZERO).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    let err = store.acquire(request(key, 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    assert!(err.to_string().contains("exhausted"), "{err}");
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 0, "nothing granted");
}

/// The pub/sub connection goes silent (a firewall dropped its state; it never
/// ends by itself). It is pinged, found dead and made again, so a release wakes a waiter
/// at once again instead of at the end of the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_release_subscription_is_noticed_and_replaced() {
    let server = RedisServer::start();
    let direct = RedisStore::connect(&server.url()).await.unwrap();
    let proxy = Proxy::start(server.port).await;
    let store = RedisStore::builder(proxy.url()).command_timeout(SECOND).build().unwrap();
    // The subscription is the store's only connection when it goes silent: the commands'
    // connection, made afterwards, carries on.
    let _subscribed = store.watch_releases("leader:warm").await.unwrap();
    proxy.freeze().await;

    let held = token();
    let long = request_for("leader:silent", 1, held, 60 * SECOND);
    granted_fence(direct.acquire(long).await.unwrap());
    let elector = LeaderElector::new(
        store.clone(),
        LeaderElectionOptions::new().wait_time(20 * SECOND).lease_time(10 * SECOND),
    )
    .unwrap();
    let waiting = tokio::spawn(async move { elector.run_if_leader("silent", |_| async {}).await });
    tokio::time::sleep(3 * SECOND).await; // refused; pinged, found silent, subscribed again
    let released = tokio::time::Instant::now();
    direct.release("leader:silent", held, Duration::ZERO).await.unwrap();
    let won = waiting.await.unwrap().unwrap();
    assert!(won.is_elected(), "{won:?}");
    let handed_over = released.elapsed();
    assert!(handed_over < 10 * SECOND, "woken by the release, not the lease: {handed_over:?}");
}

/// The diagnosis of a wrong-type key (two more round trips) ran outside the
/// operation's timeout, so a slow network made the call take three times as long. One
/// deadline bounds the whole operation now.
#[tokio::test]
async fn one_deadline_bounds_an_operation_and_its_diagnosis() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let store = RedisStore::builder(proxy.url())
        .command_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    granted_fence(store.acquire(request("leader:warm", 1, token())).await.unwrap()); // cached
    let layout = RedisStore::group_layout("leader:wrong-type").unwrap();
    server.cli(&["SET", &layout.group, "not a hash"]);
    // Each round trip now takes 300 ms: the script's reply comes within the timeout, the
    // two TYPE lookups after it would not.
    proxy.set(Fault::Latency(Duration::from_millis(150)));
    let err = store.acquire(request("leader:wrong-type", 1, token())).await.unwrap_err();
    proxy.set(Fault::None);
    assert!(matches!(err, Error::Timeout { operation: "acquire", .. }), "{err:?}");
    let err = store.acquire(request("leader:wrong-type", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert!(err.to_string().contains("is a string"), "{err}");
}

/// Items 10 and 11 together with a server out of memory: the writing scripts carry
/// `allow-oom`, so a leader keeps renewing and releasing, and candidates keep being
/// granted (a few bytes per slot), while the application's own writes are refused.
#[tokio::test]
async fn a_server_out_of_memory_keeps_electing() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let key = "leader:oom-elects";
    let held = token();
    granted_fence(store.acquire(request(key, 2, held)).await.unwrap());
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let refused = server.cli(&["SET", "application-key", "x"]);
    let renewed = store.renew(key, held, 10 * SECOND).await;
    let other = token();
    let granted = store.acquire(request(key, 2, other)).await;
    let full = store.acquire(request(key, 2, token())).await;
    let released = store.release(key, held, Duration::ZERO).await;
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(refused.to_lowercase().contains("oom"), "the server is out of memory: {refused}");
    assert!(matches!(renewed, Ok(leader::store::RenewOutcome::Renewed { .. })), "{renewed:?}");
    assert!(matches!(granted, Ok(AcquireOutcome::Granted(_))), "{granted:?}");
    assert!(matches!(full, Ok(AcquireOutcome::Full { .. })), "{full:?}");
    assert_eq!(released.unwrap(), ReleaseOutcome::Released);
}

/// A claim on a group's next free slot that this store did not write (an end beyond the
/// store's range, text that is no claim) made an answer of 0 ns, overflowed, and held the
/// slot back for good; and a plain attempt from the claim's own token on a full group
/// whose full marker was gone failed with a Lua error. Neither is a claim now, and the
/// claim's holder asking without one is refused as anyone is.
#[tokio::test]
async fn a_claim_this_store_did_not_write_holds_nothing_back() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    for (at, garbage) in [
        "99999999999999999999:0:deadbeef",
        "99999999999999999999:0:0:deadbeef:h",
        "abc",
        "1e30:0:x",
        "",
    ]
    .iter()
    .enumerate()
    {
        let key = format!("leader:claimed-{at}");
        let layout = RedisStore::group_layout(&key).unwrap();
        server.cli(&["HSET", &layout.group, "reserved", garbage]);
        granted_fence(store.acquire(request(&key, 1, token())).await.unwrap());
        assert_eq!(server.cli(&["HEXISTS", &layout.group, "reserved"]), "0", "{garbage:?}");
    }
    // A claim whose priority is beyond 32 bits is none either: `claim` reads no claim
    // rather than failing (it made `leader state` fail).
    let key = "leader:claimed-huge";
    let layout = RedisStore::group_layout(key).unwrap();
    server.cli(&["HSET", &layout.group, "reserved", "99999999999999:1:99999999999:ab:huge"]);
    assert_eq!(store.claim(key).await.unwrap(), None);
    let key = "leader:claimed-then-plain";
    let layout = RedisStore::group_layout(key).unwrap();
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());
    let claimer = token();
    let claim = request(key, 1, claimer).reserving(SECOND, 10 * SECOND);
    assert!(matches!(store.acquire(claim).await.unwrap(), AcquireOutcome::Full { .. }));
    server.cli(&["DEL", &layout.full]);
    let plain = store.acquire(request(key, 1, claimer)).await.unwrap();
    assert!(matches!(plain, AcquireOutcome::Full { .. }), "{plain:?}");
}

/// Another's value at a group's preference key (a list, a string without an expiry) is no
/// failure: a list is no preference, and claims meeting over it still go by priority.
#[tokio::test]
async fn another_value_at_the_preference_key_is_no_failure() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let key = "leader:preferred-list";
    let layout = RedisStore::group_layout(key).unwrap();
    server.cli(&["RPUSH", &layout.preferred, "someone"]);
    assert_eq!(store.preference(key).await.unwrap(), None);
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());
    for priority in [1, 2] {
        let claim = request(key, 1, token()).reserving_at(SECOND, 10 * SECOND, priority);
        assert!(matches!(store.acquire(claim).await.unwrap(), AcquireOutcome::Full { .. }));
    }
    let claim = store.claim(key).await.unwrap().expect("a claim");
    assert_eq!((claim.priority, claim.preference), (2, None));
    assert_eq!(server.cli(&["LLEN", &layout.preferred]), "1", "another's key was left alone");
    for preferred in [Some(("someone", 10 * SECOND)), None] {
        let refused = store.prefer(key, preferred).await.unwrap_err();
        assert!(matches!(refused, leader::Error::WrongType { .. }), "{refused:?}");
        assert_eq!(server.cli(&["LLEN", &layout.preferred]), "1", "another's key was changed");
    }
    // A preference without an expiry (an operator's SET), or naming nobody, is none: it
    // made `leader state` fail, and counted as a preference for good.
    for (at, value) in ["favourite", ""].into_iter().enumerate() {
        let key = format!("leader:preferred-forever-{at}");
        let layout = RedisStore::group_layout(&key).unwrap();
        server.cli(&["SET", &layout.preferred, value]);
        assert_eq!(store.preference(&key).await.unwrap(), None, "{value:?}");
        granted_fence(store.acquire(request(&key, 1, token())).await.unwrap());
        let better = request(&key, 1, token()).reserving_at(SECOND, 10 * SECOND, 2);
        assert!(matches!(store.acquire(better).await.unwrap(), AcquireOutcome::Full { .. }));
        let mut named = request(&key, 1, token()).reserving_at(SECOND, 10 * SECOND, 0);
        named.holder = "favourite";
        assert!(matches!(store.acquire(named).await.unwrap(), AcquireOutcome::Full { .. }));
        let claim = store.claim(&key).await.unwrap().expect("a claim");
        assert_eq!((claim.priority, claim.preference), (2, None), "{value:?}");
    }
}
