//! The `leader` command run as a real process against a real `redis-server`.

#[cfg(feature = "etcd")]
#[path = "cli/etcd.rs"]
mod etcd;
#[path = "cli/postgres.rs"]
mod postgres;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{LeaseStore, LeaseToken, RedisStore};
use leader_testkit::redis_server::RedisServer;

fn leader(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leader"))
        .args(["--url", url])
        .args(args)
        .env_remove("LEADER_STORE_URL")
        .output()
        .expect("runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

async fn hold(store: &dyn LeaseStore, key: &str, holder: &str) -> (LeaseToken, u64) {
    let token = LeaseToken::generate().unwrap();
    let request = AcquireRequest::new(
        key,
        std::num::NonZeroU32::new(3).unwrap(),
        token,
        holder,
        Duration::from_secs(60),
    );
    match store.acquire(request).await.unwrap() {
        AcquireOutcome::Granted(grant) => (token, grant.fence),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn state_prints_holders_fences_and_expiry_as_a_table_or_json() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let (_, fence_a) = hold(&store, "leader:thumbnails", "worker-a").await;
    let (_, fence_b) = hold(&store, "leader:thumbnails", "worker-b").await;

    let output = leader(&server.url(), &["state", "thumbnails"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "group thumbnails (key leader:thumbnails): 2 of 3 slots held");
    assert!(
        lines[1].starts_with("HOLDER")
            && lines[1].contains("FENCE")
            && lines[1].contains("EXPIRES IN")
    );
    assert!(lines[2].starts_with("worker-a") && lines[2].contains(&fence_a.to_string()), "{table}");
    // Of a 60 s lease: a busy machine may take seconds to start the command.
    let expires_in: f64 =
        lines[2].rsplit(' ').next().unwrap().trim_end_matches('s').parse().unwrap();
    assert!((30.0..=60.0).contains(&expires_in), "{table}");
    assert!(lines[3].starts_with("worker-b") && lines[3].contains(&fence_b.to_string()), "{table}");

    let output = leader(&server.url(), &["state", "thumbnails", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["active"], 2);
    assert_eq!(json["max_leaders"], 3);
    assert_eq!(json["slots"][0]["holder"], "worker-a");
    assert_eq!(json["slots"][1]["fence"], fence_b);
    assert!(json["slots"][0]["expires_in_ms"].as_u64().unwrap() > 30_000);

    let output = leader(&server.url(), &["state", "nobody"]);
    assert_eq!(stdout(&output), "group nobody (key leader:nobody): no live slots\n");
}

/// A partition set's groups are named as docs/partitions.md names them: the members as
/// `orders/members`, partition 3 as `orders/3`.
#[tokio::test]
async fn a_partition_sets_groups_are_named_as_the_partitions_docs_name_them() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let options = leader::PartitionOptions::new().holder_id("node-a");
    let node = leader::Partitions::start("orders", 4, store, options).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while node.view().owned.len() < 4 {
        assert!(std::time::Instant::now() < deadline, "{:?}", node.view());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let output = leader(&server.url(), &["state", "orders/members", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["slots"][0]["holder"], "node-a [4 partitions]", "{json}");
    let output = leader(&server.url(), &["state", "orders/3", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["slots"][0]["holder"], "node-a", "{json}");
    node.stop().await.unwrap();
}

#[tokio::test]
async fn groups_lists_the_groups_under_a_namespace() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    hold(&store, "billing:leader:invoices", "a").await;
    hold(&store, "billing:leader:reports", "b").await;
    hold(&store, "other:leader:elsewhere", "c").await;
    // Another program's data under a name of the group pattern: skipped with a warning.
    let foreign = RedisStore::group_layout("billing:leader:zz-cache").unwrap().group;
    server.cli(&["SET", &foreign, "not a group"]);
    let output = leader(&server.url(), &["--namespace", "billing:", "groups"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("skipped \"billing:leader:zz-cache\""), "{}", stderr(&output));
    let listing = stdout(&output);
    assert_eq!(
        listing,
        "GROUP     ACTIVE  KEY\ninvoices     1/3  billing:leader:invoices\nreports      1/3  billing:leader:reports\n",
    );
    let output = leader(&server.url(), &["--namespace", "billing:", "groups", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2);
}

/// `release` names a slot by token, fence or holder. By default it keeps the guarantee:
/// the holder's next renewal is refused, and the slot is handed on only at its expiry;
/// `--now` frees it at once.
#[tokio::test]
async fn release_ends_a_slot_named_by_token_fence_or_holder() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let (token, _) = hold(&store, "leader:stuck", "wedged-node").await;
    let (other, _) = hold(&store, "leader:stuck", "worker-b").await;
    let (_, fence_c) = hold(&store, "leader:stuck", "worker-c").await;
    let renew = |token| store.renew("leader:stuck", token, Duration::from_secs(60));

    let output = leader(&server.url(), &["release", "stuck"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--token"), "{}", stderr(&output));

    let stranger = LeaseToken::generate().unwrap().to_string();
    let output = leader(&server.url(), &["release", "stuck", "--token", &stranger]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("not held"), "{}", stderr(&output));
    assert_eq!(store.state("leader:stuck").await.unwrap().leaders.len(), 3, "freed nothing");

    let output = leader(&server.url(), &["release", "stuck", "--token", "xyz"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("32 hex digits"), "{}", stderr(&output));

    // By token: the holder's renewals end, and nobody else gets the slot before it expires.
    let output = leader(&server.url(), &["release", "stuck", "--token", &token.to_string()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("next renewal is refused"), "{}", stdout(&output));
    assert_eq!(renew(token).await.unwrap(), leader::store::RenewOutcome::NotHeld);
    let state = store.state("leader:stuck").await.unwrap();
    assert_eq!(state.leaders.len(), 3, "still taken until its expiry: {state:?}");
    let refused = store
        .acquire(AcquireRequest::new(
            "leader:stuck",
            std::num::NonZeroU32::new(3).unwrap(),
            LeaseToken::generate().unwrap(),
            "newcomer",
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");

    // By holder, the same.
    let output = leader(&server.url(), &["release", "stuck", "--holder", "worker-b"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(renew(other).await.unwrap(), leader::store::RenewOutcome::NotHeld);

    // By fence, now: free at once.
    let output =
        leader(&server.url(), &["release", "stuck", "--fence", &fence_c.to_string(), "--now"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("freed the slot"), "{}", stdout(&output));
    assert_eq!(store.state("leader:stuck").await.unwrap().leaders.len(), 2);
}

/// `memory://` is a store of one process: the command would read its own, empty one and
/// show no holder (or `watch` it for ever). Refused, naming the stores to give instead.
#[test]
fn a_memory_url_is_refused() {
    for command in [&["state", "jobs"][..], &["watch", "jobs"], &["groups"]] {
        let output = leader("memory://", command);
        assert_eq!(output.status.code(), Some(2), "{command:?}");
        let message = stderr(&output);
        assert!(message.contains("memory:// is a store of one process"), "{message}");
        assert!(message.contains("redis://, postgres://, etcd://"), "{message}");
    }
}

#[tokio::test]
async fn errors_are_clear_and_exit_with_2() {
    // An unreachable server, on every store: one line naming the store, where it is (no
    // password), the operation asked for and the root cause, once. Port 1: nothing listens
    // there, and no test binary running beside this one can take it (a free port could be).
    let port = 1;
    let etcd = cfg!(feature = "etcd")
        .then(|| (format!("etcd://127.0.0.1:{port}"), format!("http://127.0.0.1:{port}")));
    for (url, shown) in [
        (
            format!("redis://app:hunter2@127.0.0.1:{port}"),
            format!("redis://app:***@127.0.0.1:{port}"),
        ),
        (
            format!("postgres://app:hunter2@127.0.0.1:{port}/app"),
            format!("app@127.0.0.1:{port}/app"),
        ),
    ]
    .into_iter()
    .chain(etcd)
    {
        let output = leader(&url, &["state", "x", "--command-timeout", "2s"]);
        assert_eq!(output.status.code(), Some(2));
        let message = stderr(&output);
        let kind = url.split_once("://").unwrap().0;
        let expected = format!(
            "error: {kind} store at {shown} unavailable during connect: Connection refused (os error 111)\n"
        );
        assert_eq!(message, expected, "{url}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    let output = leader("http://localhost", &["state", "x"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).starts_with("error: invalid `url`"), "{}", stderr(&output));

    let server = RedisServer::start();
    server.cli(&["SET", "{leader:taken}:group", "someone else's"]);
    let output = leader(&server.url(), &["state", "taken"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("holds data that is not a leader group"),
        "{}",
        stderr(&output)
    );
    assert_eq!(server.cli(&["GET", "{leader:taken}:group"]), "someone else's");

    let output = leader(&server.url(), &["state", "two words"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("invalid name"), "{}", stderr(&output));
}

#[tokio::test]
async fn watch_redraws_when_slots_are_granted_and_released() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_leader"))
        .args(["--url", &server.url(), "watch", "pool", "--duration", "60s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Frames arrive one by one; each step waits for the frame before it, so a slow start
    // of the watcher cannot make it miss a change.
    let (frames_tx, frames) = std::sync::mpsc::channel::<String>();
    let stdout = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut frame = String::new();
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.is_empty() {
                let _ = frames_tx.send(std::mem::take(&mut frame));
            } else {
                frame.push_str(&line);
                frame.push('\n');
            }
        }
    });
    let next_frame = || frames.recv_timeout(Duration::from_secs(10)).expect("a frame within 10 s");

    let first = next_frame();
    assert!(first.contains("no live slots"), "{first}");
    let (token, _) = hold(&store, "leader:pool", "worker-x").await;
    let granted = next_frame();
    assert!(granted.contains("1 of 3 slots held") && granted.contains("worker-x"), "{granted}");
    store.release("leader:pool", token, Duration::ZERO).await.unwrap();
    let released = next_frame();
    assert!(released.contains("no live slots"), "{released}");
    watcher.kill().unwrap();
    let _ = watcher.wait();
}

/// Built without etcd (its client needs protoc to build), the CLI says how to get it.
#[cfg(not(feature = "etcd"))]
#[test]
fn an_etcd_url_without_the_etcd_feature_says_how_to_install_it() {
    let output = leader("etcd://127.0.0.1:2379", &["state", "x"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(message.contains("built without etcd"), "{message}");
    assert!(message.contains("cargo install --path leader-cli --features etcd"), "{message}");
}

/// A Redis server that refuses the URL's password is a permanent error, not an outage.
#[tokio::test]
async fn a_refused_redis_password_is_permanent() {
    let server = RedisServer::start_with(&["--requirepass", "right"]);
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port);
    let err = leader::store::connect(&url).await.unwrap_err();
    assert!(!err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("authentication refused"), "{err}");
    assert!(!err.to_string().contains("wrong"), "{err}");
}

/// `leader prefer` records a preference that `leader state` shows (table and JSON), `--clear`
/// withdraws it, and bad input is a clear error that changes nothing.
#[tokio::test]
async fn prefer_names_a_holder_that_state_shows_and_clear_withdraws() {
    let server = RedisServer::start();
    let url = server.url();
    let output = leader(&url, &["prefer", "report", "--holder", "web-2", "--for", "5m"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("preferred \"web-2\" for group report for 5m"));
    // A leader, and web-2 waiting with a claim: the state names it as the preferred holder.
    let store = RedisStore::connect(&url).await.unwrap();
    hold(&store, "leader:report", "web-1").await;
    hold(&store, "leader:report", "web-3").await;
    hold(&store, "leader:report", "web-4").await;
    let mut waiting = AcquireRequest::new(
        "leader:report",
        std::num::NonZeroU32::new(3).unwrap(),
        LeaseToken::generate().unwrap(),
        "web-2",
        Duration::from_secs(60),
    )
    .reserving_at(Duration::ZERO, Duration::from_secs(60), 0);
    waiting.holder = "web-2";
    assert!(matches!(store.acquire(waiting).await.unwrap(), AcquireOutcome::Full { .. }));
    let table = stdout(&leader(&url, &["state", "report"]));
    assert!(table.contains("preferred holder web-2 (for "), "{table}");
    assert!(table.contains("next free slot kept for web-2 (priority 0"), "{table}");
    assert!(table.contains(", the preferred holder\n"), "{table}");
    let output = leader(&url, &["state", "report", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["preferred"]["holder"], "web-2");
    assert_eq!(json["waiting"]["holder"], "web-2");
    assert_eq!(json["waiting"]["preferred"], true);
    let left = json["preferred"]["expires_in_ms"].as_u64().unwrap();
    assert!((200_000..=300_000).contains(&left), "{json}");

    let output = leader(&url, &["prefer", "report", "--clear"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = leader(&url, &["state", "report", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["preferred"], serde_json::Value::Null);

    for (args, says) in [
        (&["prefer", "report", "--holder", "web-2", "--for", "0s"][..], "preference ttl"),
        (&["prefer", "report", "--holder", ""][..], "holder_id"),
        (&["prefer", "report"][..], "--holder"),
    ] {
        let output = leader(&url, args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(stderr(&output).contains(says), "{args:?}: {}", stderr(&output));
    }
    assert_eq!(server.cli(&["EXISTS", "{leader:report}:preferred"]), "0");
}
