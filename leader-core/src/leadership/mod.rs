//! [`Leadership`]: leadership of a role that a long-running service keeps for as long as it
//! lives, renewed in the background.

mod options;
mod registry;
mod run;
mod status;

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use options::{LeadershipOptions, LeadershipSettings, WhenUncoordinated};
pub use registry::{LeadershipRegistry, Roles};
pub use status::{LeadershipDescription, LeadershipHealth, LeadershipStatus};

use crate::{Error, Lease, LeaseStore};

/// Leadership of one role, kept by a background task: candidates try to take a slot of the
/// role's group, the holder renews it every `renew_interval`, and a refused renewal or a
/// lease that runs out steps it down at once.
///
/// - [`leadership_token`](Self::leadership_token) is cancelled when the current term ends;
///   run leader-only work under it.
/// - [`fence`](Self::fence) is the store's fencing token of the current term; pass it to
///   downstream stores. [`term`](Self::term) only counts this instance's acquisitions.
/// - [`stop`](Self::stop) releases the slot, so a graceful restart hands over at once; a
///   crashed process hands over when its lease expires. Dropping every clone of the handle
///   stops it too.
/// - An unreachable store makes nobody leader here; it is logged once per outage and retried
///   every `retry_interval` plus jitter. A panic in the loop (say, in a store) is logged,
///   backed off one retry interval and survived.
///
/// ```
/// use std::time::Duration;
/// use leader_core::{Leadership, LeadershipOptions, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let leadership = Leadership::start("scheduler", MemoryStore::new(), LeadershipOptions::new()).await?;
/// let term = leadership.wait_for_leadership().await; // cancelled when this term ends
/// assert!(leadership.is_leader() && !term.is_cancelled());
/// leadership.stop().await; // hands over at once
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
    /// Checks `options` for `role` and starts the background loop; returns at once, before
    /// any election. Fails only on invalid options, names or keys.
    pub async fn start(
        role: &str,
        store: impl LeaseStore + 'static,
        options: LeadershipOptions,
    ) -> Result<Self, Error> {
        Self::start_shared(role, Arc::new(store), options)
    }

    /// [`start`](Self::start) over a store already shared as `Arc<dyn LeaseStore>`.
    pub fn start_shared(
        role: &str,
        store: Arc<dyn LeaseStore>,
        options: LeadershipOptions,
    ) -> Result<Self, Error> {
        let settings = options.validate(role)?;
        Ok(Self::start_validated(settings, store))
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
        });
        let task = tokio::spawn(run::run(shared.clone(), received));
        if let Ok(mut slot) = shared.task.try_lock() {
            *slot = Some(task);
        }
        Leadership { shared, _owner: Arc::new(StopOnDrop(shutdown)) }
    }

    /// The role.
    pub fn role(&self) -> &str {
        &self.shared.settings.role
    }

    /// Whether this instance leads now: it won a term and the term's local deadline has not
    /// passed. Checked here and now, so a process paused past its lease answers `false` on
    /// its first check after waking, even before the background loop has noticed; check
    /// right before acting on leadership, and pass [`fence`](Self::fence) downstream.
    pub fn is_leader(&self) -> bool {
        self.shared.status.borrow().is_leader && self.lease().is_some_and(|lease| !lease.is_lost())
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

    /// The store's fencing token of the current term, while leading.
    pub fn fence(&self) -> Option<u64> {
        self.shared.status.borrow().fence
    }

    /// The current status.
    pub fn status(&self) -> LeadershipStatus {
        *self.shared.status.borrow()
    }

    /// A token cancelled when the current term ends; already cancelled when not leading.
    pub fn leadership_token(&self) -> CancellationToken {
        match &*self.shared.current.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(lease) => lease.loss_token(),
            None => cancelled(),
        }
    }

    /// The current term's lease, while leading.
    pub fn lease(&self) -> Option<Lease> {
        self.shared.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until this instance leads, and returns the term's token (see
    /// [`leadership_token`](Self::leadership_token)). Once the leadership is stopped it
    /// returns an already-cancelled token instead of waiting forever.
    pub async fn wait_for_leadership(&self) -> CancellationToken {
        let mut changes = self.shared.status.subscribe();
        loop {
            let status = *changes.borrow_and_update();
            if status.is_leader {
                let token = self.leadership_token();
                if !token.is_cancelled() {
                    return token;
                }
            }
            if status.stopped || changes.changed().await.is_err() {
                return cancelled();
            }
        }
    }

    /// A watch of the status: every election, loss and resignation, with term and fence.
    pub fn subscribe(&self) -> watch::Receiver<LeadershipStatus> {
        self.shared.status.subscribe()
    }

    /// Steps down if leading (releasing the slot, so another instance can take it at once)
    /// and stays out for one retry interval so another instance gets the first chance.
    /// Returns once stepped down.
    pub async fn resign(&self) {
        let (done, answered) = oneshot::channel();
        if self.shared.commands.send(Command::Resign(done)).is_ok() {
            let _ = answered.await;
        }
    }

    /// Stops the loop for good, releasing the slot if held, and waits for it to finish.
    pub async fn stop(&self) {
        self.shared.shutdown.cancel();
        let task = self.shared.task.lock().await.take();
        if let Some(task) = task {
            if let Err(error) = task.await {
                tracing::error!(role = self.role(), %error, "leadership loop ended abnormally");
            }
        }
    }

    /// Healthy unless this instance believes it leads while its last successful renewal is
    /// older than the lease (a wedged leader). Touches nothing.
    pub fn health(&self) -> LeadershipHealth {
        let lease = self.shared.settings.lease;
        // The loop's belief, not `is_leader()`'s deadline check: a wedged loop still believes.
        // Uncoordinated leadership renews nothing, so it cannot be wedged.
        let status = self.status();
        match self.lease().filter(|_| status.is_leader && status.coordinated) {
            Some(current) if current.since_confirmed() > lease => {
                LeadershipHealth::Wedged { since_confirmed: current.since_confirmed(), lease }
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
            max_leaders: settings.max_leaders,
            holder_id: settings.holder_id.to_string(),
            lease: settings.lease,
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
