//! [`LeadershipEvents`]: a role's terms and its group's holders as a stream of events, the
//! shape of client-go's `OnStartedLeading`, `OnStoppedLeading` and `OnNewLeader`.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{LeadershipStatus, Shared};
use crate::observe::GroupObserver;

/// One change of a role as [`LeadershipEvents`] tells it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeadershipEvent {
    /// This instance leads: a term began (client-go's `OnStartedLeading`). `token` is
    /// cancelled when the term ends; run the leader's work under it, and gate each action
    /// on [`Leadership::fence`](crate::Leadership::fence).
    Elected {
        /// This instance's term count (see [`Leadership::term`](crate::Leadership::term)).
        term: u64,
        /// The store's fencing token of the term.
        fence: u64,
        /// Cancelled when the term ends.
        token: CancellationToken,
    },
    /// The term told by the last [`Elected`](Self::Elected) ended: lost, resigned or
    /// stopped (client-go's `OnStoppedLeading`).
    Lost {
        /// The term that ended.
        term: u64,
    },
    /// The group's holders changed, as an observer of the group reads them, this
    /// instance's own terms included (client-go's `OnNewLeader`, for a group of any size):
    /// each holder id, in the store's order. Told at the first read that finds a holder and
    /// at each change of the set of holder ids after it (a holder that took its slot again
    /// is no new leader).
    LeadersChanged(Vec<String>),
}

/// The events of one [`Leadership`](crate::Leadership), from
/// [`events`](crate::Leadership::events): a term begun, a term ended, the group's holders
/// changed. Ends (`None`) once the leadership is stopped, after telling the end of a term
/// it told begun.
///
/// Events are read from the role's status and an observer of its group, not queued: a
/// term that began and ended between two reads is told by neither event (its token was
/// cancelled before anyone could act on it), and holders that changed twice between two
/// reads are told once, as they are now. Every `Elected` is followed by its `Lost` before
/// the next `Elected`. The stream does not keep the leadership running: it stops when
/// every handle is dropped or [`stop`](crate::Leadership::stop) is called.
pub struct LeadershipEvents {
    shared: Arc<Shared>,
    status: watch::Receiver<LeadershipStatus>,
    observer: GroupObserver,
    told_term: Option<u64>,
    /// The holder ids last told, sorted.
    told_holders: Vec<String>,
}

impl LeadershipEvents {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let settings = &shared.settings;
        let observer = GroupObserver::follow(&shared.store, &settings.role, settings.key.clone());
        let status = shared.status.subscribe();
        LeadershipEvents { shared, status, observer, told_term: None, told_holders: Vec::new() }
    }

    /// The next event, waiting for it; `None` once the leadership is stopped and every
    /// term told begun was told ended. Cancel-safe.
    pub async fn next(&mut self) -> Option<LeadershipEvent> {
        loop {
            if let Some(event) = self.term_event() {
                return Some(event);
            }
            if self.status.borrow().stopped {
                return None;
            }
            if let Some(holders) = self.holders_changed() {
                return Some(LeadershipEvent::LeadersChanged(holders));
            }
            tokio::select! {
                changed = self.status.changed() => {
                    // The sender lives in `shared`, which this stream holds.
                    if changed.is_err() {
                        return None;
                    }
                }
                // A failed read is the status's to report; the last read stays current.
                _ = self.observer.changed() => {}
            }
        }
    }

    /// The end of the term told begun, if it is over; else the start of a term not told
    /// yet, if one is live.
    fn term_event(&mut self) -> Option<LeadershipEvent> {
        let status = self.status.borrow_and_update().clone();
        let current = status.is_leader.then_some(status.term);
        if let Some(term) = self.told_term
            && current != Some(term)
        {
            self.told_term = None;
            return Some(LeadershipEvent::Lost { term });
        }
        let term = current.filter(|term| self.told_term != Some(*term))?;
        let lease = self
            .shared
            .held_lease()
            .filter(|lease| !lease.is_lost() && Some(lease.fence()) == status.fence)?;
        self.told_term = Some(term);
        Some(LeadershipEvent::Elected { term, fence: lease.fence(), token: lease.loss_token() })
    }

    /// The group's holder ids, if they changed since last told.
    fn holders_changed(&mut self) -> Option<Vec<String>> {
        let holders: Vec<String> =
            self.observer.current().leaders.into_iter().map(|slot| slot.holder).collect();
        let mut sorted = holders.clone();
        sorted.sort_unstable();
        if sorted == self.told_holders {
            return None;
        }
        self.told_holders = sorted;
        Some(holders)
    }
}

impl std::fmt::Debug for LeadershipEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeadershipEvents")
            .field("role", &self.shared.settings.role)
            .field("told_term", &self.told_term)
            .finish_non_exhaustive()
    }
}
