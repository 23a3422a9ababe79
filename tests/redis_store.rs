//! `RedisStore` against real `redis-server` processes that the tests start themselves: the
//! conformance suite, the calls it sends, its errors and its deadlines. What it writes is in
//! `redis_keys.rs`, what it publishes in `redis_events.rs`, server faults in `redis_faults.rs`.

use leader_testkit::conformance_suite;
mod support;

use std::collections::HashMap;
use std::time::Duration;

use leader::store::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use leader::{Error, LeaderElectionOptions, LeaderElector, LeaseStore, LossReason, RedisStore};
use support::proxy::Proxy;
use support::redis::{group_key, round_trips, slot_records, standalone};
use support::redis_server::RedisServer;
use support::{granted_fence, request, token};
use tokio::time::{Instant, sleep, timeout};

const SECOND: Duration = Duration::from_secs(1);

// The scripts floor the server's clock to whole milliseconds: a slot's times may read up
// to 1 ms early against this process's clock.
conformance_suite!(
    #[tokio::test]
    standalone(),
    lease = SECOND,
    tick = Duration::from_millis(1)
);

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
    let first_fence: u64 =
        server.cli(&["HGET", &group_key("leader:lossy"), "fence"]).parse().unwrap();
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
        server.cli(&["HGET", &group_key("leader:lossy-elector"), "fence"]),
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
    let contest = support::Contest {
        // Generous: a candidate skipped on a busy machine would count as no election.
        wait_time: 10 * SECOND,
        hold,
        until: support::Until::Rounds(10),
        ..support::Contest::new("shared-pool", 3, 6)
    };
    let seen = contest.run(&stores).await;
    assert!(seen.errors.is_empty(), "{:?}", seen.errors);
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
    // Renewed every second: a lease of 3 s outlives a stall of a busy machine, and the body
    // outlives two leases.
    let options = LeaderElectionOptions::new().lease_time(3 * SECOND).auto_extend(true);
    let elector = LeaderElector::new(store.clone(), options).unwrap();
    let result = elector
        .run_if_leader("extended", |lease| async move {
            sleep(7 * SECOND).await;
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
    timeout(5 * SECOND, watch.woken()).await.expect("woken through an authenticated subscription");

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
