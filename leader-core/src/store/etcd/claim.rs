//! A group's claim on its next free slot (fair waiting: see
//! [`LeaseStore::keeps_reservations`](crate::LeaseStore::keeps_reservations)), on etcd.
//!
//! The claim is the group's `{prefix}{key} last claim` key: `{token} {arrival µs} {hold ms}
//! {priority} {holder}` (the holder an operator prefers, then the highest priority, then the
//! earliest arrival, holds it; see `preference.rs`),
//! bound to a lease of its own that only its holder's requests keep alive, so a claim whose
//! holder stopped asking is deleted by etcd within its hold (rounded up to whole seconds,
//! and at least the cluster's minimum TTL). Arrival is the requesting client's clock minus
//! the time it says it waited: a claim is a bound on starvation, not a safety rule, so
//! clocks apart by less than the gap between two waiters' arrivals keep their order.
//!
//! The key is under the markers' range, which every grant compares (nothing written there
//! since the grant's decision): a claim written after a grant was decided makes it decide
//! again, and a guess (a grant without a read) commits only where no claim is held.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp};

use super::group::Group;
use super::layout::GroupKeys;
use super::{EtcdStore, OnLease};
use crate::error::Error;
use crate::store::bound::Bound;
use crate::store::{AcquireRequest, ClaimInfo};
use crate::token::LeaseToken;

/// The group's claim key as a read found it.
#[derive(Debug, Clone)]
pub(crate) struct ClaimKey {
    /// When it was last written: a claim's write compares it.
    pub mod_revision: i64,
    /// The lease it lives on.
    pub lease: i64,
    /// What it says; `None` for a value this store did not write, or a key on no lease
    /// (which would never lapse): such a key holds nothing back, and the next claim
    /// replaces it.
    pub claim: Option<Claim>,
    /// Who holds the claim, for [`LeaseStore::claim`](crate::LeaseStore::claim).
    pub holder: String,
}

/// A live claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub token: LeaseToken,
    /// The holder's arrival, in µs since the epoch on its own clock.
    pub arrival_us: u64,
    /// How long it lives after its holder's last request.
    pub hold: Duration,
    /// Its priority: a higher one takes the claim over whatever its arrival.
    pub priority: i32,
}

impl ClaimKey {
    /// The claim key `kv`.
    pub(crate) fn read(kv: &KeyValue) -> ClaimKey {
        let read = (|| {
            let value = std::str::from_utf8(kv.value()).ok()?;
            let mut fields = value.splitn(5, ' ');
            let token = fields.next()?.parse().ok()?;
            let arrival_us = fields.next()?.parse().ok()?;
            let hold_ms: u64 = fields.next()?.parse().ok().filter(|ms| *ms > 0)?;
            let hold = Duration::from_millis(hold_ms).min(super::leases::secs(super::MAX_TTL_SECS));
            let priority = fields.next()?.parse().ok()?;
            let holder = fields.next()?.to_owned();
            (kv.lease() != 0).then_some((Claim { token, arrival_us, hold, priority }, holder))
        })();
        let (claim, holder) = read.unzip();
        let holder = holder.unwrap_or_default();
        ClaimKey { mod_revision: kv.mod_revision(), lease: kv.lease(), claim, holder }
    }
}

impl Claim {
    fn encode(&self, holder: &str) -> String {
        let hold_ms = self.hold.as_millis().max(1);
        format!("{} {} {hold_ms} {} {holder}", self.token, self.arrival_us, self.priority)
    }

    /// Whether this claim goes before `other`: a higher priority, or the same and an
    /// earlier arrival (`preferred`: whether each is of the holder an operator prefers,
    /// which goes first).
    fn before(&self, other: &Claim, preferred: (bool, bool)) -> bool {
        (preferred.0, self.priority, std::cmp::Reverse(self.arrival_us))
            > (preferred.1, other.priority, std::cmp::Reverse(other.arrival_us))
    }
}

/// What the group's claim makes of an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimStep {
    /// No claim bears on it: a free slot is granted as usual (a claim stays).
    Free,
    /// The request holds the claim, or takes it over (`write`: the key must say so): a
    /// free slot is granted and the claim ends; in a full group the claim is written or
    /// kept alive, and the answer comes within half its hold.
    Holds { write: Option<Claim> },
    /// Another's claim keeps the last free slot: refused until the claim's lease (of its
    /// `hold`, at least the cluster's shortest) can have lapsed.
    HeldBack { hold: Duration },
}

