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
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::PartitionsView;
use super::assignment::{assigned_to, identity};
use super::options::Settings;
use super::partition::{Cell, PartitionEvent};
use crate::election::{Lease, LossReason};
use crate::error::Error;
use crate::store::{
    AcquireOutcome, AcquireRequest, Grant, GroupSnapshot, HeldSlot, LeaseStore, RenewOutcome,
};
use crate::telemetry;
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

/// A renewal batch's answers, for the tokens it renewed.
struct Renewal {
    sent_at: Instant,
    /// The announcement's token, if it was renewed (first in the batch).
    member: Option<LeaseToken>,
    partitions: Vec<(u32, LeaseToken)>,
    answers: Result<Vec<RenewOutcome>, Error>,
}

/// A read of the members, after announcing the node if it was not.
struct Read {
    /// The announcement's token.
    token: LeaseToken,
    /// The node's fence among the members, and its new deadline if it was announced now.
    announced: Result<(u64, Option<Instant>), Error>,
    read_at: Instant,
    members: Result<GroupSnapshot, Error>,
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
    /// Whether two members with this node's holder id were seen (warned of once).
    warned_duplicate: bool,
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
            warned_duplicate: false,
        })
    }

    /// Announces the node: takes (or confirms) its slot of the members' group.
    pub(crate) async fn announce(&mut self) -> Result<(), Error> {
        let (fence, deadline) =
            announce(&*self.store, &self.settings, self.membership.token).await?;
        self.membership.fence = Some(fence);
        self.membership.deadline = deadline;
        Ok(())
    }

    /// Runs until `stop`, then hands every partition over and withdraws the announcement.
    ///
    /// The loop itself never waits for the store: each renewal batch and each read of the
    /// members runs beside it (one of each at a time), so a slow reply to one never delays
    /// the other, nor a renewal that falls due meanwhile.
    pub(crate) async fn run(mut self, stop: CancellationToken) -> Result<(), Error> {
        let settings = Arc::clone(&self.settings);
        let mut changes = self.store.watch_changes(&settings.member_key).await.ok();
        let mut next_renewal = Instant::now() + settings.renew_interval;
        let mut next_read = Instant::now();
        let mut renewing: Option<JoinHandle<Renewal>> = None;
        let mut reading: Option<JoinHandle<Read>> = None;
        // Whether a read was asked for while one was in flight (it may have read too early).
        let mut read_again = false;
        loop {
            let due = match (&renewing, &reading) {
                (None, None) => next_renewal.min(next_read),
                (None, Some(_)) => next_renewal,
                (Some(_), None) => next_read,
                (Some(_), Some(_)) => Instant::now() + settings.lease_time,
            };
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
                renewal = finished(&mut renewing) => {
                    next_renewal = match renewal.map(|renewal| self.on_renewal(renewal)) {
                        Ok(Some(sent_at)) => sent_at + settings.renew_interval,
                        _ => Instant::now() + settings.retry_interval,
                    };
                }
                read = finished(&mut reading) => {
                    // The next renewal comes with a read: none is needed before it (while
                    // one is in flight, its due time has passed: the next is an interval on).
                    let horizon = match renewing {
                        Some(_) => Instant::now() + settings.renew_interval,
                        None => next_renewal,
                    };
                    next_read = match read {
                        Ok(read) => self.on_read(read).map_or(horizon, |at| at.min(horizon)),
                        Err(_) => Instant::now() + settings.retry_interval,
                    };
                    if std::mem::take(&mut read_again) {
                        next_read = Instant::now();
                    }
                }
                () = woken(&mut changes) => {
                    next_read = Instant::now();
                    read_again |= reading.is_some();
                }
                () = sleep_until(due) => {
                    let now = Instant::now();
                    if renewing.is_none() && now >= next_renewal {
                        renewing = Some(tokio::spawn(self.renewal()));
                        // Each renewal comes with a read of the members.
                        next_read = next_read.min(now);
                        read_again |= reading.is_some();
                    }
                    if reading.is_none() && now >= next_read {
                        reading = Some(tokio::spawn(self.read()));
                    }
                }
            }
            self.forget_expired();
            self.publish();
        }
        // A state read left in flight changes nothing; a renewal's answer is not needed to
        // release.
        for task in [renewing.map(|t| t.abort_handle()), reading.map(|t| t.abort_handle())]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
        self.shut_down().await
    }

    /// The renewal of the announcement and every partition held, in one batch, to run
    /// beside the loop.
    fn renewal(&self) -> impl Future<Output = Renewal> + Send + 'static {
        let (settings, store) = (Arc::clone(&self.settings), Arc::clone(&self.store));
        let member = self.membership.fence.map(|_| self.membership.token);
        let partitions: Vec<(u32, LeaseToken)> =
            self.held.iter().map(|(index, held)| (*index, held.token)).collect();
        async move {
            let mut slots = Vec::with_capacity(partitions.len() + 1);
            if let Some(token) = member {
                slots.push(HeldSlot::new(&settings.member_key, token));
            }
            for (index, token) in &partitions {
                slots.push(HeldSlot::new(&settings.partition_keys[*index as usize], *token));
            }
            let sent_at = Instant::now();
            let answers = telemetry::renew_many(&*store, &slots, settings.lease_time).await;
            Renewal { sent_at, member, partitions, answers }
        }
    }

    /// A renewal's answers: the announcement's and each partition's deadline moved, what
    /// the store no longer holds forgotten. When it was sent, if the store answered.
    fn on_renewal(&mut self, renewal: Renewal) -> Option<Instant> {
        let Renewal { sent_at, member, partitions, answers } = renewal;
        let answers = match answers {
            Ok(answers) => answers,
            Err(error) => {
                tracing::warn!(set = %self.settings.name, error = %crate::error_chain(&error), "renewing the partitions failed; retrying");
                return None;
            }
        };
        let mut answers = answers.into_iter();
        // Answers for a token no longer held (its partition handed over meanwhile, the
        // announcement made again) are left alone.
        if let Some(token) = member {
            let answer = answers.next();
            if token == self.membership.token && self.membership.fence.is_some() {
                match answer {
                    Some(RenewOutcome::Renewed { expires_in, .. }) => {
                        self.membership.deadline = sent_at + expires_in;
                    }
                    _ => {
                        tracing::warn!(set = %self.settings.name, "the node's announcement lapsed; announcing it again");
                        self.membership.fence = None;
                    }
                }
            }
        }
        for ((index, token), answer) in partitions.into_iter().zip(answers) {
            let Some(held) = self.held.get(&index).filter(|held| held.token == token) else {
                continue;
            };
            let ended = match answer {
                RenewOutcome::Renewed { expires_at, expires_in } => {
                    held.cell.lease.renewed(expires_at, expires_in, sent_at).err()
                }
                _ => Some(held.cell.lease.end(LossReason::Refused)),
            };
            if ended.is_some() {
                self.forget(index);
            }
        }
        Some(sent_at)
    }

    /// Announces the node if it is not, and reads the members, to run beside the loop.
    fn read(&mut self) -> impl Future<Output = Read> + Send + 'static {
        if self.membership.fence.is_some() && Instant::now() >= self.membership.deadline {
            self.membership.fence = None;
        }
        let (settings, store) = (Arc::clone(&self.settings), Arc::clone(&self.store));
        let (token, announced) = (self.membership.token, self.membership.fence);
        async move {
            let announced = match announced {
                Some(fence) => Ok((fence, None)),
                None => announce(&*store, &settings, token)
                    .await
                    .map(|(fence, deadline)| (fence, Some(deadline))),
            };
            let read_at = Instant::now();
            let members = match &announced {
                Ok(_) => telemetry::state(&*store, &settings.member_key).await,
                Err(_) => Ok(GroupSnapshot::default()), // not read: the announcement failed
            };
            Read { token, announced, read_at, members }
        }
    }

    /// A read's answer: the node's share among the members, partitions handed over or
    /// asked for to match it. When to read again: soon after a failure (`retry_interval`),
    /// else when the first other member's announcement expires unless renewed (a dead
    /// node's partitions are taken as soon as they can be), else at the next renewal.
    fn on_read(&mut self, read: Read) -> Option<Instant> {
        let settings = Arc::clone(&self.settings);
        let retry = Some(Instant::now() + settings.retry_interval);
        let Read { token, announced, read_at, members } = read;
        match announced {
            Ok((fence, fresh)) => {
                if let Some(deadline) = fresh
                    && token == self.membership.token
                {
                    self.membership.fence = Some(fence);
                    self.membership.deadline = deadline;
                }
            }
            Err(error) => {
                tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "announcing the node failed; retrying");
                return retry;
            }
        }
        let group = match members {
            Ok(group) => group,
            Err(error) => {
                tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "reading the members failed; retrying");
                return retry;
            }
        };
        // A node's identity is its holder id, which outlives a new announcement (after the
        // store lost one): a fence would move every partition then.
        let me = identity(&settings.holder_id);
        let first_expiry = group
            .leaders
            .iter()
            .filter(|slot| *slot.holder != *settings.holder_id)
            .map(|slot| read_at + slot.expires_in + EXPIRY_MARGIN)
            .min();
        let slots = group.leaders.iter().chain(&group.pending);
        let mut members: Vec<u64> = slots.clone().map(|slot| identity(&slot.holder)).collect();
        // A read may come from a replica a little behind: this node is a member.
        members.push(me);
        members.sort_unstable();
        let announced = members.len();
        members.dedup();
        if members.len() + 1 < announced && !self.warned_duplicate {
            self.warned_duplicate = true;
            tracing::warn!(set = %settings.name, "two live nodes share a holder id; they compete for the same share (give each node its own holder_id)");
        }
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
            // beyond the acquires in flight: the next read asks.
            if self.asking.len() >= ACQUIRES_IN_FLIGHT {
                waiting = true;
                continue;
            }
            if self.asking.insert(index) {
                self.ask(index);
            }
        }
        if waiting { retry } else { first_expiry }
    }

    /// Starts an acquire of partition `index` beside the loop, under a new token.
    fn ask(&mut self, index: u32) {
        match LeaseToken::generate() {
            Ok(token) => self.ask_under(index, token),
            Err(error) => {
                self.asking.remove(&index);
                tracing::warn!(set = %self.settings.name, error = %crate::error_chain(&error), "no token for a partition; retrying");
            }
        }
    }

    /// Starts an acquire of partition `index` under `token` beside the loop, in the node's
    /// session (its announcement's token: a store may keep all the node's slots alive as one).
    fn ask_under(&mut self, index: u32, token: LeaseToken) {
        let (settings, store) = (Arc::clone(&self.settings), Arc::clone(&self.store));
        let session = self.membership.token;
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
            )
            .in_session(session);
            let sent_at = Instant::now();
            let outcome = telemetry::acquire(&*store, request).await;
            match (&outcome, watch) {
                // Held elsewhere still (its owner hands it over at its next step): done at
                // its release, its expiry, or the retry interval, whichever comes first.
                (Ok(AcquireOutcome::Full { nearest_expiry }), Some(mut watch)) => {
                    let wait = settings.retry_interval.min(*nearest_expiry);
                    let _ = tokio::time::timeout(wait, watch.woken()).await;
                }
                (Ok(AcquireOutcome::Full { nearest_expiry }), None) => {
                    tokio::time::sleep(settings.retry_interval.min(*nearest_expiry)).await;
                }
                // Asked again after the retry interval.
                (Err(_), _) => tokio::time::sleep(settings.retry_interval).await,
                (Ok(AcquireOutcome::Granted(_)), _) => {}
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
            // A grant already over by its own reply (the same token asked again found the
            // slot about to expire): given back, and asked for under a new token, so a
            // token is never granted over and over with no time left.
            Ok(AcquireOutcome::Granted(grant)) if sent_at + grant.expires_in <= Instant::now() => {
                self.give_back(index, token);
                if self.share.binary_search(&index).is_ok() && !self.held.contains_key(&index) {
                    self.asking.insert(index);
                    self.ask(index);
                }
            }
            Ok(AcquireOutcome::Granted(grant)) => {
                if self.share.binary_search(&index).is_ok() && !self.held.contains_key(&index) {
                    self.own(index, token, grant, sent_at);
                } else {
                    self.give_back(index, token);
                }
            }
            // Held elsewhere still, or the store failed, and the acquire waited (for a
            // release, or the retry interval): asked again while it is this node's share.
            other => {
                let failed = other.is_err();
                if let Err(error) = other {
                    // Debug: in an outage every partition asked for fails so; the renewals'
                    // failures warn once per retry.
                    tracing::debug!(set = %self.settings.name, partition = index, error = %crate::error_chain(&error), "acquiring a partition failed; retrying");
                }
                if self.share.binary_search(&index).is_ok() && !self.held.contains_key(&index) {
                    self.asking.insert(index);
                    // The same token: a grant made while the reply was lost is this one.
                    self.ask_under(index, token);
                } else if failed {
                    // No longer wanted: a grant made while the reply was lost goes back (in a
                    // session it would otherwise live as long as the node).
                    self.give_back(index, token);
                }
            }
        }
    }

    /// Makes a granted partition this node's: its lease, its handle, its event.
    fn own(&mut self, index: u32, token: LeaseToken, grant: Grant, sent_at: Instant) {
        let settings = &self.settings;
        let key: Arc<str> = settings.partition_keys[index as usize].as_str().into();
        let name: Arc<str> = format!("{}/{index}", settings.name).into();
        let holder = Arc::clone(&settings.holder_id);
        telemetry::metric::transition(&key, "elected");
        let cell = Cell::new(index, self.events.clone(), |on_loss| {
            Lease::new(name, key, token, holder, grant, sent_at, Some(on_loss))
        });
        // The loss signal fires at the local deadline even if this loop is stalled.
        let (lease, stop) = (cell.lease.clone(), cell.stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                biased;
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
            let released = release(&*store, &settings, key, token).await;
            cell.lease.released();
            released
        });
    }

    /// Gives back a grant this node no longer wants, beside the loop.
    fn give_back(&mut self, index: u32, token: LeaseToken) {
        let (store, settings) = (Arc::clone(&self.store), Arc::clone(&self.settings));
        self.handovers.spawn(async move {
            let key = &settings.partition_keys[index as usize];
            release(&*store, &settings, key, token).await
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

    /// Forgets partition `index`, and asks for it again at once (under a new token) if it
    /// is still this node's share (it was lost: refused, or its deadline passed).
    fn forget(&mut self, index: u32) {
        if let Some(held) = self.held.remove(&index) {
            // The lease's end revoked it already; a hand-over's too.
            let reason = held.cell.lease.loss_reason().unwrap_or(LossReason::Refused);
            held.cell.revoke(reason);
            if reason == LossReason::Expired {
                // Lapsed here, perhaps not at the store: a slot in the node's session would
                // live on with it, and its next grant wait for it.
                self.give_back(index, held.token);
            }
        }
        self.shared.lock().remove(&index);
        if self.share.binary_search(&index).is_ok()
            && self.asking.len() < ACQUIRES_IN_FLIGHT
            && self.asking.insert(index)
        {
            self.ask(index);
        }
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
            let (key, token) = (&self.settings.member_key, self.membership.token);
            let released = telemetry::release(&*self.store, key, token, Duration::ZERO).await;
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

/// Releases the slot of group `key` held under `token`, asking again every retry interval
/// while the store fails transiently, for up to one lease: a slot in a session lives as long
/// as the session is renewed, so a release that got no answer is not left to expiry (after a
/// lease of failures, the node's renewals have failed too).
async fn release(
    store: &dyn LeaseStore,
    settings: &Settings,
    key: &str,
    token: LeaseToken,
) -> Result<(), Error> {
    let give_up = Instant::now() + settings.lease_time;
    loop {
        match telemetry::release(store, key, token, Duration::ZERO).await {
            Err(error) if error.is_transient() && Instant::now() < give_up => {
                tracing::debug!(set = %settings.name, key, error = %crate::error_chain(&error), "releasing a partition failed; retrying");
                tokio::time::sleep(settings.retry_interval).await;
            }
            released => return released.map(drop),
        }
    }
}

/// Takes (or confirms) the slot of the members' group held under `token` (the node's
/// session, too): its fence and local deadline.
async fn announce(
    store: &dyn LeaseStore,
    settings: &Settings,
    token: LeaseToken,
) -> Result<(u64, Instant), Error> {
    let request = AcquireRequest::new(
        &settings.member_key,
        NonZeroU32::new(MAX_MEMBERS).expect("not zero"),
        token,
        &settings.holder_id,
        settings.lease_time,
    )
    .in_session(token);
    let sent_at = Instant::now();
    match telemetry::acquire(store, request).await? {
        AcquireOutcome::Granted(grant) => Ok((grant.fence, sent_at + grant.expires_in)),
        AcquireOutcome::Full { .. } => Err(Error::invalid_option(
            "live nodes",
            MAX_MEMBERS + 1,
            format!(
                "a partition set has at most {MAX_MEMBERS} live nodes ({})",
                settings.member_key
            ),
        )),
    }
}

/// The result of a task run beside the loop once it ends; never while there is none.
async fn finished<T>(task: &mut Option<JoinHandle<T>>) -> Result<T, tokio::task::JoinError> {
    let Some(handle) = task.as_mut() else { return std::future::pending().await };
    let result = handle.await;
    *task = None;
    result
}

/// Resolves when the members' group changes, never without a watch.
async fn woken(changes: &mut Option<crate::store::GroupWatch>) {
    match changes {
        Some(watch) => watch.woken().await,
        None => std::future::pending().await,
    }
}
