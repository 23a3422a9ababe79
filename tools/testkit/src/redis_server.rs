//! Real `redis-server` processes for tests: started on a free port with no persistence and a
//! log in a temporary directory, killed on drop; they can be killed, restarted and paused.
//!
//! The server binary is `$LEADER_TEST_REDIS_SERVER` (default `redis-server`) and the client
//! `$LEADER_TEST_REDIS_CLI` (default `redis-cli`), so the same suites run on Valkey:
//! `LEADER_TEST_REDIS_SERVER=…/valkey-server LEADER_TEST_REDIS_CLI=…/valkey-cli cargo test`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The commands leader's scripts run inside the server.
const SCRIPT_INTERNAL: &[&str] = &[
    "time",
    "get",
    "hgetall",
    "hget",
    "hmget",
    "hset",
    "hdel",
    "set",
    "del",
    "pttl",
    "pexpire",
    "pexpireat",
    "publish",
];

/// The server binary the tests run: `$LEADER_TEST_REDIS_SERVER`, or `redis-server`.
pub fn server_program() -> String {
    std::env::var("LEADER_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// The client binary the tests run: `$LEADER_TEST_REDIS_CLI`, or `redis-cli`.
pub fn cli_program() -> String {
    std::env::var("LEADER_TEST_REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_owned())
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`, through `kill`; a test's failure if it
/// cannot.
pub(crate) fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
    assert!(status.unwrap().success(), "kill -{signal} {pid}");
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `redis-server` without persistence on a free local port, killed on drop.
pub struct RedisServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// A standalone server.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with extra `redis-server` arguments, such as `["--cluster-enabled", "yes"]`.
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut server = RedisServer {
            port: free_port(),
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        // Another test may take the free port between our check and the server's bind:
        // then the server exits at once, and we try again on another port.
        for _ in 0..5 {
            if server.try_spawn() {
                return server;
            }
            server.port = free_port();
        }
        server.spawn();
        server
    }

    /// Starts the server; false if it exited at once (its port was taken).
    fn try_spawn(&mut self) -> bool {
        let mut child = self.command().spawn().unwrap_or_else(|error| {
            panic!("{} on PATH (apt-get install redis-server): {error}", server_program())
        });
        std::thread::sleep(Duration::from_millis(30));
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        self.child = Some(child);
        wait_until_answers(self.port, &self.dir.path().join("redis.log"));
        true
    }

    fn command(&self) -> Command {
        let mut command = Command::new(server_program());
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let child = self.command().spawn().unwrap_or_else(|error| {
            panic!("{} on PATH (apt-get install redis-server): {error}", server_program())
        });
        self.child = Some(child);
        wait_until_answers(self.port, &self.dir.path().join("redis.log"));
    }

    /// SIGKILL: the server dies with everything it held in memory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a new one on the same port, without the old data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGSTOP: the server keeps its connections but answers nothing.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        send_signal(self.child.as_ref().expect("running").id(), signal);
    }

    /// Calls per command that clients sent since the last `CONFIG RESETSTAT`, from
    /// `INFO commandstats`: the commands scripts run inside the server (INFO counts those
    /// too, but they are no round trips) and the INFO and CONFIG calls of this very check
    /// are left out.
    pub fn client_commands(&self) -> std::collections::HashMap<String, u64> {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
                let internal =
                    SCRIPT_INTERNAL.contains(&name) || name == "info" || name.starts_with("config");
                (!internal).then(|| (name.to_owned(), calls))
            })
            .collect()
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.resume_quietly();
        }
        self.kill();
    }
}

impl RedisServer {
    fn resume_quietly(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").arg("-CONT").arg(child.id().to_string()).status();
        }
    }
}

/// Runs `redis-cli` against 127.0.0.1:`port` and returns its trimmed output.
pub fn cli(port: u16, args: &[&str]) -> String {
    let output = Command::new(cli_program())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("{} on PATH: {error}", cli_program()));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn wait_until_answers(port: u16, log: &PathBuf) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        // Any answer will do: PONG, or NOAUTH from a server whose default user is off.
        if !cli(port, &["PING"]).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = std::fs::read_to_string(log).unwrap_or_default();
    panic!("{} on port {port} did not answer within 10 s; its log:\n{log}", server_program());
}
