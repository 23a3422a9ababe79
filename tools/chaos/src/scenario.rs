//! The scenarios: one fault each, on the deployment it needs, with the candidates and
//! slots it runs with.

use std::time::Duration;

use crate::backend::Topology;

/// A fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL the holder (a replacement candidate is started afterwards).
    KillHolder,
    /// SIGSTOP the holder for two leases, then SIGCONT.
    PauseHolder,
    /// The holder stops itself between its check and its write for two leases: its write
    /// arrives late and must be rejected.
    StallHolderBeforeWrite,
    /// SIGKILL Redis and start it again, without data, after one lease.
    RestartRedis,
    /// SIGKILL Redis and start it again, without data, at once.
    RestartRedisAtOnce,
    /// SIGSTOP Redis for one and a half leases, then SIGCONT.
    PauseRedis,
    /// The proxy closes every connection.
    CutConnections,
    /// The proxy moves nothing for one and a half leases.
    BlackHole,
    /// The proxy delays every chunk both ways by the lease divided by this, for three leases.
    Latency(u32),
    /// The holder stops itself (SIGSTOP) with its next renewal's reply in hand, and the lab
    /// continues it after this percentage of the lease.
    StallDuringRenewal(u32),
    /// A standby stops itself with its next grant's reply in hand, and the lab continues it
    /// after one and a half leases: the reply is read after its local deadline.
    StallWithGrant,
    /// The proxy lets requests through but drops replies (closing the connection) for one
    /// and a half leases.
    DropReplies,
    /// `SCRIPT FLUSH` every 50 ms for two leases.
    ScriptFlush,
    /// `SENTINEL FAILOVER`: the replica becomes the primary; the fault lasts until the old
    /// primary has synced as the new one's replica (grants wait for one replica).
    SentinelFailover,
    /// The Cluster node serving the group is killed and started again after one lease,
    /// without data; the fault lasts until the cluster is ok again.
    RestartClusterNode,
    /// SIGKILL PostgreSQL and start it again on the same data directory after one lease:
    /// committed grants survive.
    RestartPostgres,
    /// SIGSTOP PostgreSQL (every process) for one and a half leases, then SIGCONT.
    PausePostgres,
    /// SIGKILL etcd's Raft leader and start it again on its data after one lease.
    KillEtcdLeader,
    /// SIGKILL every etcd member and start them again on their data after one lease.
    RestartEtcd,
    /// SIGSTOP etcd's Raft leader for one and a half leases, then SIGCONT.
    PauseEtcdLeader,
    /// Cut etcd's Raft leader off from its peers for one and a half leases (clients still
    /// reach it), then heal.
    IsolateEtcdLeader,
}

/// One scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// A short name, for `--only`.
    pub name: &'static str,
    /// The fault.
    pub fault: Fault,
    /// The fault in words, for the table.
    pub described: &'static str,
    /// Candidate processes.
    pub candidates: usize,
    /// Slots in the group.
    pub max_leaders: u32,
    /// The deployment.
    pub topology: Topology,
}

impl Scenario {
    /// Whether the scenario runs with candidates in `mode`. Partitions mode has no stall
    /// points inside a renewal or a grant (a node renews its partitions in batches), and
    /// each partition is a group of one slot, so a scenario of N > 1 is the same one again.
    ///
    /// Priority mode's candidates never resign, so a standby wins a slot only when the best
    /// one fails: a stall of a standby's grant never comes.
    pub fn supports(&self, mode: crate::candidate::CandidateMode) -> bool {
        use crate::candidate::CandidateMode;
        match mode {
            CandidateMode::Partitions => {
                self.max_leaders == 1
                    && !matches!(self.fault, Fault::StallDuringRenewal(_) | Fault::StallWithGrant)
            }
            CandidateMode::Priority => self.fault != Fault::StallWithGrant,
            _ => true,
        }
    }

    /// Whether candidates reach Redis through the fault proxy.
    pub fn uses_proxy(&self) -> bool {
        matches!(
            self.fault,
            Fault::CutConnections | Fault::BlackHole | Fault::Latency(_) | Fault::DropReplies
        )
    }

