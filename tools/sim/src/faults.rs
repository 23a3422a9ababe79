//! The fault layer: each candidate reaches the shared memory store through a
//! [`StoreLayer`] of its own, which, while faults are on, draws from the seed for every call
//! whether to answer it at once, late (before or after the store acts), lose its reply after
//! the store acted, fail it (for now or for good), or hold it past its caller's deadline and
//! let the store act on it afterwards; and whether to answer an acquire "full" without
//! reaching the store, as etcd does when its transaction lost every round to others'. A
//! killed candidate's calls never return. Every call the store acts on is written to the
//! trace and followed by a check of the oracle. While faults are on, a wake-up of a
//! candidate's or an observer's group watch may be lost too, without an error (a
//! notification the network dropped).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use leader::store::author::{GroupSignal, GroupWatch, HeldSlot, StoreLayer};
use leader::store::{
    AcquireOutcome, AcquireRequest, ClaimInfo, Grant, GroupSnapshot, ReleaseOutcome, RenewOutcome,
    Revocation, SlotRef,
};
use leader::{Error, LeaseStore, LeaseToken, SlotInfo};
use tokio_util::sync::CancellationToken;

use crate::actors::GROUP;
use crate::world::{Mutant, World};

/// What happens to one call.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Answered at once.
    None,
    /// The request reaches the store `before` late, its reply the caller `after` late (a
    /// slow network, or the calling task stalled right after the reply).
    Delay { before: Duration, after: Duration },
    /// The store acts; the reply is lost `after` later.
    LoseReply { after: Duration },
    /// Fails `after` a while without reaching the store: for now, or (`permanent`) with an
    /// error no retry mends.
    Fail { after: Duration, permanent: bool },
    /// Held: the caller times out at the command timeout, and the store acts `by` after it.
    Late { by: Duration },
}

/// A candidate's way to the store.
#[derive(Debug, Clone)]
pub struct FaultLayer {
    world: Arc<World>,
    who: String,
}

impl FaultLayer {
    /// The layer of candidate instance `who`.
    pub fn new(world: Arc<World>, who: &str) -> Self {
        FaultLayer { world, who: who.to_owned() }
    }

    fn draw(&self, may_be_late: bool) -> Fault {
        let world = &self.world;
        if !world.faults_on() {
            return Fault::None;
        }
        let third = world.command_timeout.as_millis() as u64 / 3;
        world.draw(|rng| {
            if !rng.chance(world.fault_rate) {
                return Fault::None;
            }
            match rng.below(100) {
                0..40 => Fault::Delay { before: rng.millis(0, third), after: rng.millis(0, third) },
                40..60 => Fault::LoseReply { after: rng.millis(0, third) },
                60..80 => Fault::Fail { after: rng.millis(0, third), permanent: rng.chance(100) },
                _ if may_be_late => Fault::Late { by: rng.millis(0, 3 * third) },
                _ => Fault::Delay { before: Duration::ZERO, after: rng.millis(0, third) },
            }
        })
    }

    /// Whether an acquire is answered "full" at once, without reaching the store: what etcd
    /// answers when the acquire's transaction lost every round to others' (for a group
    /// with room), while faults are on.
    fn contended(&self) -> bool {
        let world = &self.world;
        world.faults_on() && world.draw(|rng| rng.chance(world.fault_rate) && rng.below(10) == 0)
    }

    /// Never returns once the candidate was killed.
    async fn hang_if_dead(&self) {
        if self.world.is_dead(&self.who) {
            std::future::pending::<()>().await;
        }
    }

