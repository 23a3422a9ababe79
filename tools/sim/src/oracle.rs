//! The oracle: what must hold at every step, judged from the store's own truth (the memory
//! store's state, by its clock) rather than from what the candidates report.
//!
//! - every believer (a lease whose `live_fence()` answers `Some`) holds a live slot of its
//!   group in the store, under its fence and holder: so never more than `max_leaders`
//!   believers per group, no believer after the store freed or re-granted its slot, and at
//!   most one owner of a partition;
//! - fences strictly increase over every grant of a group (the same token answered again
//!   gets its own fence back);
//! - an observer names only slots the store granted, to the holder it granted them to.
//!
//! A believer whose lease the store last confirmed before its clock stepped ahead or it
//! lost its data is excused the first rule: no client can keep a slot the store dropped
//! early, and its fence, lower than every later grant's, is what protects it then.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::FutureExt;
use leader::store::GroupSnapshot;
use leader::{LeaderGroupState, Lease, LeaseStore, LeaseToken, MemoryStore, Partition};

/// How many violations a run keeps (the first one is the one that matters).
const KEPT: usize = 20;

/// Everything the oracle knows of a run.
#[derive(Debug, Default)]
pub struct Oracle {
    believers: Vec<Believer>,
    grants: BTreeMap<String, Grants>,
    violations: Vec<String>,
    checks: u64,
    /// When the store's clock stepped ahead or it lost its data: a lease confirmed before
    /// may have lost its slot before its local deadline.
    breaks: Vec<Duration>,
}

/// A lease some candidate may act on.
#[derive(Debug)]
struct Believer {
    who: String,
    belief: Belief,
    /// Believes until told otherwise, whatever its lease says (a broken variant).
    blind: bool,
}

/// What a candidate checks before it acts: a lease's `live_fence()`, or a partition's (which
/// also answers `None` once the node started handing it over).
#[derive(Debug, Clone)]
pub enum Belief {
    /// A per-call slot's or a `Leadership` term's lease.
    Lease(Lease),
    /// A partition a node owns.
    Partition(Partition),
}

impl Belief {
    fn lease(&self) -> &Lease {
        match self {
            Belief::Lease(lease) => lease,
            Belief::Partition(partition) => partition.lease(),
        }
    }

    fn live_fence(&self) -> Option<u64> {
        match self {
            Belief::Lease(lease) => lease.live_fence(),
            Belief::Partition(partition) => partition.live_fence(),
        }
    }
}

/// The grants of one group.
#[derive(Debug, Default)]
struct Grants {
    last_fence: u64,
    /// Each grant's holder and token, by fence.
    by_fence: BTreeMap<u64, (String, LeaseToken)>,
    /// The fences granted to requests whose callers had given up (timed out) by then, and
    /// those an operator revoked at expiry: slots held by nobody until they lapse.
    orphaned: BTreeSet<u64>,
}

impl Oracle {
    /// `lease` is acted on by `who` from now on, for as long as its `live_fence()` answers
    /// (or, `blind`, until [`stop_believing`](Self::stop_believing)).
    pub fn believe(&mut self, who: &str, belief: Belief, blind: bool) {
        let token = belief.lease().token();
        let known = self.believers.iter().any(|b| b.belief.lease().token() == token);
        if !known && (blind || belief.live_fence().is_some()) {
            self.believers.push(Believer { who: who.to_owned(), belief, blind });
        }
    }

    /// The blind believer of `token` stops acting.
    pub fn stop_believing(&mut self, token: LeaseToken) {
        self.believers.retain(|b| b.belief.lease().token() != token);
    }

    /// The store granted `fence` of `key` to `holder` under `token`, at `at` (`late`: to a
    /// request whose caller had timed out).
    pub fn record_grant(
        &mut self,
        key: &str,
        token: LeaseToken,
        holder: &str,
        fence: u64,
        at: Duration,
        late: bool,
    ) {
        let grants = self.grants.entry(key.to_owned()).or_default();
        if late {
            grants.orphaned.insert(fence);
        }
        match grants.by_fence.get(&fence) {
            Some((_, granted)) if *granted == token => return, // the same grant, answered again
            Some((other, _)) => {
                let message = format!(
                    "{at:?}: fence {fence} of {key} granted to {holder} after it was granted to \
                     {other}"
                );
                self.violate(message);
                return;
            }
            None => {}
        }
        let last = grants.last_fence;
        grants.last_fence = last.max(fence);
        grants.by_fence.insert(fence, (holder.to_owned(), token));
        if fence <= last {
            self.violate(format!(
                "{at:?}: fence {fence} of {key} granted to {holder} after fence {last}: fences \
                 must strictly increase"
            ));
        }
    }

