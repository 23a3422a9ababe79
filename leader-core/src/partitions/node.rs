//! The loop of one node of a partition set: it announces the node, renews the node's
//! announcement and partitions in batches, reads the members, computes its share and takes
//! or hands over partitions to match it.
//!
//! Everything that may take long runs beside the loop, so renewals keep their cadence: each
//! acquire (an etcd store waits out a takeover's lock-delay inside it), and each hand-over
//! (its grace for the work to stop, then the release). The loop learns of their ends from
//! its join sets.

use std::collections::{BTreeMap, HashSet};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::PartitionsView;
use super::assignment::assigned_to;
use super::options::Settings;
use super::partition::{Cell, PartitionEvent};
use crate::election::{Lease, LossReason};
use crate::error::Error;
use crate::store::{AcquireOutcome, AcquireRequest, Grant, HeldSlot, LeaseStore, RenewOutcome};
use crate::token::LeaseToken;

/// The most nodes one set may have: the slots of its members' group.
pub(crate) const MAX_MEMBERS: u32 = 1024;

/// How long after another member's announcement expires (unless renewed) a node reads the
/// members again: the store's expiry is on its clock, counted from a moment before the read.
const EXPIRY_MARGIN: Duration = Duration::from_millis(5);

/// The most acquires a node has in flight at once.
const ACQUIRES_IN_FLIGHT: usize = 128;

/// What the node and its [`Partitions`](super::Partitions) handle share.
#[derive(Default)]
pub(crate) struct Shared {
    /// The partitions the node owns and has not started handing over.
    pub owned: Mutex<BTreeMap<u32, Arc<Cell>>>,
}

/// The node's announcement: its slot of the members' group.
struct Membership {
    token: LeaseToken,
    /// The slot's fence, the node's identity among the members, while it is held.
    fence: Option<u64>,
    /// Its local deadline.
    deadline: Instant,
}

/// A partition the node holds.
struct Held {
    token: LeaseToken,
    cell: Arc<Cell>,
}

/// The end of an acquire run beside the loop.
struct Asked {
    index: u32,
    token: LeaseToken,
    sent_at: Instant,
    outcome: Result<AcquireOutcome, Error>,
}

pub(crate) struct Node {
    settings: Arc<Settings>,
    store: Arc<dyn LeaseStore>,
    shared: Arc<Shared>,
    membership: Membership,
    held: BTreeMap<u32, Held>,
    /// The partitions an acquire is in flight for.
    asking: HashSet<u32>,
    acquires: JoinSet<Asked>,
    handovers: JoinSet<Result<(), Error>>,
    /// The members last read, sorted, and this node's share among them.
    members: Vec<u64>,
    share: Vec<u32>,
    events: mpsc::UnboundedSender<PartitionEvent>,
    view: watch::Sender<PartitionsView>,
}

impl Node {
    pub(crate) fn new(
        settings: Arc<Settings>,
        store: Arc<dyn LeaseStore>,
        shared: Arc<Shared>,
        events: mpsc::UnboundedSender<PartitionEvent>,
        view: watch::Sender<PartitionsView>,
    ) -> Result<Self, Error> {
        Ok(Node {
            settings,
            store,
            shared,
            membership: Membership {
                token: LeaseToken::generate()?,
                fence: None,
                deadline: Instant::now(),
            },
            held: BTreeMap::new(),
            asking: HashSet::new(),
            acquires: JoinSet::new(),
            handovers: JoinSet::new(),
            members: Vec::new(),
            share: Vec::new(),
            events,
            view,
        })
    }

    /// Announces the node: takes (or confirms) its slot of the members' group.
    pub(crate) async fn announce(&mut self) -> Result<(), Error> {
        let settings = &self.settings;
        let request = AcquireRequest::new(
            &settings.member_key,
            NonZeroU32::new(MAX_MEMBERS).expect("not zero"),
            self.membership.token,
            &settings.holder_id,
            settings.lease_time,
        );
        let sent_at = Instant::now();
        match self.store.acquire(request).await? {
            AcquireOutcome::Granted(grant) => {
                self.membership.fence = Some(grant.fence);
                self.membership.deadline = sent_at + grant.expires_in;
                Ok(())
            }
            AcquireOutcome::Full { .. } => Err(Error::invalid_option(
                "count of nodes",
                MAX_MEMBERS + 1,
                format!(
                    "a partition set has at most {MAX_MEMBERS} live nodes ({})",
                    settings.member_key
                ),
            )),
        }
    }

