//! [`LeaseOwner`]: whose the etcd lease of a slot this store knows is. Every decision the
//! store makes about a slot's lease (keep it for the next grant, revoke it, settle a lost
//! reply by revoking it, renew it in its session's batch, release the slot as its holder or
//! as a takeover) is one `match` on it, here, and the owner is decided once: when the store
//! grants the slot, moves it to another lease, or first finds it by reading its group.

use super::hints::Settling;

/// Whose the lease of a slot this store knows is (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseOwner {
    /// This store's, for this slot alone: granted (or taken from the store's pool) by an
    /// acquire through this store, or the lease this store moved the slot to (a renewal
    /// under another TTL, a release kept for its minimum lease).
    Slot,
    /// One of this store's session leases, shared by the slots of one session (see
    /// `sessions.rs`): the others live on it.
    Session,
    /// Not known to this store, though the slot was granted through it: an acquire by a
    /// token that held its slot already (an earlier attempt's grant whose answer was given
    /// up on, or a grant through another store before a restart). Its lease may carry other
    /// slots (another store's session).
    Adopted,
    /// Someone else's: the slot was found by reading its group, by a renewal, release or
    /// revocation naming a token this store was not granted (an operator's tool, another
    /// service with the token). Its holder may still act.
    Found,
}

/// How a lease is revoked once its slot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revoking {
    /// Revoked: nothing else is bound to it.
    Always,
    /// Revoked if a read of its time to live lists no other key.
    IfUnshared,
    /// Never: it carries other slots.
    Never,
}

impl LeaseOwner {
    /// The owner of a lease an acquire takes: its session's, or one of its own.
    pub(crate) fn for_acquire(in_session: bool) -> Self {
        match in_session {
            true => LeaseOwner::Session,
            false => LeaseOwner::Slot,
        }
    }

    /// The owner once an acquire through this store was granted the slot its token held
    /// already: a slot found by reading is adopted (its release the holder's own now).
    pub(crate) fn granted_again(self) -> Self {
        match self {
            LeaseOwner::Found => LeaseOwner::Adopted,
            owner => owner,
        }
    }

    /// The owner once the slot moved to a lease this store granted for it alone: a slot
    /// found by reading stays found (its release is still a takeover's).
    pub(crate) fn moved(self) -> Self {
        match self {
            LeaseOwner::Slot | LeaseOwner::Session | LeaseOwner::Adopted => LeaseOwner::Slot,
            LeaseOwner::Found => LeaseOwner::Found,
        }
    }

    /// Whether a release through this store is the holder's own (the next taker waits no
    /// lock-delay); otherwise it ends the slot as a takeover does, with the lock-delay.
    pub(crate) fn releases_as_holder(self) -> bool {
        match self {
            LeaseOwner::Slot | LeaseOwner::Session | LeaseOwner::Adopted => true,
            LeaseOwner::Found => false,
        }
    }

    /// Whether a transaction binding keys to the lease that got no answer is settled by
    /// revoking the lease (recorded as unanswered until then: see `hints.rs`), so a late
    /// commit leaves nothing; otherwise the lease carries other slots, and the caller asks
    /// again (a late commit on it gives the token no second slot).
    pub(crate) fn settles_lost_replies(self) -> bool {
        match self {
            LeaseOwner::Slot => true,
            LeaseOwner::Session | LeaseOwner::Adopted | LeaseOwner::Found => false,
        }
    }

    /// How a transaction binding keys to the lease is settled when it gets no answer,
    /// before the token's next call (see `hints.rs`): the lease revoked (a late commit
    /// leaves nothing), a grant on a session's lease fenced off (a late commit would hold
    /// a slot for as long as the session lives, for a token that may have moved on), or
    /// not at all: the caller asks again, and a late commit gives the token no second slot.
    pub(crate) fn settling(self) -> Option<Settling> {
        match self {
            LeaseOwner::Slot => Some(Settling::Revoke),
            LeaseOwner::Session => Some(Settling::FenceOff),
            LeaseOwner::Adopted | LeaseOwner::Found => None,
        }
    }