    /// Runs `apply` (the store's action, its trace line and the oracle's check) under the
    /// fault drawn for this call.
    async fn call<T: Send + 'static>(
        &self,
        operation: &'static str,
        may_be_late: bool,
        apply: BoxFuture<'static, Result<T, Error>>,
    ) -> Result<T, Error> {
        self.hang_if_dead().await;
        let fault = self.draw(may_be_late);
        let world = &self.world;
        let answer = match fault {
            Fault::None => apply.await,
            Fault::Delay { before, after } => {
                tokio::time::sleep(before).await;
                self.hang_if_dead().await;
                let answer = apply.await;
                tokio::time::sleep(after).await;
                answer
            }
            Fault::LoseReply { after } => {
                let _ = apply.await;
                tokio::time::sleep(after).await;
                world.log(&self.who, format_args!("{operation}: reply lost"));
                Err(unavailable(operation))
            }
            Fault::Fail { after, permanent } => {
                tokio::time::sleep(after).await;
                world.log(&self.who, format_args!("{operation}: failed (permanent {permanent})"));
                Err(if permanent {
                    Error::Store {
                        store: "sim",
                        endpoint: String::new(),
                        operation,
                        message: "refused for good by the fault layer".into(),
                    }
                } else {
                    unavailable(operation)
                })
            }
            Fault::Late { by } => {
                let timeout = world.command_timeout;
                let late_world = Arc::clone(world);
                tokio::spawn(async move {
                    tokio::time::sleep(timeout + by).await;
                    // The memory store acts within one poll.
                    let acted = late_world.late(|| apply.now_or_never());
                    assert!(acted.is_some(), "the memory store answers at once");
                });
                tokio::time::sleep(timeout).await;
                world.log(&self.who, format_args!("{operation}: timed out (the store acts later)"));
                Err(Error::Timeout {
                    store: "sim",
                    endpoint: String::new(),
                    operation,
                    after: timeout,
                })
            }
        };
        self.hang_if_dead().await;
        answer
    }
}

fn unavailable(operation: &'static str) -> Error {
    Error::Unavailable {
        store: "sim",
        endpoint: String::new(),
        operation,
        cause: "the fault layer dropped the call".into(),
    }
}

