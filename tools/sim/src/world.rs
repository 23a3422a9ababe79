//! What every part of one simulated run shares: the store, the clock's origin, the seeded
//! random numbers, the trace, the oracle, which candidates are dead, and whether faults
//! are on.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::sync::Mutex;
use std::time::Duration;

use leader::MemoryStore;
use tokio::time::Instant;

use crate::oracle::Oracle;
use crate::rng::Rng;

/// A deliberately broken variant, which the oracle must catch (`tools/sim/tests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// A per-call holder acts until its body ends, without checking its lease.
    ActPastDeadline,
    /// The store answers a renewal with three times the time to live it gave.
    RenewPastExpiry,
    /// The store's release frees the group's oldest slot, whatever token it is given.
    ReleaseAnyToken,
    /// A partition's acquire answered full is answered granted, with nothing written.
    PartitionWithoutGrant,
    /// The store's state lists a slot it never granted, as a pending grant would be.
    ObserverSeesPending,
    /// The candidates' clocks run 2% slower than the store's: beyond what a lease's local
    /// deadline allows for (0.1%).
    ClockBeyondAllowance,
    /// A store that loses its data loses its fence counter too, and counts again from
    /// zero: fences go back.
    FencesResetWithData,
}

impl Mutant {
    /// Every variant, in the order the tests try them.
    pub const ALL: [Mutant; 7] = [
        Mutant::ActPastDeadline,
        Mutant::RenewPastExpiry,
        Mutant::ReleaseAnyToken,
        Mutant::PartitionWithoutGrant,
        Mutant::ObserverSeesPending,
        Mutant::ClockBeyondAllowance,
        Mutant::FencesResetWithData,
    ];

    /// The variant's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::ActPastDeadline => "act-past-deadline",
            Mutant::RenewPastExpiry => "renew-past-expiry",
            Mutant::ReleaseAnyToken => "release-any-token",
            Mutant::PartitionWithoutGrant => "partition-without-grant",
            Mutant::ObserverSeesPending => "observer-sees-pending",
            Mutant::ClockBeyondAllowance => "clock-beyond-allowance",
            Mutant::FencesResetWithData => "fences-reset-with-data",
        }
    }

    /// The variant named `name`.
    pub fn by_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|mutant| mutant.name() == name)
    }
}

/// A fault of the store itself, on the plan's schedule.
#[derive(Debug, Clone, Copy)]
pub enum StoreFault {
    /// The store's clock steps this far ahead: every slot live then expires that much
    /// sooner, before its holder's local deadline (which no allowance covers).
    StepAhead(Duration),
    /// The store's clock steps this far back: every slot live then lasts that much longer.
    StepBack(Duration),
    /// The store restarts without its data: every slot is gone, and fences keep
    /// increasing (as the stores promise across a restart; not in
    /// [`Mutant::FencesResetWithData`]).
    LoseData,
}

/// One run's shared state.
#[derive(Debug)]
pub struct World {
    /// The store every candidate reaches through its own fault layer.
    pub store: MemoryStore,
    /// How long a store call may take before its caller gets a timeout.
    pub command_timeout: Duration,
    /// The broken variant this run plays, if any.
    pub mutant: Option<Mutant>,
    /// The per-mille share of calls faulted while faults are on, drawn from the seed.
    pub fault_rate: u64,
    /// How much slower the candidates' clocks run than the store's, in parts per million,
    /// drawn from the seed: every time to live the store reports lasts this much longer on
    /// a candidate's clock. At most the 1,000 a lease's local deadline allows for (20,000
    /// in [`Mutant::ClockBeyondAllowance`]).
    pub slow_clock_ppm: u64,
    start: Instant,
    faults_on: Mutex<bool>,
    rng: Mutex<Rng>,
    trace: Mutex<Vec<String>>,
    echo: bool,
    oracle: Mutex<Oracle>,
    dead: Mutex<BTreeSet<String>>,
    /// Set while the store acts on a request its caller gave up on (held past its deadline).
    late: Mutex<bool>,
}

