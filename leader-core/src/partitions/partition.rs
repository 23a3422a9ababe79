//! [`Partition`]: one partition this node owns, and [`PartitionEvent`]: each change of what
//! it owns.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::events::EventSender;
use crate::election::{Lease, LossReason};

/// One partition this node owns: its index, its lease (fence, loss signal) and the signal to
/// stop working on it.
///
/// Cheap to clone. The node keeps a partition it hands over (to a node that joined, or at
/// [`stop`](super::Partitions::stop)) held until every handle of it is dropped, or until its
/// hand-over grace ends: drop the handle once the work on it has stopped.
#[derive(Clone)]
pub struct Partition {
    handles: Arc<Handles>,
}

impl Partition {
    fn cell(&self) -> &Cell {
        &self.handles.cell
    }

    /// Whether this is a handle of `cell`'s grant.
    pub(crate) fn is_of(&self, cell: &Cell) -> bool {
        std::ptr::eq(self.cell(), cell)
    }

    /// The partition's index, from 0 to the set's count - 1.
    pub fn index(&self) -> u32 {
        self.cell().index
    }

    /// The fencing token of this node's grant of the partition: strictly greater than every
    /// earlier grant's of the same partition, on any node.
    pub fn fence(&self) -> u64 {
        self.cell().lease.fence()
    }

    /// The fencing token while the partition's lease is live and the node has not started
    /// handing it over, checked here and now; `None` after. The one check to make right
    /// before each action on the partition.
    pub fn live_fence(&self) -> Option<u64> {
        if self.cell().stop.is_cancelled() {
            return None;
        }
        self.cell().lease.live_fence()
    }

    /// The partition's lease: its store key, token, times and loss signal.
    pub fn lease(&self) -> &Lease {
        &self.cell().lease
    }

    /// Resolves when work on the partition must stop: the node hands it over, or its lease
    /// was lost (also at the lease's local deadline, even when nothing else runs).
    pub async fn cancelled(&self) {
        tokio::select! {
            biased;
            () = self.cell().stop.cancelled() => {}
            () = self.cell().lease.lost() => {}
        }
    }

    /// A token cancelled when work on the partition must stop (see
    /// [`cancelled`](Self::cancelled)), for APIs that take one. Cancelling it yourself
    /// changes nothing. Gate each action on [`live_fence`](Self::live_fence) too: after a pause
    /// of the whole process the token can be late.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cell().stop.child_token()
    }
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partition")
            .field("index", &self.cell().index)
            .field("stopping", &self.cell().stop.is_cancelled())
            .field("lease", &self.cell().lease)
            .finish()
    }
}

/// A change of the partitions this node owns, in the order the node saw them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum PartitionEvent {
    /// The node was granted a partition: start working on it.
    Assigned(Partition),
    /// Work on a partition must stop: the node hands it over ([`LossReason::SteppedDown`]),
    /// or lost it ([`LossReason::Refused`], [`LossReason::Expired`]). Its
    /// [`Partition::cancelled`] has resolved too.
    Revoked {
        /// The partition's index.
        index: u32,
        /// Why.
        reason: LossReason,
    },
}

/// What the node and the handles of one partition share: the lease, the stop signal (sent
/// once, with its event) and whether a handle is still out.
pub(crate) struct Cell {
    pub index: u32,
    pub lease: Lease,
    pub stop: CancellationToken,
    revoked: AtomicBool,
    events: EventSender,
    /// The handles given out now, if any: new handles join them.
    handles: Mutex<Weak<Handles>>,
    /// Notified when the last handle is dropped.
    handles_gone: Notify,
}

/// What every [`Partition`] handle of one grant shares; its `Drop` tells the node that no
/// handle is left.
struct Handles {
    cell: Arc<Cell>,
}

impl Drop for Handles {
    fn drop(&mut self) {
        self.cell.handles_gone.notify_one();
    }
}

impl Cell {
    /// The cell of partition `index` held under `lease`, whose loss revokes it.
    pub(crate) fn new(
        index: u32,
        events: EventSender,
        lease: impl FnOnce(Box<dyn Fn(LossReason) + Send + Sync>) -> Lease,
    ) -> Arc<Self> {
        Arc::new_cyclic(|cell: &Weak<Cell>| {
            let cell = cell.clone();
            let on_loss = Box::new(move |reason| {
                if let Some(cell) = cell.upgrade() {
                    cell.revoke(reason);
                }
            });
            Cell {
                index,
                lease: lease(on_loss),
                stop: CancellationToken::new(),
                revoked: AtomicBool::new(false),
                events,
                handles: Mutex::new(Weak::new()),
                handles_gone: Notify::new(),
            }
        })
    }

    /// A handle of the partition, one more of those out now (or the first of a new set).
    pub(crate) fn handle(self: &Arc<Self>) -> Partition {
        let mut out = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        let handles = out.upgrade().unwrap_or_else(|| {
            let handles = Arc::new(Handles { cell: Arc::clone(self) });
            *out = Arc::downgrade(&handles);
            handles
        });
        Partition { handles }
    }

    /// Resolves once no handle of the partition is out.
    pub(crate) async fn handles_dropped(&self) {
        loop {
            let notified = self.handles_gone.notified();
            let out = self.handles.lock().unwrap_or_else(|p| p.into_inner()).strong_count();
            if out == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Stops work on the partition, for `reason`: the first call signals and sends the
    /// event, later ones do nothing.
    pub(crate) fn revoke(&self, reason: LossReason) {
        if !self.revoked.swap(true, Ordering::AcqRel) {
            self.stop.cancel();
            self.events.revoked(self, reason);
        }
    }

    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }
}
