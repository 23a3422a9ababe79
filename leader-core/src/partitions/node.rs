//! The loop of one node of a partition set: it renews the node's announcement and
//! partitions in batches, reads the members, and follows its share: what leaves it is
//! handed over, what joins it is claimed.
//!
//! The loop itself never waits for the store. Its periodic calls (the renewal batch, the
//! members' read, and, while the node is off its cap, the read of the partitions' holders;
//! one of each at a time) run beside it, and so do the claims (each a
//! candidacy in the candidate loop: `claims.rs`) and the hand-overs (a grace for the work to
//! stop, then the release through the slot's guard: `held.rs`). The loop learns of their
//! ends from their join handles and sets.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::PartitionsView;
use super::claims::Claims;
use super::events::EventSender;
use super::held::Held;
use super::members::Membership;
use super::options::Settings;
use super::partition::Cell;
use crate::error::Error;
use crate::store::LeaseStore;

/// What the node and its [`Partitions`](super::Partitions) handle share.
#[derive(Default)]
pub(crate) struct Shared {
    /// The partitions the node owns and has not started handing over.
    pub owned: Mutex<BTreeMap<u32, Arc<Cell>>>,
}

/// One of the loop's periodic calls: due at a time, or running beside the loop.
enum Periodic<T> {
    Due(Instant),
    /// `again`: asked for once more while running (it may have started too early).
    Running {
        task: JoinHandle<T>,
        again: bool,
    },
}

impl<T> Periodic<T> {
    /// When it is due, if it is not running.
    fn due(&self) -> Option<Instant> {
        match self {
            Periodic::Due(at) => Some(*at),
            Periodic::Running { .. } => None,
        }
    }

    /// Asks for the call now: at once if it is not running, else again once it ends.
    fn now(&mut self) {
        match self {
            Periodic::Due(at) => *at = Instant::now(),
            Periodic::Running { again, .. } => *again = true,
        }
    }

    /// The running call's result, and whether it was asked for again meanwhile; pending
    /// while it is not running. Cancel-safe.
    async fn finished(&mut self) -> (Result<T, JoinError>, bool) {
        match self {
            Periodic::Running { task, again } => (task.await, *again),
            Periodic::Due(_) => std::future::pending().await,
        }
    }

    /// Aborts the call if it is running.
    fn abort(&self) {
        if let Periodic::Running { task, .. } = self {
            task.abort();
        }
    }
}

/// When a periodic call nobody asked for is due: never, in effect.
const NOT_YET: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// The most ended claims one turn of the loop handles, so a burst of grants does not hold
/// up a renewal.
const CLAIMS_PER_TURN: usize = 256;

pub(crate) struct Node {
    pub(super) settings: Arc<Settings>,
    pub(super) store: Arc<dyn LeaseStore>,
    pub(super) shared: Arc<Shared>,
    pub(super) membership: Membership,
    pub(super) held: BTreeMap<u32, Held>,
    pub(super) claims: Claims,
    /// Hand-overs and give-backs running beside the loop: each ends with its release.
    pub(super) handovers: JoinSet<Result<(), Error>>,
    /// The members last read, sorted, their group as read, and this node's share among them.
    pub(super) members: Vec<super::assignment::Member>,
    pub(super) announcements: crate::store::GroupSnapshot,
    pub(super) share: Vec<u32>,
    /// Whether the node, off its cap, wants the partitions' holders read (`share.rs`).
    pub(super) holders_wanted: bool,
    pub(super) events: EventSender,
    view: watch::Sender<PartitionsView>,
    /// No held partition's local deadline falls before this: until then nothing held can
    /// have lapsed, and the loop does not look (an early one costs a look, no more).
    pub(super) next_deadline: Instant,
    /// Whether the members, the share or what is owned changed since the view was published.
    pub(super) view_stale: bool,
    /// Cancelled when the node stops: the releases it tries again until then give up (each
    /// goes on in the background, for a while, from its guard).
    pub(super) stopping: CancellationToken,
    /// Whether the node stands aside, owning nothing: announced (again) in its loop, it met
    /// an earlier live node it disagrees with (see `Node::stand_aside_if_refused`).
    pub(super) aside: bool,
}

impl Node {
    pub(crate) fn new(
        settings: Arc<Settings>,
        store: Arc<dyn LeaseStore>,
        shared: Arc<Shared>,
        events: EventSender,
        view: watch::Sender<PartitionsView>,
    ) -> Result<Self, Error> {
        Ok(Node {
            settings,
            store,
            shared,
            membership: Membership::new()?,
            held: BTreeMap::new(),
            claims: Claims::default(),
            handovers: JoinSet::new(),
            members: Vec::new(),
            announcements: crate::store::GroupSnapshot::default(),
            share: Vec::new(),
            holders_wanted: false,
            events,
            view,
            next_deadline: Instant::now(),
            view_stale: true,
            stopping: CancellationToken::new(),
            aside: false,
        })
    }

