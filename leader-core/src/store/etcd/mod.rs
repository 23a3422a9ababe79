//! [`EtcdStore`]: leader groups on etcd, where a grant is a Raft commit.
//!
//! # The model
//!
//! A group is a few keys under `{prefix}{key} ` (see `layout.rs`): one key per live slot,
//! bound to an etcd lease of the slot's TTL, so it goes with the lease; one marker per slot
//! index whose holder has not released it; and the size of its latest grant. Markers and the
//! size live on marker leases nobody keeps alive, so a group nobody uses leaves nothing once
//! they have run out (ten slot TTLs, at least ten seconds), and a holder's release deletes its
//! slot and its marker at once.
//!
//! - **Acquire** takes a free index in one transaction that binds the slot key to a lease,
//!   *if* nothing happened in the group since the revision its decision was made on. It
//!   reads the group first (a linearizable read, no Raft write) unless a slot was just
//!   freed, and answers a full group, a token that already holds a slot (idempotent
//!   acquire) and a mismatched `max_leaders` from that read (see `acquire.rs`,
//!   `hints.rs`). etcd needs the lease before the transaction; the store reuses the leases
//!   of its released slots (see `leases.rs`), so a grant after a release is **one round
//!   trip**, otherwise two or three (a read, a lease grant, the transaction).
//! - **The fence** is the slot key's `create_revision`: etcd's revision, strictly increasing
//!   over every write of the cluster, kept by Raft and never going back after a restart of
//!   any or all members.
//! - **Expiry** is the lease's, on the etcd leader's clock. TTLs are whole seconds: a
//!   `lease_time` is rounded up to the next second (a slot then lives a little longer at the
//!   store than its holder counts on, which is safe), and one below the cluster's minimum
//!   TTL (one and a half election timeouts, rounded up: 2 s with etcd's defaults) is refused,
//!   naming the minimum, since etcd would silently raise it. etcd deletes an expired lease's
//!   keys within about half a second of its expiry.
//! - **Renew** is a keep-alive on the lease's one open stream and, in parallel, a read of the
//!   slot key: one round trip, no Raft write (and, every few TTLs, one transaction that
//!   moves the slot's marker to a fresher marker lease). A renewal under another TTL moves
//!   the slot to a new lease in one transaction.
//! - **Release** deletes the slot and its marker in one transaction (the hand-over happens
//!   there): one round trip, and the lease is kept for the next grant. A release within
//!   `min_lease_time` moves the slot to a lease that ends then (see `release.rs`).
//! - **State** reads the group (one round trip) and each live lease's time to live (one
//!   more, in parallel; `state.rs` also reads many groups in one transaction). A slot
//!   waiting out a lock-delay is reported as pending, never as a leader. A full group's
//!   nearest expiry is the shortest TTL among its slots, an upper bound: waiters wake on
//!   the watch's delete event at the true expiry.
//! - **Waiters and observers** share one etcd watch per group and process (see `feed.rs`).
//!
//! # Leases revoked early, and the lock-delay
//!
//! etcd can revoke leases early: a Raft leader that was paused (SIGSTOP, a long GC or VM
//! pause) and resumes may still act as the lessor for a moment, find leases expired on its own
//! stale view, and have their revocation committed while their holders' TTLs still run (etcd
//! issues 12528 and 15247). The holder learns of it only at its next keep-alive. So a grant of
//! an index whose marker says its holder never released it (an expiry, a revocation, a
//! release by another process) is returned only after a **lock-delay** of that holder's TTL
//! from the grant, during which the new lease is kept alive and the slot is written as
//! pending: by then the old holder's local deadline has passed, however its lease ended. A
//! grant under another size waits for the markers of the indices the new size leaves out
//! too. A slot freed by its holder's release is taken at once. The delay is not part of the
//! command timeout; a candidate that stops during it leaves nothing (its lease is revoked).
//!
//! # Members
//!
//! The store keeps a client per endpoint and sends calls to one member, moving to the next
//! after a transient failure (a member down, cut off from its peers, without a leader; see
//! `members.rs`). A transaction that got no answer is not sent again elsewhere: its lease is
//! revoked before the next attempt. Every call asks for a leader (`hasleader`), so a member
//! that lost quorum answers at once instead of serving a stale watch. With no quorum
//! anywhere, operations fail with a transient error; nothing is granted.

