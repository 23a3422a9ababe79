//! Every example takes its command line as the demo does, and refuses what it does not
//! understand: run here as built by `cargo test` (which builds the examples beside the tests).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

/// Runs example `name` with `args`; its exit status and output, within 20 s.
fn run(name: &str, args: &[&str]) -> Output {
    // target/<profile>/deps/<this test> -> target/<profile>/examples/<name>
    let test = std::env::current_exe().expect("this test's path");
    let example: PathBuf =
        test.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join(name);
    let mut child = Command::new(&example)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{}: {error}", example.display()));
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("{name} {args:?} still ran after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `roles_service --url …` ran on the in-memory store, leading alone, with the URL ignored.
#[test]
fn a_store_url_after_url_is_used_and_its_failure_said_once() {
    for name in ["roles_service", "demo", "periodic_jobs", "partitioned_consumer"] {
        let output = run(name, &["--url", "redis://127.0.0.1:1", "--run-for", "1"]);
        let said = stderr(&output);
        if name == "roles_service" {
            assert_eq!(output.status.code(), Some(2), "{name}: {said}");
            assert_eq!(said.matches("Connection refused").count(), 1, "said once: {said}");
            assert!(said.contains("redis://127.0.0.1:1"), "names the store: {said}");
        } else {
            // Their only flags are the store's: --run-for is theirs to refuse.
            assert_eq!(output.status.code(), Some(2), "{name}: {said}");
            assert!(said.contains("unknown flag --run-for"), "{name}: {said}");
        }
    }
}

#[test]
fn an_unknown_flag_a_missing_value_or_a_url_of_another_kind_is_a_usage_error() {
    for (args, says) in [
        (&["--bogus", "1"][..], "unknown flag --bogus"),
        (&["--listen"][..], "--listen needs a value"),
        (&["--redis", "postgres://postgres@127.0.0.1:1/test"][..], "--redis takes a redis URL"),
        (&["memory://", "memory://"][..], "one store URL at most"),
        (&["--run-for", "soon"][..], "--run-for takes SECONDS, not \"soon\""),
        (&["--run-for", "1", "--run-for=5"][..], "--run-for given twice"),
        (&["--etcd", "redis://127.0.0.1:1"][..], "--etcd takes an etcd URL"),
    ] {
        let output = run("roles_service", args);
        let said = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {said}");
        assert!(said.contains(says), "{args:?}: {said}");
    }
}

#[test]
fn the_in_memory_store_is_the_default_and_run_for_ends_the_run() {
    let output = run("roles_service", &["--run-for", "1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("on memory store"), "{said}");
    assert!(said.contains("shutting down"), "{said}");
}
