//! Runs one scenario end to end: the deployment, the register, the candidates, the
//! monitor, the faults, a graceful stop, then the checker.

use std::path::Path;
use std::time::Duration;

use leader::LeaseStore;
use leader_testkit::proxy::{self, Proxy};
use tokio::task::block_in_place;
use tokio::time::{Instant, sleep};

use crate::backend::{Backend, Topology};
use crate::candidate::CandidateMode;
use crate::checker::{FaultWindow, Run, Verdict, check};
use crate::events::Event;
use crate::events::now_micros;
use crate::fleet::Fleet;
use crate::monitor::Monitor;
use crate::partitioned::PARTITIONS;
use crate::register::FencedRegister;
use crate::scenario::{Fault, Scenario, Timing};
use crate::store_spec::StoreSpec;

/// A scenario's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The scenario.
    pub scenario: Scenario,
    /// What the checker found.
    pub verdict: Verdict,
    /// How long the scenario took.
    pub took: Duration,
    /// Everything the checker judged, for a closer look at a failure.
    pub run: Run,
}

/// What a fault acts on.
struct Lab {
    backend: Backend,
    /// The fault proxies candidates go through (one per etcd member; one otherwise).
    proxies: Vec<Proxy>,
    fleet: Fleet,
    key: String,
    lease: Duration,
}

