//! `RedisStore` against real `redis-server` processes that the tests start themselves.

mod conformance;
mod support;

use support::redis_server::RedisServer;
use support::{granted_fence, request, request_for, token};

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

use std::collections::HashMap;
use std::time::Duration;

use leader::store::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use leader::{Error, LeaderElectionOptions, LeaderElector, LeaseStore, LeaseToken, LossReason};
use support::proxy::Proxy;
use tokio::time::{Instant, sleep, timeout};

const SECOND: Duration = Duration::from_secs(1);

/// Live and expired slots recorded for `key` on `server`: the group hash's fields other than
/// the bookkeeping ones.
fn slot_records(server: &RedisServer, key: &str) -> usize {
    let fields = server.cli(&["HKEYS", &format!("{{{key}}}:group")]);
    let bookkeeping = ["", "max", "fence", "waiting", "watched"];
    fields.lines().filter(|field| !bookkeeping.contains(field)).count()
}

/// The client-sent commands an operation cost, read from the server.
async fn round_trips<F: Future>(
    server: &RedisServer,
    operation: F,
) -> (F::Output, HashMap<String, u64>) {
    server.cli(&["CONFIG", "RESETSTAT"]);
    let output = operation.await;
    (output, server.client_commands())
}

#[tokio::test]
async fn every_operation_is_one_round_trip() {
    let (store, server) = standalone().await;
    let key = "leader:round-trips";
    let one_evalsha = HashMap::from([("evalsha".to_owned(), 1)]);
    // Warm up the connection and the script cache: each script's first use on a server
    // costs one more round trip (EVALSHA answered NOSCRIPT, then EVAL).
    let held = token();
    store.acquire(request(key, 1, held)).await.unwrap();
    store.renew(key, held, 10 * SECOND).await.unwrap();
    store.state(key).await.unwrap();
    store.release("leader:elsewhere", held, Duration::ZERO).await.unwrap();

    let (outcome, sent) = round_trips(&server, store.acquire(request(key, 1, held))).await;
    assert!(matches!(outcome.unwrap(), AcquireOutcome::Granted(_)));
    assert_eq!(sent, one_evalsha, "acquire (idempotent retry)");
    let (outcome, sent) = round_trips(&server, store.acquire(request(key, 1, token()))).await;
    assert!(matches!(outcome.unwrap(), AcquireOutcome::Full { .. }));
    assert_eq!(sent, one_evalsha, "a failed attempt");
    let (outcome, sent) = round_trips(&server, store.renew(key, held, 10 * SECOND)).await;
    assert!(matches!(outcome.unwrap(), RenewOutcome::Renewed { .. }));
    assert_eq!(sent, one_evalsha, "renew");
    let (outcome, sent) = round_trips(&server, store.state(key)).await;
    assert_eq!(outcome.unwrap().leaders.len(), 1);
    assert_eq!(sent, one_evalsha, "state");
    let (outcome, sent) = round_trips(&server, store.release(key, held, Duration::ZERO)).await;
    assert_eq!(outcome.unwrap(), ReleaseOutcome::Released);
    assert_eq!(sent, one_evalsha, "release");
    let (outcome, sent) = round_trips(&server, store.acquire(request(key, 1, token()))).await;
    assert!(matches!(outcome.unwrap(), AcquireOutcome::Granted(_)));
    assert_eq!(sent, one_evalsha, "a fresh grant");
}

