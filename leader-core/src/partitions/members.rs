//! The node's membership: its announcement (a slot of the members' group, whose token is the
//! node's session) and the reads of who the members are (what the node then keeps, claims
//! and hands over: `share.rs`).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::node::Node;
use super::options::{Settings, announced};
use super::share::members_of;
use crate::backoff::{Backoff, FIRST_PAUSE};
use crate::election::guard::SlotGuard;
use crate::election::lease::local_deadline;
use crate::error::Error;
use crate::store::{AcquireOutcome, AcquireRequest, GroupSnapshot, LeaseStore, SlotInfo};
use crate::telemetry;
use crate::token::LeaseToken;

/// The most nodes one set may have: the slots of its members' group.
pub(crate) const MAX_MEMBERS: u32 = 1024;

/// How long after another member's announcement expires (unless renewed) a node reads the
/// members again: the store's expiry is on its clock, counted from a moment before the read.
const EXPIRY_MARGIN: Duration = Duration::from_millis(5);

/// The node's announcement: its slot of the members' group.
pub(super) struct Membership {
    /// The slot's token, the node's session: it never changes, so a new announcement (after
    /// the store lost one) keeps the partitions claimed in the session.
    pub token: LeaseToken,
    /// The slot's fence while it is held.
    pub fence: Option<u64>,
    /// Its local deadline.
    pub deadline: Instant,
    /// The fence of the node's own announcement before it lapsed or was withdrawn: a read
    /// may list it a while yet (the store has not let it go, or not purged it), and it is
    /// no other node's.
    pub previous: Option<u64>,
    /// Whether the announcement was made in the loop and not yet checked against the
    /// members (the read after it failed): the next read that succeeds checks it.
    pub unchecked: bool,
}

/// A read of the members, after announcing the node if it was not (and does not stand
/// aside).
pub(super) struct Read {
    /// The announcement's token.
    token: LeaseToken,
    announced: Announced,
    read_at: Instant,
    members: Result<GroupSnapshot, Error>,
}

/// What became of the node's announcement before a read.
enum Announced {
    /// Held already, under this fence.
    Kept,
    /// Made now (the first, or again after it lapsed): its fence and local deadline.
    Now(u64, Instant),
    /// Not made: the node stands aside for an earlier node it disagrees with.
    Aside,
    /// Not made: the store answered "full" for a group with room (see [`announce`]).
    Contended,
    /// The store failed.
    Failed(Error),
}

impl Membership {
    pub(super) fn new() -> Result<Self, Error> {
        Ok(Membership {
            token: LeaseToken::generate()?,
            fence: None,
            deadline: Instant::now(),
            previous: None,
            unchecked: false,
        })
    }

    /// Withdraws the announcement, through the slot's guard: a release the store does not
    /// answer goes on in the background.
    pub(super) async fn withdraw(
        &mut self,
        store: &Arc<dyn LeaseStore>,
        settings: &Settings,
    ) -> Result<(), Error> {
        if self.fence.take().is_none() {
            return Ok(());
        }
        let key = settings.member_key.as_str().into();
        let mut guard =
            SlotGuard::new(Arc::clone(store), key, self.token, Duration::ZERO, settings.lease_time);
        guard.set_armed(true);
        guard.release().await.map(drop)
    }

    /// The announcement lapsed: the node announces itself again at its next read.
    pub(super) fn lapse(&mut self) {
        self.previous = self.fence.take().or(self.previous);
    }

    /// [`withdraw`](Self::withdraw), to run beside the node's loop.
    pub(super) fn withdrawal(
        &mut self,
        store: &Arc<dyn LeaseStore>,
        settings: &Arc<Settings>,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        self.previous = self.fence.or(self.previous);
        let mut withdrawn = Membership { token: self.token, fence: self.fence.take(), ..*self };
        let (store, settings) = (Arc::clone(store), Arc::clone(settings));
        async move { withdrawn.withdraw(&store, &settings).await }
    }

