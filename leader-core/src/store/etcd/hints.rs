//! [`Hints`]: what this store last learnt of each group, to choose an acquire's first step.
//!
//! A transaction that could write is a Raft write even when its compare fails, while a read
//! is not. So an acquire goes straight to the transaction (guessing the index) only when a
//! slot of the group was just freed, by this store's release or as the group's watch saw;
//! only the first acquire after that guesses, and the others read first, so waiters woken
//! together do not all write. Otherwise (a group it knows nothing of, after a refusal or a
//! grant) the store reads first. A token that holds a slot, or whose last acquire did not
//! answer (it failed, or was dropped mid-way, and may have been granted unseen), always
//! reads first, so a guess never gives a token a second slot.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::LeaseToken;

/// How many groups the hints keep before they start again (a lost hint costs a read).
const KEPT: usize = 4096;

/// What this store last learnt of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hint {
    /// An acquire found it full, or took a slot: read first.
    Full,
    /// The group's watch saw slot `index` freed since.
    Freed(u32),
}

/// An acquire's first step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstStep {
    /// Straight to the transaction, for this index.
    Guess(u32),
    /// Read the group first.
    Read,
}

/// The hints of one store, by group range.
#[derive(Default)]
pub(crate) struct Hints {
    by_range: Mutex<HashMap<String, Hint>>,
    /// Tokens whose last acquire has not answered (it failed, or was dropped mid-way), and
    /// may have been granted unseen; the oldest are forgotten first.
    uncertain: Mutex<VecDeque<LeaseToken>>,
}

impl Hints {
    fn by_range(&self) -> std::sync::MutexGuard<'_, HashMap<String, Hint>> {
        self.by_range.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set(&self, range: &str, hint: Hint) {
        let mut by_range = self.by_range();
        if by_range.len() >= KEPT && !by_range.contains_key(range) {
            by_range.clear();
        }
        by_range.insert(range.to_owned(), hint);
    }

    /// The first step of an acquire of the group `range`.
    pub(crate) fn first_step(&self, range: &str) -> FirstStep {
        let mut by_range = self.by_range();
        match by_range.get(range).copied() {
            None => FirstStep::Read,
            Some(Hint::Full) => FirstStep::Read,
            Some(Hint::Freed(index)) => {
                by_range.insert(range.to_owned(), Hint::Full);
                FirstStep::Guess(index)
            }
        }
    }

    /// An acquire found the group full, or took a slot.
    pub(crate) fn full(&self, range: &str) {
        self.set(range, Hint::Full);
    }

    fn uncertain_tokens(&self) -> std::sync::MutexGuard<'_, VecDeque<LeaseToken>> {
        self.uncertain.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An acquire under `token` begins.
    pub(crate) fn attempting(&self, token: LeaseToken) {
        let mut uncertain = self.uncertain_tokens();
        if !uncertain.contains(&token) {
            if uncertain.len() >= KEPT {
                uncertain.pop_front();
            }
            uncertain.push_back(token);
        }
    }

    /// An acquire under `token` answered (granted or refused).
    pub(crate) fn answered(&self, token: LeaseToken) {
        self.uncertain_tokens().retain(|kept| *kept != token);
    }

    /// Whether `token`'s last acquire did not answer.
    pub(crate) fn uncertain(&self, token: LeaseToken) -> bool {
        self.uncertain_tokens().contains(&token)
    }

    /// Slot `index` was freed: this store released it, or the group's watch saw it go
    /// (released, expired or revoked).
    pub(crate) fn freed(&self, range: &str, index: u32) {
        self.set(range, Hint::Freed(index));
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
        hints.freed("g ", 2);
        assert_eq!(hints.first_step("g "), FirstStep::Guess(2));
        assert_eq!(hints.first_step("g "), FirstStep::Read, "the others read first");
        hints.freed("other ", 1);
        assert_eq!(hints.first_step("other "), FirstStep::Guess(1));
    }

    #[test]
    fn a_token_whose_acquire_did_not_answer_is_uncertain_until_one_does() {
        let hints = Hints::default();
        let token = LeaseToken::generate().unwrap();
        hints.attempting(token);
        assert!(hints.uncertain(token));
        hints.attempting(token);
        hints.answered(token);
        assert!(!hints.uncertain(token));
    }
}
