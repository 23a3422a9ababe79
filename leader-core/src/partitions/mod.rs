//! Partition leases: `count` units of work (partitions, tenants, shards) spread over the
//! live nodes of a fleet, each unit held under a lease of its own.
//!
//! Each node of a set, [`Partitions::start`]ed under one name on one store:
//! - announces itself: a slot of the group `{name}/members`, renewed with its lease, so the
//!   members are read from the store (no configuration), and a node that dies leaves it
//!   when its lease ends;
//! - computes its share: `floor(count / n)` or `ceil(count / n)` partitions of `n` members,
//!   from a sticky table every node computes alike from the members and who holds each
//!   partition (each keeps what it holds up to its cap), so a join moves only the joiner's
//!   share and a leave only the leaver's partitions;
//! - holds each partition of its share as the one slot of the group `{name}/{partition}`,
//!   with its own fence and loss signal ([`Partition`]), and renews them all in batches
//!   ([`LeaseStore::renew_many`]: one round trip per 128 partitions on Redis and PostgreSQL);
//! - hands over a partition that is no longer its share: it signals the work to stop
//!   ([`PartitionEvent::Revoked`], [`Partition::cancelled`]), keeps the lease until the
//!   partition's handles are dropped or the hand-over grace ends, then releases it, so the
//!   new owner takes it at its next try without waiting for an expiry.
//!
//! A partition is never held by two nodes beyond what the store's guarantee allows: it is a
//! slot like any other, and its fence increases strictly over its grants.

mod assignment;
mod claims;
mod events;
mod held;
mod members;
mod node;
mod options;
mod partition;
mod share;
mod uncoordinated;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use options::{MAX_PARTITIONS, MAX_WEIGHT, PartitionOptions};
pub use partition::{Partition, PartitionEvent};

use crate::error::Error;
use crate::store::IntoSharedStore;
use events::EventReceiver;
use node::{Node, Shared};

/// What a node of a partition set sees now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionsView {
    /// The live nodes, this one included, as last read from the store (0 before the first
    /// read, and after [`Partitions::stop`]).
    pub members: usize,
    /// The partitions the table gives this node among them (what it keeps and what it
    /// claims), in order.
    pub share: Vec<u32>,
    /// The partitions this node owns and works on now (not those it is handing over), in
    /// order. Equal to `share` once the set is stable.
    pub owned: Vec<u32>,
}

/// One node of a partition set: the partitions it owns, and each change of them.
///
/// ```
/// use std::time::Duration;
/// use leader_core::{MemoryStore, PartitionEvent, PartitionOptions, Partitions};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let store = MemoryStore::new();
/// let options = PartitionOptions::new().lease_time(Duration::from_secs(3));
/// let mut node = Partitions::start("orders", 8, store, options).await?;
/// // Alone, this node gets all 8.
/// while let Some(PartitionEvent::Assigned(partition)) = node.next_event().await {
///     let fence = partition.live_fence().expect("just granted");
///     tokio::spawn(async move {
///         // Work on partition.index() with `fence` until this resolves:
///         partition.cancelled().await;
///     });
///     if node.view().owned.len() == 8 {
///         break;
///     }
/// }
/// node.stop().await?; // hands every partition over, gracefully
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Partitions {
    name: Arc<str>,
    count: u32,
    shared: Arc<Shared>,
    view: watch::Receiver<PartitionsView>,
    events: EventReceiver,
    stop: CancellationToken,
    task: tokio::sync::Mutex<Option<JoinHandle<Result<(), Error>>>>,
}