    /// Releases the withdrawn announcement's slot once more, which it no longer holds:
    /// the store ends the node's session again (on etcd, an acquire in the session that
    /// ran past the withdrawal may have given it a lease again). An error changes
    /// nothing: such a lease expires by itself.
    pub(super) async fn end_session(&self, store: &Arc<dyn LeaseStore>, settings: &Settings) {
        let key = settings.member_key.as_str();
        if let Err(error) =
            crate::telemetry::release(&**store, key, self.token, Duration::ZERO).await
        {
            tracing::debug!(set = %settings.name, error = %crate::error_chain(&error), "could not end the node's session again; its lease expires by itself");
        }
    }
}

/// Before a node's first announcement: waits while an earlier announcement under its holder
/// id is not renewed, as a crashed process's left behind: it expires (then the node starts),
/// or is renewed, its time to live rising between two reads (a live node, which the
/// members' check after the announcement refuses). Waits at most two of this node's leases
/// and two of the store's expiry resolutions (etcd answers whole seconds, and 0 for a while
/// after a lease ran out; a slot in its lock-delay is pending); a failed read waits for
/// nothing.
pub(super) async fn wait_out_a_predecessor(store: &dyn LeaseStore, settings: &Settings) {
    let resolution = store.expiry_resolution();
    let same_id = |slot: &&SlotInfo| {
        announced(&slot.holder).is_some_and(|(id, _, _)| *id == *settings.holder_id)
    };
    let give_up = Instant::now() + 2 * (settings.lease_time + resolution);
    let mut last_seen: Option<Duration> = None;
    while Instant::now() < give_up {
        let Ok(group) = telemetry::state(store, &settings.member_key).await else { return };
        let read_at = Instant::now();
        let (live, pending) =
            (group.leaders.iter().find(same_id), group.pending.iter().find(same_id));
        let Some(slot) = live.or(pending) else { return };
        if live.is_some() {
            match last_seen {
                Some(before) if slot.expires_in > before => return, // renewed: a live node
                Some(_) => {}
                None => {
                    tracing::info!(set = %settings.name, holder = %settings.holder_id, expires_in = ?slot.expires_in, "a live announcement has this node's holder id; waiting to see whether it is renewed (a running node) or expires (a crashed one)");
                }
            }
            last_seen = Some(slot.expires_in);
        }
        let expired = read_at + slot.expires_in + resolution + Duration::from_millis(5);
        tokio::time::sleep_until(expired.min(read_at + settings.retry_interval)).await;
    }
}

impl Node {
    /// Announces the node: takes (or confirms) its slot of the members' group. `false`
    /// when the store answered "full" for a group with room (see [`announce`]): the loop
    /// announces the node again.
    pub(crate) async fn announce(&mut self) -> Result<bool, Error> {
        let Some((fence, deadline)) =
            announce(&*self.store, &self.settings, self.membership.token).await?
        else {
            return Ok(false);
        };
        self.membership.fence = Some(fence);
        self.membership.deadline = deadline;
        Ok(true)
    }

