//! [`LeaderGroupElector`]: run a body on at most `max_leaders` candidates at a time.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;

use super::candidate::{self, PerCall, PerCallStop, Won};
use super::guard::SlotGuard;
use super::lease::LossReason;
use super::lease_guard::{LeaseGuard, Supervision};
use super::options::Settings;
use super::overrun;
use super::renewal::supervise;
use crate::election::{LeaderGroupElectionOptions, LeaderGroupState, LeaderRunResult, Lease};
use crate::error::Error;
use crate::observe::GroupObserver;
use crate::store::{AcquireRequest, ClaimInfo, IntoSharedStore, LeaseStore};
use crate::telemetry;
use crate::token::LeaseToken;

/// Elects up to `max_leaders` holders per group name, one call at a time.
///
/// Each `run_if_leader` call makes a new token, waits up to `wait_time` for a free slot, runs
/// the body under the slot's [`Lease`] and releases the slot when the body ends, however it
/// ends (value, panic, or the future being dropped).
///
/// ```
/// use std::time::Duration;
/// use leader_core::{LeaderGroupElectionOptions, LeaderGroupElector, LeaderRunResult, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let group = LeaderGroupElector::new(
///     MemoryStore::new(),
///     LeaderGroupElectionOptions::new(3)
///         .wait_time(Duration::from_millis(500))
///         .lease_time(Duration::from_secs(10)),
/// )?;
/// match group.run_if_leader("thumbnail-workers", |lease| async move { lease.fence() }).await? {
///     LeaderRunResult::Elected(fence) => println!("processed a batch under fence {fence}"),
///     LeaderRunResult::Skipped => println!("three workers are busy; try later"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LeaderGroupElector {
    pub(super) store: Arc<dyn LeaseStore>,
    pub(super) settings: Arc<Settings>,
    /// The last group name resolved and its key, shared by clones: most electors run the
    /// same group again and again, which then costs no allocation or validation. Measured
    /// with `cargo run -p leader-bench --release -- --name-cache`: a hit saves about 260 ns
    /// of a 1 µs call on a `MemoryStore` (a miss pays the lock and resolves); on Redis the
    /// saving is lost in the round trip. The macros build an elector per call and miss.
    last_resolved: Arc<Mutex<Option<Resolved>>>,
}

/// A group name and the store key it resolves to.
type Resolved = (Arc<str>, Arc<str>);

impl LeaderGroupElector {
    /// An elector over `store`, after checking every option: any store by value, or a
    /// [`SharedStore`](crate::store::SharedStore) (what
    /// [`store::connect`](crate::store::connect) returns, or the process-wide
    /// [`default_store`](crate::default_store)) used as it is. Electors made over one shared
    /// store share its observers' readers: one read per change of a group for all their
    /// [`observe`](Self::observe)rs.
    ///
    /// Fails with [`Error::InvalidOption`] or [`Error::InvalidKey`] naming the first value
    /// out of range.
    pub fn new(
        store: impl IntoSharedStore,
        options: LeaderGroupElectionOptions,
    ) -> Result<Self, Error> {
        let settings = options.settings()?;
        Ok(LeaderGroupElector {
            store: store.into_shared_store(),
            settings: Arc::new(settings),
            last_resolved: Arc::new(Mutex::new(None)),
        })
    }

    /// The same as [`new`](Self::new), which now takes a shared store as it is.
    #[deprecated(note = "`new` takes a `SharedStore` as it is")]
    pub fn from_shared_store(
        store: Arc<dyn LeaseStore>,
        options: LeaderGroupElectionOptions,
    ) -> Result<Self, Error> {
        Self::new(store, options)
    }

    /// This elector with the macros' `on_store_error = "skip"`: a store failure before a
    /// grant is tried again until `wait_time` is over, then the call is `Skipped`.
    pub(crate) fn skip_on_store_error(mut self) -> Self {
        Arc::make_mut(&mut self.settings).skip_on_store_error = true;
        self
    }

    /// How many slots each group has.
    pub fn max_leaders(&self) -> u32 {
        self.settings.max_leaders.get()
    }