    /// Runs until `stop`, then hands every partition over and withdraws the announcement.
    pub(crate) async fn run(mut self, stop: CancellationToken) -> Result<(), Error> {
        let settings = Arc::clone(&self.settings);
        let mut changes = self.store.watch_changes(&settings.member_key).await.ok();
        let mut renewal = Periodic::Due(Instant::now() + settings.renew_interval);
        let mut read = Periodic::Due(Instant::now());
        // Asked for by a read of the members that finds the node off its cap.
        let mut holders = Periodic::Due(Instant::now() + NOT_YET);
        // A failed renewal or read is tried again no later than the next renewal.
        let retry_after_failure = settings.retry_interval.min(settings.renew_interval);
        loop {
            // With all three running, nothing is due until one ends.
            let due = [renewal.due(), read.due(), holders.due()].into_iter().flatten().min();
            let due = due.unwrap_or_else(|| Instant::now() + settings.lease_time);
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                claimed = self.claims.next() => {
                    // With those that ended meanwhile (a takeover's grants come in bursts):
                    // one look at what lapsed and one view for them all.
                    self.on_claimed(claimed);
                    for _ in 1..CLAIMS_PER_TURN {
                        let Some(claimed) = self.claims.ready() else { break };
                        self.on_claimed(claimed);
                    }
                }
                Some(done) = self.handovers.join_next() => {
                    if let Ok(Err(error)) = done {
                        tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "a partition's release failed; trying again in the background");
                    }
                    self.forget_released();
                }
                (result, _) = renewal.finished() => {
                    let sent_at = result.ok().and_then(|renewal| self.on_renewal(renewal));
                    renewal = Periodic::Due(match sent_at {
                        Some(sent_at) => sent_at + settings.renew_interval,
                        None => Instant::now() + retry_after_failure,
                    });
                }
                (result, again) = read.finished() => {
                    // The next renewal comes with a read: none is needed before it (while
                    // one is in flight, its due time has passed: the next is an interval on).
                    let horizon =
                        renewal.due().unwrap_or_else(|| Instant::now() + settings.renew_interval);
                    let next = match result {
                        Ok(result) => self.on_read(result).map_or(horizon, |at| at.min(horizon)),
                        Err(_) => Instant::now() + retry_after_failure,
                    };
                    read = Periodic::Due(if again { Instant::now() } else { next });
                }
                (result, again) = holders.finished() => {
                    if let Ok(result) = result {
                        self.on_holders_read(result);
                    }
                    holders = Periodic::Due(if again { Instant::now() } else { Instant::now() + NOT_YET });
                }
                () = woken(&mut changes) => read.now(),
                () = sleep_until(due) => {
                    let now = Instant::now();
                    if renewal.due().is_some_and(|at| now >= at) {
                        renewal = Periodic::Running { task: tokio::spawn(self.renewal()), again: false };
                        // Each renewal comes with a read of the members.
                        read.now();
                    }
                    if read.due().is_some_and(|at| now >= at) {
                        read = Periodic::Running { task: tokio::spawn(self.read()), again: false };
                    }
                    if holders.due().is_some_and(|at| now >= at) {
                        holders = Periodic::Running { task: tokio::spawn(self.holders_read()), again: false };
                    }
                }
            }
            if std::mem::take(&mut self.holders_wanted) {
                holders.now();
            }
            self.forget_expired();
            self.publish();
        }
        self.stopping.cancel();
        // A read left in flight changes nothing; a renewal's answer is not needed to release.
        renewal.abort();
        read.abort();
        holders.abort();
        self.shut_down().await
    }

    /// Claims partition `index` if it is this node's share and not held.
    pub(super) fn claim_if_wanted(&mut self, index: u32) {
        if self.share.binary_search(&index).is_ok() && !self.held.contains_key(&index) {
            self.claims.claim(index, &self.settings, &self.store, self.membership.token);
        }
    }

    /// Publishes the view, if anything in it changed since the last one.
    pub(super) fn publish(&mut self) {
        if !std::mem::take(&mut self.view_stale) {
            return;
        }
        let view = PartitionsView {
            members: self.members.len(),
            share: self.share.clone(),
            owned: self
                .held
                .iter()
                .filter(|(_, held)| !held.cell.is_revoked())
                .map(|(i, _)| *i)
                .collect(),
        };
        self.view.send_if_modified(|old| {
            let changed = *old != view;
            *old = view;
            changed
        });
    }

    /// Hands every partition over, withdraws every claim (giving back what they won or may
    /// have won), and withdraws the announcement. The first release error, if any.
    async fn shut_down(mut self) -> Result<(), Error> {
        self.follow_nobody();
        let mut first_error = None;
        // What it held released, the node leaves at once, so the others take it: claims
        // still waiting out a lock-delay (etcd's) end behind, each grant given back.
        self.handovers_ended(&mut first_error).await;
        let claims_left = !self.claims.is_idle();
        if let Err(error) = self.membership.withdraw(&self.store, &self.settings).await {
            first_error.get_or_insert(error);
        }
        while !self.claims.is_idle() {
            let claimed = self.claims.next().await;
            self.give_back(claimed.guard);
        }
        self.handovers_ended(&mut first_error).await;
        if claims_left {
            // A claim that ran past the withdrawal may have opened the session again.
            self.membership.end_session(&self.store, &self.settings).await;
        }
        self.held.clear();
        self.shared.lock().clear();
        self.members.clear();
        self.view_stale = true;
        self.publish();
        first_error.map_or(Ok(()), Err)
    }

    /// Waits for every hand-over and give-back in flight; the first error kept.
    async fn handovers_ended(&mut self, first_error: &mut Option<Error>) {
        while let Some(done) = self.handovers.join_next().await {
            if let Ok(Err(error)) = done {
                first_error.get_or_insert(error);
            }
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("owned", &self.lock().keys().collect::<Vec<_>>()).finish()
    }
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Arc<Cell>>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Resolves when the members' group changes, never without a watch.
async fn woken(changes: &mut Option<crate::store::GroupWatch>) {
    match changes {
        Some(watch) => watch.woken().await,
        None => std::future::pending().await,
    }
}