/// Runs `scenario` with candidates spawned from `program` (this crate's binary), holding
/// their slots in `mode`.
pub async fn run_scenario(
    program: &Path,
    scenario: &Scenario,
    timing: Timing,
    mode: CandidateMode,
) -> Result<Outcome, String> {
    let began = Instant::now();
    let lease = timing.lease;
    let topology = scenario.topology;
    let backend = tokio::task::spawn_blocking(move || Backend::start(topology))
        .await
        .map_err(|e| format!("starting {topology:?}: {e}"))?;
    let direct = backend.spec();
    let mut proxies = Vec::new();
    if scenario.uses_proxy() {
        let ports = match &backend {
            Backend::Standalone(server) => vec![server.port],
            Backend::Postgres(server) => vec![server.port],
            Backend::Etcd(cluster) => cluster.members.iter().map(|m| m.client_port).collect(),
            _ => Vec::new(),
        };
        for port in ports {
            proxies.push(Proxy::start(port).await);
        }
    }
    let through = match (proxies.as_slice(), &backend) {
        ([], _) => direct.clone(),
        ([proxy], Backend::Postgres(_)) => {
            StoreSpec::postgres(format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port))
        }
        (proxies, Backend::Etcd(_)) => {
            let ports: Vec<String> =
                proxies.iter().map(|proxy| format!("127.0.0.1:{}", proxy.port)).collect();
            StoreSpec::etcd(format!("etcd://{}", ports.join(",")))
        }
        ([proxy, ..], _) => StoreSpec::standalone(proxy.url()),
    };
    let register = FencedRegister::start(scenario.max_leaders).await.map_err(|e| e.to_string())?;
    let key = format!("chaos:{}", scenario.name);
    let args: Vec<String> = [
        ("--store", through.to_string()),
        ("--key", key.clone()),
        ("--max-leaders", scenario.max_leaders.to_string()),
        ("--lease-ms", lease.as_millis().to_string()),
        ("--register", register.address().to_owned()),
        ("--replica-ack", u32::from(topology == Topology::Sentinel).to_string()),
        ("--command-timeout-ms", scenario.command_timeout(lease).as_millis().to_string()),
        ("--mode", mode.name().to_owned()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect();
    let fleet = Fleet::spawn(program, scenario.candidates, &args).map_err(|e| e.to_string())?;
    let monitor_store = direct.connect(Duration::from_millis(200), 0).map_err(|e| e.to_string())?;
    // Partitions mode judges each partition as a group of one slot.
    let groups: Vec<String> = match mode {
        CandidateMode::Partitions => (0..PARTITIONS).map(|i| format!("{key}/{i}")).collect(),
        _ => vec![key.clone()],
    };
    // One sample every 5 ms in all: each group's every 5 ms × groups (six monitors at 5 ms
    // each would load the store six times more than the candidates under test).
    let every = Duration::from_millis(5) * groups.len() as u32;
    let monitors: Vec<Monitor> = groups
        .iter()
        .map(|group| Monitor::start(monitor_store.clone(), group.clone(), every))
        .collect();
    let mut lab = Lab { backend, proxies, fleet, key, lease };
    // Partitions mode: some node leads; the checker judges each partition's recovery.
    let n = if mode == CandidateMode::Partitions { 1 } else { scenario.max_leaders as usize };

    lab.fleet.wait_for_leaders(n, 0, Duration::from_secs(15)).await?;
    let mut faults = Vec::new();
    for round in 1..=timing.rounds {
        sleep(lease).await; // a lease of ordinary hand-overs first
        let fault = lab.inject(scenario.fault).await?;
        if std::env::var_os("LEADER_CHAOS_LOG").is_some() {
            // Beside the candidates' logs, on the same clock (UTC time of day).
            let (start, end) = (time_of_day(fault.start), time_of_day(fault.end));
            eprintln!("[lab] {} round {round}: fault from {start} to {end}", scenario.name);
        }
        lab.fleet
            .wait_for_leaders(n, fault.end, 10 * lease)
            .await
            .map_err(|e| format!("{} round {round}: {e}", scenario.name))?;
        if mode == CandidateMode::Priority {
            // The best live candidate (the latest started) leads: a better one that waited
            // is stepped down for after half a lease, read twice per half lease.
            let best = lab.fleet.best_live();
            lab.fleet
                .wait_for_candidate(best, fault.end, 10 * lease)
                .await
                .map_err(|e| format!("{} round {round}: {e}", scenario.name))?;
        }
        if mode == CandidateMode::Partitions {
            // Every partition led again (a dead node's once its leases ran out).
            lab.fleet
                .wait_for_partitions(PARTITIONS, fault.end, 10 * lease)
                .await
                .map_err(|e| format!("{} round {round}: {e}", scenario.name))?;
        }
        faults.push(fault);
    }
    sleep(lease).await;

    let unclean_exits = lab.fleet.stop().await;
    // Killed holders' slots run out within a lease of their last renewal (and etcd deletes
    // an expired lease's keys within half a second).
    sleep(lease + Duration::from_millis(200) + scenario.expiry_slack()).await;
    let mut leaked = Vec::new();
    for group in &groups {
        leaked.push(live_slots(&*monitor_store, group).await?);
    }
    if mode == CandidateMode::Partitions {
        // The nodes' announcements must be gone too.
        let members = format!("{}/members", lab.key);
        leaked[0] += live_slots(&*monitor_store, &members).await?;
    }
    let reports = lab.fleet.reports();
    let writes = register.log();
    let killed = lab.fleet.killed();
    let mut runs = Vec::new();
    for (i, (group, monitor)) in groups.iter().zip(monitors).enumerate() {
        let partition = (mode == CandidateMode::Partitions).then_some(i as u32);
        runs.push(Run {
            max_leaders: scenario.max_leaders as usize,
            // A partition's reports, and the stops (which end every term's availability).
            reports: reports
                .iter()
                .filter(|r| r.partition == partition || matches!(r.event, Event::Stopped { .. }))
                .cloned()
                .collect(),
            writes: writes.iter().filter(|write| write.key == *group).cloned().collect(),
            samples: monitor.finish(), // before the deployment stops
            faults: faults.clone(),
            killed: killed.clone(),
            leaked: leaked[i],
            unclean_exits: unclean_exits.clone(),
            recovery_bound: scenario.recovery_bound(timing)
                + match (mode, topology) {
                    // After an outage longer than a lease, a node announces itself again
                    // before it reads the members, and on etcd that waits out the
                    // lock-delay of its own lapsed announcement: one TTL more.
                    (CandidateMode::Partitions, Topology::Etcd) => lease,
                    _ => Duration::ZERO,
                },
            store_forgets_grants: scenario.store_forgets_grants(),
            // Judged over every partition below: the stalled node wrote to one of them.
            expects_rejected_write: scenario.fault == Fault::StallHolderBeforeWrite
                && partition.is_none(),
            shortfall_bound: scenario.shortfall_bound(timing),
            terms_must_not_lapse: scenario.terms_must_not_lapse(),
        });
    }
    let mut verdict = Verdict::default();
    for (i, run) in runs.iter().enumerate() {
        let one = check(run);
        match mode {
            CandidateMode::Partitions => verdict.merge(&format!("partition {i}: "), one),
            _ => verdict = one,
        }
    }
    if mode == CandidateMode::Partitions
        && scenario.fault == Fault::StallHolderBeforeWrite
        && verdict.writes_rejected == 0
    {
        verdict.violations.push("the late write never reached the register".to_owned());
    }
    let run = runs.swap_remove(0);
    Ok(Outcome { scenario: *scenario, verdict, took: began.elapsed(), run })
}

/// Live slots of `key`, asking a few times if the store is still coming back.
async fn live_slots(store: &dyn LeaseStore, key: &str) -> Result<usize, String> {
    let mut last_error = String::new();
    for _ in 0..50 {
        match store.state(key).await {
            Ok(snapshot) => return Ok(snapshot.leaders.len()),
            Err(error) => last_error = error.to_string(),
        }
        sleep(Duration::from_millis(100)).await;
    }
    Err(format!("could not read the group at the end: {last_error}"))
}

impl Lab {
    /// Injects `fault` and returns when it stopped.
    async fn inject(&mut self, fault: Fault) -> Result<FaultWindow, String> {
        let lease = self.lease;
        let start = now_micros();
        let mut out = Vec::new();
        match fault {
            Fault::KillHolder => {
                let holder = self.holder().await?;
                self.fleet.kill(holder);
                out.push(holder);
                self.fleet.add().map_err(|e| e.to_string())?; // keep the numbers up
            }
            Fault::PauseHolder => {
                let holder = self.holder().await?;
                self.fleet.pause(holder);
                out.push(holder);
                sleep(2 * lease).await;
                self.fleet.resume(holder);
            }
            Fault::StallHolderBeforeWrite => {
                let holder = self.stall_a_holder("stall").await?;
                out.push(holder);
                sleep(2 * lease).await;
                self.fleet.resume(holder);
            }
            Fault::StallDuringRenewal(percent) => {
                let holder = self.stall_a_holder("stall-renewal").await?;
                out.push(holder);
                sleep(lease * percent / 100).await;
                self.fleet.resume(holder);
            }
            Fault::StallWithGrant => {
                let standbys = self.fleet.standbys();
                // The first of them to win a slot stops: at the next hand-over or so.
                let standby = self.fleet.stall_first_granted(&standbys, 30 * lease).await?;
                out.push(standby);
                sleep(lease * 3 / 2).await;
                self.fleet.resume(standby);
            }
            Fault::RestartRedis => {
                let server = self.server()?;
                block_in_place(|| server.kill());
                sleep(lease).await;
                block_in_place(|| self.server().map(|server| server.restart()))?;
            }
            Fault::RestartRedisAtOnce => {
                let server = self.server()?;
                block_in_place(|| server.restart());
            }
            Fault::PauseRedis => {
                self.server()?.pause();
                sleep(lease * 3 / 2).await;
                self.server()?.resume();
            }
            Fault::CutConnections => {
                for proxy in self.proxies()? {
                    proxy.cut().await;
                }
            }
            Fault::BlackHole => self.proxy_fault(proxy::Fault::BlackHole, lease * 3 / 2).await?,
            Fault::Latency(divisor) => {
                self.proxy_fault(proxy::Fault::Latency(lease / divisor), 3 * lease).await?
            }
            Fault::DropReplies => {
                self.proxy_fault(proxy::Fault::DropReplies, lease * 3 / 2).await?;
            }
            Fault::ScriptFlush => {
                let until = Instant::now() + 2 * lease;
                while Instant::now() < until {
                    let server = self.server()?;
                    let said = block_in_place(|| server.cli(&["SCRIPT", "FLUSH"]));
                    if said != "OK" {
                        return Err(format!("SCRIPT FLUSH said `{said}`"));
                    }
                    sleep(Duration::from_millis(50)).await;
                }
            }
            Fault::SentinelFailover => match &self.backend {
                Backend::Sentinel(set_up) => block_in_place(|| set_up.fail_over()),
                _ => return Err("a Sentinel failover needs the Sentinel topology".into()),
            },
            Fault::RestartPostgres => {
                let Backend::Postgres(server) = &self.backend else {
                    return Err("a PostgreSQL restart needs the PostgreSQL topology".into());
                };
                block_in_place(|| server.kill());
                sleep(lease).await;
                block_in_place(|| server.restart());
            }
            Fault::PausePostgres => {
                let Backend::Postgres(server) = &self.backend else {
                    return Err("a PostgreSQL pause needs the PostgreSQL topology".into());
                };
                block_in_place(|| server.pause());
                sleep(lease * 3 / 2).await;
                block_in_place(|| server.resume());
            }
            Fault::KillEtcdLeader => {
                let leader = self.etcd_leader().await?;
                let cluster = self.etcd()?;
                block_in_place(|| cluster.members[leader].kill());
                sleep(lease).await;
                block_in_place(|| {
                    self.etcd().map(|cluster| cluster.members[leader].start_again())
                })?;
            }
            Fault::RestartEtcd => {
                let cluster = self.etcd()?;
                block_in_place(|| cluster.members.iter_mut().for_each(|member| member.kill()));
                sleep(lease).await;
                let cluster = self.etcd()?;
                block_in_place(|| {
                    cluster.members.iter_mut().for_each(|member| member.start_again())
                });
            }
            Fault::PauseEtcdLeader => {
                let leader = self.etcd_leader().await?;
                self.etcd()?.members[leader].pause();
                sleep(lease * 3 / 2).await;
                self.etcd()?.members[leader].resume();
            }
            Fault::IsolateEtcdLeader => {
                let leader = self.etcd_leader().await?;
                self.etcd()?.isolate(leader).await;
                sleep(lease * 3 / 2).await;
                self.etcd()?.heal();
            }
            Fault::RestartClusterNode => {
                let Backend::Cluster(cluster) = &mut self.backend else {
                    return Err("a Cluster node restart needs the Cluster topology".into());
                };
                let node = block_in_place(|| cluster.index_of(&group_hash_of(&self.key)));
                block_in_place(|| cluster.nodes[node].kill());
                sleep(lease).await;
                block_in_place(|| {
                    cluster.nodes[node].restart();
                    cluster.wait_until_ok();
                });
            }
        }
        Ok(FaultWindow { start, end: now_micros(), out })
    }

    /// The candidate leading most recently (waiting out a hand-over in progress).
    async fn holder(&self) -> Result<usize, String> {
        let leading = self.fleet.wait_for_leaders(1, 0, 5 * self.lease).await?;
        Ok(leading[0])
    }

    /// Tells the current holder to stall (`command`: before its next write, or during its
    /// next renewal); picks the holder again when the one picked had just resigned.
    async fn stall_a_holder(&mut self, command: &str) -> Result<usize, String> {
        for _ in 0..20 {
            let holder = self.holder().await?;
            if self.fleet.stall(holder, command, Duration::from_secs(5)).await? {
                return Ok(holder);
            }
        }
        Err("no holder stalled in 20 tries: each had resigned when told".into())
    }

    fn server(&mut self) -> Result<&mut leader_testkit::redis_server::RedisServer, String> {
        self.backend.server().ok_or_else(|| "this fault needs the standalone topology".into())
    }

    fn proxies(&self) -> Result<&[Proxy], String> {
        match self.proxies.as_slice() {
            [] => Err("this fault needs the proxy".into()),
            proxies => Ok(proxies),
        }
    }

    async fn proxy_fault(&self, fault: proxy::Fault, lasting: Duration) -> Result<(), String> {
        self.proxies()?.iter().for_each(|proxy| proxy.set(fault));
        sleep(lasting).await;
        self.proxies()?.iter().for_each(|proxy| proxy.set(proxy::Fault::None));
        Ok(())
    }

    fn etcd(&mut self) -> Result<&mut leader_testkit::etcd::EtcdCluster, String> {
        match &mut self.backend {
            Backend::Etcd(cluster) => Ok(cluster),
            _ => Err("this fault needs the etcd topology".into()),
        }
    }

    /// The member that leads the etcd cluster now.
    async fn etcd_leader(&mut self) -> Result<usize, String> {
        let cluster = self.etcd()?;
        Ok(cluster.wait_for_leader(Duration::from_secs(10)).await)
    }
}

/// The Redis key of group `key`'s hash, as the store lays it out.
fn group_hash_of(key: &str) -> String {
    leader::RedisStore::group_layout(key).expect("the lab's keys have no braces").group
}

/// `at` (µs since the epoch) as the UTC time of day, `HH:MM:SS.mmm`.
fn time_of_day(at: u64) -> String {
    let ms = at / 1_000 % 86_400_000;
    let (h, m, s) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1_000 % 60);
    format!("{h:02}:{m:02}:{s:02}.{:03}", ms % 1_000)
}
