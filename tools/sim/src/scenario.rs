//! One seeded run: the plan drawn from the seed (timing, candidates, the faults' share of
//! calls, kills, stops, restarts and resignations during the fault window), played in
//! virtual time on a current-thread runtime with tokio's paused clock, then the checks
//! after the faults: every partition and the group's slots led again within the bound, and
//! nothing held once every candidate stopped gracefully.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until};

use leader::LeaseStore;

use crate::actors::{GROUP, Kind, Running, SET, Timing};
use crate::oracle::read;
use crate::rng::Rng;
use crate::world::{Mutant, StoreFault, World};

/// What one run found.
#[derive(Debug)]
pub struct Outcome {
    /// The run's seed.
    pub seed: u64,
    /// The broken variant it played, if any.
    pub mutant: Option<Mutant>,
    /// What the oracle found; empty when the run passed.
    pub violations: Vec<String>,
    /// Every line of the trace.
    pub trace: Vec<String>,
    /// How long after the faults ended every partition and the group were led again.
    pub recovered_after: Option<Duration>,
    /// The checks of every believer the oracle made.
    pub checks: u64,
}

impl Outcome {
    /// Whether the oracle found nothing.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// A lifecycle event of the fault window.
#[derive(Debug, Clone, Copy)]
enum Action {
    Kill,
    Stop,
    Start,
    Resign,
}

/// The run drawn from a seed.
#[derive(Debug)]
struct Plan {
    timing: Timing,
    command_timeout: Duration,
    fault_window: Duration,
    candidates: Vec<(Kind, String)>,
    events: Vec<(Duration, usize, Action)>,
    /// The store's own faults, in the first six leases of the window (so the leases they
    /// cut short run out before the faults end).
    store_faults: Vec<(Duration, StoreFault)>,
    /// The holder an operator prefers for the group from the faults' end: a role's, or
    /// `ghost` (a holder that never comes).
    preference: Option<String>,
}

impl Plan {
    fn draw(seed: u64, mutant: Option<Mutant>) -> Plan {
        let mut rng = Rng::new(seed.rotate_left(17) ^ 0x9a11);
        let lease = Duration::from_millis(rng.pick(&[200, 500, 1000]));
        let timing = Timing {
            max_leaders: rng.between(1, 3) as u32,
            lease,
            partitions: rng.between(1, 8) as u32,
        };
        let command_timeout = lease / rng.pick(&[10, 5, 3]);
        let mut candidates = Vec::new();
        let per_call = if mutant == Some(Mutant::ActPastDeadline) { 2 } else { rng.between(0, 3) };
        for index in 1..=per_call {
            let kind = Kind::PerCall {
                guard: rng.chance(500),
                auto_extend: mutant != Some(Mutant::ActPastDeadline) && rng.chance(500),
                min_lease: rng.chance(300),
            };
            candidates.push((kind, format!("call{index}")));
        }
        for index in 1..=rng.between(1, 3) {
            let priority = rng.chance(400).then(|| rng.between(0, 2) as i32);
            candidates.push((Kind::Role { priority }, format!("role{index}")));
        }
        for index in 1..=rng.between(1, 3) {
            candidates.push((Kind::Node, format!("node{index}")));
        }
        if rng.chance(500) {
            candidates.push((Kind::Operator, "operator".to_owned()));
        }
        candidates.push((Kind::Observer, "observer".to_owned()));
        let fault_window = 8 * lease;
        let mut events = Vec::new();
        for _ in 0..rng.between(0, 6) {
            let at = rng.millis(0, fault_window.as_millis() as u64);
            let index = rng.below(candidates.len() as u64 - 1) as usize; // not the observer
            let action = rng.pick(&[Action::Kill, Action::Stop, Action::Start, Action::Resign]);
            events.push((at, index, action));
        }
        events.sort_by_key(|(at, ..)| *at);
        let mut store_faults = Vec::new();
        let faults =
            if mutant == Some(Mutant::FencesResetWithData) { 1 } else { rng.between(0, 2) };
        for _ in 0..faults {
            let at = rng.millis(0, 6 * lease.as_millis() as u64);
            let step = lease * rng.pick(&[1, 5, 10, 30]) / 10;
            let fault = match rng.below(3) {
                _ if mutant == Some(Mutant::FencesResetWithData) => StoreFault::LoseData,
                0 => StoreFault::StepAhead(step),
                1 => StoreFault::StepBack(step.min(lease)),
                _ => StoreFault::LoseData,
            };
            store_faults.push((at, fault));
        }
        store_faults.sort_by_key(|(at, _)| *at);
        let roles: Vec<&String> = candidates
            .iter()
            .filter(|(kind, _)| matches!(kind, Kind::Role { .. }))
            .map(|(_, holder)| holder)
            .collect();
        let preference = rng.chance(300).then(|| match rng.below(roles.len() as u64 + 1) {
            0 => "ghost".to_owned(),
            index => roles[index as usize - 1].clone(),
        });
        Plan { timing, command_timeout, fault_window, candidates, events, store_faults, preference }
    }