    /// The candidates' store command timeout: a quarter of the lease, or, on a slow network
    /// (a round trip of up to half the lease), the whole lease, and two on etcd, whose
    /// acquire makes up to five round trips one after another (the lease of an attempt that
    /// got no answer revoked, a lease, the index's marker lease, the transaction, and its
    /// confirmation after a lock-delay; docs/etcd-store.md). At +lease/10 each way, with
    /// one lease, every acquire during the fault could time out, and the role stayed short
    /// until the fault ended (1 run in 6 missed the shortfall bound).
    pub fn command_timeout(&self, lease: Duration) -> Duration {
        match (self.fault, self.topology) {
            (Fault::Latency(_), Topology::Etcd) => 2 * lease,
            (Fault::Latency(_), _) => lease,
            _ => lease / 4,
        }
    }

    /// On a slow network, which still carries every request: the longest the role may be
    /// short of N leaders, during the fault or after it. That is the recovery bound plus one
    /// round trip, the time a lapsed term's release takes to reach the store and its news
    /// to come back. `None` for other faults, which are judged by their recovery.
    pub fn shortfall_bound(&self, timing: Timing) -> Option<Duration> {
        match self.fault {
            Fault::Latency(divisor) => {
                Some(self.recovery_bound(timing) + 2 * timing.lease / divisor)
            }
            _ => None,
        }
    }

    /// Whether no term may end by running out: a round trip shorter than half the lease
    /// leaves time to renew, since renewals are due when two thirds of the lease remain.
    pub fn terms_must_not_lapse(&self) -> bool {
        matches!(self.fault, Fault::Latency(divisor) if divisor > 4)
    }

    /// The longest a recovery may take. On etcd, a slot taken over from a holder that never
    /// released it is acted on one TTL after its grant (the lock-delay), the lease's keys go
    /// up to half a second after it ends, and a lost Raft leader is replaced within an
    /// election timeout: two leases and those. With Sentinel, grants and renewals wait for
    /// the replica's acknowledgement (up to the command timeout, a quarter lease), and a
    /// renewal sent just before the fault's end that the replica did not confirm still
    /// keeps the slot on the primary for its lease: one wait more.
    pub fn recovery_bound(&self, timing: Timing) -> Duration {
        match self.topology {
            Topology::Etcd => {
                let election = Duration::from_millis(leader_testkit::etcd::ELECTION_TIMEOUT_MS);
                timing.recovery_bound() + timing.lease + election + Duration::from_millis(500)
            }
            Topology::Sentinel => timing.recovery_bound() + timing.lease / 4,
            _ => timing.recovery_bound(),
        }
    }

    /// How long after a lease ends the store may still show the slot: etcd deletes an
    /// expired lease's keys within half a second.
    pub fn expiry_slack(&self) -> Duration {
        match self.topology {
            Topology::Etcd => Duration::from_millis(600),
            _ => Duration::ZERO,
        }
    }

    /// Whether the fault makes the store forget grants (a restart without data, at once).
    pub fn store_forgets_grants(&self) -> bool {
        self.fault == Fault::RestartRedisAtOnce
    }
}

const fn scenario(
    name: &'static str,
    fault: Fault,
    described: &'static str,
    candidates: usize,
    max_leaders: u32,
    topology: Topology,
) -> Scenario {
    Scenario { name, fault, described, candidates, max_leaders, topology }
}

