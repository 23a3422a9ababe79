//! What a caller asks of a store: a slot of a group ([`AcquireRequest`]), and which slot a
//! revocation ends and how ([`SlotRef`], [`Revocation`]).

use std::num::NonZeroU32;
use std::time::Duration;

#[cfg(doc)]
use super::LeaseStore;
#[cfg(doc)]
use super::batch::RENEW_BATCH_LEN;
use crate::error::Error;
use crate::token::LeaseToken;

/// A request for one slot of a group, made with [`AcquireRequest::new`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// The group's resolved store key.
    pub key: &'a str,
    /// How many slots the group has: at least one, by its type, so no store checks it.
    pub max_leaders: NonZeroU32,
    /// The token the slot is to be held under; the same token again returns the same grant.
    pub token: LeaseToken,
    /// Who asks, for state and logs.
    pub holder: &'a str,
    /// The slot's time to live on the store's clock.
    pub lease_time: Duration,
    /// The session the slot belongs to, if any (see [`in_session`](Self::in_session)).
    pub session: Option<LeaseToken>,
    /// The candidate's claim to the group's next free slot, if it asks for one (see
    /// [`reserving`](Self::reserving)).
    pub reservation: Option<Reservation>,
}

/// A waiting candidate's claim to its group's next free slot, for fair waiting: made with
/// [`AcquireRequest::reserving`].
///
/// A group keeps at most one reservation. While it lives, a group with exactly one free slot
/// grants that slot to the reservation's token alone; a group with more free slots grants
/// the others as usual.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reservation {
    /// How long the candidate has waited for a slot so far. The store turns it into an
    /// arrival on its own clock (now minus `waited`): a request that arrived strictly
    /// earlier takes the group's reservation over.
    pub waited: Duration,
    /// How long the reservation lives after this request, unless the same token asks again
    /// first (each request from it starts this time over).
    pub hold_for: Duration,
    /// The candidate's priority (higher wins): a request of a strictly higher priority takes
    /// the group's reservation over whatever its arrival, and arrival orders equal
    /// priorities. 0 for a candidate that announces none.
    pub priority: i32,
}

impl<'a> AcquireRequest<'a> {
    /// A request for a slot of group `key` (of `max_leaders` slots) under `token`, for
    /// `holder`, to live `lease_time` on the store's clock.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use leader_core::LeaseToken;
    /// use leader_core::store::AcquireRequest;
    ///
    /// let three = NonZeroU32::new(3).unwrap();
    /// let token = LeaseToken::generate().unwrap();
    /// let request = AcquireRequest::new("leader:workers", three, token, "host-a", Duration::from_secs(10));
    /// assert_eq!(request.max_leaders.get(), 3);
    /// ```
    pub fn new(
        key: &'a str,
        max_leaders: NonZeroU32,
        token: LeaseToken,
        holder: &'a str,
        lease_time: Duration,
    ) -> Self {
        AcquireRequest {
            key,
            max_leaders,
            token,
            holder,
            lease_time,
            session: None,
            reservation: None,
        }
    }

    /// The same request, for a slot of session `session`: a caller that renews many slots
    /// together ([`LeaseStore::renew_many`], as a node of [partition
    /// leases](crate::Partitions) does) names them one session, and a store may keep them
    /// alive as one. The etcd store binds a session's slots of one TTL to one etcd lease, so
    /// a batch renewal is one keep-alive and a read per [`RENEW_BATCH_LEN`] slots; its
    /// slots then live while any of them is renewed, and end when released or when the
    /// session's renewals stop. Stores that keep each slot's expiry apart (memory, Redis,
    /// PostgreSQL) ignore it.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use leader_core::LeaseToken;
    /// use leader_core::store::AcquireRequest;
    ///
    /// let node = LeaseToken::generate().unwrap();
    /// let token = LeaseToken::generate().unwrap();
    /// let request = AcquireRequest::new("orders/7", NonZeroU32::MIN, token, "host-a", Duration::from_secs(10))
    ///     .in_session(node);
    /// assert_eq!(request.session, Some(node));
    /// ```
    pub fn in_session(self, session: LeaseToken) -> Self {
        AcquireRequest { session: Some(session), ..self }
    }