#[tokio::test]
async fn script_flush_mid_run_reloads_the_scripts() {
    let (store, server) = standalone().await;
    let key = "leader:flushed";
    let held = token();
    store.acquire(request(key, 2, held)).await.unwrap();
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    let (outcome, sent) = round_trips(&server, store.renew(key, held, 10 * SECOND)).await;
    assert!(matches!(outcome.unwrap(), RenewOutcome::Renewed { .. }));
    assert_eq!(sent, HashMap::from([("evalsha".to_owned(), 1), ("eval".to_owned(), 1)]));
    let (outcome, sent) = round_trips(&server, store.renew(key, held, 10 * SECOND)).await;
    assert!(matches!(outcome.unwrap(), RenewOutcome::Renewed { .. }));
    assert_eq!(sent, HashMap::from([("evalsha".to_owned(), 1)]), "cached again after EVAL");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn a_key_of_another_type_is_reported_and_left_alone() {
    let (store, server) = standalone().await;
    server.cli(&["SET", "{leader:taken}:group", "someone else's"]);
    server.cli(&["LPUSH", "{leader:listed}:group", "x"]);
    for (key, offending) in [
        ("leader:taken", "{leader:taken}:group is a string"),
        ("leader:listed", "{leader:listed}:group is a list"),
    ] {
        let err = store.acquire(request(key, 1, token())).await.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{key}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(offending) && message.contains(key), "{message}");
        assert!(!err.is_transient());
    }
    assert_eq!(server.cli(&["GET", "{leader:taken}:group"]), "someone else's");
    assert_eq!(server.cli(&["LRANGE", "{leader:listed}:group", "0", "-1"]), "x");
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
    let short = request_for(key, 2, crashed, Duration::from_millis(50));
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
    assert_eq!(keys(&server), ["{leader:tidy}:group"], "one key per group");
    let group_ttl: i64 = server.cli(&["PTTL", "{leader:tidy}:group"]).parse().unwrap();
    assert!(group_ttl > 10_000, "the group outlives its longest slot: {group_ttl} ms");
    let refused = store.acquire(request(key, 2, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");
    assert_eq!(keys(&server), ["{leader:tidy}:full", "{leader:tidy}:group"], "refused: marked");
    // -2 once it expired (a busy machine can take 50 ms to get here): also before the expiry.
    let marked: i64 = server.cli(&["PTTL", "{leader:tidy}:full"]).parse().unwrap();
    assert!(marked < 50, "the marker ends before the nearest expiry: {marked} ms");
    let waiting = || server.cli(&["HEXISTS", "{leader:tidy}:group", "waiting"]);
    assert_eq!(waiting(), "1", "a refusal marks the group as waited on");
    assert_eq!(
        store.release(key, released, Duration::ZERO).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(keys(&server), ["{leader:tidy}:group"], "a group that is not full is one key");
    assert_eq!(waiting(), "0", "the release that woke the candidate clears the mark");
    sleep(Duration::from_millis(100)).await; // the crashed holder's slot expires, unreleased
    assert_eq!(slot_records(&server, key), 1, "the expired record waits for the next grant");
    let next = token();
    let AcquireOutcome::Granted(grant) = store.acquire(request(key, 2, next)).await.unwrap() else {
        panic!("refused")
    };
    assert_eq!(slot_records(&server, key), 1, "the grant deleted the expired record");
    assert_eq!(store.release(key, next, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    let mut fields: Vec<String> =
        server.cli(&["HKEYS", "{leader:tidy}:group"]).lines().map(str::to_owned).collect();
    fields.sort();
    assert_eq!(fields, ["fence", "max"], "an idle group keeps its max and last fence");
    let fence: u64 = server.cli(&["HGET", "{leader:tidy}:group", "fence"]).parse().unwrap();
    assert_eq!(fence, grant.fence);
}

/// Every command the server ran since the last reset, including those scripts ran.
fn all_commands(server: &RedisServer) -> HashMap<String, u64> {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            Some((name.to_owned(), stats.strip_prefix("calls=")?.split(',').next()?.parse().ok()?))
        })
        .collect()
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
    let marker_ms =
        |key: &str| -> i64 { server.cli(&["PTTL", &format!("{{{key}}}:full")]).parse().unwrap() };
    let soon = Duration::from_millis(200);

    // A renewal with a shorter lease than the slot had left.
    let (key, held) = ("leader:renewed-shorter", token());
    hold_and_mark_full(&store, key, held).await;
    assert!(marker_ms(key) > 9_000);
    assert!(matches!(store.renew(key, held, soon).await.unwrap(), RenewOutcome::Renewed { .. }));
    assert!((0..200).contains(&marker_ms(key)), "{}", marker_ms(key));
    sleep(soon + Duration::from_millis(20)).await;
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());

    // A release kept until the minimum lease ends.
    let (key, held) = ("leader:kept", token());
    hold_and_mark_full(&store, key, held).await;
    assert!(marker_ms(key) > 9_000);
    assert!(matches!(store.release(key, held, soon).await.unwrap(), ReleaseOutcome::Kept { .. }));
    assert!((0..200).contains(&marker_ms(key)), "{}", marker_ms(key));
    sleep(soon + Duration::from_millis(20)).await;
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());
}

#[tokio::test]
async fn a_foreign_key_where_the_marker_goes_is_reported_and_left_alone() {
    let (store, server) = standalone().await;
    server.cli(&["SET", "{leader:squatted}:full", "someone else's"]);
    let err = store.acquire(request("leader:squatted", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert!(err.to_string().contains("{leader:squatted}:full is a string"), "{err}");
    assert_eq!(server.cli(&["GET", "{leader:squatted}:full"]), "someone else's");
    assert_eq!(server.cli(&["EXISTS", "{leader:squatted}:group"]), "0", "nothing was written");
}

#[tokio::test]
async fn a_foreign_string_with_a_ttl_where_the_marker_goes_is_reported_and_left_alone() {
    let (store, server) = standalone().await;
    server.cli(&["SET", "{leader:squatted}:full", "someone else's", "PX", "60000"]);
    let err = store.acquire(request("leader:squatted", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(server.cli(&["GET", "{leader:squatted}:full"]), "someone else's");
    let ttl: i64 = server.cli(&["PTTL", "{leader:squatted}:full"]).parse().unwrap();
    assert!(ttl > 50_000, "its TTL was left alone: {ttl} ms");
    assert_eq!(server.cli(&["EXISTS", "{leader:squatted}:group"]), "0", "nothing was written");
}

#[tokio::test]
async fn renewals_and_releases_never_touch_a_foreign_key_where_the_marker_goes() {
    let (store, server) = standalone().await;
    let (key, held) = ("leader:collided", token());
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    server.cli(&["SET", "{leader:collided}:full", "someone else's"]);
    let shorter = store.renew(key, held, Duration::from_secs(1)).await.unwrap();
    assert!(matches!(shorter, RenewOutcome::Renewed { .. }), "{shorter:?}");
    assert_eq!(server.cli(&["PTTL", "{leader:collided}:full"]), "-1", "given no expiry");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(server.cli(&["GET", "{leader:collided}:full"]), "someone else's", "not deleted");
}

/// The commands scripts ran since the last reset, by name (what clients sent left out).
fn commands_inside_scripts(server: &RedisServer) -> HashMap<String, u64> {
    let sent = ["evalsha", "eval", "info", "config|resetstat"];
    all_commands(server).into_iter().filter(|(name, _)| !sent.contains(&name.as_str())).collect()
}

/// Command counts by name, to compare with [`commands_inside_scripts`].
fn counts<const N: usize>(named: [(&str, u64); N]) -> HashMap<String, u64> {
    named.into_iter().map(|(name, calls)| (name.to_owned(), calls)).collect()
}

#[tokio::test]
async fn a_cycle_nobody_waits_for_or_watches_publishes_nothing() {
    let (store, server) = standalone().await;
    let key = "leader:quiet";
    let warm = token(); // the scripts loaded
    granted_fence(store.acquire(request(key, 1, warm)).await.unwrap());
    store.release(key, warm, Duration::ZERO).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..10 {
        let held = token();
        granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
        assert_eq!(
            store.release(key, held, Duration::ZERO).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    // A grant looks for the full marker, reads the clock and the group, writes the record
    // and the group's expiry; a release reads the clock and its record and deletes it.
    // Nothing else, nothing published.
    let per_cycle = counts([
        ("get", 10),
        ("time", 20),
        ("hgetall", 10),
        ("hset", 10),
        ("pexpire", 10),
        ("hmget", 10),
        ("hdel", 10),
    ]);
    assert_eq!(commands_inside_scripts(&server), per_cycle);
}

#[tokio::test]
async fn releases_and_shortening_renewals_publish_while_a_refused_candidate_may_wait() {
    let (store, server) = standalone().await;
    let key = "leader:waited-on";
    let published = || commands_inside_scripts(&server).get("publish").copied().unwrap_or(0);
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(matches!(store.renew(key, held, SECOND).await.unwrap(), RenewOutcome::Renewed { .. }));
    assert_eq!(published(), 0, "nobody was refused: a shorter lease wakes nobody");
    let refused = store.acquire(request(key, 1, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");
    assert!(matches!(
        store.renew(key, held, Duration::from_millis(500)).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(published(), 1, "the refused candidate waits for the old expiry: woken");
    assert!(matches!(store.renew(key, held, SECOND).await.unwrap(), RenewOutcome::Renewed { .. }));
    assert_eq!(published(), 1, "a longer lease frees nothing sooner");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(published(), 2, "the release wakes the candidate");
    let next = token();
    granted_fence(store.acquire(request(key, 1, next)).await.unwrap());
    assert_eq!(store.release(key, next, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(published(), 2, "the woken candidate no longer waits: the next release is silent");
}

#[tokio::test]
async fn a_grant_clears_the_mark_of_a_candidate_an_expiry_woke() {
    let (store, server) = standalone().await;
    let key = "leader:expired-under-waiter";
    let short = request_for(key, 1, token(), Duration::from_millis(100));
    granted_fence(store.acquire(short).await.unwrap());
    assert!(matches!(
        store.acquire(request(key, 1, token())).await.unwrap(),
        AcquireOutcome::Full { .. }
    ));
    let waiting = || server.cli(&["HEXISTS", "{leader:expired-under-waiter}:group", "waiting"]);
    assert_eq!(waiting(), "1");
    // The refused candidate's timer ends at the expiry, which frees the slot.
    sleep(Duration::from_millis(150)).await;
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());
    assert_eq!(waiting(), "0", "every candidate refused before was woken by the expiry");
}

#[tokio::test]
async fn a_watcher_gets_grants_and_releases_published_for_as_long_as_it_asked() {
    let (store, server) = standalone().await;
    let key = "leader:watched";
    let layout = RedisStore::group_layout(key).unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(&[&layout.grant_channel, &layout.release_channel]).await.unwrap();
    let mut messages = pubsub.into_on_message();
    use futures_util::StreamExt;

    store.announce_watcher(key, Duration::from_millis(400)).await.unwrap();
    let ttl: i64 = server.cli(&["PTTL", &layout.group]).parse().unwrap();
    assert!(ttl > 0, "the hash the watcher made expires: {ttl}");
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    store.release(key, held, Duration::ZERO).await.unwrap();
    for channel in [&layout.grant_channel, &layout.release_channel] {
        let message = timeout(5 * SECOND, messages.next()).await.unwrap().unwrap();
        assert_eq!(message.get_channel_name(), channel.as_str());
    }
    sleep(Duration::from_millis(450)).await;
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    store.release(key, held, Duration::ZERO).await.unwrap();
    assert!(
        timeout(Duration::from_millis(300), messages.next()).await.is_err(),
        "nothing is published once the watch ran out"
    );

    for bad in [Duration::ZERO, Duration::from_secs(86_401)] {
        let err = store.announce_watcher(key, bad).await.unwrap_err();
        assert!(err.to_string().contains("duration"), "{err}");
    }
}

#[tokio::test]
async fn every_key_carries_a_ttl_and_an_idle_group_disappears() {
    let server = RedisServer::start();
    let idle = Duration::from_millis(400);
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
    let group_ttl: i64 = server.cli(&["PTTL", "{report-tenant-7}:group"]).parse().unwrap();
    assert!(group_ttl > 5_000, "the group outlives its longest slot: {group_ttl} ms");
    let short_lease = request_for(key, 3, short, Duration::from_millis(100));
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
    let group_ttl: i64 = server.cli(&["PTTL", "{report-tenant-7}:group"]).parse().unwrap();
    assert!(group_ttl > 20_000, "a renewal extends the group: {group_ttl} ms");
    store.release(key, kept, Duration::from_millis(300)).await.unwrap();
    every_key_expires("a kept release");
    store.release(key, long, Duration::ZERO).await.unwrap();
    store.state(key).await.unwrap();
    every_key_expires("a release");
    // The renewal put the group's expiry 20 s + idle ahead, and a release never shortens
    // it; once the kept (300 ms) and the crashed (100 ms) slots have ended, the next grant
    // sets it from the live slots again.
    sleep(Duration::from_millis(350)).await;
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

#[tokio::test]
async fn a_flushed_script_cache_is_refilled_once_however_many_callers_find_it_empty() {
    let (store, server) = standalone().await;
    granted_fence(store.acquire(request("leader:warm", 1, token())).await.unwrap());
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    server.cli(&["CONFIG", "RESETSTAT"]);
    let keys: Vec<String> = (0..64).map(|i| format!("leader:storm-{i}")).collect();
    let acquires = keys.iter().map(|key| store.acquire(request(key, 1, token())));
    for outcome in futures_util::future::join_all(acquires).await {
        granted_fence(outcome.unwrap());
    }
    let sent = server.client_commands();
    assert_eq!(sent.get("eval"), Some(&1), "one EVAL refills the cache: {sent:?}");
}

/// A server that answers `INFO` as Redis `version` would, and every other command `+OK`.
async fn server_reporting(version: &'static str) -> u16 {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (reader, mut writer) = socket.into_split();
                let mut reader = BufReader::new(reader);
                let mut line = String::new();
                // Each command is an array of bulk strings: `*N`, then N times `$len` and data.
                while reader.read_line(&mut line).await.unwrap_or(0) > 0 {
                    let count: usize = line.trim().trim_start_matches('*').parse().unwrap_or(0);
                    let mut args = Vec::new();
                    for _ in 0..count {
                        line.clear();
                        reader.read_line(&mut line).await.unwrap();
                        let len: usize = line.trim().trim_start_matches('$').parse().unwrap();
                        let mut data = vec![0; len + 2];
                        reader.read_exact(&mut data).await.unwrap();
                        args.push(String::from_utf8_lossy(&data[..len]).into_owned());
                    }
                    let reply = if args.first().is_some_and(|a| a.eq_ignore_ascii_case("INFO")) {
                        let body = format!("# Server\r\nredis_version:{version}\r\n");
                        format!("${}\r\n{body}\r\n", body.len())
                    } else {
                        "+OK\r\n".to_owned()
                    };
                    writer.write_all(reply.as_bytes()).await.unwrap();
                    line.clear();
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_server_older_than_redis_7_is_refused_with_a_clear_error() {
    let url = format!("redis://127.0.0.1:{}", server_reporting("6.2.14").await);
    let err = RedisStore::connect(&url).await.unwrap_err();
    assert!(matches!(err, Error::UnsupportedServer { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "redis server version 6.2.14 is not supported: the Redis store needs Redis 7.0 or later, \
         or Valkey"
    );
    assert!(!err.is_transient());
    // A store built without connecting refuses on its first call.
    let store = RedisStore::builder(url).build().unwrap();
    let err = store.acquire(request("leader:old", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::UnsupportedServer { .. }), "{err:?}");

    let url = format!("redis://127.0.0.1:{}", server_reporting("7.0.0").await);
    RedisStore::connect(&url).await.expect("7.0 is enough");
}

#[tokio::test]
async fn fences_keep_increasing_after_the_server_loses_its_data() {
    let (store, mut server) = standalone().await;
    let key = "leader:amnesia";
    let mut last = 0;
    for round in 0..3 {
        let held = token();
        let fence = match store.acquire(request(key, 1, held)).await.unwrap() {
            AcquireOutcome::Granted(grant) => grant.fence,
            other => panic!("round {round}: {other:?}"),
        };
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        last = fence;
        server.restart();
        assert_eq!(server.cli(&["DBSIZE"]), "0", "restarted without its data");
        // The store finds its connection closed and retries once on a new one.
        assert!(store.state(key).await.unwrap().leaders.is_empty());
    }
}

#[tokio::test]
async fn an_acquire_whose_reply_was_lost_is_granted_again_to_the_retry() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let store = RedisStore::connect(&proxy.url()).await.unwrap();
    let key = "leader:lossy";
    let retried = token();
    store.acquire(request("leader:warm-up", 1, token())).await.unwrap(); // script cached
    proxy.drop_replies(true);
    let err = store.acquire(request(key, 2, retried)).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    proxy.drop_replies(false);
    assert_eq!(slot_records(&server, "leader:lossy"), 1, "the script ran");
    let first_fence: u64 = server.cli(&["HGET", "{leader:lossy}:group", "fence"]).parse().unwrap();
    let AcquireOutcome::Granted(grant) = store.acquire(request(key, 2, retried)).await.unwrap()
    else {
        panic!("the retry was refused");
    };
    assert_eq!(grant.fence, first_fence, "the retry got the same grant");
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1, "no second slot");
}

#[tokio::test]
async fn an_elector_releases_a_slot_whose_grant_reply_was_lost() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let store = RedisStore::connect(&proxy.url()).await.unwrap();
    let elector =
        LeaderElector::new(store, LeaderElectionOptions::new().lease_time(60 * SECOND)).unwrap();
    assert!(elector.run_if_leader("warm-up", |_| async {}).await.unwrap().is_elected());
    proxy.drop_replies(true);
    let err = elector.run_if_leader("lossy-elector", |_| async {}).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    proxy.drop_replies(false);
    assert_ne!(
        server.cli(&["HGET", "{leader:lossy-elector}:group", "fence"]),
        "",
        "the grant was made"
    );
    support::eventually(5 * SECOND, "the background release frees the slot", || async {
        slot_records(&server, "leader:lossy-elector") == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_candidates_on_many_connections_never_exceed_max_leaders() {
    let server = RedisServer::start();
    let mut stores = Vec::new();
    for _ in 0..6 {
        stores.push(RedisStore::connect(&server.url()).await.unwrap()); // a connection each
    }
    let hold = Duration::from_millis(2);
    let seen =
        support::contend_for_a_group_of_three(&stores, 6, 10, "shared-pool", 2 * SECOND, hold)
            .await;
    let most = seen.most_at_once;
    assert!(most <= 3, "{most} holders at once in a group of 3");
    assert_eq!(most, 3, "36 candidates never filled the group");
    assert!(seen.elected > 30, "only {} elections", seen.elected);
    assert_eq!(slot_records(&server, "leader:shared-pool"), 0, "slots left behind");
}

#[tokio::test]
async fn a_release_in_one_process_wakes_a_waiter_in_another() {
    let server = RedisServer::start();
    let (holder_store, waiter_store) = (
        RedisStore::connect(&server.url()).await.unwrap(),
        RedisStore::connect(&server.url()).await.unwrap(),
    );
    let options = LeaderElectionOptions::new().lease_time(60 * SECOND).wait_time(20 * SECOND);
    let holder = LeaderElector::new(holder_store, options.clone()).unwrap();
    let waiter = LeaderElector::new(waiter_store, options).unwrap();
    let (in_body_tx, in_body_rx) = tokio::sync::oneshot::channel();
    let holding = tokio::spawn(async move {
        holder
            .run_if_leader("handover", |_| async move {
                in_body_tx.send(()).unwrap();
                sleep(Duration::from_millis(300)).await;
                Instant::now()
            })
            .await
    });
    in_body_rx.await.unwrap();
    let result = waiter.run_if_leader("handover", |_| async { Instant::now() }).await.unwrap();
    let elected_at = result.elected().expect("the waiter was elected");
    let released_at = holding.await.unwrap().unwrap().elected().unwrap();
    let gap = elected_at.saturating_duration_since(released_at);
    // The holder's lease had 59 s left: only the release message can explain this.
    assert!(gap < 5 * SECOND, "woken {gap:?} after the release");
}

#[tokio::test]
async fn auto_extend_and_loss_work_on_redis() {
    let (store, _server) = standalone().await;
    let options =
        LeaderElectionOptions::new().lease_time(Duration::from_millis(600)).auto_extend(true);
    let elector = LeaderElector::new(store.clone(), options).unwrap();
    let result = elector
        .run_if_leader("extended", |lease| async move {
            sleep(Duration::from_millis(1_500)).await;
            let survived = !lease.is_lost();
            store.release(lease.key(), lease.token(), Duration::ZERO).await.unwrap();
            timeout(5 * SECOND, lease.lost()).await.expect("loss noticed at the next renewal");
            (survived, lease.loss_reason())
        })
        .await
        .unwrap();
    assert_eq!(result.elected(), Some((true, Some(LossReason::Refused))));
}

#[tokio::test]
async fn bad_urls_and_unreachable_servers_are_clear_errors() {
    let err = RedisStore::connect("http://user:hunter2@localhost").await.unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with("invalid `url`"), "{message}");
    assert!(!message.contains("hunter2"), "password leaked: {message}");

    let port = support::redis_server::free_port();
    let err =
        RedisStore::connect(&format!("redis://app:hunter2@127.0.0.1:{port}")).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("hunter2"));

    let store =
        RedisStore::builder(format!("redis://app:hunter2@127.0.0.1:{port}/0")).build().unwrap();
    let shown = format!("{store:?} {store}");
    assert!(shown.contains("app:***@127.0.0.1") && !shown.contains("hunter2"), "{shown}");
    let err = store.state("leader:x").await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { operation: "state", .. }), "{err:?}");
}

#[tokio::test]
async fn keys_with_braces_are_refused() {
    let (store, _server) = standalone().await;
    let err = store.acquire(request("leader:{tagged}", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::InvalidKey { .. }), "{err:?}");
    assert!(err.to_string().contains("hash tag"), "{err}");
}

#[tokio::test]
async fn a_paused_server_times_out_and_the_store_recovers() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    store.state("leader:paused").await.unwrap();
    server.pause();
    let err = store.acquire(request("leader:paused", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { operation: "acquire", .. }), "{err:?}");
    server.resume();
    support::eventually(5 * SECOND, "the store answers again", || async {
        store.state("leader:paused").await.is_ok()
    })
    .await;
}

#[tokio::test]
async fn a_server_demoted_to_replica_gives_transient_errors_not_a_stuck_store() {
    let (store, server) = standalone().await;
    let other = RedisServer::start();
    store.acquire(request("leader:demoted", 1, token())).await.unwrap();
    server.cli(&["REPLICAOF", "127.0.0.1", &other.port.to_string()]);
    support::eventually(5 * SECOND, "the server is a read-only replica", || async {
        server.cli(&["ROLE"]).starts_with("slave")
    })
    .await;
    let err = store.acquire(request("leader:demoted-2", 1, token())).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    let source = std::error::Error::source(&err).map(ToString::to_string).unwrap_or_default();
    assert!(source.to_lowercase().contains("read only"), "{source}");
    // Promoted again, the same store carries on without a restart.
    server.cli(&["REPLICAOF", "NO", "ONE"]);
    let outcome = store.acquire(request("leader:demoted-2", 1, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Granted(_)), "{outcome:?}");
}

/// A primary and a replica of it that has synced.
async fn primary_with_a_synced_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    support::eventually(10 * SECOND, "the replica syncs", || async {
        replica.cli(&["INFO", "replication"]).contains("master_link_status:up")
    })
    .await;
    (primary, replica)
}

#[tokio::test]
async fn replica_acknowledgement_fails_and_releases_an_unreplicated_grant() {
    let (primary, replica) = primary_with_a_synced_replica().await;
    // Generous for the replica that answers (a loaded machine delays its ack); the paused
    // one is waited for this long, once.
    let store = RedisStore::builder(primary.url()).replica_ack(1, 2 * SECOND).build().unwrap();
    let outcome = store.acquire(request("leader:replicated", 1, token())).await.unwrap();
    assert!(matches!(outcome, AcquireOutcome::Granted(_)), "{outcome:?}");
    assert_eq!(slot_records(&replica, "leader:replicated"), 1);

    replica.pause();
    let err = store.acquire(request("leader:unreplicated", 1, token())).await.unwrap_err();
    replica.resume();
    assert!(matches!(err, Error::NotReplicated { acknowledged: 0, required: 1, .. }), "{err:?}");
    assert!(err.is_transient());
    assert_eq!(slot_records(&primary, "leader:unreplicated"), 0, "released");

    let err = RedisStore::builder(primary.url()).replica_ack(0, SECOND).build().unwrap_err();
    assert!(
        err.to_string().starts_with("invalid `replica_ack` 0: must be at least 1 replica"),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreplicated_grant_is_reported_as_such_even_when_giving_it_back_fails() {
    let (primary, replica) = primary_with_a_synced_replica().await;
    let store = RedisStore::builder(primary.url())
        .command_timeout(Duration::from_millis(300))
        .replica_ack(1, Duration::from_millis(600))
        .build()
        .unwrap();
    store.state("leader:warm-up").await.unwrap();
    replica.pause();
    // While the grant waits for the replica, the primary stops taking writes (scripts
    // included) for longer than the command timeout: the compensating release fails.
    let acquire = store.acquire(request("leader:unreleased", 1, token()));
    let pause_writes = async {
        sleep(Duration::from_millis(200)).await;
        primary.cli(&["CLIENT", "PAUSE", "2000", "WRITE"]);
    };
    let (outcome, ()) = tokio::join!(acquire, pause_writes);
    replica.resume();
    let err = outcome.unwrap_err();
    assert!(matches!(err, Error::NotReplicated { acknowledged: 0, required: 1, .. }), "{err:?}");
}

#[tokio::test]
async fn acl_user_and_password_come_from_the_url_and_never_show() {
    let server = RedisServer::start_with(&[
        "--user",
        "default",
        "off",
        "--user",
        "app",
        "on",
        ">s3cret-pass",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = server.port;
    let store =
        RedisStore::connect(&format!("redis://app:s3cret-pass@127.0.0.1:{port}")).await.unwrap();
    assert!(!format!("{store:?}").contains("s3cret-pass"), "{store:?}");
    // Scripts and the release subscription both authenticate.
    let held = token();
    store.acquire(request("leader:acl", 1, held)).await.unwrap();
    let mut watch = store.watch_releases("leader:acl").await.unwrap();
    let refused = store.acquire(request("leader:acl", 1, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "a candidate that will wait");
    store.release("leader:acl", held, Duration::ZERO).await.unwrap();
    timeout(5 * SECOND, watch.released())
        .await
        .expect("woken through an authenticated subscription");

    let err =
        RedisStore::connect(&format!("redis://app:wrong-pass@127.0.0.1:{port}")).await.unwrap_err();
    let shown = format!("{err} {err:?} {:?}", std::error::Error::source(&err));
    assert!(!shown.contains("wrong-pass"), "{shown}");
}

#[tokio::test]
async fn a_script_error_from_the_server_is_a_clear_error_and_takes_no_slot() {
    let (store, server) = standalone().await;
    store.state("leader:warm").await.unwrap(); // connection and script cache ready
    // A user the server's ACL forbids HSET fails the grant's write inside the script.
    server.cli(&["ACL", "SETUSER", "default", "-hset"]);
    let err = store.acquire(request("leader:denied", 1, token())).await.unwrap_err();
    server.cli(&["ACL", "SETUSER", "default", "+hset"]);
    assert!(matches!(err, Error::Store { operation: "acquire", .. }), "{err:?}");
    // Redis: "The user executing the script can't run this command"; Valkey: "ACL failure in
    // script: User default has no permissions to run the 'hset' command".
    let shown = err.to_string();
    assert!(shown.contains("can't run this command") || shown.contains("no permissions"), "{err}");
    assert_eq!(slot_records(&server, "leader:denied"), 0, "no slot was left behind");
    assert!(matches!(
        store.acquire(request("leader:denied", 1, token())).await.unwrap(),
        AcquireOutcome::Granted(_)
    ));
}

#[tokio::test]
async fn a_full_group_still_refuses_on_a_server_out_of_memory() {
    let (store, server) = standalone().await;
    let key = "leader:oom-full";
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    // The scripts carry `allow-oom`: the refusal is a refusal, and marks the group full
    // and waited on as ever (a few bytes), so the release that follows wakes its waiter.
    let refused = store.acquire(request(key, 1, token())).await;
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(matches!(refused, Ok(AcquireOutcome::Full { .. })), "{refused:?}");
    let layout = RedisStore::group_layout(key).unwrap();
    assert_eq!(server.cli(&["EXISTS", &layout.full]), "1");
    assert_eq!(server.cli(&["HEXISTS", &layout.group, "waiting"]), "1");
}

#[tokio::test]
async fn an_exhausted_pool_is_a_timeout_not_a_hang() {
    let server = RedisServer::start();
    let mut config = deadpool_redis::Config::from_url(server.url());
    config.pool = Some(deadpool_redis::PoolConfig::new(1));
    let pool = config.create_pool(Some(deadpool_redis::Runtime::Tokio1)).unwrap();
    let _taken = pool.get().await.unwrap(); // the application holds the only connection
    let store = RedisStore::pool_builder(pool, redis::Client::open(server.url()).unwrap())
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = store.acquire(request("leader:starved", 1, token())).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { operation: "acquire", .. }), "{err:?}");
    assert!(err.is_transient());
    assert!(started.elapsed() < 5 * SECOND);
    assert_eq!(slot_records(&server, "leader:starved"), 0);
}

/// The local deadline never falls after the store's expiry. The server floors its clock to
/// whole milliseconds, and the client counts the deadline from before it sent the request;
/// the server runs on this machine's clock, so the two compare at microsecond resolution.
#[tokio::test]
async fn a_local_deadline_never_falls_after_the_stores_expiry() {
    use std::time::SystemTime;
    let (store, _server) = standalone().await;
    let mut late = Vec::new();
    for _ in 0..300 {
        let held = token();
        let sent = SystemTime::now();
        let grant = match store.acquire(request("deadline", 1, held)).await.unwrap() {
            AcquireOutcome::Granted(grant) => grant,
            full => panic!("{full:?}"),
        };
        if let Ok(after) = (sent + grant.expires_in).duration_since(grant.expires_at) {
            late.push(("grant", after));
        }
        let sent = SystemTime::now();
        match store.renew("deadline", held, 10 * SECOND).await.unwrap() {
            RenewOutcome::Renewed { expires_at, expires_in } => {
                if let Ok(after) = (sent + expires_in).duration_since(expires_at) {
                    late.push(("renewal", after));
                }
            }
            other => panic!("not renewed: {other:?}"),
        }
        store.release("deadline", held, Duration::ZERO).await.unwrap();
    }
    // And as a body sees its lease: the time left, read first, then the wall clock.
    let elector =
        LeaderElector::new(store.clone(), LeaderElectionOptions::new().lease_time(10 * SECOND))
            .unwrap();
    for _ in 0..100 {
        let seen = elector
            .run_if_leader("deadline-body", |lease| async move {
                let remaining = lease.remaining();
                let believed_until = std::time::SystemTime::now() + remaining;
                believed_until.duration_since(lease.expires_at()).ok()
            })
            .await
            .unwrap();
        if let leader::LeaderRunResult::Elected(Some(after)) = seen {
            late.push(("lease", after));
        }
    }
    assert!(late.is_empty(), "{} deadlines after the store's expiry: {late:?}", late.len());
}

/// A reply slower than the Redis client's own 500 ms response timeout is still a reply: the
/// store's command timeout (5 s by default) is the only one.
#[tokio::test]
async fn replies_slower_than_half_a_second_arrive_within_the_command_timeout() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let store = RedisStore::connect(&proxy.url()).await.unwrap();
    proxy.set(support::proxy::Fault::Latency(Duration::from_millis(300))); // 600 ms round trips
    let held = token();
    let granted = store.acquire(request("slow-network", 1, held)).await;
    assert!(matches!(granted, Ok(AcquireOutcome::Granted(_))), "{granted:?}");
    let renewed = store.renew("slow-network", held, 10 * SECOND).await;
    assert!(matches!(renewed, Ok(RenewOutcome::Renewed { .. })), "{renewed:?}");
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