impl Partitions {
    /// Starts a node of set `name`, of `count` partitions, on `store`: announces it and
    /// reads the members, then takes its share in the background. Must be called within a
    /// tokio runtime.
    ///
    /// Errors: invalid options or name, a first announcement the store refuses for good (a
    /// key it cannot take, a group of another size at the members' key), a set that has as
    /// many live nodes as it may have ([`Error::SetFull`]), and live nodes this one
    /// disagrees with: started with another count ([`Error::PartitionCountMismatch`]) or
    /// announced under this node's holder id ([`Error::HolderInUse`]; an announcement under
    /// it that nobody renews, a crashed process's, start waits out first, for at most two
    /// leases, and one renewed meanwhile refuses the node). A store that is
    /// unreachable or slow for now is no error: the node retries in the background. Over a
    /// store that does not coordinate (a [`DisabledStore`](crate::DisabledStore)) it
    /// returns at once and follows
    /// [`when_uncoordinated`](PartitionOptions::when_uncoordinated): by default it owns no
    /// partition, and says so.
    ///
    /// Every node of a set must give the same `count` and keys; `count` is between 1 and
    /// [`MAX_PARTITIONS`], and a set has at most 1024 live nodes.
    pub async fn start(
        name: &str,
        count: u32,
        store: impl IntoSharedStore,
        options: PartitionOptions,
    ) -> Result<Self, Error> {
        let settings = Arc::new(options.settings(name, count)?);
        let store = store.into_shared_store();
        let shared = Arc::new(Shared::default());
        let (events_tx, events) = events::queue();
        let (view_tx, view) = watch::channel(PartitionsView::default());
        let stop = CancellationToken::new();
        let task = if store.coordinates() {
            // An earlier announcement under this holder id may be a crashed process's.
            members::wait_out_a_predecessor(&*store, &settings).await;
            let mut node =
                Node::new(Arc::clone(&settings), store, Arc::clone(&shared), events_tx, view_tx)?;
            // A store that fails for now (unreachable, slow) is the node's to retry, as every
            // later failure is; what no retry mends (a key the store refuses, a group of
            // another size at the members' key) is the caller's.
            match node.announce().await {
                Ok(true) => node.check_the_members().await?,
                Ok(false) => {
                    tracing::info!(set = %settings.name, "the members' group was contended; announcing the node in the background");
                }
                Err(error) if error.is_transient() => {
                    tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "announcing the node failed; retrying in the background");
                }
                Err(error) => return Err(error),
            }
            tokio::spawn(node.run(stop.clone()))
        } else {
            let run = uncoordinated::run(
                Arc::clone(&settings),
                store.kind(),
                Arc::clone(&shared),
                events_tx,
                view_tx,
                stop.clone(),
            );
            tokio::spawn(run)
        };
        Ok(Partitions {
            name: Arc::clone(&settings.name),
            count,
            shared,
            view,
            events,
            stop,
            task: tokio::sync::Mutex::new(Some(task)),
        })
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many partitions the set has.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The partitions this node owns and works on now, by index (not those it is handing
    /// over).
    pub fn owned(&self) -> Vec<Partition> {
        self.shared
            .owned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|cell| cell.handle())
            .collect()
    }

    /// What the node sees now: the members, its share, what it owns.
    pub fn view(&self) -> PartitionsView {
        self.view.borrow().clone()
    }

    /// A receiver of [`view`](Self::view) that wakes on each change.
    pub fn watch_view(&self) -> watch::Receiver<PartitionsView> {
        self.view.clone()
    }

    /// The next change of the partitions this node owns; `None` once the node has stopped
    /// and every event was read, or once the events were taken by
    /// [`take_events`](Self::take_events). Events wait here until read, but a grant
    /// revoked before its [`PartitionEvent::Assigned`] was read is told by neither event
    /// (the unread event's handle of the partition is dropped with it, so it holds no
    /// hand-over back): what waits is bounded by the partitions, read or not.
    pub async fn next_event(&mut self) -> Option<PartitionEvent> {
        self.events.next().await
    }

    /// How many events wait to be read by [`next_event`](Self::next_event) (0 once they
    /// were taken by [`take_events`](Self::take_events)).
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// The stream of events, for a task of its own (the node's own
    /// [`next_event`](Self::next_event) answers `None` from then on).
    pub fn take_events(&mut self) -> PartitionEvents {
        PartitionEvents { events: std::mem::replace(&mut self.events, EventReceiver::ended()) }
    }

    /// Stops the node: every partition is handed over (its work told to stop, then
    /// released once its handles are dropped or its grace ends) and the node's announcement
    /// withdrawn, so the other nodes take its partitions at once, and waits for it. `Err`
    /// with the first release the store failed (such a partition expires by itself at the
    /// end of its lease), or if the node's task ended abnormally. A second call, made
    /// while the first waits or after it, waits for the node to have stopped too and
    /// returns `Ok` (the first call has the failure, if any).
    pub async fn stop(&self) -> Result<(), Error> {
        self.stop.cancel();
        // Held while the task is awaited: a second call waits here until the node stopped.
        let mut task = self.task.lock().await;
        match task.take() {
            Some(task) => task.await.unwrap_or_else(|join| {
                Err(Error::BackgroundTaskFailed {
                    what: format!("partitions node of set `{}`", self.name),
                    reason: join.to_string(),
                })
            }),
            None => Ok(()),
        }
    }
}

/// A node's events, taken from it by [`Partitions::take_events`].
#[derive(Debug)]
pub struct PartitionEvents {
    events: EventReceiver,
}

impl PartitionEvents {
    /// The next change of the partitions the node owns; `None` once the node has stopped
    /// and every event was read. A grant revoked before its `Assigned` was read is told by
    /// neither event (see [`Partitions::next_event`]).
    pub async fn next(&mut self) -> Option<PartitionEvent> {
        self.events.next().await
    }

    /// How many events wait to be read.
    pub fn pending(&self) -> usize {
        self.events.len()
    }
}

impl Drop for Partitions {
    /// A node dropped without [`stop`](Self::stop) stops in the background, as gracefully.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