    /// This candidate's holder id.
    pub fn holder_id(&self) -> &str {
        &self.settings.holder_id
    }

    /// The store key `name` resolves to, without touching the store.
    pub fn key(&self, name: &str) -> Result<String, Error> {
        self.settings.keys.resolve(name)
    }

    fn resolve(&self, name: &str) -> Result<Resolved, Error> {
        let mut last = self.last_resolved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((group, key)) = &*last
            && **group == *name
        {
            return Ok((group.clone(), key.clone()));
        }
        let resolved: Resolved = (name.into(), self.settings.keys.resolve(name)?.into());
        *last = Some(resolved.clone());
        Ok(resolved)
    }

    /// Takes a slot of group `name` if one is won within `wait_time`, and holds it until
    /// the returned guard is released or dropped: the form for work that is not one closure
    /// (see [`LeaseGuard`] for what it offers and its loss rules).
    ///
    /// - `Ok(Some(guard))`: a slot was granted, with time left on its lease.
    /// - `Ok(None)`: every slot stayed held by others until `wait_time` was over; contention
    ///   is not an error.
    /// - `Err(_)`: the name is invalid or the store failed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_core::{LeaderGroupElectionOptions, LeaderGroupElector, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
    /// let workers = LeaderGroupElector::new(
    ///     MemoryStore::new(),
    ///     LeaderGroupElectionOptions::new(2).lease_time(Duration::from_secs(10)),
    /// )?;
    /// let first = workers.acquire("importers").await?.expect("a free slot");
    /// let second = workers.acquire("importers").await?.expect("the other slot");
    /// assert!(workers.acquire("importers").await?.is_none(), "both slots are held");
    /// assert!(first.renew().await?, "still held: renewed by hand");
    /// drop(first); // given back in the background
    /// # leader_core::wait_for_releases().await;
    /// assert!(workers.acquire("importers").await?.is_some());
    /// # drop(second);
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, name: &str) -> Result<Option<LeaseGuard>, Error> {
        self.take_slot(name, Supervision::Spawned).await
    }

    /// Runs `body` if a slot of group `name` is won within `wait_time`.
    ///
    /// - `Ok(Elected(value))`: a slot was held while the body ran, then released (or kept
    ///   until `min_lease_time` after the grant, without delaying this return).
    /// - `Ok(Skipped)`: every slot stayed held by others; the body did not run.
    /// - `Err(_)`: the name is invalid or the store failed; never a disguised `Skipped`.
    ///
    /// A panic in the body propagates after the slot is released. Dropping the returned
    /// future releases the slot in the background; a program shutting down can wait for
    /// that with [`wait_for_releases`](crate::wait_for_releases). The body never starts
    /// under a lease whose local deadline has passed: a grant whose reply came too late is
    /// released and counts as a lost attempt.
    ///
    /// It is [`acquire`](Self::acquire) with the body run under the guard's lease and the
    /// guard released when the body ends.
    pub async fn run_if_leader<F, Fut, T>(
        &self,
        name: &str,
        body: F,
    ) -> Result<LeaderRunResult<T>, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let settings = &*self.settings;
        // With renewal, a task renews (so a body that hogs its thread cannot starve it on a
        // multi-threaded runtime); without, only the deadline is watched, here, beside the
        // body: no task needed.
        let supervision = match settings.renew_interval {
            Some(_) => Supervision::Spawned,
            None => Supervision::ByCaller,
        };
        let Some(guard) = self.take_slot(name, supervision).await? else {
            return Ok(LeaderRunResult::Skipped);
        };
        let lease = guard.lease().clone();
        let body = std::pin::pin!(
            AssertUnwindSafe(lease.clone().scope(body(lease.clone()))).catch_unwind()
        );
        let outcome = match supervision {
            Supervision::Spawned => body.await,
            Supervision::ByCaller => {
                let mut body = body;
                let deadline =
                    supervise(self.store.clone(), lease.clone(), settings.lease_time, None);
                let outcome = tokio::select! {
                    biased;
                    outcome = &mut body => outcome,
                    () = deadline => body.await,
                };
                // Checked once the body ended, so a body that never yielded (it blocked its
                // thread past the deadline) is told of too.
                if lease.is_lost() && lease.loss_reason() == Some(LossReason::Expired) {
                    overrun::body_outlived_its_lease(lease.key(), settings.lease_time);
                }
                outcome
            }
        };
        // A failure is logged (and the release goes on in the background): the body's value
        // matters more, and the slot expires by itself at the end of its lease.
        let _ = guard.release().await;
        match outcome {
            Ok(value) => Ok(LeaderRunResult::Elected(value)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Stands for a slot of `name` until one is won (`Some`), `wait_time` is over (`None`) or
    /// the store fails: the one way both [`acquire`](Self::acquire) and
    /// [`run_if_leader`](Self::run_if_leader) take a slot.
    async fn take_slot(
        &self,
        name: &str,
        supervision: Supervision,
    ) -> Result<Option<LeaseGuard>, Error> {
        let settings = &*self.settings;
        let (group, key) = self.resolve(name)?;
        let token = LeaseToken::generate()?;
        let mut slot = SlotGuard::new(
            self.store.clone(),
            key.clone(),
            token,
            settings.min_lease_time,
            settings.lease_time,
        );
        let request = AcquireRequest {
            key: &key,
            max_leaders: settings.max_leaders,
            token,
            holder: &settings.holder_id,
            lease_time: settings.lease_time,
            session: None,
            reservation: None,
        };
        let mut policy = PerCall::new(name, settings);
        let Won { grant, sent_at, token } = match candidate::stand(
            &*self.store,
            request,
            &mut slot,
            &mut policy,
        )
        .await
        {
            Ok(won) => won,
            Err(PerCallStop::Skipped) => {
                tracing::debug!(group = name, holder = %settings.holder_id, "skipped: group full");
                return Ok(None);
            }
            Err(PerCallStop::Failed(error)) => return Err(error),
        };
        telemetry::metric::transition(&key, "elected");
        let lease = Lease::new(group, key, token, settings.holder_id.clone(), grant, sent_at, None);
        tracing::debug!(group = name, holder = %settings.holder_id, fence = grant.fence, "elected");
        Ok(Some(LeaseGuard::new(
            self.store.clone(),
            lease,
            slot,
            settings.lease_time,
            settings.renew_interval,
            supervision,
        )))
    }

    /// An observer of group `name`: its holders now and each change, from any process,
    /// without taking a slot (see [`GroupObserver`]). An unknown group is an empty state.
    /// Fails on an invalid name, or with the store's error when the group cannot be read
    /// now.
    pub async fn observe(&self, name: &str) -> Result<GroupObserver, Error> {
        let key = self.settings.keys.resolve(name)?;
        GroupObserver::start_on_key(&self.store, name, key).await
    }

    /// The group's live slots, as the store reports them.
    pub async fn state(&self, name: &str) -> Result<LeaderGroupState, Error> {
        let key = self.settings.keys.resolve(name)?;
        let snapshot = telemetry::state(&*self.store, &key).await?;
        Ok(LeaderGroupState {
            name: name.to_owned(),
            key,
            max_leaders: snapshot.max_leaders,
            active_count: snapshot.leaders.len() as u32,
            leaders: snapshot.leaders,
            pending: snapshot.pending,
        })
    }

    /// The candidate the group's next free slot is kept for, if one waits and announced
    /// itself (a [priority](crate::LeadershipOptions::priority), or fair waiting after lost
    /// hand-overs): its holder id, priority, time waited and time left. `None` over a store
    /// that keeps no claims. One read of the store.
    ///
    /// ```
    /// use leader_core::{LeaderGroupElectionOptions, LeaderGroupElector, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
    /// let elector = LeaderGroupElector::new(MemoryStore::new(), LeaderGroupElectionOptions::new(1))?;
    /// assert_eq!(elector.waiting_candidate("report").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn waiting_candidate(&self, name: &str) -> Result<Option<ClaimInfo>, Error> {
        let key = self.settings.keys.resolve(name)?;
        telemetry::claim(&*self.store, &key).await
    }
}
