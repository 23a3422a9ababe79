//! Small statistics: rates and percentiles.

use std::time::Duration;

/// The `p`-th percentile (0..=100) of `samples`, which it sorts.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

/// Milliseconds with two decimals.
pub fn ms(duration: Duration) -> String {
    format!("{:.2}", duration.as_secs_f64() * 1_000.0)
}

/// Operations per second, rounded to hundreds.
pub fn rate(count: u64, over: Duration) -> f64 {
    (count as f64 / over.as_secs_f64() / 100.0).round() * 100.0
}

/// The resident memory of this process, in bytes, from /proc.
pub fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The CPU time this process has used so far (user and system, every thread), in seconds,
/// from `/proc/self/stat` (0 where there is none): the clients' cost per operation is its
/// growth over a workload divided by the operations.
pub fn own_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the command name (which may hold spaces) in parentheses; utime and
    // stime are the 14th and 15th fields of the line, in clock ticks (100 per second on
    // Linux).
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
