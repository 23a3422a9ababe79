//! The candidate processes of one scenario: spawned from this very binary, their reports
//! collected as they come, and the signals and commands the faults need.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::time::{Instant, sleep, timeout};

use crate::events::{Event, now_micros};

/// An event and the candidate that reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// The candidate's index in the fleet.
    pub candidate: usize,
    /// The partition the event is about (partitions mode), from the line's `partition`.
    pub partition: Option<u32>,
    /// What it reported.
    pub event: Event,
}

struct Member {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: Pid,
    killed: bool,
}

/// The running candidates.
pub struct Fleet {
    program: PathBuf,
    args: Vec<String>,
    members: Vec<Member>,
    reports: Arc<Mutex<Vec<Reported>>>,
}

impl Fleet {
    /// Spawns `count` candidates: `program candidate --id c<i> <args…>`.
    pub fn spawn(program: &Path, count: usize, args: &[String]) -> std::io::Result<Fleet> {
        let mut fleet = Fleet {
            program: program.to_owned(),
            args: args.to_vec(),
            members: Vec::with_capacity(count),
            reports: Arc::new(Mutex::new(Vec::new())),
        };
        for _ in 0..count {
            fleet.add()?;
        }
        Ok(fleet)
    }

    /// Spawns one more candidate; its index.
    pub fn add(&mut self) -> std::io::Result<usize> {
        let candidate = self.members.len();
        let mut child = Command::new(&self.program)
            .arg("candidate")
            .args(["--id", &format!("c{candidate}")])
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let collected = self.reports.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
                let partition = value.get("partition").and_then(|p| p.as_u64()).map(|p| p as u32);
                if let Ok(event) = serde_json::from_value(value) {
                    let mut reports = collected.lock().unwrap_or_else(|p| p.into_inner());
                    reports.push(Reported { candidate, partition, event });
                }
            }
        });
        let pid = Pid::from_raw(child.id().expect("running") as i32);
        self.members.push(Member { stdin: child.stdin.take(), child, pid, killed: false });
        Ok(candidate)
    }

    /// The candidates killed so far, by index.
    pub fn killed(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&candidate| self.members[candidate].killed).collect()
    }

    /// Everything reported so far.
    pub fn reports(&self) -> Vec<Reported> {
        self.reports.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The live candidates that reported leading within the last 100 ms (and not before
    /// `since`, µs since the epoch), most recent first.
    pub fn leading_since(&self, since: u64) -> Vec<usize> {
        let since = since.max(now_micros().saturating_sub(100_000));
        let reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = vec![None; self.members.len()];
        for report in reports.iter() {
            last[report.candidate] = Some(&report.event);
        }
        let mut leading: Vec<(u64, usize)> = last
            .iter()
            .enumerate()
            .filter(|(candidate, _)| !self.members[*candidate].killed)
            .filter_map(|(candidate, event)| match event {
                Some(Event::Leading { at, .. } | Event::Wrote { at, .. }) if *at >= since => {
                    Some((*at, candidate))
                }
                _ => None,
            })
            .collect();
        leading.sort_unstable_by(|a, b| b.cmp(a));
        leading.into_iter().map(|(_, candidate)| candidate).collect()
    }

    /// Waits up to `limit` until live candidates report leading each of `count` partitions
    /// after `since` (µs since the epoch, and within the last 100 ms), or an error naming
    /// the partitions led.
    pub async fn wait_for_partitions(
        &self,
        count: u32,
        since: u64,
        limit: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let since = since.max(now_micros().saturating_sub(100_000));
            let led: std::collections::BTreeSet<u32> = {
                let reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
                reports
                    .iter()
                    .filter(|report| !self.members[report.candidate].killed)
                    .filter(
                        |report| matches!(report.event, Event::Leading { at, .. } if at >= since),
                    )
                    .filter_map(|report| report.partition)
                    .collect()
            };
            if led.len() as u32 >= count {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("{count} partitions never led within {limit:?}; {led:?} did"));
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits up to `limit` until `n` live candidates report leading after `since` (µs since
    /// the epoch); which, or an error naming who did.
    pub async fn wait_for_leaders(
        &self,
        n: usize,
        since: u64,
        limit: Duration,
    ) -> Result<Vec<usize>, String> {
        self.wait_for_leading(since, limit, |leading| leading.len() >= n)
            .await
            .map_err(|led| format!("{n} leaders never appeared within {limit:?}; {led:?} led"))
    }

    /// Waits up to `limit` until the live candidates that report leading after `since` are
    /// `enough`; who they are, or who led at the limit.
    async fn wait_for_leading(
        &self,
        since: u64,
        limit: Duration,
        enough: impl Fn(&[usize]) -> bool,
    ) -> Result<Vec<usize>, Vec<usize>> {
        let deadline = Instant::now() + limit;
        loop {
            let leading = self.leading_since(since);
            if enough(&leading) {
                return Ok(leading);
            }
            if Instant::now() >= deadline {
                return Err(leading);
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    /// The live candidate of the highest index: in priority mode, the best.
    pub fn best_live(&self) -> usize {
        (0..self.members.len()).rev().find(|at| !self.members[*at].killed).unwrap_or(0)
    }

    /// Waits up to `limit` until `candidate` reports leading after `since` (µs since the
    /// epoch), or an error naming who led instead.
    pub async fn wait_for_candidate(
        &self,
        candidate: usize,
        since: u64,
        limit: Duration,
    ) -> Result<(), String> {
        self.wait_for_leading(since, limit, |leading| leading.contains(&candidate))
            .await
            .map(drop)
            .map_err(|led| {
                format!("the best candidate c{candidate} never led within {limit:?}; {led:?} led")
            })
    }

    /// SIGKILL: the candidate dies holding whatever it held.
    pub fn kill(&mut self, candidate: usize) {
        self.members[candidate].killed = true;
        let _ = kill(self.members[candidate].pid, Signal::SIGKILL);
    }

    /// SIGSTOP: the candidate freezes wherever it is.
    pub fn pause(&self, candidate: usize) {
        let _ = kill(self.members[candidate].pid, Signal::SIGSTOP);
    }

    /// SIGCONT after [`pause`](Self::pause) or [`stall`](Self::stall).
    pub fn resume(&self, candidate: usize) {
        let _ = kill(self.members[candidate].pid, Signal::SIGCONT);
    }

    /// The live candidates that have not reported leading lately.
    pub fn standbys(&self) -> Vec<usize> {
        let leading = self.leading_since(0);
        (0..self.members.len())
            .filter(|candidate| !self.members[*candidate].killed && !leading.contains(candidate))
            .collect()
    }

    /// Tells each of `candidates` to stop itself with its next grant in hand, waits up to
    /// `within` for the first that does, and disarms the others; which one stopped. All are
    /// armed because standbys do not win equally often: Redis tells subscribers of a release
    /// in the order they subscribed, so the first one usually wins.
    pub async fn stall_first_granted(
        &mut self,
        candidates: &[usize],
        within: Duration,
    ) -> Result<usize, String> {
        for &candidate in candidates {
            self.command(candidate, "stall-grant").await?;
        }
        let deadline = Instant::now() + within;
        let stalled = loop {
            if let Some(&stalled) =
                candidates.iter().find(|&&candidate| is_stopped(self.members[candidate].pid))
            {
                break stalled;
            }
            if Instant::now() >= deadline {
                return Err(format!("none of {candidates:?} won a slot within {within:?}"));
            }
            sleep(Duration::from_millis(1)).await;
        };
        for &candidate in candidates.iter().filter(|&&candidate| candidate != stalled) {
            self.command(candidate, "disarm").await?;
        }
        Ok(stalled)
    }

    /// Writes one command line to a candidate.
    async fn command(&mut self, candidate: usize, command: &str) -> Result<(), String> {
        let stdin =
            self.members[candidate].stdin.as_mut().ok_or("the candidate's input is closed")?;
        let line = format!("{command}\n");
        stdin.write_all(line.as_bytes()).await.map_err(|e| format!("{command} c{candidate}: {e}"))
    }

    /// Tells a candidate to stop itself (`command`: `stall`, between its next check and its
    /// write, or `stall-renewal`, with that reply in hand), and waits up to
    /// `within` until it has (`true`) or it found at a check that it does not lead (`false`:
    /// it resigned or lost the slot since it was seen leading).
    pub async fn stall(
        &mut self,
        candidate: usize,
        command: &str,
        within: Duration,
    ) -> Result<bool, String> {
        let sent = now_micros();
        self.command(candidate, command).await?;
        let pid = self.members[candidate].pid;
        let deadline = Instant::now() + within;
        loop {
            if is_stopped(pid) {
                return Ok(true);
            }
            if self.declined_stall_since(candidate, sent) {
                return Ok(false);
            }
            if Instant::now() >= deadline {
                let reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
                let mut recent: Vec<String> = reports
                    .iter()
                    .rev()
                    .filter(|report| report.candidate == candidate)
                    .take(5)
                    .map(|report| format!("{:?}", report.event))
                    .collect();
                recent.reverse();
                return Err(format!(
                    "c{candidate} neither stalled nor declined within {within:?}; its last \
                     reports: {recent:?}"
                ));
            }
            sleep(Duration::from_millis(1)).await;
        }
    }

    fn declined_stall_since(&self, candidate: usize, since: u64) -> bool {
        let reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
        reports.iter().rev().any(|report| {
            report.candidate == candidate
                && matches!(report.event, Event::StallDeclined { at } if at >= since)
        })
    }

    /// Stops every live candidate gracefully (each releases its slot) and waits for them;
    /// the ones that did not exit cleanly within 10 s, by index.
    pub async fn stop(&mut self) -> Vec<usize> {
        for member in &mut self.members {
            if let Some(mut stdin) = member.stdin.take() {
                let _ = stdin.write_all(b"stop\n").await;
            }
        }
        let mut unclean = Vec::new();
        for (candidate, member) in self.members.iter_mut().enumerate() {
            if member.killed {
                let _ = member.child.wait().await;
                continue;
            }
            let _ = kill(member.pid, Signal::SIGCONT);
            match timeout(Duration::from_secs(10), member.child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                _ => unclean.push(candidate),
            }
        }
        // Let the readers take the last lines.
        sleep(Duration::from_millis(50)).await;
        unclean
    }
}

/// Whether the process is stopped (state `T` in /proc/<pid>/stat).
fn is_stopped(pid: Pid) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name, which is in parentheses.
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
}