    /// After the first announcement: refuses to join a set whose earlier live nodes (a
    /// smaller fence) announced another count, or this node's holder id, and withdraws the
    /// announcement. A read that fails refuses nothing: the loop warns of both at each
    /// change of the members.
    pub(crate) async fn check_the_members(&mut self) -> Result<(), Error> {
        let (settings, Some(fence)) = (Arc::clone(&self.settings), self.membership.fence) else {
            return Ok(());
        };
        let Ok(group) = telemetry::state(&*self.store, &settings.member_key).await else {
            return Ok(());
        };
        let Some(refusal) = earlier_disagreement(&settings, &group, fence, None) else {
            return Ok(());
        };
        if let Err(error) = self.membership.withdraw(&self.store, &settings).await {
            tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "withdrawing the announcement failed; it expires by itself");
        }
        Err(refusal)
    }

    /// Announces the node if it is not, and reads the members, to run beside the loop.
    pub(super) fn read(&mut self) -> impl Future<Output = Read> + Send + 'static {
        if self.membership.fence.is_some() && Instant::now() >= self.membership.deadline {
            self.membership.lapse();
        }
        let (settings, store) = (Arc::clone(&self.settings), Arc::clone(&self.store));
        let (token, held, aside) =
            (self.membership.token, self.membership.fence.is_some(), self.aside);
        async move {
            let announced = match (held, aside) {
                (true, _) => Announced::Kept,
                (false, true) => Announced::Aside,
                (false, false) => match announce(&*store, &settings, token).await {
                    Ok(Some((fence, deadline))) => Announced::Now(fence, deadline),
                    Ok(None) => Announced::Contended,
                    Err(error) => Announced::Failed(error),
                },
            };
            let read_at = Instant::now();
            let members = match &announced {
                Announced::Failed(_) | Announced::Contended => Ok(GroupSnapshot::default()), // not read
                _ => telemetry::state(&*store, &settings.member_key).await,
            };
            Read { token, announced, read_at, members }
        }
    }

    /// A read's answer: the node's share among the members; partitions handed over,
    /// claimed or unclaimed to match it. When to read again: soon after a failure
    /// (`retry_interval`), else when the first other member's announcement expires unless
    /// renewed (a dead node's partitions are taken as soon as they can be).
    pub(super) fn on_read(&mut self, read: Read) -> Option<Instant> {
        let settings = Arc::clone(&self.settings);
        let retry = Some(Instant::now() + settings.retry_interval);
        let Read { token, announced, read_at, members } = read;
        match announced {
            Announced::Now(fence, deadline) if token == self.membership.token => {
                self.membership.fence = Some(fence);
                self.membership.deadline = deadline;
                self.membership.unchecked = true;
            }
            Announced::Failed(error) => {
                tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "announcing the node failed; retrying");
                return retry;
            }
            // Other nodes' announcements won the store's rounds: one of them is made each
            // round, so this one is soon; after a short pause, jittered so that the losers
            // do not meet again.
            Announced::Contended => {
                tracing::debug!(set = %settings.name, "the members' group was contended; announcing the node again");
                return Some(
                    Instant::now() + Backoff::new(FIRST_PAUSE, FIRST_PAUSE).jittered().next_pause(),
                );
            }
            Announced::Now(..) | Announced::Kept | Announced::Aside => {}
        }
        let group = match members {
            Ok(group) => group,
            Err(error) => {
                tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "reading the members failed; retrying");
                return retry;
            }
        };
        // An announcement made in the loop is checked at the first read that succeeds.
        let unchecked = std::mem::take(&mut self.membership.unchecked);
        let announced_now = if unchecked { self.membership.fence } else { None };
        if let Some(next) = self.stand_aside_if_refused(&group, announced_now) {
            return next;
        }
        // The store rounds what is left down to its resolution (whole seconds on etcd): an
        // announcement read with less left may live that long yet, so the next look comes no
        // sooner (a store with change watches wakes the node when it ends anyway), and
        // never within a short pause of this one.
        let resolution = self.store.expiry_resolution();
        let soonest = Instant::now() + settings.retry_interval.min(FIRST_PAUSE);
        let first_expiry = group
            .leaders
            .iter()
            .filter(|slot| *slot.holder != *settings.member_holder)
            .map(|slot| (read_at + slot.expires_in.max(resolution) + EXPIRY_MARGIN).max(soonest))
            .min();
        let members = members_of(&group, &settings.member_holder);
        if members != self.members {
            let mut disagreements = group
                .leaders
                .iter()
                .filter(|slot| Some(slot.fence) != self.membership.fence)
                .filter_map(|slot| disagreement(&settings, &slot.holder));
            if let Some(error) = disagreements.next() {
                tracing::error!(set = %settings.name, error = %error, "the set's live nodes disagree; partitions may stay unowned until they agree");
            }
        }
        self.follow(members, group, None, false);
        first_expiry
    }

    /// Whether the node stands aside, as a node started now would be refused: announced
    /// again after its announcement lapsed (a pause, a cut), or for the first time after
    /// start found the store unreachable, it met an earlier live node it disagrees with
    /// (under its holder id, of another count: one that joined meanwhile, or its own
    /// previous process, dead, whose announcement has not expired yet). It withdraws its
    /// announcement, hands back what it held and owns nothing, reading the members at each
    /// renewal until no such node is live, then announces itself again. `Some(when to read
    /// again)` while it stands aside.
    fn stand_aside_if_refused(
        &mut self,
        group: &GroupSnapshot,
        announced_now: Option<u64>,
    ) -> Option<Option<Instant>> {
        let settings = Arc::clone(&self.settings);
        if let Some(fence) = announced_now {
            let previous = self.membership.previous;
            let refusal = earlier_disagreement(&settings, group, fence, previous)?;
            tracing::error!(set = %settings.name, error = %refusal, "an earlier live node disagrees with this one: it stands aside, owning nothing, until that node is gone");
            self.aside = true;
            let withdrawal = self.membership.withdrawal(&self.store, &settings);
            self.handovers.spawn(withdrawal);
            self.follow_nobody();
            return Some(None);
        }
        if !self.aside {
            return None;
        }
        // Standing aside, the node has no announcement: every live node is earlier.
        let previous = self.membership.previous;
        if earlier_disagreement(&settings, group, u64::MAX, previous).is_some() {
            return Some(None);
        }
        tracing::info!(set = %settings.name, "the node this one stood aside for is gone; announcing it");
        self.aside = false;
        Some(Some(Instant::now()))
    }
}