    /// Whether the lease is kept for the next grant once no key is bound to it (its slot
    /// released, or its grant not made).
    pub(crate) fn pooled_once_unbound(self) -> bool {
        match self {
            LeaseOwner::Slot => true,
            LeaseOwner::Session | LeaseOwner::Adopted | LeaseOwner::Found => false,
        }
    }

    /// How the lease is revoked once the slot is gone from it (revoked, released by
    /// another, or moved to another lease).
    pub(crate) fn revoking(self) -> Revoking {
        match self {
            LeaseOwner::Slot => Revoking::Always,
            LeaseOwner::Adopted | LeaseOwner::Found => Revoking::IfUnshared,
            LeaseOwner::Session => Revoking::Never,
        }
    }

    /// Whether a slot a candidate abandons before acting (a lock-delay given up) ends with
    /// its lease revoked; otherwise its key alone is deleted.
    pub(crate) fn abandoned_by_revoking(self) -> bool {
        match self {
            LeaseOwner::Slot => true,
            LeaseOwner::Session | LeaseOwner::Adopted | LeaseOwner::Found => false,
        }
    }

    /// Whether a slot granted again through this store moves to a lease of its own first:
    /// an adopted lease may carry a dead process's other slots (its session's), which
    /// keeping it alive would keep held; moved, they run out by themselves.
    pub(crate) fn moved_when_granted_again(self) -> bool {
        match self {
            LeaseOwner::Adopted => true,
            LeaseOwner::Slot | LeaseOwner::Session | LeaseOwner::Found => false,
        }
    }

    /// Whether the slot renews in its session's batch: one keep-alive for the session.
    pub(crate) fn renews_with_session(self) -> bool {
        match self {
            LeaseOwner::Session => true,
            LeaseOwner::Slot | LeaseOwner::Adopted | LeaseOwner::Found => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: [LeaseOwner; 4] =
        [LeaseOwner::Slot, LeaseOwner::Session, LeaseOwner::Adopted, LeaseOwner::Found];

    /// Only a lease of the slot's alone is pooled, revoked outright or revoked to settle a
    /// lost reply; a session's is never revoked; a found slot alone is released as a
    /// takeover, before and after a move.
    #[test]
    fn each_owner_has_its_policies() {
        let table: Vec<_> = EVERY
            .iter()
            .map(|owner| {
                (
                    owner.releases_as_holder(),
                    owner.settles_lost_replies(),
                    owner.pooled_once_unbound(),
                    owner.revoking(),
                    owner.abandoned_by_revoking(),
                    owner.renews_with_session(),
                    owner.moved_when_granted_again(),
                )
            })
            .collect();
        assert_eq!(
            table,
            [
                (true, true, true, Revoking::Always, true, false, false),
                (true, false, false, Revoking::Never, false, true, false),
                (true, false, false, Revoking::IfUnshared, false, false, true),
                (false, false, false, Revoking::IfUnshared, false, false, false),
            ]
        );
        assert_eq!(
            EVERY.map(LeaseOwner::moved),
            [LeaseOwner::Slot, LeaseOwner::Slot, LeaseOwner::Slot, LeaseOwner::Found]
        );
        assert_eq!(
            EVERY.map(LeaseOwner::granted_again),
            [LeaseOwner::Slot, LeaseOwner::Session, LeaseOwner::Adopted, LeaseOwner::Adopted]
        );
        assert_eq!(
            EVERY.map(LeaseOwner::settling),
            [Some(Settling::Revoke), Some(Settling::FenceOff), None, None]
        );
        assert_eq!(LeaseOwner::for_acquire(true), LeaseOwner::Session);
        assert_eq!(LeaseOwner::for_acquire(false), LeaseOwner::Slot);
    }
}