    /// Checks every believer against the store's state now.
    pub fn check(&mut self, store: &MemoryStore, at: Duration) {
        self.checks += 1;
        self.believers.retain(|b| b.blind || b.belief.live_fence().is_some());
        let mut snapshots: BTreeMap<String, GroupSnapshot> = BTreeMap::new();
        let mut tokens: BTreeMap<String, Vec<LeaseToken>> = BTreeMap::new();
        let mut found = Vec::new();
        for believer in &self.believers {
            let lease = believer.belief.lease();
            let confirmed = at.saturating_sub(lease.since_confirmed());
            if self.breaks.iter().any(|broke| *broke >= confirmed) {
                continue; // its fence protects it; fences are checked at every grant
            }
            let key = lease.key();
            let snapshot = snapshots.entry(key.to_owned()).or_insert_with(|| read(store, key));
            let fence = lease.fence();
            // Its slot, or one the store granted later to a request of its own token (sent
            // before, answered late) after the store lost the first: its renewals keep
            // that one, and its own fence, lower, is still below every other holder's.
            let granted = self.grants.get(key);
            let held = snapshot.leaders.iter().any(|slot| {
                slot.holder == lease.holder()
                    && (slot.fence == fence
                        || slot.fence > fence
                            && granted
                                .and_then(|grants| grants.by_fence.get(&slot.fence))
                                .is_some_and(|(_, token)| *token == lease.token()))
            });
            if !held {
                let live: Vec<String> =
                    snapshot.leaders.iter().map(|s| format!("{}#{}", s.holder, s.fence)).collect();
                found.push(format!(
                    "{at:?}: {} acts on fence {fence} of {key}, which the store does not hold \
                     (the store's live slots: {live:?})",
                    believer.who
                ));
            }
            let believers = tokens.entry(key.to_owned()).or_default();
            if !believers.contains(&lease.token()) {
                believers.push(lease.token());
            }
        }
        for (key, tokens) in tokens {
            let max = snapshots[&key].max_leaders.unwrap_or(0) as usize;
            if tokens.len() > max {
                found.push(format!("{at:?}: {} believers of {key}, of {max} slots", tokens.len()));
            }
        }
        for message in found {
            self.violate(message);
        }
    }

    /// The store's clock stepped ahead, or the store lost its data, at `at`.
    pub fn record_break(&mut self, at: Duration) {
        self.breaks.push(at);
    }

    /// Checks what observer `who` reported of a group.
    pub fn check_observed(&mut self, who: &str, state: &LeaderGroupState, at: Duration) {
        let mut found = Vec::new();
        for slot in state.leaders.iter().chain(&state.pending) {
            let granted = self.grants.get(&state.key).and_then(|g| g.by_fence.get(&slot.fence));
            if granted.is_none_or(|(holder, _)| *holder != slot.holder) {
                found.push(format!(
                    "{at:?}: observer {who} reports {}#{} of {}, which the store never granted",
                    slot.holder, slot.fence, state.key
                ));
            }
        }
        for message in found {
            self.violate(message);
        }
    }

    /// Records a violation found by a check of the run's own (liveness, a graceful stop).
    pub fn violate(&mut self, message: String) {
        if self.violations.len() < KEPT {
            self.violations.push(message);
        }
    }

    /// The violations found so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// An operator revoked `fence` of `key` at its holder's expiry.
    pub fn record_revoked(&mut self, key: &str, fence: u64) {
        self.grants.entry(key.to_owned()).or_default().orphaned.insert(fence);
    }

    /// Whether `fence` of `key` is held by nobody until it lapses (within its lease): granted
    /// to a request whose caller had given up on it, or revoked at expiry.
    pub fn orphaned(&self, key: &str, fence: u64) -> bool {
        self.grants.get(key).is_some_and(|grants| grants.orphaned.contains(&fence))
    }

    /// How many live believers of `key` are among the candidate instances `whos`.
    pub fn believed_by(&mut self, key: &str, whos: &[String]) -> usize {
        self.believers
            .iter()
            .filter(|b| b.belief.lease().key() == key && whos.contains(&b.who))
            .filter(|b| b.belief.live_fence().is_some())
            .count()
    }

    /// How many checks of the believers ran.
    pub fn checks(&self) -> u64 {
        self.checks
    }
}

/// The store's state of `key` now (the memory store answers without waiting).
pub fn read(store: &MemoryStore, key: &str) -> GroupSnapshot {
    store
        .state(key)
        .now_or_never()
        .expect("the memory store answers at once")
        .expect("the memory store's state never fails")
}