/// What is wrong with a live node of `group` announced before this one (whose announcement
/// has `fence`), for this one: the first that disagrees. The slot under `own_before`, this
/// node's own earlier announcement, is no other node.
fn earlier_disagreement(
    settings: &Settings,
    group: &GroupSnapshot,
    fence: u64,
    own_before: Option<u64>,
) -> Option<Error> {
    let earlier = group.leaders.iter().chain(&group.pending);
    let earlier = earlier.filter(|slot| slot.fence < fence && Some(slot.fence) != own_before);
    earlier.filter_map(|slot| disagreement(settings, &slot.holder)).next()
}

/// What is wrong with another live node whose announcement's holder is `holder`, for this
/// one: another count, or this node's holder id.
fn disagreement(settings: &Settings, holder: &str) -> Option<Error> {
    let (holder_id, count, _) = announced(holder)?;
    if count != settings.count {
        return Some(Error::PartitionCountMismatch {
            set: settings.name.to_string(),
            requested: settings.count,
            existing: count,
        });
    }
    (*holder_id == *settings.holder_id).then(|| Error::HolderInUse {
        set: settings.name.to_string(),
        holder: holder_id.to_owned(),
    })
}

/// Takes (or confirms) the slot of the members' group held under `token` (the node's
/// session, too): its fence and local deadline. `None` when the store answered "full" for
/// a group with room, as etcd does when its transaction lost every round to other
/// announcements or found the slot gone meanwhile: a contention, not a full set.
async fn announce(
    store: &dyn LeaseStore,
    settings: &Settings,
    token: LeaseToken,
) -> Result<Option<(u64, Instant)>, Error> {
    let request = AcquireRequest::new(
        &settings.member_key,
        NonZeroU32::new(MAX_MEMBERS).expect("not zero"),
        token,
        &settings.member_holder,
        settings.lease_time,
    )
    .in_session(token);
    let sent_at = Instant::now();
    match telemetry::acquire(store, request).await? {
        AcquireOutcome::Granted(grant) => {
            Ok(Some((grant.fence, local_deadline(sent_at, grant.expires_in))))
        }
        AcquireOutcome::Full { .. } => {
            let live = telemetry::state(store, &settings.member_key).await?.leaders.len();
            if live < MAX_MEMBERS as usize {
                return Ok(None);
            }
            Err(Error::SetFull {
                set: settings.name.to_string(),
                key: settings.member_key.clone(),
                max_nodes: MAX_MEMBERS,
            })
        }
    }
}
