//! [`Hints`]: what this store last learnt of each group, to choose an acquire's first step,
//! and the leases of transactions that did not answer.
//!
//! A transaction that could write is a Raft write even when its compare fails, while a read
//! is not. So an acquire goes straight to the transaction (guessing the index) only when a
//! slot of the group was just freed, by this store's release or as the group's watch saw;
//! only the first acquire after that guesses, and the others read first, so waiters woken
//! together do not all write. Otherwise (a group it knows nothing of, after a refusal or a
//! grant) the store reads first. A guess is decided on the revision at which the slot was
//! freed: it commits only if nothing was created or written in the group since (see
//! `acquire.rs`).
//!
//! A transaction whose answer never came may still commit later (a member that held it
//! back). Its lease is recorded against the acquire's token before the transaction is
//! sent, with how it is settled, and cleared once it answers; the token's next call first
//! settles every lease still recorded, and waits for the answer (see
//! [`EtcdStore::settle`](super::EtcdStore)): a lease of the slot's alone is revoked, so
//! whatever the late transaction bound to it is gone, or can no longer be bound; a grant on
//! a session's lease (which carries the session's other slots) is fenced off, so it can no
//! longer commit (see `sessions.rs`).

use super::bounded::{Bounded, MOST};
use crate::token::LeaseToken;

/// How a lease named by an unanswered transaction is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settling {
    /// Revoked: the lease is the slot's alone.
    Revoke,
    /// The grant fenced off: the lease is a session's, which this store never revokes.
    FenceOff,
}

/// What this store last learnt of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hint {
    /// An acquire found it full, or took a slot: read first.
    Full,
    /// Slot `index` was freed at `revision`.
    Freed { index: u32, revision: i64 },
}

/// An acquire's first step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstStep {
    /// Straight to the transaction, for this index, decided on the group as it was at
    /// `revision`.
    Guess { index: u32, revision: i64 },
    /// Read the group first.
    Read,
}

/// The hints of one store, by group range, and the leases of unanswered transactions, by
/// token; each map keeps the entries used most recently ([`Bounded`]: a lost hint costs a
/// read). The unanswered leases have the larger cap, since a partitions node in an outage
/// has one per partition it claims: each is settled at its token's next call.
pub(crate) struct Hints {
    by_range: Bounded<String, Hint>,
    unanswered: Bounded<LeaseToken, Vec<(i64, Settling)>>,
}

impl Default for Hints {
    fn default() -> Self {
        Hints { by_range: Bounded::default(), unanswered: Bounded::new(MOST) }
    }
}

impl Hints {
    fn set(&self, range: &str, hint: Hint) {
        self.by_range.lock().put(range.to_owned(), hint);
    }

    /// The first step of an acquire of the group `range`.
    pub(crate) fn first_step(&self, range: &str) -> FirstStep {
        let mut by_range = self.by_range.lock();
        match by_range.get(range).copied() {
            None | Some(Hint::Full) => FirstStep::Read,
            Some(Hint::Freed { index, revision }) => {
                by_range.put(range.to_owned(), Hint::Full);
                FirstStep::Guess { index, revision }
            }
        }
    }

    /// An acquire found the group full, or took a slot.
    pub(crate) fn full(&self, range: &str) {
        self.set(range, Hint::Full);
    }

    /// Slot `index` was freed at `revision`: this store released it, or the group's watch
    /// saw it go (released, expired or revoked).
    pub(crate) fn freed(&self, range: &str, index: u32, revision: i64) {
        self.set(range, Hint::Freed { index, revision });
    }

    /// A transaction binding keys to `lease` for `token` is about to be sent; if it gets no
    /// answer, the lease is settled as `settling` says.
    pub(crate) fn sending(&self, token: LeaseToken, lease: i64, settling: Settling) {
        let mut unanswered = self.unanswered.lock();
        let leases = unanswered.get_or_insert_mut(token, Vec::new);
        if !leases.contains(&(lease, settling)) {
            leases.push((lease, settling));
        }
    }

    /// The transaction on `lease` for `token` answered (it committed or its compare failed).
    pub(crate) fn answered(&self, token: LeaseToken, lease: i64) {
        let mut unanswered = self.unanswered.lock();
        if let Some(leases) = unanswered.peek_mut(&token) {
            leases.retain(|(kept, _)| *kept != lease);
            if leases.is_empty() {
                unanswered.pop(&token);
            }
        }
    }

    /// The leases `token`'s unanswered transactions named, each with how it is settled
    /// (none: its attempts all answered).
    pub(crate) fn unanswered_leases(&self, token: LeaseToken) -> Vec<(i64, Settling)> {
        self.unanswered.lock().peek(&token).cloned().unwrap_or_default()
    }

    /// `lease` is settled (revoked, or its grant fenced off): nothing more comes of what
    /// `token`'s transactions sent on it.
    pub(crate) fn settled(&self, token: LeaseToken, lease: i64) {
        self.answered(token, lease);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_acquire_after_a_freed_slot_guesses() {
        let hints = Hints::default();
        assert_eq!(hints.first_step("g "), FirstStep::Read, "nothing known");
        hints.full("g ");
        assert_eq!(hints.first_step("g "), FirstStep::Read);
        hints.freed("g ", 2, 40);
        assert_eq!(hints.first_step("g "), FirstStep::Guess { index: 2, revision: 40 });
        assert_eq!(hints.first_step("g "), FirstStep::Read, "the others read first");
    }

    #[test]
    fn a_lease_stays_recorded_until_its_transaction_answers() {
        let hints = Hints::default();
        let token = LeaseToken::generate().unwrap();
        hints.sending(token, 7, Settling::Revoke);
        hints.sending(token, 8, Settling::FenceOff);
        hints.answered(token, 7);
        assert_eq!(hints.unanswered_leases(token), [(8, Settling::FenceOff)]);
        hints.settled(token, 8);
        assert!(hints.unanswered_leases(token).is_empty());
    }
}
