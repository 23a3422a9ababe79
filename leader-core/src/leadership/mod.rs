//! [`Leadership`]: leadership of a role that a long-running service keeps for as long as it
//! lives, renewed in the background.

mod events;
mod options;
mod preemption;
mod registry;
mod run;
mod status;

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use events::{LeadershipEvent, LeadershipEvents};
pub(crate) use options::LeadershipSettings;
pub use options::{LeadershipOptions, WhenUncoordinated};
pub use registry::{LeadershipRegistry, Roles};
pub use status::{LeadershipDescription, LeadershipHealth, LeadershipStatus};

use crate::election::Lease;
use crate::error::Error;
use crate::store::{IntoSharedStore, LeaseStore};
use crate::telemetry;

/// Leadership of one role, kept by a background task: candidates try to take a slot of the
/// role's group, the holder renews it every `renew_interval`, and a refused renewal or a
/// lease that runs out steps it down at once.
///
/// - [`fence`](Self::fence) is the store's fencing token of the current term, checked
///   against the term's local deadline when called: the gate to check right before each
///   leader-only action, and the value to pass to downstream stores.
///   [`term`](Self::term) only counts this instance's acquisitions.
/// - [`leadership_token`](Self::leadership_token) is cancelled when the current term ends;
///   stop long-running leader work with it (after a pause of the process it can be late,
///   the check is not).
/// - A term's end is decided once, by whoever notices first (a refused renewal, the
///   deadline passing, a check that finds it passed, [`resign`](Self::resign),
///   [`stop`](Self::stop)); the token, [`is_leader`](Self::is_leader), the status watch,
///   [`health`](Self::health) and the metrics follow that decision at once, and the loop
///   then releases the slot and stands again.
/// - [`stop`](Self::stop) releases the slot, so a graceful restart hands over at once; a
///   crashed process hands over when its lease expires. Dropping every clone of the handle
///   stops it too.
/// - An unreachable store makes nobody leader here; it is logged once per outage and retried
///   after 50 ms, doubling up to `retry_interval` (with jitter). A refusal only a change of
///   configuration helps (an option the store cannot keep, credentials, a permission) is
///   retried too, and reported where the application looks: the status's
///   [`failure`](LeadershipStatus::failure), [`health`](Self::health), and
///   [`wait_for_leadership`](Self::wait_for_leadership), which ends with it. A panic in the
///   loop (say, in a store) is logged, backed off one retry interval and survived.
///
/// ```
/// use std::time::Duration;
/// use leader_core::{Leadership, LeadershipOptions, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let leadership = Leadership::start("scheduler", MemoryStore::new(), LeadershipOptions::new()).await?;
/// let term = leadership.wait_for_leadership().await?; // cancelled when this term ends
/// assert!(leadership.is_leader() && !term.is_cancelled());
/// leadership.stop().await?; // hands over at once
/// assert!(term.is_cancelled());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Leadership {
    shared: Arc<Shared>,
    _owner: Arc<StopOnDrop>,
}

/// What the handle and the loop share.
struct Shared {
    settings: LeadershipSettings,
    store: Arc<dyn LeaseStore>,
    status: watch::Sender<LeadershipStatus>,
    current: Mutex<Option<Lease>>,
    commands: mpsc::UnboundedSender<Command>,
    shutdown: CancellationToken,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    /// The store's failure to release the slot held when the loop was stopped, for
    /// [`Leadership::stop`] to return.
    stop_failure: Mutex<Option<Error>>,
    /// Set once the store answered the first candidacy attempt (a grant, a refusal or a
    /// failure), for [`Leadership::start`].
    answered: watch::Sender<bool>,
}

impl Shared {
    /// The lease of the term the loop holds, live or not.
    fn held_lease(&self) -> Option<Lease> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reports that term `term` ended, if the status still shows it: called once, by whoever
    /// decided the end, so the watch, `is_leader()` and the metrics agree at once.
    fn term_ended(&self, term: u64) {
        let changed = self.status.send_if_modified(|status| {
            let current = status.is_leader && status.term == term;
            if current {
                status.is_leader = false;
                status.fence = None;
            }
            current
        });
        if changed {
            telemetry::metric::is_leader(&self.settings.role, false);
        }
    }
}

