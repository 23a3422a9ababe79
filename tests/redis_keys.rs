//! What `RedisStore` writes on a real `redis-server`: one hash per group and a full marker,
//! only live records, a TTL on every key, and other programs' keys left alone.

mod support;

use std::time::Duration;

use leader::store::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use leader::{Error, LeaseStore, LeaseToken, RedisStore};
use support::redis::{all_commands, full_key, group_key, slot_records, standalone};
use support::redis_server::RedisServer;
use support::{granted_fence, request, request_for, token};
use tokio::time::sleep;

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_key_of_another_type_is_reported_and_left_alone() {
    let (store, server) = standalone().await;
    server.cli(&["SET", &group_key("leader:taken"), "someone else's"]);
    server.cli(&["LPUSH", &group_key("leader:listed"), "x"]);
    for (key, offending) in [
        ("leader:taken", &format!("{} is a string", group_key("leader:taken"))),
        ("leader:listed", &format!("{} is a list", group_key("leader:listed"))),
    ] {
        let err = store.acquire(request(key, 1, token())).await.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{key}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(offending) && message.contains(key), "{message}");
        assert!(!err.is_transient());
    }
    assert_eq!(server.cli(&["GET", &group_key("leader:taken")]), "someone else's");
    assert_eq!(server.cli(&["LRANGE", &group_key("leader:listed"), "0", "-1"]), "x");
    assert_eq!(server.cli(&["KEYS", "*"]).lines().count(), 2, "nothing was written");
    let err = store.renew("leader:taken", token(), SECOND).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let err = store.state("leader:listed").await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
}