#[async_trait]
impl StoreLayer for FaultLayer {
    async fn acquire(
        &self,
        _inner: &dyn LeaseStore,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        if self.contended() {
            self.hang_if_dead().await;
            self.world.log(&self.who, format_args!("acquire {} -> full (contended)", request.key));
            return Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) });
        }
        let world = Arc::clone(&self.world);
        let who = self.who.clone();
        let (key, holder) = (request.key.to_owned(), request.holder.to_owned());
        let (max_leaders, token, lease_time, mut claim) =
            (request.max_leaders, request.token, request.lease_time, request.reservation);
        if claim.is_none() && request.key.ends_with(GROUP) && self.world.draw(|rng| rng.chance(250))
        {
            // Claims beyond the fair waiters' own (which need three hand-overs lost within
            // one wait): a claim on the group's next free slot, from a waiter that says it
            // waited a while, held up to half a lease; the holder's loop then sees the
            // store's answers to a claim (held back, told to ask sooner) under the faults.
            let waited = self.world.draw(|rng| rng.millis(0, 2 * lease_time.as_millis() as u64));
            let hold = self.world.draw(|rng| rng.millis(1, lease_time.as_millis() as u64 / 2));
            claim = request.reserving(waited, hold).reservation;
        }
        let apply = Box::pin(async move {
            let mut request = AcquireRequest::new(&key, max_leaders, token, &holder, lease_time);
            request.session = None;
            if let Some(claim) = claim {
                // A fair waiter's claim on the next free slot, as the store would see it.
                request = request.reserving_at(claim.waited, claim.hold_for, claim.priority);
                world.log(&who, format_args!("acquire {key} claims the next free slot"));
            }
            let mut outcome = world.store.acquire(request).await;
            match &outcome {
                Ok(AcquireOutcome::Granted(grant)) => {
                    let at = world.elapsed();
                    let late = world.is_late();
                    world.oracle().record_grant(&key, token, &holder, grant.fence, at, late);
                }
                Ok(AcquireOutcome::Full { .. })
                    if world.mutant == Some(Mutant::PartitionWithoutGrant)
                        && is_partition(&key) =>
                {
                    let now = SystemTime::now();
                    let fake =
                        Grant::new(1_000_000 + token_low(token), now, now + lease_time, lease_time);
                    outcome = Ok(AcquireOutcome::Granted(fake));
                }
                _ => {}
            }
            world.log(&who, format_args!("acquire {key} -> {}", brief(&outcome)));
            world.check();
            outcome.map(|outcome| match outcome {
                AcquireOutcome::Granted(mut grant) => {
                    grant.expires_in = world.as_seen(grant.expires_in);
                    AcquireOutcome::Granted(grant)
                }
                AcquireOutcome::Full { nearest_expiry } => {
                    AcquireOutcome::Full { nearest_expiry: world.as_seen(nearest_expiry) }
                }
                other => other,
            })
        });
        self.call("acquire", true, apply).await
    }

    async fn renew(
        &self,
        _inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        let slots = [HeldSlot::new(key, token)];
        let mut answers = self.renew_many(_inner, &slots, lease_time).await?;
        Ok(answers.pop().unwrap_or(RenewOutcome::NotHeld))
    }

    async fn renew_many(
        &self,
        _inner: &dyn LeaseStore,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        let world = Arc::clone(&self.world);
        let who = self.who.clone();
        let owned: Vec<(String, LeaseToken)> =
            slots.iter().map(|slot| (slot.key.to_owned(), slot.token)).collect();
        let apply = Box::pin(async move {
            let mut answers = Vec::with_capacity(owned.len());
            for (key, token) in &owned {
                let mut answer = world.store.renew(key, *token, lease_time).await?;
                if world.mutant == Some(Mutant::RenewPastExpiry)
                    && let RenewOutcome::Renewed { expires_at, expires_in } = answer
                {
                    answer = RenewOutcome::Renewed {
                        expires_at: expires_at + 2 * expires_in,
                        expires_in: 3 * expires_in,
                    };
                }
                match answer {
                    RenewOutcome::Renewed { expires_in, .. } => {
                        world.log(&who, format_args!("renew {key} -> renewed for {expires_in:?}"))
                    }
                    other => world.log(&who, format_args!("renew {key} -> {other:?}")),
                }
                answers.push(answer);
            }
            world.check();
            Ok(answers
                .into_iter()
                .map(|answer| match answer {
                    RenewOutcome::Renewed { expires_at, expires_in } => {
                        RenewOutcome::Renewed { expires_at, expires_in: world.as_seen(expires_in) }
                    }
                    other => other,
                })
                .collect())
        });
        self.call("renew", true, apply).await
    }

    async fn release(
        &self,
        _inner: &dyn LeaseStore,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        let world = Arc::clone(&self.world);
        let who = self.who.clone();
        let key = key.to_owned();
        let apply = Box::pin(async move {
            let answer = if world.mutant == Some(Mutant::ReleaseAnyToken) {
                match crate::oracle::read(&world.store, &key).leaders.first() {
                    Some(oldest) => {
                        world
                            .store
                            .revoke(&key, SlotRef::Fence(oldest.fence), Revocation::Now)
                            .await
                    }
                    None => Ok(ReleaseOutcome::NotHeld),
                }
            } else {
                world.store.release(&key, token, min_lease_time).await
            };
            world.log(&who, format_args!("release {key} -> {answer:?}"));
            world.check();
            answer
        });
        self.call("release", true, apply).await
    }

    async fn revoke(
        &self,
        _inner: &dyn LeaseStore,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        let world = Arc::clone(&self.world);
        let who = self.who.clone();
        let key = key.to_owned();
        let apply = Box::pin(async move {
            let answer = world.store.revoke(&key, slot, how).await;
            if let (Ok(ReleaseOutcome::Kept { .. }), SlotRef::Fence(fence)) = (&answer, slot) {
                world.oracle().record_revoked(&key, fence);
            }
            world.log(&who, format_args!("revoke {key} {slot:?} {how:?} -> {answer:?}"));
            world.check();
            answer
        });
        self.call("revoke", true, apply).await
    }

    async fn state(&self, _inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
        let world = Arc::clone(&self.world);
        let key = key.to_owned();
        let apply = Box::pin(async move {
            let mut state = world.store.state(&key).await;
            if world.mutant == Some(Mutant::ObserverSeesPending)
                && !is_partition(&key)
                && !key.ends_with("/members")
                && let Ok(state) = &mut state
            {
                state.leaders.push(SlotInfo {
                    holder: "ghost".into(),
                    fence: 999_999,
                    acquired_at: SystemTime::UNIX_EPOCH,
                    expires_in: Duration::from_secs(1),
                });
            }
            state.map(|mut state| {
                for slot in state.leaders.iter_mut().chain(&mut state.pending) {
                    slot.expires_in = world.as_seen(slot.expires_in);
                }
                state
            })
        });
        self.call("state", false, apply).await
    }

    async fn claim(&self, _inner: &dyn LeaseStore, key: &str) -> Result<Option<ClaimInfo>, Error> {
        let (world, who) = (Arc::clone(&self.world), self.who.clone());
        let key = key.to_owned();
        let apply = Box::pin(async move {
            let claim = world.store.claim(&key).await;
            if let Ok(Some(claim)) = &claim {
                let (holder, priority) = (&claim.holder, claim.priority);
                world.log(&who, format_args!("claim {key} -> {holder} at priority {priority}"));
            }
            claim.map(|claim| {
                claim.map(|mut claim| {
                    claim.expires_in = world.as_seen(claim.expires_in);
                    claim
                })
            })
        });
        self.call("claim", false, apply).await
    }

    /// One call, faulted as one: each group read in turn, as a store's batch would (the
    /// groups at different moments), the times to live as this candidate's clock sees them.
    async fn state_many(
        &self,
        _inner: &dyn LeaseStore,
        keys: &[&str],
    ) -> Result<Vec<GroupSnapshot>, Error> {
        let (world, who) = (Arc::clone(&self.world), self.who.clone());
        let keys: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
        let apply = Box::pin(async move {
            let mut answers = Vec::with_capacity(keys.len());
            for key in &keys {
                let mut state = world.store.state(key).await?;
                for slot in state.leaders.iter_mut().chain(&mut state.pending) {
                    slot.expires_in = world.as_seen(slot.expires_in);
                }
                answers.push(state);
            }
            let held: Vec<String> = answers
                .iter()
                .map(|group| {
                    group.leaders.first().map_or("-".into(), |slot| slot.holder.to_string())
                })
                .collect();
            world.log(&who, format_args!("state_many {} groups -> {held:?}", keys.len()));
            Ok(answers)
        });
        self.call("state_many", false, apply).await
    }

    async fn watch_releases(
        &self,
        _inner: &dyn LeaseStore,
        key: &str,
    ) -> Result<GroupWatch, Error> {
        let world = Arc::clone(&self.world);
        let key = key.to_owned();
        let apply = Box::pin(async move { world.store.watch_releases(&key).await });
        Ok(self.lossy(self.call("watch", false, apply).await?))
    }

    async fn watch_changes(&self, _inner: &dyn LeaseStore, key: &str) -> Result<GroupWatch, Error> {
        let world = Arc::clone(&self.world);
        let key = key.to_owned();
        let apply = Box::pin(async move { world.store.watch_changes(&key).await });
        Ok(self.lossy(self.call("watch", false, apply).await?))
    }
}

