//! The command on PostgreSQL: `state`, `groups`, `release` and `watch --json`, reads that write
//! nothing on a database without the schema, and TLS verified against a CA file.

use std::process::{Command, Stdio};
use std::time::Duration;

use leader::store::{AcquireOutcome, AcquireRequest};
use leader::{LeaseStore, LeaseToken};

use super::{hold, leader, stderr, stdout};

/// `watch --json` on PostgreSQL: one JSON object per change, with the time it was seen, the
/// holder and the fence, from the store's notifications (a grant included).
#[tokio::test]
async fn watch_prints_one_json_object_per_change_on_postgres() {
    use leader::PostgresStore;
    use leader_testkit::postgres_server::PostgresServer;

    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_leader"))
        .args(["--url", &server.url(), "watch", "pool", "--json", "--duration", "60s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<serde_json::Value>();
    let stdout = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(serde_json::from_str(&line).expect("one JSON object per line"));
        }
    });
    let next = || lines.recv_timeout(Duration::from_secs(10)).expect("a change within 10 s");

    let first = next();
    assert_eq!((first["group"].as_str(), first["active"].as_u64()), (Some("pool"), Some(0)));
    assert!(first["at"].as_str().is_some_and(|at| at.ends_with('Z')), "{first}");
    let (token, fence) = hold(&store, "leader:pool", "10.0.0.5:8080").await;
    let granted = next();
    assert_eq!(granted["slots"][0]["holder"], "10.0.0.5:8080", "{granted}");
    assert_eq!(granted["slots"][0]["fence"], fence, "{granted}");
    store.release("leader:pool", token, Duration::ZERO).await.unwrap();
    assert_eq!(next()["active"], 0);
    watcher.kill().unwrap();
    let _ = watcher.wait();
}

#[tokio::test]
async fn state_groups_and_release_work_on_postgres() {
    use leader::PostgresStore;
    use leader_testkit::postgres_server::PostgresServer;

    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let token = LeaseToken::generate().unwrap();
    let request = AcquireRequest::new(
        "leader:reports",
        std::num::NonZeroU32::new(2).unwrap(),
        token,
        "worker-pg",
        Duration::from_secs(60),
    );
    let AcquireOutcome::Granted(grant) = store.acquire(request).await.unwrap() else {
        panic!("free")
    };

    let output = leader(&server.url(), &["state", "reports"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(table.starts_with("group reports (key leader:reports): 1 of 2 slots held"), "{table}");
    assert!(table.contains("worker-pg") && table.contains(&grant.fence.to_string()), "{table}");

    let output = leader(&server.url(), &["groups"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).lines().any(|line| line.starts_with("reports ")),
        "{}",
        stdout(&output)
    );

    // Ended for its holder, kept until its expiry; then freed at once with --now.
    let output = leader(&server.url(), &["release", "reports", "--token", &token.to_string()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let renewed = store.renew("leader:reports", token, Duration::from_secs(60)).await.unwrap();
    assert_eq!(renewed, leader::store::RenewOutcome::NotHeld);
    assert_eq!(store.state("leader:reports").await.unwrap().leaders.len(), 1);
    let fence = grant.fence.to_string();
    let output = leader(&server.url(), &["release", "reports", "--fence", &fence, "--now"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(store.state("leader:reports").await.unwrap().leaders.is_empty());
}

/// An operator's read never runs DDL: on a database where no candidate ran, a role
/// without CREATE reads an empty group and no groups, and the database stays as it was.
#[tokio::test]
async fn reads_on_a_postgres_database_without_the_schema_write_nothing() {
    use leader_testkit::postgres_server::PostgresServer;

    let server = PostgresServer::start();
    server.psql("CREATE ROLE monitor LOGIN");
    let url = format!("postgres://monitor@127.0.0.1:{}/postgres", server.port);
    let output = leader(&url, &["state", "reports"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("no live slots"), "{}", stdout(&output));
    let output = leader(&url, &["groups"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("no groups"), "{}", stdout(&output));
    let made = "SELECT count(*) FROM pg_class WHERE relname LIKE 'leader\\_%'";
    assert_eq!(server.psql(made), "0", "a read made part of the schema");
}

#[tokio::test]
async fn postgres_over_tls_verifies_the_certificate_against_the_ca_file() {
    use leader_testkit::certificates;
    use leader_testkit::postgres_server::PostgresServer;

    let dir = tempfile::tempdir().unwrap();
    certificates::make(dir.path());
    let server = PostgresServer::start_with_tls(dir.path());
    let url = format!("{}?sslmode=verify-full", server.url());
    let ca = dir.path().join("ca.crt");

    // The system's roots do not know the test's CA.
    let output = leader(&url, &["state", "reports"]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(stderr(&output).to_lowercase().contains("certificate"), "{}", stderr(&output));

    // `require` encrypts without verifying, as libpq's does.
    let unverified = format!("{}?sslmode=require", server.url());
    let output = leader(&unverified, &["state", "reports"]);
    assert!(output.status.success(), "{}", stderr(&output));

    let output = leader(&url, &["state", "reports", "--ca-file", ca.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("group reports (key leader:reports)"),
        "{}",
        stdout(&output)
    );

    // A CA file is for PostgreSQL only, and must be readable.
    let output = leader("redis://127.0.0.1:1", &["state", "reports", "--ca-file", "ca.crt"]);
    assert!(stderr(&output).contains("--ca-file ca.crt applies to postgres:// URLs only"));
    let output = leader(&url, &["state", "reports", "--ca-file", "/nonexistent/ca.crt"]);
    assert!(stderr(&output).contains("cannot read --ca-file /nonexistent/ca.crt"));
}