    /// The same request, claiming the group's next free slot for its token: a candidate
    /// that has waited `waited` and lost hand-overs to others asks for it, and the store
    /// keeps the claim `hold_for` after this request. If the request is refused, the store
    /// sets the group's reservation to this token unless a live one arrived no later; once
    /// this token is granted a slot, its reservation ends. A refusal of the reservation's
    /// holder reports a nearest expiry of at most half of `hold_for`, so the holder asks
    /// again (and its reservation lives on) while it waits. A request from any other token
    /// that would take the group's last free slot while a reservation lives is refused, with
    /// the reservation's time left as the nearest expiry (on etcd, an upper bound of it: the
    /// time until the reservation's lease can have lapsed). Stores that keep no reservations
    /// ([`LeaseStore::keeps_reservations`]) ignore it.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use leader_core::LeaseToken;
    /// use leader_core::store::AcquireRequest;
    ///
    /// let token = LeaseToken::generate().unwrap();
    /// let request = AcquireRequest::new("leader:report", NonZeroU32::MIN, token, "host-a", Duration::from_secs(10))
    ///     .reserving(Duration::from_millis(750), Duration::from_secs(1));
    /// assert_eq!(request.reservation.unwrap().hold_for, Duration::from_secs(1));
    /// ```
    pub fn reserving(self, waited: Duration, hold_for: Duration) -> Self {
        self.reserving_at(waited, hold_for, 0)
    }

    /// [`reserving`](Self::reserving), announcing `priority`: the group's reservation goes
    /// to the request of the highest priority, then of the earliest arrival, and
    /// [`LeaseStore::claim`] shows it, so a holder that reads it can step down for a better
    /// candidate.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use leader_core::LeaseToken;
    /// use leader_core::store::AcquireRequest;
    ///
    /// let token = LeaseToken::generate().unwrap();
    /// let request = AcquireRequest::new("leader:report", NonZeroU32::MIN, token, "host-a", Duration::from_secs(10))
    ///     .reserving_at(Duration::ZERO, Duration::from_secs(1), 10);
    /// assert_eq!(request.reservation.unwrap().priority, 10);
    /// ```
    pub fn reserving_at(self, waited: Duration, hold_for: Duration, priority: i32) -> Self {
        AcquireRequest { reservation: Some(Reservation { waited, hold_for, priority }), ..self }
    }

    /// Checks the request's times, as every store does before it asks its server:
    /// `lease_time` (and a claim's `hold_for`) from 1 ms to 2^47 ms, a claim's `waited` at
    /// most 2^47 ms.
    pub(crate) fn check_times(&self) -> Result<(), Error> {
        crate::duration::positive("lease_time", self.lease_time)?;
        if let Some(claim) = self.reservation {
            crate::duration::within_limit("waited", claim.waited)?;
            crate::duration::positive("hold_for", claim.hold_for)?;
        }
        Ok(())
    }
}

/// Which slot of a group a tool names, for [`LeaseStore::revoke`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotRef {
    /// The slot held under this token.
    Token(LeaseToken),
    /// The slot granted with this fence (unique within a group; `state()` shows it).
    Fence(u64),
}

/// How [`LeaseStore::revoke`] ends a slot its caller was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// Keeps the guarantee: the holder's renewals are refused from now on (so it steps
    /// down at its next renewal), and the slot goes to someone else only once the holder's
    /// local deadline can have passed: at the slot's expiry (memory, Redis, PostgreSQL), or
    /// one TTL after the next grant (etcd's lock-delay).
    AtExpiry,
    /// Frees the slot at once, as the holder's own release would. Risky: the holder still
    /// believes it leads until its next renewal is refused (up to a renewal interval, or a
    /// whole lease without auto-extension), so two holders may act at once meanwhile; only
    /// a downstream store that checks fences stays safe.
    Now,
}
