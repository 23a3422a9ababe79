//! A primary, one replica and one Sentinel watching them, for failover tests.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, cli, free_port};

/// The name the Sentinel monitors the primary under.
pub const MASTER_NAME: &str = "leader-test";

/// A primary, its replica and a Sentinel (quorum 1, down after 1 s); stopped on drop.
pub struct RedisSentinel {
    /// The server that starts as the primary.
    pub primary: RedisServer,
    /// The server that starts as its replica.
    pub replica: RedisServer,
    /// The Sentinel's port.
    pub sentinel_port: u16,
    sentinel: Child,
    _dir: tempfile::TempDir,
}

impl RedisSentinel {
    /// Starts the three and waits until the replica is in sync and the Sentinel sees it.
    pub fn start() -> Self {
        let primary = RedisServer::start();
        let port = primary.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let dir = tempfile::tempdir().unwrap();
        let sentinel_port = free_port();
        let config = dir.path().join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {sentinel_port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {port} 1\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 10000\n",
                dir = dir.path().display(),
            ),
        )
        .unwrap();
        let sentinel = Command::new(crate::redis_server::server_program())
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Redis server binary, as a sentinel");
        let set_up = RedisSentinel { primary, replica, sentinel_port, sentinel, _dir: dir };
        set_up.wait_for("the replica to sync and the sentinel to see it", || {
            set_up.replica.cli(&["INFO", "replication"]).contains("master_link_status:up")
                && cli(sentinel_port, &["SENTINEL", "REPLICAS", MASTER_NAME]).contains("slave")
        });
        set_up
    }

    /// The Sentinel's URL.
    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel_port)
    }

    /// Promotes the replica and demotes the primary, and waits until both roles switched.
    pub fn fail_over(&self) {
        self.wait_for("SENTINEL FAILOVER to be accepted", || {
            cli(self.sentinel_port, &["SENTINEL", "FAILOVER", MASTER_NAME]) == "OK"
        });
        self.wait_for("the replica to become the primary", || {
            self.replica.cli(&["ROLE"]).starts_with("master")
        });
        self.wait_for("the old primary to become a replica", || {
            self.primary.cli(&["ROLE"]).starts_with("slave")
        });
        self.wait_for("the sentinel to name the new primary", || {
            cli(self.sentinel_port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])
                .contains(&self.replica.port.to_string())
        });
        self.wait_for("the old primary to sync with the new one", || {
            self.primary.cli(&["INFO", "replication"]).contains("master_link_status:up")
        });
    }

    fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        let _ = self.sentinel.kill();
        let _ = self.sentinel.wait();
    }
}
