//! The candidates of a run, one task each, every one over its own fault layer: per-call
//! holders (`run_if_leader` or an `acquire` guard, with or without `auto_extend` and
//! `min_lease_time`), `Leadership` roles, `Partitions` nodes and observers. Each registers
//! every lease it may act on with the oracle, and checks the oracle right before each action.

use std::sync::Arc;
use std::time::Duration;

use leader::store::author::Layered;
use leader::store::{Revocation, SharedStore, SlotRef};
use leader::{
    Error, GroupObserver, LeaderGroupElectionOptions, LeaderGroupElector, Leadership,
    LeadershipOptions, Lease, LeaseStore, PartitionOptions, Partitions,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::faults::FaultLayer;
use crate::oracle::Belief;
use crate::world::{Mutant, World};

/// The election group every per-call holder, role and observer shares.
pub const GROUP: &str = "sim-group";
/// The partition set every node joins.
pub const SET: &str = "sim-set";

/// The timing every candidate of a run shares.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// `max_leaders` of the group.
    pub max_leaders: u32,
    /// The lease of every slot.
    pub lease: Duration,
    /// How many partitions the set has.
    pub partitions: u32,
}

/// What a candidate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Per-call terms: through a guard (`acquire`) or a closure (`run_if_leader`).
    PerCall { guard: bool, auto_extend: bool, min_lease: bool },
    /// A `Leadership` role, standing with a priority or none (then it steps down, after
    /// half a lease, for a better candidate that keeps waiting).
    Role { priority: Option<i32> },
    /// A `Partitions` node.
    Node,
    /// A `GroupObserver` of the group.
    Observer,
    /// An operator's tool: now and then revokes a live slot of the group or of a partition
    /// at its holder's expiry (`leader release`).
    Operator,
}