impl FaultLayer {
    /// `watch` as the candidate sees it: each wake-up passed on, unless the seed loses it
    /// while faults are on (no error: the waiter learns nothing, as of a notification the
    /// network dropped). Passed on by a task that ends with the watch handed out.
    fn lossy(&self, mut watch: GroupWatch) -> GroupWatch {
        let signal = GroupSignal::new();
        let gone = CancellationToken::new();
        let handed = signal.watch().holding(gone.clone().drop_guard());
        let (world, who) = (Arc::clone(&self.world), self.who.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    () = gone.cancelled() => return,
                    () = watch.woken() => {}
                }
                let lost = world.faults_on() && world.draw(|rng| rng.chance(world.fault_rate));
                if lost {
                    world.log(&who, "watch: wake-up lost");
                } else {
                    signal.wake();
                }
            }
        });
        handed
    }
}

/// Whether `key` is one partition's (`leader:{set}/{index}`).
fn is_partition(key: &str) -> bool {
    key.rsplit_once('/').is_some_and(|(_, index)| index.parse::<u32>().is_ok())
}

fn token_low(token: LeaseToken) -> u64 {
    u64::from_str_radix(&token.to_string()[..8], 16).unwrap_or(0)
}

fn brief(outcome: &Result<AcquireOutcome, Error>) -> String {
    match outcome {
        Ok(AcquireOutcome::Granted(grant)) => {
            format!("granted fence {} for {:?}", grant.fence, grant.expires_in)
        }
        Ok(AcquireOutcome::Full { nearest_expiry }) => format!("full ({nearest_expiry:?})"),
        Ok(other) => format!("{other:?}"),
        Err(error) => format!("error: {error}"),
    }
}
