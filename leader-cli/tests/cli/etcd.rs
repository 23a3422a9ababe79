//! The command on etcd (built with the `etcd` feature): `state`, `groups`, `release` and
//! `watch --json`, a takeover shown pending during its lock-delay, and planted values refused
//! or escaped.

use std::process::{Command, Stdio};
use std::time::Duration;

use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{LeaseStore, LeaseToken};

use super::{hold, leader, stderr, stdout};

/// `state`, `groups`, `release` and `watch --json` on etcd.
#[cfg(feature = "etcd")]
#[tokio::test]
async fn state_groups_release_and_watch_work_on_etcd() {
    use leader::EtcdStore;
    use leader_testkit::etcd::EtcdServer;

    let server = EtcdServer::start();
    let url = format!("{}/apps/", server.url());
    let store = EtcdStore::connect(&url).await.unwrap();
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_leader"))
        .args(["--url", &url, "watch", "reports", "--json", "--duration", "60s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<serde_json::Value>();
    let watched = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(watched).lines().map_while(Result::ok) {
            let _ = lines_tx.send(serde_json::from_str(&line).expect("one JSON object per line"));
        }
    });
    let next = || lines.recv_timeout(Duration::from_secs(10)).expect("a change within 10 s");
    assert_eq!(next()["active"], 0);

    let (token, fence) = hold(&store, "leader:reports", "worker-etcd").await;
    let granted = next();
    assert_eq!(granted["slots"][0]["holder"], "worker-etcd", "{granted}");
    assert_eq!(granted["slots"][0]["fence"], fence, "{granted}");

    let output = leader(&url, &["state", "reports"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(table.starts_with("group reports (key leader:reports): 1 of 3 slots held"), "{table}");
    assert!(table.contains("worker-etcd") && table.contains(&fence.to_string()), "{table}");

    let output = leader(&url, &["groups"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).lines().any(|line| line.starts_with("reports ")),
        "{}",
        stdout(&output)
    );

    let output = leader(&url, &["release", "reports", "--token", &token.to_string()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(next()["active"], 0, "the watcher saw the release");
    let renewed = store.renew("leader:reports", token, Duration::from_secs(60)).await.unwrap();
    assert_eq!(renewed, leader::store::RenewOutcome::NotHeld, "the holder's renewals end");
    assert!(store.state("leader:reports").await.unwrap().leaders.is_empty());
    watcher.kill().unwrap();
    let _ = watcher.wait();
}

/// Observed from another process during a takeover's lock-delay on etcd: the candidate is
/// pending, never named as the group's holder before its grant returns.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_in_its_lock_delay_shows_as_pending_on_etcd() {
    use leader::EtcdStore;
    use leader_testkit::etcd::EtcdServer;

    let server = EtcdServer::start();
    let url = format!("{}/cli/", server.url());
    let store = EtcdStore::connect(&url).await.unwrap();
    let lease = Duration::from_secs(2);
    let one = std::num::NonZeroU32::new(1).unwrap();
    let crashed = AcquireRequest::new(
        "leader:delayed",
        one,
        LeaseToken::generate().unwrap(),
        "crashed",
        lease,
    );
    assert!(matches!(store.acquire(crashed).await.unwrap(), AcquireOutcome::Granted(_)));
    let candidate = EtcdStore::connect(&url).await.unwrap();
    let mut taking = tokio::spawn(async move {
        let token = LeaseToken::generate().unwrap();
        loop {
            let request = AcquireRequest::new("leader:delayed", one, token, "successor", lease);
            if let AcquireOutcome::Granted(grant) = candidate.acquire(request).await.unwrap() {
                return grant.fence;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut saw_pending = false;
    let mut granted_fence = None;
    while !taking.is_finished() {
        let output = leader(&url, &["state", "delayed", "--json"]);
        assert!(output.status.success(), "{}", stderr(&output));
        if taking.is_finished() {
            break; // granted meanwhile: this read may already name it
        }
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let named = |list: &str| {
            json[list].as_array().unwrap().iter().find(|slot| slot["holder"] == "successor")
        };
        if let Some(slot) = named("slots") {
            // The grant may have been made after the check above and before its reply
            // reached the task: then this slot is that grant, with its fence.
            let granted = tokio::time::timeout(Duration::from_secs(5), &mut taking).await;
            granted_fence = granted.ok().map(|fence| fence.unwrap());
            assert_eq!(
                granted_fence.map(serde_json::Value::from),
                Some(slot["fence"].clone()),
                "named as a holder during its lock-delay: {json}"
            );
            break;
        }
        saw_pending |= named("pending").is_some();
    }
    let fence = match granted_fence {
        Some(fence) => fence,
        None => taking.await.unwrap(),
    };
    assert!(saw_pending, "never seen pending");
    let output = leader(&url, &["state", "delayed", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["slots"][0]["holder"], "successor", "{json}");
    assert_eq!(json["slots"][0]["fence"], fence);
}

/// A slot value the store did not write (a grant time no calendar shows, a holder with
/// control characters) is refused or shown escaped: the command never panics.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_values_are_refused_or_escaped_never_a_panic() {
    use leader::store::etcd_client;
    use leader_testkit::etcd::EtcdServer;

    let server = EtcdServer::start();
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let token = LeaseToken::generate().unwrap();
    let planted = [
        ("leader:far slot 0", format!("{token} 18446744073709551615 5 1 0 h")),
        ("leader:escaped slot 0", format!("{token} 0 5 1 0 a\nb\u{1b}[31mred")),
    ];
    for (key, value) in &planted {
        let lease = client.lease_grant(60, None).await.unwrap().id();
        let on_lease = etcd_client::PutOptions::new().with_lease(lease);
        client.put(*key, value.as_str(), Some(on_lease)).await.unwrap();
    }
    let output = leader(&server.url(), &["state", "far"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("leader:far slot 0"), "{}", stderr(&output));
    let output = leader(&server.url(), &["state", "escaped"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("a\\nb\\u{1b}[31mred"), "{}", stdout(&output));
}
