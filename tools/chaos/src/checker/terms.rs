//! The terms a run's reports show: one per grant, with when it was held by the store's clock
//! and believed by its holder's.

use std::collections::BTreeMap;

use crate::events::Event;
use crate::fleet::Reported;

/// One term (one grant) as the reports show it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Term {
    pub(super) candidate: usize,
    pub(super) fence: u64,
    /// Store clock.
    pub(super) acquired_at: u64,
    /// Store clock: the latest expiry the holder was told of.
    pub(super) expires_at: u64,
    /// Wall clock: first check that found it leading.
    pub(super) first_check: u64,
    /// Wall clock: the latest local deadline a check saw.
    pub(super) believes_until: u64,
    /// Wall clock: when the holder started to resign, or the library sent the release of
    /// the slot (whichever came first).
    pub(super) resigning_at: Option<u64>,
    /// Wall clock: when the holder found the term over.
    pub(super) ended_at: Option<u64>,
}

impl Term {
    /// Believed from the first check until the local deadline, or until it knew better.
    pub(super) fn belief(&self) -> (u64, u64) {
        let end = self.ended_at.map_or(self.believes_until, |e| e.min(self.believes_until));
        (self.first_check, end.max(self.first_check))
    }

    /// Held by the store's clock: from the grant to the expiry, or the release. The store
    /// keeps time in whole milliseconds, so the release is taken at the millisecond it fell in.
    pub(super) fn held(&self) -> (u64, u64) {
        let end =
            self.resigning_at.map_or(self.expires_at, |r| (r / 1000 * 1000).min(self.expires_at));
        (self.acquired_at, end.max(self.acquired_at))
    }

    /// When the store granted the term, as precisely as known: the store reports grant times
    /// in milliseconds, and the fence is the server's clock in microseconds unless it had to
    /// be raised above an earlier fence; otherwise the latest instant of that millisecond.
    pub(super) fn granted_at(&self) -> u64 {
        let millisecond = self.acquired_at..self.acquired_at + 1000;
        if millisecond.contains(&self.fence) { self.fence } else { millisecond.end - 1 }
    }
}

/// The terms by (candidate, fence).
pub(super) fn terms(reports: &[Reported]) -> BTreeMap<(usize, u64), Term> {
    let mut terms: BTreeMap<(usize, u64), Term> = BTreeMap::new();
    for Reported { candidate, event, .. } in reports {
        let candidate = *candidate;
        match *event {
            Event::Leading { at, fence, acquired_at, expires_at, believes_until } => {
                let term = terms.entry((candidate, fence)).or_insert(Term {
                    candidate,
                    fence,
                    acquired_at,
                    expires_at,
                    first_check: at,
                    believes_until,
                    resigning_at: None,
                    ended_at: None,
                });
                term.expires_at = term.expires_at.max(expires_at);
                term.believes_until = term.believes_until.max(believes_until);
            }
            Event::Resigning { at, fence } => {
                if let Some(term) = terms.get_mut(&(candidate, fence)) {
                    term.resigning_at.get_or_insert(at);
                    term.ended_at.get_or_insert(at);
                }
            }
            Event::Ended { at, fence, .. } => {
                if let Some(term) = terms.get_mut(&(candidate, fence)) {
                    term.ended_at.get_or_insert(at);
                }
            }
            Event::Releasing { at, fence } => {
                if let Some(term) = terms.get_mut(&(candidate, fence)) {
                    term.resigning_at = Some(term.resigning_at.map_or(at, |r| r.min(at)));
                }
            }
            Event::Stopped { at } => {
                // A candidate that stopped believes nothing more: a term its stop dropped
                // (a guard dropped with the wait it was won in) ends with it at the latest.
                for (_, term) in terms.range_mut((candidate, 0)..=(candidate, u64::MAX)) {
                    term.ended_at.get_or_insert(at);
                }
            }
            Event::Wrote { .. }
            | Event::StallDeclined { .. }
            | Event::TermBegan { .. }
            | Event::Stalling { .. } => {}
        }
    }
    terms
}