mod acquire;
mod bounded;
mod builder;
mod claim;
mod failures;
mod feed;
mod grant_txn;
mod group;
mod hints;
mod keep_alive;
mod layout;
mod leases;
mod members;
mod ownership;
mod preference;
mod release;
mod sessions;
mod slots;
mod state;

pub use self::builder::EtcdStoreBuilder;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{ConnectOptions, GetOptions, Txn};

use self::feed::Notifications;
use self::group::Group;
use self::hints::Hints;
use self::keep_alive::KeepAlives;
use self::layout::{GroupKeys, MAX_KEY_BYTES, Part};
use self::leases::{LeasePool, MarkerLeases, too_short};
use self::members::Members;
use self::sessions::Sessions;
use self::slots::KnownSlots;
use super::bound::Bound;
use super::{
    AcquireOutcome, AcquireRequest, ClaimInfo, GroupSnapshot, GroupWatch, HeldSlot, LeaseStore,
    Preference, ReleaseOutcome, RenewOutcome, Revocation, SlotRef,
};
use crate::error::Error;
use crate::store::watch::Interest;
use crate::token::LeaseToken;

/// etcd's longest lease TTL, in seconds (`MaxLeaseTTL`).
pub(crate) const MAX_TTL_SECS: i64 = 9_000_000_000;

/// Leader groups kept in etcd: a grant survives the loss of any minority of members.
///
/// See the module documentation (and `docs/etcd-store.md`) for the model, the round trips
/// each operation takes, and the lock-delay after a slot is taken over from a holder that
/// never released it.
///
/// ```no_run
/// use leader_core::{EtcdStore, LeaderGroupElectionOptions, LeaderGroupElector};
///
/// # async fn run() -> Result<(), leader_core::Error> {
/// let store = EtcdStore::connect("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379").await?;
/// let workers = LeaderGroupElector::new(store, LeaderGroupElectionOptions::new(3))?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    members: Arc<Members>,
    prefix: String,
    feeds: Notifications,
    /// The cluster's minimum lease TTL in seconds, once a grant has shown it (0: not yet).
    min_ttl: AtomicI64,
    /// The leases of the slots this store released, for its next grants.
    leases: LeasePool,
    /// The leases its markers live on.
    markers: MarkerLeases,
    /// One keep-alive stream per lease.
    keep_alives: KeepAlives,
    /// The slots this store was granted.
    held: KnownSlots,
    /// The leases of sessions' slots.
    sessions: Sessions,
    /// What the store last learnt of each group, for an acquire's first step.
    hints: Arc<Hints>,
    /// Endpoints and prefix, for `Debug` (never the password).
    description: String,
    /// The members' endpoints, for errors.
    endpoint: String,
}

impl EtcdStore {
    fn new(
        endpoints: Vec<String>,
        options: ConnectOptions,
        prefix: String,
        command_timeout: Duration,
        description: String,
    ) -> Self {
        EtcdStore {
            inner: Arc::new(Inner {
                endpoint: endpoints.join(","),
                members: Arc::new(Members::new(endpoints, options, command_timeout)),
                prefix,
                feeds: Notifications::default(),
                min_ttl: AtomicI64::new(0),
                leases: LeasePool::default(),
                markers: MarkerLeases::default(),
                keep_alives: KeepAlives::default(),
                held: KnownSlots::default(),
                sessions: Sessions::default(),
                hints: Arc::default(),
                description,
            }),
        }
    }

    /// The prefix every key of this store starts with.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// One read of a group nobody uses: proves a member answers and the credentials work.
    async fn check(&self) -> Result<(), Error> {
        self.state("leader:connection-check").await.map(drop).map_err(|e| e.during("connect"))
    }

    fn bound(&self, operation: &'static str) -> Bound {
        self.inner.members.bound(operation)
    }

