//! A private PostgreSQL server for tests: a new cluster made with `initdb` in a temporary
//! directory, started with `pg_ctl` on a free port (binaries from `pg_config --bindir`),
//! stopped and removed on drop; it can be killed (SIGKILL), restarted on the same data
//! directory, and paused. Run as root, the server runs as the `postgres` user (PostgreSQL
//! refuses root).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::redis_server::free_port;

/// A PostgreSQL server on 127.0.0.1 with trust authentication, stopped and removed on drop.
pub struct PostgresServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    bin: PathBuf,
    dir: TempDir,
    /// `runuser -u postgres --` when this process is root.
    run_as: Vec<String>,
    /// More server options, such as `["-c", "shared_preload_libraries=pg_stat_statements"]`.
    extra: Vec<String>,
}

impl PostgresServer {
    /// Makes a new cluster and starts it; waits until it accepts connections.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`start`](Self::start) with more server options, such as
    /// `["-c", "shared_preload_libraries=pg_stat_statements"]`.
    pub fn start_with(extra: &[&str]) -> Self {
        let bin = bindir();
        let dir = tempfile::Builder::new().prefix("leader-pg-").tempdir().expect("a temp dir");
        let run_as = if is_root() {
            let status =
                Command::new("chown").arg("-R").arg("postgres:postgres").arg(dir.path()).status();
            assert!(status.is_ok_and(|s| s.success()), "chown the data directory to postgres");
            vec!["runuser".to_owned(), "-u".to_owned(), "postgres".to_owned(), "--".to_owned()]
        } else {
            Vec::new()
        };
        let extra = extra.iter().map(|arg| (*arg).to_owned()).collect();
        let server = PostgresServer { port: free_port(), bin, dir, run_as, extra };
        let output = server.run(
            "initdb",
            &["-D", &server.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
        );
        assert!(
            output.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        server.start_on_data();
        server
    }

    /// [`start`](Self::start) with TLS on (`ssl=on`), serving `server.crt` and `server.key`
    /// from `certificates` (as [`certificates::make`](crate::certificates::make) writes
    /// them; the directory is given to the server's user).
    pub fn start_with_tls(certificates: &Path) -> Self {
        if is_root() {
            let status =
                Command::new("chown").arg("-R").arg("postgres:postgres").arg(certificates).status();
            assert!(status.is_ok_and(|s| s.success()), "chown the certificates to postgres");
        }
        let file = |name: &str| certificates.join(name).display().to_string();
        let (cert, key) = (
            format!("ssl_cert_file={}", file("server.crt")),
            format!("ssl_key_file={}", file("server.key")),
        );
        Self::start_with(&["-c", "ssl=on", "-c", &cert, "-c", &key])
    }

    /// A hot standby of `primary`: a base backup (`pg_basebackup -R`) in a new directory,
    /// started on its own port with the default options, streaming from the primary. The
    /// primary makes it synchronous with `-c synchronous_standby_names=*` among its options.
    pub fn standby_of(primary: &PostgresServer) -> Self {
        let dir = tempfile::Builder::new().prefix("leader-pg-").tempdir().expect("a temp dir");
        if !primary.run_as.is_empty() {
            let status =
                Command::new("chown").arg("-R").arg("postgres:postgres").arg(dir.path()).status();
            assert!(status.is_ok_and(|s| s.success()), "chown the data directory to postgres");
        }
        let standby = PostgresServer {
            port: free_port(),
            bin: primary.bin.clone(),
            dir,
            run_as: primary.run_as.clone(),
            // Not the primary's options: promoted, it must not wait for a standby of its own.
            extra: Vec::new(),
        };
        let output = standby.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &standby.data(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        assert!(
            output.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        standby.start_on_data();
        standby
    }

    /// Promotes a standby to a primary (`pg_ctl promote`, waiting until it is done).
    pub fn promote(&self) {
        let output = self.run("pg_ctl", &["-D", &self.data(), "-w", "promote"]);
        assert!(output.status.success(), "promote: {}", String::from_utf8_lossy(&output.stderr));
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// SIGKILL of the postmaster: the server dies without a shutdown checkpoint; what was
    /// committed is in the WAL.
    pub fn kill(&self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts the server again on the same data directory (after [`kill`](Self::kill)).
    pub fn restart(&self) {
        // A killed postmaster leaves its children for a moment; the new one waits for them.
        let _ = std::fs::remove_file(self.dir.path().join("data/postmaster.pid"));
        self.start_on_data();
    }

    /// SIGSTOP of the postmaster and every backend: nothing answers until `resume`.
    pub fn pause(&self) {
        self.signal_all("STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal_all("CONT");
    }

    /// Runs one statement with `psql` and returns its unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        let output = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-A",
                "-t",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .output()
            .expect("psql");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn start_on_data(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off \
             -c synchronous_commit=on -c max_connections=200 {}",
            self.port,
            self.dir.path().display(),
            self.extra.join(" ")
        );
        let log = self.dir.path().join("server.log").display().to_string();
        let output = self.run(
            "pg_ctl",
            &["-D", &self.data(), "-o", &options, "-l", &log, "-w", "-t", "30", "start"],
        );
        if !output.status.success() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("pg_ctl start failed: {}\n{log}", String::from_utf8_lossy(&output.stderr));
        }
    }

    fn pid(&self) -> Option<u32> {
        let pid_file = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).ok()?;
        pid_file.lines().next()?.trim().parse().ok()
    }

    fn signal_all(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            // The postmaster and its children (backends, background workers).
            let _ = Command::new("pkill")
                .arg(format!("-{signal}"))
                .arg("-P")
                .arg(pid.to_string())
                .status();
            let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        let path = self.bin.join(program);
        let mut command = match self.run_as.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(&path);
                command
            }
            None => Command::new(&path),
        };
        command.args(args).output().unwrap_or_else(|error| panic!("{}: {error}", path.display()))
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.resume();
        let _ = self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
    }
}

/// The directory of `initdb` and `pg_ctl`: `$LEADER_TEST_PG_BINDIR`, or what `pg_config
/// --bindir` says.
fn bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("LEADER_TEST_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    let output = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("pg_config on PATH (apt-get install postgresql)");
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