/// Requests to the loop, answered once carried out.
enum Command {
    Resign(oneshot::Sender<()>),
}

/// Stops the loop when the last handle is dropped.
struct StopOnDrop(CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Leadership {
    /// Checks `options` for `role`, starts the background loop on the current tokio
    /// runtime, and returns once the store answered the first candidacy attempt: a grant, a
    /// slot held by others (this instance stands by), or an unreachable store (waited out in
    /// the background). Fails on invalid options, names or keys, naming the first value out
    /// of range, and with the store's refusal of the first attempt when only a change of
    /// configuration helps (see [`LeadershipStatus::failure`]); the loop is stopped then.
    /// Over a store that does not coordinate it returns at once, following
    /// `when_uncoordinated`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as `tokio::spawn` does.
    pub async fn start(
        role: &str,
        store: impl IntoSharedStore,
        options: LeadershipOptions,
    ) -> Result<Self, Error> {
        let settings = options.settings(role)?;
        let leadership = Self::start_validated(settings, store.into_shared_store());
        leadership.checked().await
    }

    /// `self` once the store answered its first candidacy attempt, or the refusal (after
    /// stopping the loop).
    pub(crate) async fn checked(self) -> Result<Self, Error> {
        if let Err(refused) = self.first_answer().await {
            let _ = self.stop().await;
            return Err(refused);
        }
        Ok(self)
    }

    pub(crate) fn start_validated(
        settings: LeadershipSettings,
        store: Arc<dyn LeaseStore>,
    ) -> Self {
        let coordinated = store.coordinates();
        let (commands, received) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            settings,
            store,
            status: watch::Sender::new(LeadershipStatus {
                coordinated,
                ..LeadershipStatus::default()
            }),
            current: Mutex::new(None),
            commands,
            shutdown: shutdown.clone(),
            task: tokio::sync::Mutex::new(None),
            stop_failure: Mutex::new(None),
            answered: watch::Sender::new(false),
        });
        let task = tokio::spawn(run::run(shared.clone(), received));
        if let Ok(mut slot) = shared.task.try_lock() {
            *slot = Some(task);
        }
        Leadership { shared, _owner: Arc::new(StopOnDrop(shutdown)) }
    }

    /// An observer of this role's group: who leads now and each change, from any process
    /// (this instance's own terms included), without taking a slot; see
    /// [`GroupObserver`](crate::GroupObserver). Fails with the store's error when the group
    /// cannot be read now.
    pub async fn observe(&self) -> Result<crate::GroupObserver, Error> {
        let settings = &self.shared.settings;
        crate::GroupObserver::start_on_key(&self.shared.store, &settings.role, settings.key.clone())
            .await
    }

    /// The role.
    pub fn role(&self) -> &str {
        &self.shared.settings.role
    }

    /// Whether this instance leads now: it won a term and the term's local deadline has not
    /// passed. Checked here and now, so a process paused past its lease answers `false` on
    /// its first check after waking, even before the background loop has run (the check
    /// decides the loss, and the loop then steps down, releases and stands again). Prefer
    /// [`fence`](Self::fence), which makes the same check and gives the fence to act with.
    pub fn is_leader(&self) -> bool {
        self.lease().is_some()
    }

    /// Whether the store coordinates; over a `DisabledStore` the role follows
    /// `when_uncoordinated` instead.
    pub fn is_coordinated(&self) -> bool {
        self.shared.status.borrow().coordinated
    }

    /// How many terms this instance has begun. Not a fencing token: use [`fence`](Self::fence).
    pub fn term(&self) -> u64 {
        self.shared.status.borrow().term
    }

    /// The store's fencing token of the current term while this instance leads, checked
    /// here and now like [`is_leader`](Self::is_leader); `None` otherwise. This is the gate
    /// for leader-only actions: check it right before each one and pass the fence downstream.
    ///
    /// ```
    /// # use leader_core::{Leadership, LeadershipOptions, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
    /// # let leadership = Leadership::start("scheduler", MemoryStore::new(), LeadershipOptions::new()).await?;
    /// # leadership.wait_for_leadership().await;
    /// # async fn fire_job(_fence: u64) {}
    /// if let Some(fence) = leadership.fence() {
    ///     fire_job(fence).await; // the downstream store rejects a fence lower than it has seen
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> Option<u64> {
        self.lease().map(|lease| lease.fence())
    }

    /// The current status.
    pub fn status(&self) -> LeadershipStatus {
        self.shared.status.borrow().clone()
    }

    /// A token cancelled when the current term ends; already cancelled when not leading.
    ///
    /// Use it to stop long work when the term ends, not as the gate of each action: the
    /// token is cancelled when the end is decided, and after a pause of the whole process
    /// (a stop signal, a long stall) your own timers may run before anything has noticed
    /// that the deadline passed. Check [`fence`](Self::fence) right before each action.
    pub fn leadership_token(&self) -> CancellationToken {
        self.lease().map_or_else(cancelled, |lease| lease.loss_token())
    }

    /// The current term's lease, while leading (its deadline checked here and now).
    pub fn lease(&self) -> Option<Lease> {
        self.shared.held_lease().filter(|lease| !lease.is_lost())
    }

    /// Waits until this instance leads, and returns the term's token (see
    /// [`leadership_token`](Self::leadership_token)). Ends with [`Error::Stopped`] once the
    /// leadership is stopped (it will not lead again), and with the store's error when the
    /// store refuses this instance's candidacy for a reason only a change of configuration
    /// helps (see [`LeadershipStatus::failure`]); an unreachable store is waited out.
    pub async fn wait_for_leadership(&self) -> Result<CancellationToken, Error> {
        let mut changes = self.shared.status.subscribe();
        loop {
            let status = changes.borrow_and_update().clone();
            if let Some(lease) = self.lease() {
                return Ok(lease.loss_token());
            }
            // Stopped first: a refusal before the stop is no reason to wait again.
            if status.stopped {
                return Err(Error::Stopped { role: self.role().to_owned() });
            }
            if let Some(failure) = &status.failure {
                return Err(Error::duplicate(failure));
            }
            if changes.changed().await.is_err() {
                return Err(Error::Stopped { role: self.role().to_owned() });
            }
        }
    }

    /// Waits until the store answered this instance's first candidacy attempt (a grant, a
    /// refusal, an unreachable store) and returns its failure if the store refused it for
    /// a reason only a change of configuration helps.
    pub(crate) async fn first_answer(&self) -> Result<(), Error> {
        let mut answered = self.shared.answered.subscribe();
        let _ = answered.wait_for(|answered| *answered).await;
        match &self.shared.status.borrow().failure {
            Some(failure) => Err(Error::duplicate(failure)),
            None => Ok(()),
        }
    }

    /// A watch of the status: every election, loss and resignation, with term and fence.
    pub fn subscribe(&self) -> watch::Receiver<LeadershipStatus> {
        self.shared.status.subscribe()
    }

    /// This role's events, the shape of client-go's callbacks: a term begun, with its
    /// token ([`LeadershipEvent::Elected`], `OnStartedLeading`), its end
    /// ([`LeadershipEvent::Lost`], `OnStoppedLeading`), and each change of the group's
    /// holders from any process ([`LeadershipEvent::LeadersChanged`], `OnNewLeader`). The
    /// stream ends once the leadership is stopped.
    ///
    /// ```
    /// use leader_core::{Leadership, LeadershipEvent, LeadershipOptions, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
    /// let options = LeadershipOptions::new().holder_id("10.0.0.7:8080");
    /// let leadership = Leadership::start("scheduler", MemoryStore::new(), options).await?;
    /// let mut events = leadership.events();
    /// let work = tokio::spawn(async move {
    ///     while let Some(event) = events.next().await {
    ///         match event {
    ///             LeadershipEvent::Elected { fence, token, .. } => {
    ///                 println!("leading under fence {fence}");
    ///                 tokio::spawn(async move { token.cancelled().await }); // the term's work
    ///             }
    ///             LeadershipEvent::Lost { term } => println!("term {term} ended"),
    ///             LeadershipEvent::LeadersChanged(holders) => println!("leaders: {holders:?}"),
    ///             _ => {}
    ///         }
    ///     }
    /// });
    /// leadership.wait_for_leadership().await?;
    /// leadership.stop().await?; // the stream tells Lost, then ends
    /// work.await.unwrap();
    /// # Ok(()) }
    /// ```
    pub fn events(&self) -> LeadershipEvents {
        LeadershipEvents::new(Arc::clone(&self.shared))
    }

    /// Steps down if leading (releasing the slot, so another instance can take it at once)
    /// and stays out for 100 ms (or `retry_interval`, if shorter) after the release was
    /// answered, so the candidates waiting, which the release wakes at once, get the first
    /// chance; then it stands again, so a slot nobody took does not stay empty. Returns
    /// once stepped down.
    pub async fn resign(&self) {
        let (done, answered) = oneshot::channel();
        if self.shared.commands.send(Command::Resign(done)).is_ok() {
            let _ = answered.await;
        }
    }

    /// Stops the loop for good, releasing the slot if held, and waits for it to finish.
    /// `Err` with the store's failure to answer that release (the slot then expires at the
    /// end of its lease; the release goes on in the background meanwhile), or if the loop
    /// ended abnormally. A second call, or a call on another handle, waits for the loop to
    /// end too and returns `Ok` (the first call has the release's failure, if any).
    pub async fn stop(&self) -> Result<(), Error> {
        self.shared.shutdown.cancel();
        let task = self.shared.task.lock().await.take();
        if task.is_none() {
            let mut status = self.shared.status.subscribe();
            let _ = status.wait_for(|status| status.stopped).await;
            return Ok(());
        }
        if let Some(task) = task
            && let Err(error) = task.await
        {
            tracing::error!(role = self.role(), %error, "leadership loop ended abnormally");
            return Err(Error::BackgroundTaskFailed {
                what: format!("leadership loop of role `{}`", self.role()),
                reason: error.to_string(),
            });
        }
        match self.shared.stop_failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Healthy unless the background loop still holds a term whose last successful renewal
    /// is older than the lease (a wedged loop, which neither renews nor steps down), or the
    /// store refuses this instance's candidacy for a reason only a change of configuration
    /// helps (see [`LeadershipStatus::failure`]). Touches nothing.
    pub fn health(&self) -> LeadershipHealth {
        let lease_time = self.shared.settings.lease_time;
        // The loop's own hold, not `is_leader()`'s deadline check: a loop that works steps
        // down as soon as a term ends, however the end was decided; a wedged one does not.
        // Uncoordinated leadership renews nothing, so it cannot be wedged.
        let status = self.status();
        if let Some(error) = status.failure {
            return LeadershipHealth::Failing { error };
        }
        let coordinated = status.coordinated;
        match self.shared.held_lease().filter(|_| coordinated) {
            Some(current) if current.since_confirmed() > lease_time => {
                LeadershipHealth::Wedged { since_confirmed: current.since_confirmed(), lease_time }
            }
            _ => LeadershipHealth::Healthy,
        }
    }

    /// The composition: role, key, store, timings. Touches nothing.
    pub fn describe(&self) -> LeadershipDescription {
        let settings = &self.shared.settings;
        LeadershipDescription {
            role: settings.role.clone(),
            key: settings.key.clone(),
            store: self.shared.store.kind(),
            coordinated: self.shared.store.coordinates(),
            when_uncoordinated: settings.when_uncoordinated,
            max_leaders: settings.max_leaders.get(),
            holder_id: settings.holder_id.to_string(),
            lease_time: settings.lease_time,
            renew_interval: settings.renew_interval,
            retry_interval: settings.retry_interval,
            retry_jitter: settings.retry_jitter,
        }
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("role", &self.role())
            .field("status", &self.status())
            .finish()
    }
}

fn cancelled() -> CancellationToken {
    let token = CancellationToken::new();
    token.cancel();
    token
}