/// Every scenario, in the order the table shows them.
pub const SCENARIOS: &[Scenario] = {
    use Fault::*;
    use Topology::*;
    &[
        scenario("kill-holder", KillHolder, "holder SIGKILLed", 4, 1, Standalone),
        scenario("kill-holder-n2", KillHolder, "holder SIGKILLed", 5, 2, Standalone),
        scenario("pause-holder", PauseHolder, "holder SIGSTOPped 2 leases", 4, 1, Standalone),
        scenario(
            "stall-before-write",
            StallHolderBeforeWrite,
            "holder stopped between check and write, 2 leases",
            4,
            1,
            Standalone,
        ),
        scenario(
            "restart-redis",
            RestartRedis,
            "Redis killed, back empty after 1 lease",
            4,
            1,
            Standalone,
        ),
        scenario(
            "restart-redis-at-once",
            RestartRedisAtOnce,
            "Redis killed, back empty at once",
            4,
            1,
            Standalone,
        ),
        scenario(
            "stall-renewal-500",
            StallDuringRenewal(50),
            "holder stopped 0.5 lease, renewal reply in hand",
            4,
            1,
            Standalone,
        ),
        scenario(
            "stall-renewal-800",
            StallDuringRenewal(80),
            "holder stopped 0.8 lease, renewal reply in hand",
            4,
            1,
            Standalone,
        ),
        scenario(
            "stall-renewal-1200",
            StallDuringRenewal(120),
            "holder stopped 1.2 leases, renewal reply in hand",
            4,
            1,
            Standalone,
        ),
        scenario(
            "late-grant",
            StallWithGrant,
            "standby stopped 1.5 leases, grant reply in hand",
            4,
            1,
            Standalone,
        ),
        scenario("pause-redis", PauseRedis, "Redis SIGSTOPped 1.5 leases", 4, 1, Standalone),
        scenario("pause-redis-n2", PauseRedis, "Redis SIGSTOPped 1.5 leases", 5, 2, Standalone),
        scenario("cut", CutConnections, "every connection cut", 4, 1, Standalone),
        scenario("black-hole", BlackHole, "black hole 1.5 leases", 4, 1, Standalone),
        scenario("latency", Latency(10), "+lease/10 each way, 3 leases", 4, 1, Standalone),
        scenario("latency-l6", Latency(6), "+lease/6 each way, 3 leases", 4, 1, Standalone),
        scenario("latency-l4", Latency(4), "+lease/4 each way, 3 leases", 4, 1, Standalone),
        scenario("drop-replies", DropReplies, "replies dropped 1.5 leases", 4, 1, Standalone),
        scenario("script-flush", ScriptFlush, "SCRIPT FLUSH every 50 ms", 4, 1, Standalone),
        scenario("sentinel-failover", SentinelFailover, "Sentinel failover", 4, 1, Sentinel),
        scenario(
            "cluster-node-restart",
            RestartClusterNode,
            "group's Cluster node killed, back after 1 lease",
            4,
            1,
            Cluster,
        ),
        scenario("pg-kill-holder", KillHolder, "holder SIGKILLed", 4, 1, Postgres),
        scenario("pg-pause-holder", PauseHolder, "holder SIGSTOPped 2 leases", 4, 1, Postgres),
        scenario(
            "pg-restart",
            RestartPostgres,
            "PostgreSQL SIGKILLed, back on its data after 1 lease",
            4,
            1,
            Postgres,
        ),
        scenario("pg-pause", PausePostgres, "PostgreSQL SIGSTOPped 1.5 leases", 4, 1, Postgres),
        scenario("pg-cut", CutConnections, "every connection cut", 4, 1, Postgres),
        scenario("pg-black-hole", BlackHole, "black hole 1.5 leases", 4, 1, Postgres),
        scenario("etcd-kill-holder", KillHolder, "holder SIGKILLed", 4, 1, Etcd),
        scenario("etcd-kill-holder-n2", KillHolder, "holder SIGKILLed", 5, 2, Etcd),
        scenario("etcd-pause-holder", PauseHolder, "holder SIGSTOPped 2 leases", 4, 1, Etcd),
        scenario(
            "etcd-kill-leader",
            KillEtcdLeader,
            "Raft leader SIGKILLed, back on its data after 1 lease",
            4,
            1,
            Etcd,
        ),
        scenario(
            "etcd-restart-all",
            RestartEtcd,
            "every member SIGKILLed, back on their data after 1 lease",
            4,
            1,
            Etcd,
        ),
        scenario(
            "etcd-pause-leader",
            PauseEtcdLeader,
            "Raft leader SIGSTOPped 1.5 leases",
            4,
            1,
            Etcd,
        ),
        scenario(
            "etcd-isolate-leader",
            IsolateEtcdLeader,
            "Raft leader cut off from its peers 1.5 leases",
            4,
            1,
            Etcd,
        ),
        scenario("etcd-cut", CutConnections, "every connection cut", 4, 1, Etcd),
        scenario("etcd-black-hole", BlackHole, "black hole 1.5 leases", 4, 1, Etcd),
        scenario("etcd-latency", Latency(10), "+lease/10 each way, 3 leases", 4, 1, Etcd),
    ]
};

/// How long things take in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The candidates' lease.
    pub lease: Duration,
    /// Faults per scenario.
    pub rounds: usize,
}

impl Timing {
    /// The short run CI does: one fault per scenario, 1 s leases.
    pub const SHORT: Timing = Timing { lease: Duration::from_secs(1), rounds: 1 };
    /// The soak for release checks: 20 faults per scenario.
    pub const SOAK: Timing = Timing { lease: Duration::from_secs(1), rounds: 20 };

    /// The longest a recovery may take: one lease plus one retry (with its jitter), as the
    /// candidates are configured.
    pub fn recovery_bound(&self) -> Duration {
        self.lease + self.lease / 5 + self.lease / 20
    }
}