use ClaimStep::{Free, HeldBack, Holds};

/// The step of `request` (of a group of `max` slots) on `group`, at `now`.
pub(crate) fn step(
    group: &Group,
    request: &AcquireRequest<'_>,
    max: u32,
    now: SystemTime,
) -> ClaimStep {
    let held = group.claim.as_ref().and_then(|key| key.claim);
    let asked = request.reservation.map(|reservation| {
        let now_us = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
        let waited_us = reservation.waited.as_micros();
        Claim {
            token: request.token,
            arrival_us: u64::try_from(now_us.saturating_sub(waited_us)).unwrap_or(u64::MAX),
            hold: reservation.hold_for,
            priority: reservation.priority,
        }
    });
    let is_preferred = |holder: &str| group.preferred.as_deref() == Some(holder);
    let held_holder = group.claim.as_ref().map_or("", |key| key.holder.as_str());
    let preferred = (is_preferred(request.holder), is_preferred(held_holder));
    match (held, asked) {
        (Some(held), Some(asked)) if held.token == asked.token => Holds { write: None },
        (Some(held), Some(asked)) if asked.before(&held, preferred) => Holds { write: Some(asked) },
        (None, Some(asked)) => Holds { write: Some(asked) },
        (Some(held), _) if held.token == request.token => Holds { write: None },
        (Some(held), _) if (max as usize).saturating_sub(group.slots.len()) <= 1 => {
            HeldBack { hold: held.hold }
        }
        _ => Free,
    }
}

impl EtcdStore {
    /// The TTL of a claim's lease, in whole seconds: its hold rounded up, at least the
    /// cluster's minimum (etcd would raise it anyway; a claim is no deadline its holder
    /// counts on, so a longer one is fine) and at most etcd's longest.
    pub(crate) fn claim_ttl(&self, hold: Duration) -> i64 {
        let secs = hold.as_secs().saturating_add(u64::from(hold.subsec_nanos() > 0));
        i64::try_from(secs).unwrap_or(i64::MAX).clamp(self.min_ttl().max(1), super::MAX_TTL_SECS)
    }

    /// Writes `claim` of `holder` as the group's claim if the claim key is still as `group`
    /// read it, on a lease of its hold; whether it was written (otherwise the group changed:
    /// read it again).
    pub(crate) async fn write_claim(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        group: &Group,
        claim: Claim,
        holder: &str,
    ) -> Result<bool, Error> {
        let ttl = self.claim_ttl(claim.hold);
        // A lease this store kept from a released slot if it has one (one Raft write less);
        // one found gone (revoked behind the store's back) is replaced by a new one, once.
        let mut lease = self.lease(bound, ttl, None, true).await?;
        let unchanged = match &group.claim {
            Some(key) => Compare::mod_revision(keys.claim(), CompareOp::Equal, key.mod_revision),
            None => Compare::create_revision(keys.claim(), CompareOp::Equal, 0),
        };
        let mut fresh = false;
        let written = loop {
            let on_lease = PutOptions::new().with_lease(lease.id);
            let txn = Txn::new().when([unchanged.clone()]).and_then([TxnOp::put(
                keys.claim(),
                claim.encode(holder),
                Some(on_lease),
            )]);
            match self.txn_on_lease(bound, txn).await? {
                OnLease::Reply(reply) => break reply.succeeded(),
                OnLease::LeaseGone if !fresh => {
                    lease = self.grant_lease(bound, ttl, None).await?;
                    fresh = true;
                }
                gone @ OnLease::LeaseGone => return gone.reply().map(|_| false),
            }
        };
        if !written {
            self.revoke_behind(lease.id);
        }
        Ok(written)
    }

    /// Makes the group's claim the request's (of `holder`), in a full group: `write` it (a
    /// claim of its own, or one taken over), or keep the claim it holds alive for another
    /// hold (written again if it lapsed meanwhile). Whether the claim is the request's now;
    /// otherwise the group changed: read it again.
    pub(crate) async fn hold_claim(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        group: &Group,
        write: Option<Claim>,
        holder: &str,
    ) -> Result<bool, Error> {
        if let Some(claim) = write {
            return self.write_claim(bound, keys, group, claim, holder).await;
        }
        let Some(key) = &group.claim else { return Ok(false) };
        let Some(claim) = key.claim else { return Ok(false) };
        let ttl = self.claim_ttl(claim.hold);
        if self.keep_alive(bound, key.lease, ttl).await? {
            return Ok(true);
        }
        self.write_claim(bound, keys, group, claim, holder).await
    }

