//! A group's reservation of its next free slot, as the [`MemoryStore`](super::MemoryStore)
//! keeps it (the Redis and PostgreSQL stores keep the same rules in their scripts): at most
//! one per group, held by the best waiter among those that asked (the holder an operator
//! prefers, then the highest priority, then the earliest arrival), for a while after each of
//! its requests.

use tokio::time::Instant;

use super::{AcquireRequest, ClaimInfo};
use crate::token::LeaseToken;

/// Who the group's next free slot is kept for (its token, holder and priority), since when
/// that waiter waits, and until when the claim lives unless it asks again.
#[derive(Debug, Clone)]
pub(super) struct Reserved {
    token: LeaseToken,
    holder: String,
    priority: i32,
    arrival: Instant,
    until: Instant,
}

/// An operator's preference for a group's holder, until when it lives.
#[derive(Debug, Clone)]
pub(super) struct Preferred {
    pub holder: String,
    pub until: Instant,
}

impl Preferred {
    /// The holder `preferred` names, if it lives at `now`.
    pub(super) fn live(preferred: Option<&Preferred>, now: Instant) -> Option<&str> {
        preferred.filter(|preferred| preferred.until > now).map(|p| p.holder.as_str())
    }
}

/// The live reservation at `now`, as [`LeaseStore::claim`](super::LeaseStore::claim) shows it
/// (under the live preference for `preferred`, if any).
pub(super) fn info(
    reserved: Option<&Reserved>,
    now: Instant,
    preferred: Option<&str>,
) -> Option<ClaimInfo> {
    let claim = reserved.filter(|claim| claim.until > now)?;
    let info = ClaimInfo::new(
        claim.holder.clone(),
        claim.priority,
        now - claim.arrival,
        claim.until - now,
    );
    Some(info.with_preference(preferred.map(str::to_owned)))
}

/// Whether `reserved` is a reservation still alive at `now`.
pub(super) fn lives_at(reserved: Option<&Reserved>, now: Instant) -> bool {
    reserved.is_some_and(|claim| claim.until > now)
}

/// Drops a lapsed reservation, and answers until when a request from `token` must be
/// refused because the group's last free slot is kept for another (`free`: the group's free
/// slots, at least one).
pub(super) fn held_back_until(
    reserved: &mut Option<Reserved>,
    token: LeaseToken,
    free: usize,
    now: Instant,
) -> Option<Instant> {
    if reserved.as_ref().is_some_and(|claim| claim.until <= now) {
        *reserved = None;
    }
    let claim = reserved.as_ref()?;
    (free == 1 && claim.token != token).then_some(claim.until)
}

/// A `request` that claims the next free slot takes the group's reservation, unless a live
/// one that goes first holds it: the holder an operator prefers (`preferred`), then a higher
/// priority, then the same priority and an arrival no later. Its own reservation lives on
/// from now. (Made before the slots are counted: a granted request's claim then ends with
/// [`granted`].)
pub(super) fn claim(
    reserved: &mut Option<Reserved>,
    request: &AcquireRequest<'_>,
    now: Instant,
    preferred: Option<&str>,
) {
    let Some(asked) = request.reservation else { return };
    let is_preferred = |holder: &str| preferred == Some(holder);
    let arrival = now.checked_sub(asked.waited).unwrap_or(now);
    let until = now + asked.hold_for;
    match reserved {
        Some(claim) if claim.until > now && claim.token == request.token => {
            claim.arrival = claim.arrival.min(arrival);
            claim.priority = asked.priority;
            claim.until = until;
        }
        Some(claim)
            if claim.until > now
                && (
                    is_preferred(&claim.holder),
                    claim.priority,
                    std::cmp::Reverse(claim.arrival),
                ) >= (
                    is_preferred(request.holder),
                    asked.priority,
                    std::cmp::Reverse(arrival),
                ) => {}
        _ => {
            *reserved = Some(Reserved {
                token: request.token,
                holder: request.holder.to_owned(),
                priority: asked.priority,
                arrival,
                until,
            });
        }
    }
}

/// A slot was granted to `token`: its reservation, if it had one, is done.
pub(super) fn granted(reserved: &mut Option<Reserved>, token: LeaseToken) {
    if reserved.as_ref().is_some_and(|claim| claim.token == token) {
        *reserved = None;
    }
}

/// When a refused `request` is to ask again: at `until` (the nearest expiry, or the end of
/// another's claim), or sooner if it holds the claim, within half the claim's life, so the
/// claim lives on while it waits; a request that claims behind another's claim asks again
/// when that claim would lapse (so a better candidate behind one that died announces itself
/// then, not at the nearest expiry).
pub(super) fn renewed_by(
    reserved: Option<&Reserved>,
    request: &AcquireRequest<'_>,
    now: Instant,
    until: Instant,
) -> Instant {
    match (reserved, request.reservation) {
        (Some(claim), Some(asked)) if claim.token == request.token => {
            until.min(now + asked.hold_for / 2)
        }
        (Some(claim), Some(_)) if claim.until > now => until.min(claim.until),
        _ => until,
    }
}