#[tokio::test]
async fn a_group_is_one_hash_that_keeps_only_live_records() {
    let (store, server) = standalone().await;
    let key = "leader:tidy";
    let crashed = token();
    // Long enough to outlive the steps before its expiry on a busy machine.
    let short = request_for(key, 2, crashed, Duration::from_secs(3));
    assert!(matches!(store.acquire(short).await.unwrap(), AcquireOutcome::Granted(_)));
    let released = token();
    assert!(matches!(
        store.acquire(request(key, 2, released)).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
    let keys = |server: &RedisServer| {
        let mut keys: Vec<String> = server.cli(&["KEYS", "*"]).lines().map(str::to_owned).collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&server), [group_key("leader:tidy")], "one key per group");
    let group_ttl: i64 = server.cli(&["PTTL", &group_key("leader:tidy")]).parse().unwrap();
    assert!(group_ttl > 10_000, "the group outlives its longest slot: {group_ttl} ms");
    let refused = store.acquire(request(key, 2, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");
    assert_eq!(
        keys(&server),
        [full_key("leader:tidy"), group_key("leader:tidy")],
        "refused: marked"
    );
    let marked: i64 = server.cli(&["PTTL", &full_key("leader:tidy")]).parse().unwrap();
    assert!(marked < 3_000, "the marker ends before the nearest expiry: {marked} ms");
    let waiting = || server.cli(&["HEXISTS", &group_key("leader:tidy"), "waiting"]);
    assert_eq!(waiting(), "1", "a refusal marks the group as waited on");
    assert_eq!(
        store.release(key, released, Duration::ZERO).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(keys(&server), [group_key("leader:tidy")], "a group that is not full is one key");
    assert_eq!(waiting(), "0", "the release that woke the candidate clears the mark");
    sleep(Duration::from_millis(3_100)).await; // the crashed holder's slot expires, unreleased
    assert_eq!(slot_records(&server, key), 1, "the expired record waits for the next grant");
    let next = token();
    let AcquireOutcome::Granted(grant) = store.acquire(request(key, 2, next)).await.unwrap() else {
        panic!("refused")
    };
    assert_eq!(slot_records(&server, key), 1, "the grant deleted the expired record");
    assert_eq!(store.release(key, next, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    let mut fields: Vec<String> =
        server.cli(&["HKEYS", &group_key("leader:tidy")]).lines().map(str::to_owned).collect();
    fields.sort();
    assert_eq!(fields, ["fence", "max"], "an idle group keeps its max and last fence");
    let fence: u64 = server.cli(&["HGET", &group_key("leader:tidy"), "fence"]).parse().unwrap();
    assert_eq!(fence, grant.fence);
}

#[tokio::test]
async fn a_full_group_refuses_without_the_clock_or_the_records() {
    let (store, server) = standalone().await;
    let key = "leader:marked";
    let (first, second) = (token(), token());
    granted_fence(store.acquire(request(key, 2, first)).await.unwrap());
    let fence = granted_fence(store.acquire(request(key, 2, second)).await.unwrap());

    let outcome = store.acquire(request(key, 2, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Full { .. }), "the first refusal marks the group");
    server.cli(&["CONFIG", "RESETSTAT"]);
    let outcome = store.acquire(request(key, 2, token())).await.unwrap();
    let AcquireOutcome::Full { nearest_expiry } = outcome else { panic!("{outcome:?}") };
    assert!(nearest_expiry > Duration::from_secs(9), "{nearest_expiry:?}");
    let ran = all_commands(&server);
    let marker_reads = (ran.get("get"), ran.get("pttl"), ran.get("hget"));
    assert_eq!(marker_reads, (Some(&1), Some(&1), Some(&1)), "{ran:?}");
    assert!(!ran.contains_key("time") && !ran.contains_key("hgetall"), "{ran:?}");

    // The marker never hides a holder's own slot or another N.
    assert_eq!(granted_fence(store.acquire(request(key, 2, second)).await.unwrap()), fence);
    let err = store.acquire(request(key, 3, token())).await.unwrap_err();
    assert!(matches!(err, Error::MaxLeadersMismatch { requested: 3, existing: 2, .. }), "{err:?}");

    // A release ends it at once.
    assert_eq!(store.release(key, first, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    granted_fence(store.acquire(request(key, 2, token())).await.unwrap());
}

/// Takes the only slot of group `key` (N=1) under `held`, then has another token refused,
/// which marks the group full.
async fn hold_and_mark_full(store: &RedisStore, key: &str, held: LeaseToken) {
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    let refused = store.acquire(request(key, 1, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");
}

#[tokio::test]
async fn the_full_marker_never_outlives_a_slot_that_ends_sooner() {
    let (store, server) = standalone().await;
    let marker_ms = |key: &str| -> i64 { server.cli(&["PTTL", &full_key(key)]).parse().unwrap() };
    let soon = Duration::from_secs(2);

    // A renewal with a shorter lease than the slot had left.
    let (key, held) = ("leader:renewed-shorter", token());
    hold_and_mark_full(&store, key, held).await;
    assert!(marker_ms(key) > 9_000);
    assert!(matches!(store.renew(key, held, soon).await.unwrap(), RenewOutcome::Renewed { .. }));
    assert!((0..=2_000).contains(&marker_ms(key)), "{}", marker_ms(key));
    sleep(soon + Duration::from_millis(50)).await;
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());

    // A release kept until the minimum lease ends.
    let (key, held) = ("leader:kept", token());
    hold_and_mark_full(&store, key, held).await;
    assert!(marker_ms(key) > 9_000);
    assert!(matches!(store.release(key, held, soon).await.unwrap(), ReleaseOutcome::Kept { .. }));
    assert!((0..=2_000).contains(&marker_ms(key)), "{}", marker_ms(key));
    sleep(soon + Duration::from_millis(50)).await;
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());
}

#[tokio::test]
async fn a_foreign_key_where_the_marker_goes_is_reported_and_left_alone() {
    let (store, server) = standalone().await;
    server.cli(&["SET", &full_key("leader:squatted"), "someone else's"]);
    let err = store.acquire(request("leader:squatted", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("{} is a string", full_key("leader:squatted"))),
        "{err}"
    );
    assert_eq!(server.cli(&["GET", &full_key("leader:squatted")]), "someone else's");
    assert_eq!(server.cli(&["EXISTS", &group_key("leader:squatted")]), "0", "nothing was written");
}

#[tokio::test]
async fn a_foreign_string_with_a_ttl_where_the_marker_goes_is_reported_and_left_alone() {
    let (store, server) = standalone().await;
    server.cli(&["SET", &full_key("leader:squatted"), "someone else's", "PX", "60000"]);
    let err = store.acquire(request("leader:squatted", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(server.cli(&["GET", &full_key("leader:squatted")]), "someone else's");
    let ttl: i64 = server.cli(&["PTTL", &full_key("leader:squatted")]).parse().unwrap();
    assert!(ttl > 50_000, "its TTL was left alone: {ttl} ms");
    assert_eq!(server.cli(&["EXISTS", &group_key("leader:squatted")]), "0", "nothing was written");
}

#[tokio::test]
async fn renewals_and_releases_never_touch_a_foreign_key_where_the_marker_goes() {
    let (store, server) = standalone().await;
    let (key, held) = ("leader:collided", token());
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    server.cli(&["SET", &full_key("leader:collided"), "someone else's"]);
    let shorter = store.renew(key, held, Duration::from_secs(1)).await.unwrap();
    assert!(matches!(shorter, RenewOutcome::Renewed { .. }), "{shorter:?}");
    assert_eq!(server.cli(&["PTTL", &full_key("leader:collided")]), "-1", "given no expiry");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(server.cli(&["GET", &full_key("leader:collided")]), "someone else's", "not deleted");
}

#[tokio::test]
async fn every_key_carries_a_ttl_and_an_idle_group_disappears() {
    let server = RedisServer::start();
    // Long enough to cover the steps between a write and the look at its TTL on a busy
    // machine.
    let idle = Duration::from_secs(2);
    let store = RedisStore::builder(server.url()).idle_group_ttl(idle).connect().await.unwrap();
    let every_key_expires = |step: &str| {
        for key in server.cli(&["KEYS", "*"]).lines().filter(|k| !k.is_empty()) {
            let ttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
            assert!(ttl >= 0 || ttl == -2, "after {step}, {key} has no TTL ({ttl})");
        }
    };
    let key = "report-tenant-7";
    let (long, short, kept) = (token(), token(), token());
    let long_lease = request_for(key, 3, long, 5 * SECOND);
    granted_fence(store.acquire(long_lease).await.unwrap());
    every_key_expires("a grant");
    let group_ttl: i64 = server.cli(&["PTTL", &group_key("report-tenant-7")]).parse().unwrap();
    assert!(group_ttl > 5_000, "the group outlives its longest slot: {group_ttl} ms");
    let short_lease = request_for(key, 3, short, 2 * SECOND);
    granted_fence(store.acquire(short_lease).await.unwrap());
    granted_fence(store.acquire(request(key, 3, kept)).await.unwrap());
    let refused = store.acquire(request(key, 3, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");
    every_key_expires("a refusal");
    assert!(matches!(
        store.renew(key, long, 20 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    every_key_expires("a renewal");
    let group_ttl: i64 = server.cli(&["PTTL", &group_key("report-tenant-7")]).parse().unwrap();
    assert!(group_ttl > 20_000, "a renewal extends the group: {group_ttl} ms");
    store.release(key, kept, 2 * SECOND).await.unwrap();
    every_key_expires("a kept release");
    store.release(key, long, Duration::ZERO).await.unwrap();
    store.state(key).await.unwrap();
    every_key_expires("a release");
    // The renewal put the group's expiry 20 s + idle ahead, and a release never shortens
    // it; once the kept and the crashed slots (2 s each) have ended, the next grant sets it
    // from the live slots again.
    sleep(2 * SECOND + Duration::from_millis(100)).await;
    let last = token();
    let fence = granted_fence(
        store.acquire(request_for(key, 3, last, Duration::from_millis(50))).await.unwrap(),
    );
    store.release(key, last, Duration::ZERO).await.unwrap();
    every_key_expires("the last release");
    sleep(idle + Duration::from_millis(300)).await;
    assert_eq!(server.cli(&["KEYS", "*"]), "", "an idle group disappears");
    // And its fences keep increasing after it is gone (floored at the server clock).
    let again = granted_fence(store.acquire(request(key, 3, token())).await.unwrap());
    assert!(again > fence, "{again} > {fence}");
}

mod key_lifetimes {
    //! Whatever the operations, every key the store writes carries a TTL, and no TTL is
    //! longer than the longest lease plus the idle group TTL.

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire { who: usize, lease_ms: u64, max_leaders: u32 },
        Renew { who: usize, lease_ms: u64 },
        Release { who: usize, min_lease_ms: u64 },
        State,
        Watch,
        Sleep { ms: u64 },
    }

    const LEASES: [u64; 3] = [40, 300, 2_000];
    const IDLE_MS: u64 = 500;

    fn op() -> impl Strategy<Value = Op> {
        let who = 0..4usize;
        let lease = prop::sample::select(LEASES.to_vec());
        prop_oneof![
            (who.clone(), lease.clone(), 1..3u32).prop_map(|(who, lease_ms, max_leaders)| {
                Op::Acquire { who, lease_ms, max_leaders }
            }),
            (who.clone(), lease).prop_map(|(who, lease_ms)| Op::Renew { who, lease_ms }),
            (who, prop::sample::select(vec![0u64, 100]))
                .prop_map(|(who, min_lease_ms)| Op::Release { who, min_lease_ms }),
            Just(Op::State),
            Just(Op::Watch),
            (0..60u64).prop_map(|ms| Op::Sleep { ms }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn every_key_carries_a_bounded_ttl_after_any_operations(
            ops in proptest::collection::vec(op(), 1..25)
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let server = RedisServer::start();
                let store = RedisStore::builder(server.url())
                    .idle_group_ttl(Duration::from_millis(IDLE_MS))
                    .connect()
                    .await
                    .unwrap();
                let tokens: Vec<LeaseToken> = (0..4).map(|_| token()).collect();
                let key = "leader:lifetimes";
                for (step, op) in ops.iter().enumerate() {
                    match *op {
                        Op::Acquire { who, lease_ms, max_leaders } => {
                            let request = request_for(key, max_leaders, tokens[who], Duration::from_millis(lease_ms));
                            // Another N while slots live is refused: fine, nothing is written.
                            let _ = store.acquire(request).await;
                        }
                        Op::Renew { who, lease_ms } => {
                            store.renew(key, tokens[who], Duration::from_millis(lease_ms)).await.unwrap();
                        }
                        Op::Release { who, min_lease_ms } => {
                            store.release(key, tokens[who], Duration::from_millis(min_lease_ms)).await.unwrap();
                        }
                        Op::State => drop(store.state(key).await.unwrap()),
                        // Watched for as long as the longest lease.
                        Op::Watch => store.announce_watcher(key, Duration::from_millis(LEASES[2])).await.unwrap(),
                        Op::Sleep { ms } => sleep(Duration::from_millis(ms)).await,
                    }
                    // PTTL is 0 in the millisecond a key expires in (it is deleted on the
                    // next look), -2 once gone, -1 for a key without an expiry.
                    let longest = LEASES[2] + IDLE_MS;
                    for name in server.cli(&["KEYS", "*"]).lines().filter(|k| !k.is_empty()) {
                        let ttl: i64 = server.cli(&["PTTL", name]).parse().unwrap();
                        assert!(
                            ttl == -2 || (0 <= ttl && ttl as u64 <= longest),
                            "step {step} ({op:?}): {name} has TTL {ttl} ms\nops: {ops:?}"
                        );
                    }
                }
            });
        }
    }
}

/// A watcher's field is never a slot: a live one is left alone and not counted, a lapsed one
/// (a watcher that went without withdrawing) goes with the next grant.
#[tokio::test]
async fn watcher_fields_are_no_slots_and_lapsed_ones_go() {
    let (store, server) = standalone().await;
    let key = "leader:watched-by-many";
    let group = group_key(key);
    server.cli(&[
        "HSET",
        &group,
        "watcher:gone:observers",
        "1",
        "watcher:here:observers",
        "99999999999999",
    ]);
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    let fields = server.cli(&["HKEYS", &group]);
    assert!(!fields.contains("watcher:gone"), "a lapsed watcher's field goes: {fields}");
    assert!(fields.contains("watcher:here"), "a live one stays: {fields}");
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1, "no watcher counts as a slot");
    let refused = store.acquire(request(key, 1, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");
}