impl World {
    /// A world for `seed`, its clock starting now; `echo` prints each trace line as it is
    /// written.
    pub fn new(seed: u64, mutant: Option<Mutant>, command_timeout: Duration, echo: bool) -> Self {
        let mut rng = Rng::new(seed);
        World {
            fault_rate: rng.pick(&[50, 150, 300, 500]),
            slow_clock_ppm: match mutant {
                Some(Mutant::ClockBeyondAllowance) => 20_000,
                _ => rng.pick(&[0, 100, 500, 1_000]),
            },
            store: MemoryStore::new(),
            command_timeout,
            mutant,
            start: Instant::now(),
            faults_on: Mutex::new(true),
            rng: Mutex::new(rng),
            trace: Mutex::new(Vec::new()),
            echo,
            oracle: Mutex::new(Oracle::default()),
            dead: Mutex::new(BTreeSet::new()),
            late: Mutex::new(false),
        }
    }

    /// A time to live the store reports, as long as it lasts on a candidate's clock, which
    /// runs [`slow_clock_ppm`](Self::slow_clock_ppm) slower.
    pub fn as_seen(&self, store_time: Duration) -> Duration {
        store_time + store_time * self.slow_clock_ppm as u32 / 1_000_000
    }

    /// A draw from the run's random numbers.
    pub fn draw<T>(&self, draw: impl FnOnce(&mut Rng) -> T) -> T {
        draw(&mut self.rng.lock().unwrap())
    }

    /// Time since the run began, on the virtual clock.
    pub fn elapsed(&self) -> Duration {
        Instant::now() - self.start
    }

    /// Adds a line to the trace: the virtual time, who, and what.
    pub fn log(&self, who: &str, what: impl Display) {
        let line = format!("{:>9.3}ms {who:<10} {what}", self.elapsed().as_secs_f64() * 1e3);
        if self.echo {
            println!("{line}");
        }
        self.trace.lock().unwrap().push(line);
    }

    /// The trace so far.
    pub fn trace(&self) -> Vec<String> {
        self.trace.lock().unwrap().clone()
    }

    /// Whether faults are injected now.
    pub fn faults_on(&self) -> bool {
        *self.faults_on.lock().unwrap()
    }

    /// Ends the faults: from now on every call is answered at once.
    pub fn end_faults(&self) {
        *self.faults_on.lock().unwrap() = false;
        self.log("sim", "faults end");
    }

    /// Kills candidate instance `who`: every store call it makes from now on hangs.
    pub fn kill(&self, who: &str) {
        self.dead.lock().unwrap().insert(who.to_owned());
    }

    /// Whether `who` was killed.
    pub fn is_dead(&self, who: &str) -> bool {
        self.dead.lock().unwrap().contains(who)
    }

    /// Runs `apply`, a store action on a request whose caller already timed out.
    pub fn late<T>(&self, apply: impl FnOnce() -> T) -> T {
        *self.late.lock().unwrap() = true;
        let result = apply();
        *self.late.lock().unwrap() = false;
        result
    }

    /// Whether the store acts now on a request its caller gave up on.
    pub fn is_late(&self) -> bool {
        *self.late.lock().unwrap()
    }

    /// The oracle, for a check or a record.
    pub fn oracle(&self) -> std::sync::MutexGuard<'_, Oracle> {
        self.oracle.lock().unwrap()
    }

    /// Applies `fault` to the store now. From a step ahead or a loss of data on, the
    /// oracle excuses a believer whose lease the store last confirmed before it: its slot
    /// may be gone before its local deadline, which only its fence still protects.
    pub fn break_store(&self, fault: StoreFault) {
        self.log("sim", format_args!("the store: {fault:?}"));
        match fault {
            StoreFault::StepAhead(by) => self.store.__step_clock(by, true),
            StoreFault::StepBack(by) => self.store.__step_clock(by, false),
            StoreFault::LoseData => {
                self.store.__lose_data(self.mutant != Some(Mutant::FencesResetWithData));
            }
        }
        if !matches!(fault, StoreFault::StepBack(_)) {
            self.oracle().record_break(self.elapsed());
        }
        self.check();
    }

    /// Checks every believer against the store now.
    pub fn check(&self) {
        let at = self.elapsed();
        self.oracle().check(&self.store, at);
    }
}