    fn keys(&self, key: &str) -> Result<GroupKeys, Error> {
        if let Some(bad) = key.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::InvalidKey {
                key: key.to_owned(),
                reason: format!(
                    "must not contain whitespace or control characters (found {bad:?}): \
                     EtcdStore ends a group's key with a space"
                ),
            });
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(Error::invalid_option(
                "key",
                format!("{}… ({} bytes)", key.chars().take(32).collect::<String>(), key.len()),
                format!(
                    "must be at most {MAX_KEY_BYTES} bytes with EtcdStore (every transaction \
                     carries it several times; etcd refuses requests over --max-request-bytes)"
                ),
            ));
        }
        Ok(GroupKeys::new(&self.inner.prefix, key))
    }

    /// The cluster's minimum lease TTL in seconds, if a grant has shown it (else 0).
    fn min_ttl(&self) -> i64 {
        self.inner.min_ttl.load(Ordering::Relaxed)
    }

    /// The TTL in whole seconds for `lease_time` (rounded up), or why it cannot be kept.
    fn ttl_for(&self, lease_time: Duration) -> Result<i64, Error> {
        let secs = lease_time.as_secs().saturating_add(u64::from(lease_time.subsec_nanos() > 0));
        let secs = i64::try_from(secs).unwrap_or(i64::MAX).max(1);
        if secs > MAX_TTL_SECS {
            return Err(Error::invalid_option(
                "lease_time",
                lease_time,
                format!("must be at most {MAX_TTL_SECS}s with EtcdStore (etcd's longest lease)"),
            ));
        }
        let min = self.min_ttl();
        if secs < min {
            return Err(too_short(lease_time, min));
        }
        Ok(secs)
    }

    /// Reads the group.
    async fn read(&self, bound: &Bound, keys: &GroupKeys) -> Result<Group, Error> {
        let get = self.inner.members.call(bound, |client| {
            let range = keys.range.clone();
            async move { client.kv_client().get(range, Some(GetOptions::new().with_prefix())).await }
        });
        let reply = get.await?;
        let revision = reply.header().map_or(0, |header| header.revision());
        Group::read(keys, reply.kvs(), revision)
    }

    /// Sends one transaction, not again after an attempt that got no answer (see
    /// `Members::call_write`).
    async fn txn(&self, bound: &Bound, txn: Txn) -> Result<etcd_client::TxnResponse, Error> {
        self.txn_on_lease(bound, txn).await?.reply()
    }

    /// [`txn`](Self::txn), telling a lease found gone apart, by the client's typed error.
    async fn txn_on_lease(&self, bound: &Bound, txn: Txn) -> Result<OnLease, Error> {
        let call = self.inner.members.call_write(bound, |client| {
            let txn = txn.clone();
            async move {
                match client.kv_client().txn(txn).await {
                    Ok(reply) => Ok(OnLease::Reply(reply)),
                    Err(error) if failures::lease_not_found(&error) => Ok(OnLease::LeaseGone),
                    Err(error) => Err(error),
                }
            }
        });
        call.await
    }
}

/// What a transaction that puts keys on a lease came to.
pub(crate) enum OnLease {
    /// The store answered (committed, or its compare failed).
    Reply(etcd_client::TxnResponse),
    /// The lease is gone (expired or revoked): nothing was written.
    LeaseGone,
}

impl OnLease {
    /// The reply; a lease found gone is the store's refusal, as etcd words it.
    pub(crate) fn reply(self) -> Result<etcd_client::TxnResponse, Error> {
        match self {
            OnLease::Reply(reply) => Ok(reply),
            OnLease::LeaseGone => Err(Error::Store {
                store: "etcd",
                endpoint: String::new(),
                operation: "txn",
                message: "etcdserver: requested lease not found".into(),
            }),
        }
    }
}