/// A candidate instance while it runs.
#[derive(Debug)]
pub struct Running {
    /// The instance's name in the trace (the holder id and the instance's number).
    pub who: String,
    stop: CancellationToken,
    resign: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Running {
    /// Starts instance `who` of a candidate of `kind` holding as `holder`.
    pub fn start(
        world: &Arc<World>,
        kind: Kind,
        holder: &str,
        who: String,
        timing: Timing,
    ) -> Self {
        let (stop, resign) = (CancellationToken::new(), Arc::new(Notify::new()));
        let store = Layered::new(FaultLayer::new(Arc::clone(world), &who), world.store.clone());
        let world = Arc::clone(world);
        let (holder, name) = (holder.to_owned(), who.clone());
        let task = match kind {
            Kind::PerCall { guard, auto_extend, min_lease } => {
                let elector = elector(store, &holder, timing, auto_extend, min_lease);
                tokio::spawn(per_call(world, name, elector, guard, timing, stop.clone()))
            }
            Kind::Role { priority } => {
                let mut options = LeadershipOptions::new()
                    .max_leaders(timing.max_leaders)
                    .lease_time(timing.lease)
                    .retry_interval(timing.lease / 2)
                    .holder_id(holder);
                if let Some(priority) = priority {
                    options = options.priority(priority).step_down_delay(timing.lease / 2);
                }
                tokio::spawn(role(world, name, store, options, stop.clone(), Arc::clone(&resign)))
            }
            Kind::Node => {
                let options = PartitionOptions::new()
                    .lease_time(timing.lease)
                    .retry_interval(timing.lease / 4)
                    .holder_id(holder);
                tokio::spawn(node(world, name, store, options, timing.partitions, stop.clone()))
            }
            Kind::Observer => {
                let store: SharedStore = Arc::new(store);
                tokio::spawn(observer(world, name, store, stop.clone()))
            }
            Kind::Operator => tokio::spawn(operator(world, name, store, timing, stop.clone())),
        };
        Running { who, stop, resign, task }
    }

    /// A crash: the instance's store calls never return from now on, and its task is gone.
    pub fn kill(self, world: &World) {
        world.kill(&self.who);
        world.log(&self.who, "killed");
        self.task.abort();
    }

    /// A graceful stop, waited for (within `bound`; false if it took longer).
    pub async fn stop(self, world: &World, bound: Duration) -> bool {
        world.log(&self.who, "stopping");
        self.stop.cancel();
        let mut task = self.task;
        let stopped = tokio::time::timeout(bound, &mut task).await.is_ok();
        if !stopped {
            task.abort();
        }
        world.log(&self.who, if stopped { "stopped" } else { "did not stop in time" });
        stopped
    }

    /// Asks a role to resign (nothing for the other kinds).
    pub fn resign(&self) {
        self.resign.notify_one();
    }
}

fn elector(
    store: Layered<FaultLayer, leader::MemoryStore>,
    holder: &str,
    timing: Timing,
    auto_extend: bool,
    min_lease: bool,
) -> LeaderGroupElector {
    let mut options = LeaderGroupElectionOptions::new(timing.max_leaders)
        .lease_time(timing.lease)
        .wait_time(timing.lease)
        .auto_extend(auto_extend)
        .holder_id(holder);
    if min_lease {
        options = options.min_lease_time(timing.lease / 2);
    }
    LeaderGroupElector::new(store, options).expect("valid options")
}

/// Per-call terms until stopped: each takes a slot, acts until its body's time is up or
/// the lease is lost, and gives the slot back (a guard released, or dropped).
async fn per_call(
    world: Arc<World>,
    who: String,
    elector: LeaderGroupElector,
    guard: bool,
    timing: Timing,
    stop: CancellationToken,
) {
    let blind = world.mutant == Some(Mutant::ActPastDeadline);
    while !stop.is_cancelled() {
        let body = world.draw(|rng| rng.millis(0, 2 * timing.lease.as_millis() as u64));
        let failed = if guard {
            match elector.acquire(GROUP).await {
                Ok(Some(slot)) => {
                    hold(&world, &who, slot.lease(), body, &stop, blind).await;
                    if world.draw(|rng| rng.chance(500)) {
                        let answer = slot.release().await;
                        world.log(&who, format_args!("guard released: {answer:?}"));
                    } else {
                        drop(slot);
                        world.log(&who, "guard dropped");
                    }
                    None
                }
                Ok(None) => None,
                Err(error) => Some(error),
            }
        } else {
            let (world, who, stop) = (&world, &who, &stop);
            let work = move |lease: Lease| async move {
                hold(world, who, &lease, body, stop, blind).await;
            };
            elector.run_if_leader(GROUP, work).await.err()
        };
        if let Some(error) = failed {
            world.log(&who, format_args!("per-call error: {error}"));
        }
        let pause = world.draw(|rng| rng.millis(1, timing.lease.as_millis() as u64 / 2));
        tokio::select! {
            biased;
            () = stop.cancelled() => {}
            () = sleep(pause) => {}
        }
    }
}

/// Acts on `lease` for `body`: before each action the oracle checks every believer, and the
/// holder checks its lease (unless `blind`, the broken variant that does not).
async fn hold(
    world: &World,
    who: &str,
    lease: &Lease,
    body: Duration,
    stop: &CancellationToken,
    blind: bool,
) {
    world.oracle().believe(who, Belief::Lease(lease.clone()), blind);
    world.log(who, format_args!("acts on fence {} for {body:?}", lease.fence()));
    let end = Instant::now() + body;
    while Instant::now() < end && !stop.is_cancelled() {
        world.check();
        if !blind && lease.live_fence().is_none() {
            world.log(who, format_args!("lease lost ({:?})", lease.loss_reason()));
            return;
        }
        let tick = world.draw(|rng| rng.millis(1, 50));
        sleep(tick.min(end - Instant::now())).await;
    }
    if blind {
        world.oracle().stop_believing(lease.token());
    }
    world.log(who, "done");
}

/// A role: registers each term's lease, resigns when asked, stops when told.
async fn role(
    world: Arc<World>,
    who: String,
    store: Layered<FaultLayer, leader::MemoryStore>,
    options: LeadershipOptions,
    stop: CancellationToken,
    resign: Arc<Notify>,
) {
    // A start the store refused for good (a fault's permanent failure) is tried again, as a
    // node's is; a stop while starting drops the start, and with it the only handle.
    let leadership = loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            started = Leadership::start(GROUP, store.clone(), options.clone()) => match started {
                Ok(leadership) => break leadership,
                Err(error) => world.log(&who, format_args!("start failed: {error}")),
            },
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = sleep(Duration::from_millis(50)) => {}
        }
    };
    let mut status = leadership.subscribe();
    loop {
        if let Some(lease) = leadership.lease() {
            world.oracle().believe(&who, Belief::Lease(lease), false);
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            () = resign.notified() => {
                world.log(&who, "resigning");
                leadership.resign().await;
                world.log(&who, "resigned");
            }
            changed = status.changed() => if changed.is_err() { break },
        }
    }
    if let Err(error) = leadership.stop().await {
        world.log(&who, format_args!("stop: {error}"));
    }
}

