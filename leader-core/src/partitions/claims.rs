//! A node's claims on the partitions of its share: each one a candidacy in the one
//! candidate loop ([`stand`]), under the node's session, beside the node's loop, until the
//! partition is won or the claim is withdrawn.
//!
//! What a partition's candidacy adds to the loop is its [`Claim`] policy: it waits for as
//! long as it takes (a release wakes it, or the nearest expiry), pauses with [`Backoff`]
//! after a store failure, and ends when withdrawn (the partition left the node's share, or
//! the node stops). A withdrawn claim's guard gives back whatever a lost reply may have
//! granted.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::options::Settings;
use crate::backoff::{Backoff, FIRST_PAUSE};
use crate::election::candidate::{Policy, Won, stand};
use crate::election::guard::SlotGuard;
use crate::error::Error;
use crate::store::{AcquireRequest, LeaseStore};
use crate::token::LeaseToken;

/// The end of a claim: the partition won (its guard armed, holding it), or withdrawn (its
/// guard left to give back what a lost reply may have granted).
pub(super) struct Claimed {
    pub index: u32,
    /// The claim's first token, which tells it from a claim made again (it wins under
    /// another if it had to give a late grant back).
    pub token: LeaseToken,
    pub guard: SlotGuard,
    pub won: Option<Won>,
}

/// The claims in flight, by partition.
#[derive(Default)]
pub(super) struct Claims {
    running: JoinSet<Claimed>,
    /// Each partition's claim in flight: its token (which tells a claim from one withdrawn
    /// and made again) and what withdraws it. Ordered, so that claims withdrawn together
    /// end in one order every run (the simulation replays a seed's trace).
    by_index: BTreeMap<u32, (LeaseToken, CancellationToken)>,
}

impl Claims {
    /// Whether a claim on `index` is in flight.
    pub(super) fn contains(&self, index: u32) -> bool {
        self.by_index.contains_key(&index)
    }

    /// Claims partition `index` under a new token, in the node's `session`, unless a claim
    /// on it is in flight.
    pub(super) fn claim(
        &mut self,
        index: u32,
        settings: &Arc<Settings>,
        store: &Arc<dyn LeaseStore>,
        session: LeaseToken,
    ) {
        if self.contains(index) {
            return;
        }
        let token = match LeaseToken::generate() {
            Ok(token) => token,
            Err(error) => {
                // The next read of the members claims it again.
                tracing::warn!(set = %settings.name, error = %crate::error_chain(&error), "no token for a partition; retrying");
                return;
            }
        };
        let withdrawn = CancellationToken::new();
        self.by_index.insert(index, (token, withdrawn.clone()));
        let (settings, store) = (Arc::clone(settings), Arc::clone(store));
        self.running.spawn(async move {
            let key: Arc<str> = settings.partition_keys[index as usize].as_str().into();
            let mut guard = SlotGuard::new(
                Arc::clone(&store),
                Arc::clone(&key),
                token,
                Duration::ZERO,
                settings.lease_time,
            );
            let request = AcquireRequest::new(
                &key,
                NonZeroU32::MIN,
                token,
                &settings.holder_id,
                settings.lease_time,
            )
            .in_session(session);
            let mut policy = Claim::new(&settings, index, withdrawn);
            let won = stand(&*store, request, &mut guard, &mut policy).await.ok();
            Claimed { index, token, guard, won }
        });
    }

    /// Withdraws the claim on `index`, if one is in flight: it ends at its next step.
    pub(super) fn withdraw(&mut self, index: u32) {
        if let Some((_, withdrawn)) = self.by_index.remove(&index) {
            withdrawn.cancel();
        }
    }

    /// Withdraws every claim in flight on a partition `keep` refuses.
    pub(super) fn withdraw_unless(&mut self, keep: impl Fn(u32) -> bool) {
        self.by_index.retain(|index, (_, withdrawn)| {
            let kept = keep(*index);
            if !kept {
                withdrawn.cancel();
            }
            kept
        });
    }

    /// Withdraws every claim in flight.
    pub(super) fn withdraw_all(&mut self) {
        for (_, (_, withdrawn)) in std::mem::take(&mut self.by_index) {
            withdrawn.cancel();
        }
    }

    /// The next claim to end; pending while none is in flight. Cancel-safe.
    pub(super) async fn next(&mut self) -> Claimed {
        loop {
            match self.running.join_next().await {
                Some(Ok(claimed)) => return self.ended(claimed),
                // A claim's task never panics; one aborted with the runtime ends nothing.
                Some(Err(_)) => {}
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// A claim that has ended already, if any: what a loop takes after [`next`](Self::next)
    /// so that claims ending together are handled together.
    pub(super) fn ready(&mut self) -> Option<Claimed> {
        loop {
            // A claim's task never panics; one aborted with the runtime ends nothing.
            if let Ok(claimed) = self.running.try_join_next()? {
                return Some(self.ended(claimed));
            }
        }
    }

    /// `claimed`, no longer in flight.
    fn ended(&mut self, claimed: Claimed) -> Claimed {
        if self.by_index.get(&claimed.index).is_some_and(|(token, _)| *token == claimed.token) {
            self.by_index.remove(&claimed.index);
        }
        claimed
    }

    /// Whether no claim is running (withdrawn ones included).
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty()
    }
}

/// The policy of a claim: no deadline, a [`Backoff`] after a store failure (up to the
/// retry interval), ended by its withdrawal.
struct Claim {
    set: Arc<str>,
    index: u32,
    withdrawn: CancellationToken,
    backoff: Backoff,
}

impl Claim {
    fn new(settings: &Settings, index: u32, withdrawn: CancellationToken) -> Self {
        let backoff =
            Backoff::new(FIRST_PAUSE.min(settings.retry_interval), settings.retry_interval)
                .jittered();
        Claim { set: Arc::clone(&settings.name), index, withdrawn, backoff }
    }
}

impl Policy for Claim {
    type Stop = ();

    fn deadline(&self) -> Option<tokio::time::Instant> {
        None
    }

    fn at_deadline(&mut self) {}

    async fn failed(&mut self, error: Error) -> Result<(), ()> {
        if error.is_transient() {
            // Debug: in an outage every partition claimed fails so; the renewals' failures
            // warn once per retry.
            tracing::debug!(set = %self.set, partition = self.index, error = %crate::error_chain(&error), "acquiring a partition failed; retrying");
        } else {
            tracing::warn!(set = %self.set, partition = self.index, error = %crate::error_chain(&error), "acquiring a partition failed; retrying");
        }
        tokio::select! {
            biased;
            () = self.withdrawn.cancelled() => Err(()),
            () = tokio::time::sleep(self.backoff.next_pause()) => Ok(()),
        }
    }

    fn answered(&mut self) {
        self.backoff.reset();
    }

    async fn gave_back_a_late_grant(&mut self, _fence: u64) -> Result<(), ()> {
        if self.withdrawn.is_cancelled() { Err(()) } else { Ok(()) }
    }

    async fn interrupted(&mut self) -> Option<()> {
        self.withdrawn.cancelled().await;
        Some(())
    }
}