#[async_trait]
impl LeaseStore for EtcdStore {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    /// A lease's time to live is read in whole seconds.
    fn expiry_resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// A group's claim is a key on a lease of its own (see `claim.rs`).
    fn keeps_reservations(&self) -> bool {
        true
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            request.check_times()?;
            let keys = self.keys(request.key)?;
            let ttl = self.ttl_for(request.lease_time)?;
            self.take_slot(request, &keys, ttl).await
        })
        .await
    }

    async fn renew(
        &self,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", lease_time)?;
            let keys = self.keys(key)?;
            let ttl = self.ttl_for(lease_time)?;
            self.renew_slot(&keys, token, ttl, lease_time).await
        })
        .await
    }

    /// Slots of one session ([`AcquireRequest::in_session`]) share a lease: one keep-alive
    /// for them all and, beside it, one read of up to [`RENEW_BATCH_LEN`] slot keys per
    /// round trip. Other slots are renewed one by one.
    ///
    /// [`RENEW_BATCH_LEN`]: crate::store::author::RENEW_BATCH_LEN
    async fn renew_many(
        &self,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", lease_time)?;
            let ttl = self.ttl_for(lease_time)?;
            self.renew_batch(slots, ttl, lease_time).await
        })
        .await
    }

    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::within_limit("min_lease_time", min_lease_time)?;
            let keys = self.keys(key)?;
            let released = self.release_slot(&keys, token, min_lease_time).await?;
            self.session_released(token);
            Ok(released)
        })
        .await
    }

    /// At expiry, the slot's key is deleted and its index marked held, so the next taker waits
    /// the lock-delay; its lease is revoked, so the holder's next renewal is refused.
    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = self.keys(key)?;
            self.revoke_slot(&keys, slot, how).await
        })
        .await
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        crate::store::located(&self.inner.endpoint, self.state_of(key)).await
    }

    async fn claim(&self, key: &str) -> Result<Option<ClaimInfo>, Error> {
        crate::store::located(&self.inner.endpoint, self.claim_of(key)).await
    }

    async fn prefer(&self, key: &str, preferred: Option<(&str, Duration)>) -> Result<(), Error> {
        crate::store::located(&self.inner.endpoint, self.set_preference(key, preferred)).await
    }

    async fn preference(&self, key: &str) -> Result<Option<Preference>, Error> {
        crate::store::located(&self.inner.endpoint, self.preference_of(key)).await
    }

    /// The groups' ranges in one read-only transaction per [`RENEW_BATCH_LEN`] groups, then
    /// each lease's time to live once (a node's partitions share its session's lease).
    ///
    /// [`RENEW_BATCH_LEN`]: crate::store::author::RENEW_BATCH_LEN
    async fn state_many(&self, keys: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        crate::store::located(&self.inner.endpoint, self.states_of(keys)).await
    }

    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = self.keys(key)?;
            let bound = self.bound("watch");
            self.inner
                .feeds
                .watch(&self.inner.members, &self.inner.hints, keys, bound, Interest::Releases)
                .await
        })
        .await
    }

    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = self.keys(key)?;
            let bound = self.bound("watch");
            self.inner
                .feeds
                .watch(&self.inner.members, &self.inner.hints, keys, bound, Interest::Changes)
                .await
        })
        .await
    }

    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let bound = self.bound("list");
            let start = format!("{}{prefix}", self.inner.prefix);
            let reply = self
                .inner
                .members
                .call(&bound, |client| {
                    let start = start.clone();
                    async move {
                        let options = GetOptions::new().with_prefix().with_keys_only();
                        client.kv_client().get(start, Some(options)).await
                    }
                })
                .await?;
            // A group is listed while it has a slot, a marker or its size: the keys a group
            // keeps while used, and for a while after.
            let mut groups: Vec<String> = reply
                .kvs()
                .iter()
                .filter_map(|kv| {
                    let key = std::str::from_utf8(kv.key()).ok()?;
                    let (group, _) = key.strip_prefix(&self.inner.prefix)?.split_once(' ')?;
                    let ours = GroupKeys::new(&self.inner.prefix, group).part_of(kv.key());
                    let listed = matches!(ours, Some(Part::Max | Part::Slot(_) | Part::Last(_)));
                    (listed && group.ends_with(suffix)).then(|| group.to_owned())
                })
                .collect();
            groups.sort();
            groups.dedup();
            Ok(groups)
        })
        .await
    }
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("cluster", &self.inner.description)
            .field("members", &self.inner.members.endpoints())
            .field("session_leases", &self.inner.sessions.lease_count())
            .field("keep_alive_streams", &self.inner.keep_alives.open())
            .finish()
    }
}