/// A partitions node: registers each owned partition's lease, stops when told.
async fn node(
    world: Arc<World>,
    who: String,
    store: Layered<FaultLayer, leader::MemoryStore>,
    options: PartitionOptions,
    count: u32,
    stop: CancellationToken,
) {
    let mut partitions = loop {
        match Partitions::start(SET, count, store.clone(), options.clone()).await {
            Ok(partitions) => break partitions,
            Err(error) => {
                world.log(&who, format_args!("start failed: {error}"));
                if matches!(error, Error::SetFull { .. }) {
                    // The simulated sets have a few nodes, never a full members' group.
                    world.oracle().violate(format!("{who}: start refused as a full set: {error}"));
                }
                tokio::select! {
                    biased;
                    () = stop.cancelled() => return,
                    () = sleep(Duration::from_millis(50)) => {}
                }
            }
        }
    };
    let mut view = partitions.watch_view();
    loop {
        for partition in partitions.owned() {
            world.oracle().believe(&who, Belief::Partition(partition), false);
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            event = partitions.next_event() => match event {
                Some(event) => world.log(&who, format_args!("{event:?}")),
                None => break,
            },
            changed = view.changed() => if changed.is_err() { break },
        }
    }
    if let Err(error) = partitions.stop().await {
        world.log(&who, format_args!("stop failed: {error}"));
    }
}

/// An observer: checks every state it reports.
async fn observer(world: Arc<World>, who: String, store: SharedStore, stop: CancellationToken) {
    let mut observer = loop {
        match GroupObserver::start(&store, GROUP).await {
            Ok(observer) => break observer,
            Err(_) => tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = sleep(Duration::from_millis(50)) => {}
            },
        }
    };
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            changed = observer.changed() => match changed {
                Ok(state) => {
                    let at = world.elapsed();
                    world.oracle().check_observed(&who, &state, at);
                }
                Err(_) => sleep(Duration::from_millis(20)).await,
            },
        }
    }
}

/// An operator: every so often, while the faults last, revokes a live slot at its holder's
/// expiry, which must never let two holders act at once. (After the faults, revocations
/// would keep the group or a partition from ever being led again: each leaves a slot held
/// by nobody until it lapses.)
async fn operator(
    world: Arc<World>,
    who: String,
    store: Layered<FaultLayer, leader::MemoryStore>,
    timing: Timing,
    stop: CancellationToken,
) {
    loop {
        let pause = world.draw(|rng| rng.millis(1, 2 * timing.lease.as_millis() as u64));
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = sleep(pause) => {}
        }
        if !world.faults_on() {
            continue;
        }
        let key = match world.draw(|rng| rng.below(u64::from(timing.partitions) + 1)) {
            0 => format!("leader:{GROUP}"),
            index => format!("leader:{SET}/{}", index - 1),
        };
        let live = crate::oracle::read(&world.store, &key).leaders;
        if let Some(slot) = live.get(world.draw(|rng| rng.below(live.len() as u64)) as usize) {
            let how = Revocation::AtExpiry;
            if let Err(error) = store.revoke(&key, SlotRef::Fence(slot.fence), how).await {
                world.log(&who, format_args!("revoke failed: {error}"));
            }
        }
    }
}
