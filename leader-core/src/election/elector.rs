//! [`LeaderElector`]: run a body on one candidate at a time.

use crate::election::{
    LeaderElectionOptions, LeaderGroupElectionOptions, LeaderGroupElector, LeaderGroupState,
    LeaderRunResult, Lease, LeaseGuard,
};
use crate::error::Error;
use crate::store::{IntoSharedStore, LeaseStore};

/// Elects one holder per name: a [`LeaderGroupElector`] with `max_leaders` = 1.
///
/// ```
/// use std::time::Duration;
/// use leader_core::{LeaderElectionOptions, LeaderElector, LeaderRunResult, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let elector = LeaderElector::new(
///     MemoryStore::new(),
///     LeaderElectionOptions::new().lease_time(Duration::from_secs(600)).auto_extend(true),
/// )?;
/// let report = elector.run_if_leader("nightly-report", |lease| async move {
///     format!("report written under fence {}", lease.fence())
/// }).await?;
/// assert_eq!(report, LeaderRunResult::Elected("report written under fence 1".to_owned()));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LeaderElector {
    group: LeaderGroupElector,
}

impl LeaderElector {
    /// An elector over `store`, after checking every option: any store by value, or a
    /// [`SharedStore`](crate::store::SharedStore) used as it is (see
    /// [`LeaderGroupElector::new`]).
    pub fn new(store: impl IntoSharedStore, options: LeaderElectionOptions) -> Result<Self, Error> {
        let options = LeaderGroupElectionOptions::from_election(1, options);
        Ok(LeaderElector { group: LeaderGroupElector::new(store, options)? })
    }

    /// The same as [`new`](Self::new), which now takes a shared store as it is.
    #[deprecated(note = "`new` takes a `SharedStore` as it is")]
    pub fn from_shared_store(
        store: std::sync::Arc<dyn LeaseStore>,
        options: LeaderElectionOptions,
    ) -> Result<Self, Error> {
        Self::new(store, options)
    }

    /// This candidate's holder id.
    pub fn holder_id(&self) -> &str {
        self.group.holder_id()
    }

    /// The store key `name` resolves to, without touching the store.
    pub fn key(&self, name: &str) -> Result<String, Error> {
        self.group.key(name)
    }

    /// Takes leadership of `name` if it is won within `wait_time`, held until the guard is
    /// released or dropped (`Ok(None)` when another holds it); see
    /// [`LeaderGroupElector::acquire`] and [`LeaseGuard`].
    pub async fn acquire(&self, name: &str) -> Result<Option<LeaseGuard>, Error> {
        self.group.acquire(name).await
    }

    /// Runs `body` if leadership of `name` is won within `wait_time`; see
    /// [`LeaderGroupElector::run_if_leader`].
    pub async fn run_if_leader<F, Fut, T>(
        &self,
        name: &str,
        body: F,
    ) -> Result<LeaderRunResult<T>, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.group.run_if_leader(name, body).await
    }

    /// Who leads `name` now, if anyone (`max_leaders` is 1).
    pub async fn state(&self, name: &str) -> Result<LeaderGroupState, Error> {
        self.group.state(name).await
    }

    /// An observer of `name`'s leader: who leads now and each change, from any process,
    /// without competing; see [`LeaderGroupElector::observe`].
    pub async fn observe(&self, name: &str) -> Result<crate::GroupObserver, Error> {
        self.group.observe(name).await
    }

    /// Asks for `holder` to lead `name` for the next `ttl`; see
    /// [`LeaderGroupElector::prefer`].
    pub async fn prefer(
        &self,
        name: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<(), Error> {
        self.group.prefer(name, holder, ttl).await
    }

    /// Withdraws any preference for `name`; see [`LeaderGroupElector::clear_preference`].
    pub async fn clear_preference(&self, name: &str) -> Result<(), Error> {
        self.group.clear_preference(name).await
    }

    /// The live preference for `name`, if any; see [`LeaderGroupElector::preference`].
    pub async fn preference(&self, name: &str) -> Result<Option<crate::Preference>, Error> {
        self.group.preference(name).await
    }
}