    /// Runs until `stop`, then hands every partition over and withdraws the announcement.
    pub(crate) async fn run(mut self, stop: CancellationToken) -> Result<(), Error> {
        let settings = Arc::clone(&self.settings);
        let mut changes = self.store.watch_changes(&settings.member_key).await.ok();
        let mut next_renewal = Instant::now() + settings.renew_interval;
        let mut next_step = Instant::now();
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                Some(asked) = self.acquires.join_next() => {
                    if let Ok(asked) = asked {
                        self.on_asked(asked);
                    }
                }
                Some(done) = self.handovers.join_next() => {
                    if let Ok(Err(error)) = done {
                        tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "a partition's release failed; it expires by itself");
                    }
                    self.forget_released();
                }
                () = woken(&mut changes) => next_step = Instant::now(),
                () = sleep_until(next_renewal.min(next_step)) => {
                    if Instant::now() >= next_renewal {
                        next_renewal = if self.renew().await {
                            next_renewal.max(Instant::now() - settings.renew_interval) + settings.renew_interval
                        } else {
                            Instant::now() + settings.retry_interval
                        };
                    }
                    next_step = self.step().await.map_or(next_renewal, |at| at.min(next_renewal));
                }
            }
            self.publish();
        }
        self.shut_down().await
    }

    /// Renews the announcement and every partition held, in one batch; forgets what the
    /// store no longer holds. Whether the store answered.
    async fn renew(&mut self) -> bool {
        let settings = &self.settings;
        let mut slots = Vec::with_capacity(self.held.len() + 1);
        let announced = self.membership.fence.is_some();
        if announced {
            slots.push(HeldSlot::new(&settings.member_key, self.membership.token));
        }
        let indexes: Vec<u32> = self.held.keys().copied().collect();
        for &index in &indexes {
            slots.push(HeldSlot::new(
                &settings.partition_keys[index as usize],
                self.held[&index].token,
            ));
        }
        let sent_at = Instant::now();
        let answers = match self.store.renew_many(&slots, settings.lease_time).await {
            Ok(answers) => answers,
            Err(error) => {
                tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "renewing the partitions failed; retrying");
                self.forget_expired();
                return false;
            }
        };
        let mut answers = answers.into_iter();
        if announced {
            match answers.next() {
                Some(RenewOutcome::Renewed { expires_in, .. }) => {
                    self.membership.deadline = sent_at + expires_in;
                }
                _ => {
                    tracing::warn!(set = %settings.name, "the node's announcement lapsed; announcing it again");
                    self.membership.fence = None;
                }
            }
        }
        for (index, answer) in indexes.into_iter().zip(answers) {
            let cell = &self.held[&index].cell;
            let ended = match answer {
                RenewOutcome::Renewed { expires_at, expires_in } => {
                    cell.lease.renewed(expires_at, expires_in, sent_at).err()
                }
                _ => Some(cell.lease.end(LossReason::Refused)),
            };
            if ended.is_some() {
                self.forget(index);
            }
        }
        self.forget_expired();
        true
    }

    /// Announces the node if it is not, reads the members, and takes or hands over
    /// partitions to match this node's share. When to step again: at once after a failure
    /// (in `retry_interval`), else when the first other member's announcement expires
    /// unless renewed (a dead node's partitions are taken as soon as they can be), else at
    /// the next renewal.
    async fn step(&mut self) -> Option<Instant> {
        let settings = Arc::clone(&self.settings);
        if self.membership.fence.is_some() && Instant::now() >= self.membership.deadline {
            self.membership.fence = None;
        }
        if self.membership.fence.is_none()
            && let Err(error) = self.announce().await
        {
            tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "announcing the node failed; retrying");
            return Some(Instant::now() + settings.retry_interval);
        }
        let Some(me) = self.membership.fence else {
            return Some(Instant::now() + settings.retry_interval);
        };
        let read_at = Instant::now();
        let (members, first_expiry) = match self.store.state(&settings.member_key).await {
            Ok(group) => {
                let first_expiry = group
                    .leaders
                    .iter()
                    .filter(|slot| slot.fence != me)
                    .map(|slot| read_at + slot.expires_in + EXPIRY_MARGIN)
                    .min();
                let mut members: Vec<u64> =
                    group.leaders.iter().chain(&group.pending).map(|slot| slot.fence).collect();
                // A read may come from a replica a little behind: this node is a member.
                members.push(me);
                members.sort_unstable();
                members.dedup();
                (members, first_expiry)
            }
            Err(error) => {
                tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "reading the members failed; retrying");
                return Some(Instant::now() + settings.retry_interval);
            }
        };
        if members != self.members {
            let position = members.binary_search(&me).expect("pushed above");
            self.share = assigned_to(settings.count, &members, position);
            tracing::info!(set = %settings.name, members = members.len(), share = self.share.len(), "partition members changed");
            self.members = members;
        }
        let share: HashSet<u32> = self.share.iter().copied().collect();
        let extra: Vec<u32> = self
            .held
            .iter()
            .filter(|(index, held)| !share.contains(index) && !held.cell.is_revoked())
            .map(|(index, _)| *index)
            .collect();
        for index in extra {
            self.hand_over(index);
        }
        let mut waiting = false;
        for index in self.share.clone() {
            if self.held.contains_key(&index) {
                continue;
            }
            // Asked already (a refused acquire is asked again when it has waited), or
            // beyond the acquires in flight: the next step asks.
            if self.asking.len() >= ACQUIRES_IN_FLIGHT {
                waiting = true;
                continue;
            }
            if self.asking.insert(index) {
                self.ask(index);
            }
        }
        match waiting {
            true => Some(Instant::now() + settings.retry_interval),
            false => first_expiry,
        }
    }

    /// Starts an acquire of partition `index` beside the loop.
    fn ask(&mut self, index: u32) {
        let token = match LeaseToken::generate() {
            Ok(token) => token,
            Err(error) => {
                self.asking.remove(&index);
                tracing::warn!(set = %self.settings.name, error = %crate::error_chain(&error), "no token for a partition; retrying");
                return;
            }
        };
        let (settings, store) = (Arc::clone(&self.settings), Arc::clone(&self.store));
        self.acquires.spawn(async move {
            let key = &settings.partition_keys[index as usize];
            // Made before the acquire, so a release right after its refusal still wakes it.
            let watch = store.watch_releases(key).await.ok();
            let request = AcquireRequest::new(
                key,
                NonZeroU32::MIN,
                token,
                &settings.holder_id,
                settings.lease_time,
            );
            let sent_at = Instant::now();
            let outcome = store.acquire(request).await;
            if let (Ok(AcquireOutcome::Full { nearest_expiry }), Some(mut watch)) =
                (&outcome, watch)
            {
                // Held elsewhere still (its owner hands it over at its next step): done at
                // its release, its expiry, or the retry interval, whichever comes first.
                let wait = settings.retry_interval.min(*nearest_expiry);
                let _ = tokio::time::timeout(wait, watch.woken()).await;
            }
            Asked { index, token, sent_at, outcome }
        });
    }

    /// An acquire's end: a grant becomes an owned partition if it is still this node's
    /// share, else it is given back.
    fn on_asked(&mut self, asked: Asked) {
        self.asking.remove(&asked.index);
        let Asked { index, token, sent_at, outcome } = asked;
        match outcome {
            Ok(AcquireOutcome::Granted(grant)) => {
                if self.share.binary_search(&index).is_ok() && !self.held.contains_key(&index) {
                    self.own(index, token, grant, sent_at);
                } else {
                    self.give_back(index, token);
                }
            }
            // Held elsewhere still, and the acquire waited for its release (or the retry
            // interval): asked again while it is this node's share.
            Ok(_) => {
                if self.share.binary_search(&index).is_ok() && !self.held.contains_key(&index) {
                    self.asking.insert(index);
                    self.ask(index);
                }
            }
            Err(error) => {
                tracing::warn!(set = %self.settings.name, partition = index, error = %crate::error_chain(&error), "acquiring a partition failed; retrying");
            }
        }
    }

    /// Makes a granted partition this node's: its lease, its handle, its event.
    fn own(&mut self, index: u32, token: LeaseToken, grant: Grant, sent_at: Instant) {
        let settings = &self.settings;
        let key: Arc<str> = settings.partition_keys[index as usize].as_str().into();
        let name: Arc<str> = format!("{}/{index}", settings.name).into();
        let holder = Arc::clone(&settings.holder_id);
        let cell = Cell::new(index, self.events.clone(), |on_loss| {
            Lease::new(name, key, token, holder, grant, sent_at, Some(on_loss))
        });
        // The loss signal fires at the local deadline even if this loop is stalled.
        let (lease, stop) = (cell.lease.clone(), cell.stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = lease.lost() => {}
                () = stop.cancelled() => {}
            }
        });
        let handle = cell.handle();
        self.held.insert(index, Held { token, cell: Arc::clone(&cell) });
        self.shared.lock().insert(index, cell);
        let _ = self.events.send(PartitionEvent::Assigned(handle));
    }

    /// Starts handing partition `index` over: its work is told to stop, and once its handles
    /// are dropped (or the grace ends) it is released, beside the loop. It is renewed until
    /// then.
    fn hand_over(&mut self, index: u32) {
        let Some(held) = self.held.get(&index) else { return };
        held.cell.revoke(LossReason::SteppedDown);
        self.shared.lock().remove(&index);
        let (cell, token) = (Arc::clone(&held.cell), held.token);
        let (store, settings) = (Arc::clone(&self.store), Arc::clone(&self.settings));
        self.handovers.spawn(async move {
            let _ = tokio::time::timeout(settings.handover_grace, cell.handles_dropped()).await;
            let key = &settings.partition_keys[index as usize];
            let released = store.release(key, token, Duration::ZERO).await;
            cell.lease.released();
            released.map(drop)
        });
    }

    /// Gives back a grant this node no longer wants, beside the loop.
    fn give_back(&mut self, index: u32, token: LeaseToken) {
        let (store, settings) = (Arc::clone(&self.store), Arc::clone(&self.settings));
        self.handovers.spawn(async move {
            let key = &settings.partition_keys[index as usize];
            store.release(key, token, Duration::ZERO).await.map(drop)
        });
    }

    /// Forgets the partitions whose hand-over ended (their lease was released).
    fn forget_released(&mut self) {
        let released: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, held)| held.cell.lease.loss_reason().is_some())
            .map(|(index, _)| *index)
            .collect();
        for index in released {
            self.forget(index);
        }
    }

    /// Forgets the partitions whose local deadline passed.
    fn forget_expired(&mut self) {
        let expired: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, held)| held.cell.lease.is_lost())
            .map(|(i, _)| *i)
            .collect();
        for index in expired {
            self.forget(index);
        }
    }

    fn forget(&mut self, index: u32) {
        if let Some(held) = self.held.remove(&index) {
            // The lease's end revoked it already; a hand-over's too.
            held.cell.revoke(held.cell.lease.loss_reason().unwrap_or(LossReason::Refused));
        }
        self.shared.lock().remove(&index);
    }

    fn publish(&self) {
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

    /// Hands every partition over, gives back what acquires still in flight grant, and
    /// withdraws the announcement. The first release error, if any.
    async fn shut_down(mut self) -> Result<(), Error> {
        self.share.clear();
        let indexes: Vec<u32> = self.held.keys().copied().collect();
        for index in indexes {
            if !self.held[&index].cell.is_revoked() {
                self.hand_over(index);
            }
        }
        while let Some(asked) = self.acquires.join_next().await {
            if let Ok(Asked { index, token, outcome: Ok(AcquireOutcome::Granted(_)), .. }) = asked {
                self.give_back(index, token);
            }
        }
        let mut first_error = None;
        while let Some(done) = self.handovers.join_next().await {
            if let Ok(Err(error)) = done {
                first_error.get_or_insert(error);
            }
        }
        if self.membership.fence.is_some() {
            let released = self
                .store
                .release(&self.settings.member_key, self.membership.token, Duration::ZERO)
                .await;
            if let Err(error) = released {
                first_error.get_or_insert(error);
            }
        }
        self.held.clear();
        self.shared.lock().clear();
        self.members.clear();
        self.publish();
        first_error.map_or(Ok(()), Err)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("owned", &self.lock().keys().collect::<Vec<_>>()).finish()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Arc<Cell>>> {
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