    /// How much longer the store's slots last because its clock stepped back.
    fn stepped_back(&self) -> Duration {
        self.store_faults
            .iter()
            .map(|(_, fault)| match fault {
                StoreFault::StepBack(by) => *by,
                _ => Duration::ZERO,
            })
            .sum()
    }

    /// How long after the faults end every partition and the group must be led again: the
    /// late answers of the fault window (twice the command timeout), the slots of killed
    /// candidates running out (a lease), a lease for a hand-over, the candidates' longest
    /// pause after store failures (1 s) and the longest retry interval (half a lease), and
    /// as long again as the store's clock stepped back (a killed holder's slot lasts that
    /// much longer).
    fn recovery_bound(&self) -> Duration {
        let lease = self.timing.lease;
        2 * self.command_timeout
            + 2 * lease
            + Duration::from_secs(1)
            + lease / 2
            + self.stepped_back()
    }
}

/// A candidate of the plan and its running instance, if any.
struct Seat {
    kind: Kind,
    holder: String,
    instances: u32,
    running: Option<Running>,
}

impl Seat {
    fn start(&mut self, world: &Arc<World>, timing: Timing) {
        self.instances += 1;
        let who = format!("{}.{}", self.holder, self.instances);
        world.log(&who, format_args!("starts ({:?})", self.kind));
        self.running = Some(Running::start(world, self.kind, &self.holder, who, timing));
    }
}

/// Whether runs replay: tokio's random numbers can be seeded only in a build with
/// `--cfg tokio_unstable` (the workspace's `.cargo/config.toml` sets it).
pub fn replays() -> bool {
    cfg!(tokio_unstable)
}

/// Runs seed `seed` (with broken variant `mutant`); `echo` prints the trace as it goes.
pub fn run(seed: u64, mutant: Option<Mutant>, echo: bool) -> Outcome {
    leader::__private::seed_thread_randomness(Some(seed));
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    // tokio's own draws (which of several ready `select!` branches, which watch waiter
    // first) from the seed too.
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = builder.build().expect("a current-thread runtime");
    let outcome = runtime.block_on(simulate(seed, mutant, echo));
    drop(runtime);
    leader::__private::seed_thread_randomness(None);
    outcome
}

async fn simulate(seed: u64, mutant: Option<Mutant>, echo: bool) -> Outcome {
    let plan = Plan::draw(seed, mutant);
    let world = Arc::new(World::new(seed, mutant, plan.command_timeout, echo));
    let timing = plan.timing;
    world.log(
        "sim",
        format_args!(
            "seed {seed}: {timing:?}, command timeout {:?}, {} ‰ of calls faulted, clocks \
             {} ppm slow, {} candidates, events {:?}, the store's faults {:?}",
            plan.command_timeout,
            world.fault_rate,
            world.slow_clock_ppm,
            plan.candidates.len(),
            plan.events,
            plan.store_faults
        ),
    );
    let start = Instant::now();
    let mut seats: Vec<Seat> = plan
        .candidates
        .iter()
        .map(|(kind, holder)| Seat {
            kind: *kind,
            holder: holder.clone(),
            instances: 0,
            running: None,
        })
        .collect();
    for seat in &mut seats {
        seat.start(&world, timing);
    }
    let checker = tokio::spawn({
        let world = Arc::clone(&world);
        async move {
            loop {
                sleep(Duration::from_millis(5)).await;
                world.check();
            }
        }
    });

    let store_faults = tokio::spawn({
        let (world, faults) = (Arc::clone(&world), plan.store_faults.clone());
        async move {
            for (at, fault) in faults {
                sleep_until(start + at).await;
                world.break_store(fault);
            }
        }
    });
    for (at, index, action) in &plan.events {
        sleep_until(start + *at).await;
        let seat = &mut seats[*index];
        match (action, seat.running.take()) {
            (Action::Kill, Some(running)) => running.kill(&world),
            (Action::Stop, Some(running)) => {
                if !running.stop(&world, 4 * timing.lease).await {
                    world.oracle().violate(format!("{}: a stop took over 4 leases", seat.holder));
                }
            }
            (Action::Resign, Some(running)) => {
                running.resign();
                seat.running = Some(running);
            }
            (Action::Start, None) => seat.start(&world, timing),
            (_, running) => seat.running = running,
        }
    }
    sleep_until(start + plan.fault_window).await;
    store_faults.await.expect("the store's faults are applied");
    world.end_faults();
    if let Some(holder) = &plan.preference {
        let key = format!("leader:{GROUP}");
        let preferred = Some((holder.as_str(), 1000 * timing.lease));
        world.store.prefer(&key, preferred).await.expect("the memory store keeps preferences");
        world.log("operator", format_args!("prefers {holder} for {key}"));
    }
    for seat in seats.iter_mut().filter(|seat| seat.running.is_none()) {
        seat.start(&world, timing);
    }

    let recovered_after = recover(&world, &plan, &seats).await;
    if recovered_after.is_none() {
        let bound = plan.recovery_bound();
        world.oracle().violate(format!(
            "the group (by its best role, where one has the highest priority) or a partition was \
             not led again within {bound:?} of the faults' end (two leases more where a best \
             role must lead)"
        ));
    }

    // The slots of candidates killed in the fault window lapse by then (a kill is a crash:
    // nothing gives them back), as do the grants of requests held past their callers.
    let lapsed = timing.lease + 3 * plan.command_timeout + plan.stepped_back();
    sleep_until(start + plan.fault_window + lapsed).await;
    for seat in &mut seats {
        if let Some(running) = seat.running.take()
            && !running.stop(&world, 4 * timing.lease).await
        {
            world.oracle().violate(format!("{}: a graceful stop took over 4 leases", seat.holder));
        }
    }
    let _ = tokio::time::timeout(2 * timing.lease, leader::wait_for_releases()).await;
    // A slot kept for its minimum lease time (half a lease) lapses by then.
    sleep(timing.lease / 2).await;
    checker.abort();
    world.check();
    let mut keys = vec![format!("leader:{GROUP}"), format!("leader:{SET}/members")];
    keys.extend((0..timing.partitions).map(|index| format!("leader:{SET}/{index}")));
    for key in keys {
        let left: Vec<String> = read(&world.store, &key)
            .leaders
            .iter()
            // A request the store acted on after its caller timed out is held by nobody (no
            // stop can give it back before it lands), as is a slot revoked at expiry; both
            // lapse within their lease.
            .filter(|slot| !world.oracle().orphaned(&key, slot.fence))
            .map(|slot| format!("{}#{}", slot.holder, slot.fence))
            .collect();
        if !left.is_empty() {
            world
                .oracle()
                .violate(format!("{key} still held after every candidate stopped: {left:?}"));
        }
    }
    let (violations, checks) = {
        let oracle = world.oracle();
        (oracle.violations().to_vec(), oracle.checks())
    };
    Outcome { seed, mutant, violations, trace: world.trace(), recovered_after, checks }
}

/// The running role that must lead after the faults: with one slot and every running role
/// of a priority, the one the operator prefers, or else one of a priority above 0 and above
/// every other's.
fn best_role(plan: &Plan, seats: &[Seat]) -> Option<String> {
    if plan.timing.max_leaders != 1 {
        return None;
    }
    let mut roles = Vec::new();
    for seat in seats {
        if let (Kind::Role { priority }, Some(running)) = (seat.kind, &seat.running) {
            roles.push((priority?, running.who.clone()));
            if plan.preference.as_ref() == Some(&seat.holder) {
                roles.last_mut().expect("just pushed").0 = i32::MAX;
            }
        }
    }
    roles.sort_by_key(|(priority, _)| std::cmp::Reverse(*priority));
    match roles.as_slice() {
        [(best, who), rest @ ..] if *best > 0 && rest.iter().all(|(other, _)| other < best) => {
            Some(who.clone())
        }
        _ => None,
    }
}

/// Waits, within the plan's bound, until every partition is owned by a running node, each
/// node owning its share (floor or ceiling of M/N), and the group has as many believers
/// among running candidates as it has slots or running roles; how long that took.
async fn recover(world: &World, plan: &Plan, seats: &[Seat]) -> Option<Duration> {
    let began = Instant::now();
    let running = |kinds: &dyn Fn(Kind) -> bool| -> Vec<String> {
        seats
            .iter()
            .filter(|seat| kinds(seat.kind))
            .filter_map(|seat| seat.running.as_ref().map(|running| running.who.clone()))
            .collect()
    };
    let roles = running(&|kind| matches!(kind, Kind::Role { .. })).len() as u32;
    let candidates = running(&|kind| matches!(kind, Kind::Role { .. } | Kind::PerCall { .. }));
    let nodes = running(&|kind| kind == Kind::Node);
    let wanted = plan.timing.max_leaders.min(roles) as usize;
    // With one slot and every running role of a priority, one role of the highest priority
    // (above the per-call candidates' 0) must lead once it has waited out the leader's
    // step-down delay (half a lease, read twice per delay) and the claim's life.
    let best = best_role(plan, seats);
    let bound =
        plan.recovery_bound() + if best.is_some() { 2 * plan.timing.lease } else { Duration::ZERO };
    while began.elapsed() <= bound {
        let led = {
            let mut oracle = world.oracle();
            let group = oracle.believed_by(&format!("leader:{GROUP}"), &candidates);
            let count = plan.timing.partitions;
            let owned = (0..count)
                .all(|index| oracle.believed_by(&format!("leader:{SET}/{index}"), &nodes) >= 1);
            // Balanced: each node owns floor(M/N) or ceil(M/N) of the M partitions.
            let (low, high) = (count / nodes.len() as u32, count.div_ceil(nodes.len() as u32));
            let balanced = nodes.iter().all(|node| {
                let mine = (0..count)
                    .filter(|index| {
                        oracle.believed_by(
                            &format!("leader:{SET}/{index}"),
                            std::slice::from_ref(node),
                        ) > 0
                    })
                    .count() as u32;
                (low..=high).contains(&mine)
            });
            let best_leads = best.as_ref().is_none_or(|who| {
                oracle.believed_by(&format!("leader:{GROUP}"), std::slice::from_ref(who)) > 0
            });
            group >= wanted && owned && balanced && best_leads
        };
        if led {
            world.log("sim", format_args!("led again after {:?}", began.elapsed()));
            return Some(began.elapsed());
        }
        sleep(Duration::from_millis(5)).await;
    }
    None
}
