//! The partitions a node holds: each one's lease and handles (its [`Cell`]) and its slot's
//! guard, the one release path of a slot; a won claim made a partition, their renewal in
//! batches, a hand-over, a loss.

use std::sync::Arc;

use tokio::time::Instant;

use super::claims::Claimed;
use super::node::Node;
use super::partition::Cell;
use crate::election::candidate::Won;
use crate::election::guard::SlotGuard;
use crate::election::lease::local_deadline;
use crate::election::{Lease, LossReason};
use crate::error::Error;
use crate::store::{HeldSlot, RenewOutcome};
use crate::telemetry;
use crate::token::LeaseToken;

/// A partition the node holds.
pub(super) struct Held {
    pub token: LeaseToken,
    pub cell: Arc<Cell>,
    pub slot: Slot,
}

/// Where a held partition's slot is.
pub(super) enum Slot {
    /// Owned: its guard, armed, gives it back if the node drops it.
    Owned(SlotGuard),
    /// Being handed over: the hand-over's task has the guard, and releases through it.
    HandingOver,
}

/// A renewal batch's answers, for the tokens it renewed.
pub(super) struct Renewal {
    sent_at: Instant,
    /// The announcement's token, if it was renewed (first in the batch).
    member: Option<LeaseToken>,
    partitions: Vec<(u32, LeaseToken)>,
    answers: Result<Vec<RenewOutcome>, Error>,
}

impl Node {
    /// The renewal of the announcement and every partition held, in one batch, to run
    /// beside the loop.
    pub(super) fn renewal(&self) -> impl Future<Output = Renewal> + Send + 'static {
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
    pub(super) fn on_renewal(&mut self, renewal: Renewal) -> Option<Instant> {
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
                        self.membership.deadline = local_deadline(sent_at, expires_in);
                    }
                    _ => {
                        tracing::warn!(set = %self.settings.name, "the node's announcement lapsed; announcing it again");
                        self.membership.lapse();
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
                    let ended = held.cell.lease.renewed(expires_at, expires_in, sent_at).err();
                    self.next_deadline = self.next_deadline.min(held.cell.lease.deadline());
                    ended
                }
                _ => Some(held.cell.lease.end(LossReason::Refused)),
            };
            if ended.is_some() {
                self.forget(index);
            }
        }
        Some(sent_at)
    }

    /// A claim's end: a won partition becomes the node's if it is still its share and not
    /// held, else it is given back; a claim that ended without a win is made again if the
    /// partition is wanted (it was withdrawn, then wanted again).
    pub(super) fn on_claimed(&mut self, claimed: Claimed) {
        let Claimed { index, guard, won, .. } = claimed;
        let wanted = self.share.binary_search(&index).is_ok() && !self.held.contains_key(&index);
        match won {
            Some(won) if wanted => {
                // A claim made again meanwhile is not needed: this one won.
                self.claims.withdraw(index);
                self.own(index, guard, won);
            }
            _ => {
                self.give_back(guard);
                self.claim_if_wanted(index);
            }
        }
    }

    /// Makes a won partition this node's: its lease, its handle, its event. A grant whose
    /// local deadline passed meanwhile is a lease already lost: the loop forgets it, gives
    /// it back and claims it again.
    fn own(&mut self, index: u32, guard: SlotGuard, won: Won) {
        let (settings, token) = (&self.settings, won.token);
        let key: Arc<str> = settings.partition_keys[index as usize].as_str().into();
        let name: Arc<str> = format!("{}/{index}", settings.name).into();
        let holder = Arc::clone(&settings.holder_id);
        telemetry::metric::transition(&key, "elected");
        let cell = Cell::new(index, self.events.clone(), |on_loss| {
            Lease::new(name, key, token, holder, won.grant, won.sent_at, Some(on_loss))
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
        self.next_deadline = self.next_deadline.min(cell.lease.deadline());
        self.view_stale = true;
        self.held.insert(index, Held { token, cell: Arc::clone(&cell), slot: Slot::Owned(guard) });
        self.shared.lock().insert(index, cell);
        self.events.assigned(handle);
    }

    /// Starts handing partition `index` over: its work is told to stop, and once its
    /// handles are dropped (or the grace ends) it is released through its guard, beside the
    /// loop. It is renewed until then.
    pub(super) fn hand_over(&mut self, index: u32) {
        let Some(held) = self.held.get_mut(&index) else { return };
        held.cell.revoke(LossReason::SteppedDown);
        self.view_stale = true;
        let Slot::Owned(mut guard) = std::mem::replace(&mut held.slot, Slot::HandingOver) else {
            return;
        };
        self.shared.lock().remove(&index);
        let cell = Arc::clone(&held.cell);
        let (grace, stopping) = (self.settings.handover_grace, self.stopping.clone());
        self.handovers.spawn(async move {
            let _ = tokio::time::timeout(grace, cell.handles_dropped()).await;
            // A release the store does not answer is tried again while the node runs (on
            // etcd its session would keep the slot alive), then in the background.
            let released = guard.release_until_stopped(true, &stopping).await;
            cell.lease.released();
            released.map(drop)
        });
    }

    /// Gives back what `guard` may hold (a grant no longer wanted, a claim withdrawn after
    /// a lost reply, a partition lapsed here), beside the loop: tried again while the node
    /// runs and the store does not answer, since on etcd the node's session would keep the
    /// slot alive for as long as the node lives, and every claim of it would be refused.
    pub(super) fn give_back(&mut self, mut guard: SlotGuard) {
        if guard.is_armed() {
            let stopping = self.stopping.clone();
            self.handovers.spawn(async move {
                let _ = guard.release_until_stopped(false, &stopping).await;
                Ok(())
            });
        }
    }

    /// Forgets the partitions whose hand-over ended (their lease was released).
    pub(super) fn forget_released(&mut self) {
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

    /// Forgets the partitions whose local deadline passed: a look at each only once the
    /// earliest deadline has come, so a node taking thousands of partitions does not look at
    /// all it holds after each grant.
    pub(super) fn forget_expired(&mut self) {
        let now = Instant::now();
        if now < self.next_deadline {
            return;
        }
        let mut next_deadline = now + self.settings.lease_time;
        let mut expired = Vec::new();
        for (index, held) in &self.held {
            if held.cell.lease.is_lost() {
                expired.push(*index);
            } else {
                next_deadline = next_deadline.min(held.cell.lease.deadline());
            }
        }
        self.next_deadline = next_deadline;
        for index in expired {
            self.forget(index);
        }
    }

    /// Forgets partition `index`, and claims it again (under a new token) if it is still
    /// this node's share (it was lost: refused, or its deadline passed).
    pub(super) fn forget(&mut self, index: u32) {
        self.view_stale = true;
        if let Some(held) = self.held.remove(&index) {
            // The lease's end revoked it already; a hand-over's too.
            let reason = held.cell.lease.loss_reason().unwrap_or(LossReason::Refused);
            held.cell.revoke(reason);
            if let Slot::Owned(mut guard) = held.slot {
                if reason == LossReason::Refused {
                    // The store ended it: nothing to give back.
                    guard.forget();
                }
                // Lapsed here, perhaps not at the store: a slot in the node's session would
                // live on with it, and its next grant wait for it.
                self.give_back(guard);
            }
        }
        self.shared.lock().remove(&index);
        self.claim_if_wanted(index);
    }
}