    /// [`LeaseStore::claim`](crate::LeaseStore::claim): the claim key of `key` and its
    /// preference key, read together, then the claim's lease's time to live (in whole
    /// seconds, rounded down: its end moves on only while the claim's holder keeps asking,
    /// which is what a leader that looks for a better candidate needs to see). A lease
    /// found gone is no claim.
    pub(crate) async fn claim_of(&self, key: &str) -> Result<Option<ClaimInfo>, Error> {
        let keys = self.keys(key)?;
        let [claim, preferred] = self.read_keys("claim", [keys.claim(), keys.preferred()]).await?;
        let Some(key) = claim.as_ref().map(ClaimKey::read) else { return Ok(None) };
        let Some(claim) = key.claim else { return Ok(None) };
        let preferred = preferred.as_ref().and_then(super::preference::preferred_holder);
        let now_us = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
        let waited_us = u64::try_from(now_us).unwrap_or(u64::MAX).saturating_sub(claim.arrival_us);
        let bound = self.bound("claim");
        let lease = key.lease;
        let life = self.inner.members.call(&bound, |client| async move {
            client.lease_client().time_to_live(lease, None).await
        });
        // Whole seconds left, rounded down (0: under a second, as a claim of a one-second
        // lease kept alive twice a second always reads); -1 for a lease that is gone.
        let left = life.await?.ttl();
        if left < 0 {
            return Ok(None);
        }
        let expires_in = super::leases::secs(left);
        let info = ClaimInfo::new(
            key.holder,
            claim.priority,
            Duration::from_micros(waited_us),
            expires_in,
        );
        Ok(Some(info.with_preference(preferred)))
    }
}

/// The answer to the claim's holder in a full group whose nearest expiry is `nearest`: soon
/// enough to keep its claim alive.
pub(crate) fn holder_wait(nearest: Duration, hold: Duration) -> Duration {
    nearest.min(hold / 2).max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::AcquireRequest;
    use std::num::NonZeroU32;

    fn token() -> LeaseToken {
        LeaseToken::generate().unwrap()
    }

    fn group_claimed_by(claim: Option<Claim>, slots: usize) -> Group {
        let claim = claim.map(|claim| ClaimKey {
            mod_revision: 3,
            lease: 9,
            claim: Some(claim),
            holder: "h".to_owned(),
        });
        let mut group = Group { claim, ..Group::default() };
        for index in 0..slots {
            group.slots.push(super::super::layout::Slot {
                index: index as u32,
                token: token(),
                fence: index as u64 + 1,
                lease: 1,
                ttl: 10,
                max_leaders: 3,
                acquired_at: UNIX_EPOCH,
                delay_ttl: None,
                holder: String::new(),
            });
        }
        group
    }

    /// An earlier arrival takes the claim over, a later one does not; the last free slot is
    /// held back from others, a second free one is not.
    #[test]
    fn the_earliest_arrival_holds_the_claim_and_the_last_free_slot() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let hold = Duration::from_secs(1);
        let holder = Claim { token: token(), arrival_us: 990_000_000, hold, priority: 0 };
        let max = NonZeroU32::new(3).unwrap();
        let (early, late, other) = (token(), token(), token());
        let ask = |token, waited| {
            AcquireRequest::new("g", max, token, "h", Duration::from_secs(5))
                .reserving(waited, hold)
        };
        let group = group_claimed_by(Some(holder), 2);
        let earlier = ask(early, Duration::from_secs(20));
        assert!(
            matches!(step(&group, &earlier, 3, now), Holds { write: Some(c) } if c.token == early)
        );
        assert_eq!(step(&group, &ask(late, Duration::from_secs(5)), 3, now), HeldBack { hold });
        let plain = AcquireRequest::new("g", max, other, "h", Duration::from_secs(5));
        assert_eq!(step(&group, &plain, 3, now), HeldBack { hold });
        assert_eq!(step(&group_claimed_by(Some(holder), 1), &plain, 3, now), Free);
        let own = AcquireRequest::new("g", max, holder.token, "h", Duration::from_secs(5));
        assert_eq!(step(&group, &own, 3, now), Holds { write: None });
        assert_eq!(step(&group_claimed_by(None, 2), &plain, 3, now), Free);
    }
}
