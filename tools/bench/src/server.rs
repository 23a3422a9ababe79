//! The bench's own `redis-server`, and what it reports.

use std::process::Command;

use leader_testkit::redis_server;

/// The server the bench measures against, killed on drop.
pub struct Server(redis_server::RedisServer);

impl Server {
    pub fn start() -> Self {
        Server(redis_server::RedisServer::start())
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    pub fn cli(&self, args: &[&str]) -> String {
        self.0.cli(args)
    }

    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
    }

    pub fn reset_stats(&self) {
        self.cli(&["CONFIG", "RESETSTAT"]);
    }

    /// CPU time the server process has used so far (user + system), from `INFO cpu`, in
    /// seconds: what the server spends on a workload is the difference around it.
    pub fn cpu_seconds(&self) -> f64 {
        self.cli(&["INFO", "cpu"])
            .lines()
            .filter_map(|line| {
                let value = line
                    .strip_prefix("used_cpu_user:")
                    .or_else(|| line.strip_prefix("used_cpu_sys:"))?;
                value.trim().parse::<f64>().ok()
            })
            .sum()
    }

    /// Commands clients sent since the last reset (not counting the commands scripts ran
    /// inside the server, nor the bench's own INFO and CONFIG).
    pub fn client_commands(&self) -> u64 {
        self.0.client_commands().values().sum()
    }

    /// Commands clients sent since the last reset, by name.
    pub fn client_commands_by_name(&self) -> std::collections::HashMap<String, u64> {
        self.0.client_commands()
    }

    /// Requests per second `redis-benchmark` reaches with `args`.
    pub fn redis_benchmark(
        &self,
        args: &[&str],
        clients: u32,
        pipeline: u32,
        requests: u64,
    ) -> f64 {
        let output = Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &self.0.port.to_string()])
            .args([
                "-c",
                &clients.to_string(),
                "-P",
                &pipeline.to_string(),
                "-n",
                &requests.to_string(),
            ])
            .args(["-r", "1000000000", "-q"])
            .args(args)
            .output()
            .expect("redis-benchmark on PATH (apt-get install redis-tools)");
        let text = String::from_utf8_lossy(&output.stdout);
        // "EVALSHA ...: 123456.78 requests per second, p50=…"
        text.rsplit('\r')
            .find_map(|part| {
                part.split(": ").nth(1)?.split(" requests per second").next()?.trim().parse().ok()
            })
            .unwrap_or_else(|| panic!("cannot read redis-benchmark's output: {text}"))
    }
}
