//! [`EtcdStore`]: leader groups on etcd, where a grant is a Raft commit.
//!
//! # The model
//!
//! A group is a few keys under `{prefix}{key} ` (see `layout.rs`): its `max_leaders`, one key
//! per live slot, one key per slot index saying how its last holder left, and one key per live
//! token. A slot key and its token key are bound to an etcd lease of the slot's TTL, so they
//! go with the lease: an idle group keeps only its `max_leaders` and one short `last` key per
//! slot index it ever used (bounded by the most slots ever held at once, plus a few).
//!
//! - **Acquire** grants a lease, then runs one transaction: *if* the chosen slot index is free,
//!   the group's `max_leaders` is the request's and the token holds no slot, *then* read the
//!   index's `last` key, write the slot and token keys (on the lease) and mark the index held;
//!   *else* read the group. Etcd needs the lease before the transaction, so a grant is **two
//!   round trips** (a lease grant and a transaction), three for a group's first grant or when
//!   the guessed index was taken (the failed transaction's read picks the next). A full group,
//!   a token that already holds a slot (idempotent acquire) and a mismatched `max_leaders` are
//!   answered from the failed transaction's read, and the unused lease is revoked behind.
//! - **The fence** is the slot key's `create_revision`: etcd's revision, strictly increasing
//!   over every write of the cluster, kept by Raft and never going back after a restart of
//!   any or all members.
//! - **Expiry** is the lease's, on the etcd leader's clock. TTLs are whole seconds: a
//!   `lease_time` is rounded up to the next second (a slot then lives a little longer at the
//!   store than its holder counts on, which is safe), and one below the cluster's minimum
//!   TTL (one and a half election timeouts, rounded up: 2 s with etcd's defaults) is refused,
//!   naming the minimum, since etcd would silently raise it. etcd deletes an expired lease's
//!   keys within about half a second of its expiry.
//! - **Renew** is a lease keep-alive: one round trip. A renewal under another TTL (shorter or
//!   longer) moves the slot to a new lease in one transaction: three round trips.
//! - **Release** deletes the slot in one transaction that marks its index released (the
//!   hand-over happens there), then revokes the lease: two round trips. A release within
//!   `min_lease_time` moves the slot to a lease that ends then.
//! - **State** reads the group (one round trip) and each live lease's time to live (one
//!   more, in parallel). A full group's nearest expiry is the shortest TTL among its slots, an
//!   upper bound: waiters wake on the watch's delete event at the true expiry.
//! - **Waiters and observers** share one etcd watch per group and process (see `feed.rs`).
//!
//! # Leases revoked early, and the lock-delay
//!
//! etcd can revoke leases early: a Raft leader that was paused (SIGSTOP, a long GC or VM
//! pause) and resumes may still act as the lessor for a moment, find leases expired on its own
//! stale view, and have their revocation committed while their holders' TTLs still run (etcd
//! issues 12528 and 15247). The holder learns of it only at its next keep-alive. So a grant of
//! an index whose `last` key says its holder never released it (an expiry or a revocation)
//! is returned only after a **lock-delay** of that holder's TTL from the grant, during which
//! the new lease is kept alive: by then the old holder's local deadline has passed, however
//! its lease ended. A slot freed by a release is taken at once. The delay is not part of the
//! command timeout.
//!
//! # Members
//!
//! The store keeps a client per endpoint and sends calls to one member, moving to the next
//! after a transient failure (a member down, cut off from its peers, without a leader; see
//! `members.rs`). Every call asks for a leader (`hasleader`), so a member that lost quorum
//! answers at once instead of serving a stale watch. With no quorum anywhere, operations
//! fail with a transient error; nothing is granted.

mod builder;
mod feed;
mod layout;
mod members;

pub use self::builder::EtcdStoreBuilder;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use tokio::time::Instant;

use self::feed::{Feeds, Wakes};
use self::layout::{GroupKeys, LastHolder, MAX_KEY_BYTES, Part, Slot};
use self::members::{Members, lease_not_found};
use super::bound::Bound;
use super::{
    AcquireOutcome, AcquireRequest, Grant, GroupSnapshot, GroupWatch, LeaseStore, ReleaseOutcome,
    RenewOutcome, SlotInfo,
};
use crate::{Error, LeaseToken};

/// etcd's longest lease TTL, in seconds (`MaxLeaseTTL`).
const MAX_TTL_SECS: i64 = 9_000_000_000;

/// How many transactions one acquire makes before it reports the group full: each failed one
/// means another candidate took the index it chose.
const MAX_ROUNDS: usize = 16;

/// Leader groups kept in etcd: a grant survives the loss of any minority of members.
///
/// See the module documentation (and `docs/etcd.md`) for the model, the round trips each
/// operation takes, and the lock-delay after a slot is taken over from a holder that never
/// released it.
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
    feeds: Feeds,
    /// The cluster's minimum lease TTL in seconds, once a grant has shown it (0: not yet).
    min_ttl: AtomicI64,
    /// The slots this process was granted, by token: where their lease is, so a renewal is
    /// one keep-alive. Only a cache: a miss reads the group.
    held: Mutex<HashMap<LeaseToken, Held>>,
    /// Endpoints and prefix, for `Debug` (never the password).
    description: String,
}

/// A slot this process holds.
#[derive(Debug, Clone, Copy)]
struct Held {
    index: u32,
    fence: u64,
    lease: i64,
    ttl: i64,
    acquired_at: SystemTime,
    /// Until when its lock-delay runs, if it was taken over.
    delay_until: Option<Instant>,
}

/// A lease granted for a slot.
#[derive(Debug, Clone, Copy)]
struct NewLease {
    id: i64,
    ttl: i64,
    /// When its grant was sent: it expires no earlier than this plus its TTL.
    sent_at: Instant,
}

/// A slot's move to a new lease: its TTL, what its index's `last` key then says, and the
/// `lease_time` the holder counts on (`None`: a longer lease than asked is fine).
#[derive(Debug, Clone, Copy)]
struct Relet {
    ttl: i64,
    last: LastHolder,
    lease_time: Option<Duration>,
}

/// A group as one read saw it.
#[derive(Debug, Default)]
struct Group {
    /// `max_leaders` and its key's `mod_revision` (0: no key).
    max: Option<u32>,
    max_revision: i64,
    slots: Vec<Slot>,
    /// Each index's `last` key: how its last holder left, and the key's `mod_revision`.
    last: HashMap<u32, (LastHolder, i64)>,
}

impl Group {
    fn read(keys: &GroupKeys, kvs: &[KeyValue]) -> Group {
        let mut group = Group::default();
        for kv in kvs {
            match keys.part_of(kv.key()) {
                Some(Part::Max) => {
                    group.max = std::str::from_utf8(kv.value()).ok().and_then(|v| v.parse().ok());
                    group.max_revision = kv.mod_revision();
                }
                Some(Part::Slot(index)) => group.slots.extend(Slot::read(index, kv)),
                Some(Part::Last(index)) => {
                    group.last.insert(index, (LastHolder::read(kv.value()), kv.mod_revision()));
                }
                Some(Part::Token) | None => {}
            }
        }
        group.slots.sort_by_key(|slot| slot.fence);
        group
    }

    /// The index a new slot takes: among the lowest free ones, those a release freed before
    /// those taken over (which wait a lock-delay); spread by token, so candidates that race
    /// rarely pick the same one.
    fn free_index(&self, max_leaders: u32, token: LeaseToken) -> Option<u32> {
        let taken: Vec<u32> = self.slots.iter().map(|slot| slot.index).collect();
        let mut free: Vec<u32> =
            (0..max_leaders).filter(|index| !taken.contains(index)).take(taken.len() + 4).collect();
        free.sort_by_key(|index| self.taken_over(*index).is_some());
        let fresh = free.iter().take_while(|index| self.taken_over(**index).is_none()).count();
        let spread = fresh.clamp(1, 4).min(free.len());
        (spread > 0).then(|| free[token_hash(token) % spread])
    }
}

impl Group {
    /// The TTL of index `index`'s last holder, if it never released it.
    fn taken_over(&self, index: u32) -> Option<i64> {
        match self.last.get(&index) {
            Some((LastHolder::Held { ttl }, _)) => Some(*ttl),
            _ => None,
        }
    }
}

fn token_hash(token: LeaseToken) -> usize {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    token.hash(&mut hasher);
    hasher.finish() as usize
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
                members: Arc::new(Members::new(endpoints, options, command_timeout)),
                prefix,
                feeds: Feeds::default(),
                min_ttl: AtomicI64::new(0),
                held: Mutex::new(HashMap::new()),
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
        self.state("leader:connection-check").await.map(drop)
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

    /// The TTL in whole seconds for `lease_time` (rounded up), or why it cannot be kept.
    fn ttl_for(&self, lease_time: Duration) -> Result<i64, Error> {
        let secs = lease_time.as_secs() + u64::from(lease_time.subsec_nanos() > 0);
        let secs = i64::try_from(secs).unwrap_or(i64::MAX).max(1);
        if secs > MAX_TTL_SECS {
            return Err(Error::invalid_option(
                "lease_time",
                format!("{lease_time:?}"),
                format!("must be at most {MAX_TTL_SECS}s with EtcdStore (etcd's longest lease)"),
            ));
        }
        let min = self.inner.min_ttl.load(Ordering::Relaxed);
        if secs < min {
            return Err(too_short(lease_time, min));
        }
        Ok(secs)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseToken, Held>> {
        self.inner.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn remember(&self, token: LeaseToken, held: Held) {
        let mut map = self.held();
        if map.len() >= 4096 && !map.contains_key(&token) {
            // Tokens whose holders vanished without a release or a refused renewal: forget
            // them all (this is a cache; a miss reads the group).
            map.clear();
        }
        map.insert(token, held);
    }

    fn forget(&self, token: LeaseToken) {
        self.held().remove(&token);
    }

    /// Grants a lease of `ttl` seconds. If the cluster raised it to its minimum, the minimum
    /// is remembered and, for a `lease_time` the holder counts on, refused (and the lease
    /// revoked); `None` takes a longer lease (a release kept for its minimum lease).
    async fn grant_lease(
        &self,
        bound: &Bound,
        ttl: i64,
        lease_time: Option<Duration>,
    ) -> Result<NewLease, Error> {
        let sent_at = Instant::now();
        let reply = self
            .inner
            .members
            .call(bound, |client| async move { client.lease_client().grant(ttl, None).await })
            .await?;
        let lease = NewLease { id: reply.id(), ttl: reply.ttl(), sent_at };
        if lease.ttl > ttl {
            self.inner.min_ttl.fetch_max(lease.ttl, Ordering::Relaxed);
            if let Some(lease_time) = lease_time {
                self.revoke_behind(lease.id);
                return Err(too_short(lease_time, lease.ttl));
            }
        }
        Ok(lease)
    }

    /// Revokes a lease no key uses, without waiting (it would expire by itself anyway).
    fn revoke_behind(&self, lease: i64) {
        let members = self.inner.members.clone();
        tokio::spawn(async move {
            let bound = members.bound("revoke");
            let revoke = members
                .call(&bound, |client| async move { client.lease_client().revoke(lease).await });
            if let Err(error) = revoke.await {
                tracing::debug!(lease, %error, "could not revoke an unused etcd lease; it expires by itself");
            }
        });
    }

    /// Keeps `lease` alive: `Ok(true)` when it was, `Ok(false)` when it is gone.
    async fn keep_alive(&self, bound: &Bound, lease: i64) -> Result<bool, Error> {
        let call = self.inner.members.call(bound, |client| async move {
            match client.lease_client().keep_alive(lease).await {
                Ok(_) => Ok(true),
                Err(error) if lease_not_found(&error) => Ok(false),
                Err(error) => Err(error),
            }
        });
        call.await
    }

    /// Reads the group.
    async fn read(&self, bound: &Bound, keys: &GroupKeys) -> Result<Group, Error> {
        let range = keys.range.clone();
        let reply =
            self.inner
                .members
                .call(bound, |client| {
                    let range = range.clone();
                    async move {
                        client.kv_client().get(range, Some(GetOptions::new().with_prefix())).await
                    }
                })
                .await?;
        Ok(Group::read(keys, reply.kvs()))
    }

    async fn txn(&self, bound: &Bound, txn: Txn) -> Result<etcd_client::TxnResponse, Error> {
        let call = self.inner.members.call(bound, |client| {
            let txn = txn.clone();
            async move { client.kv_client().txn(txn).await }
        });
        call.await
    }

    /// The slot `token` holds in the group: from this process's memory, or a read.
    async fn find(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        token: LeaseToken,
    ) -> Result<Option<Held>, Error> {
        if let Some(held) = self.held().get(&token) {
            return Ok(Some(*held));
        }
        let group = self.read(bound, keys).await?;
        Ok(group.slots.iter().find(|slot| slot.token == token).map(|slot| Held {
            index: slot.index,
            fence: slot.fence,
            lease: slot.lease,
            ttl: slot.ttl,
            acquired_at: slot.acquired_at,
            // Taken over by another process (or this one, forgotten): its delay may still
            // run, for as long as it can.
            delay_until: slot.took_over.then(|| Instant::now() + secs(slot.ttl)),
        }))
    }

    /// Moves `held`'s slot to a new lease as `relet` says, in one transaction that checks the
    /// slot is still the token's; `None` when it was not.
    async fn relet(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        token: LeaseToken,
        held: Held,
        relet: Relet,
    ) -> Result<Option<NewLease>, Error> {
        let Relet { ttl, last, lease_time } = relet;
        let holder = self.holder_of(bound, keys, held).await?;
        let lease = self.grant_lease(bound, ttl, lease_time).await?;
        let slot_key = keys.slot(held.index);
        let put = PutOptions::new().with_lease(lease.id);
        let value = Slot::value(token, held.acquired_at, ttl, held.delay_until.is_some(), &holder);
        let txn = Txn::new()
            .when([
                Compare::create_revision(
                    slot_key.as_str(),
                    CompareOp::Equal,
                    fence_rev(held.fence),
                ),
                Compare::lease(slot_key.as_str(), CompareOp::Equal, held.lease),
            ])
            .and_then([
                TxnOp::put(slot_key.as_str(), value, Some(put.clone())),
                TxnOp::put(keys.token(token), held.index.to_string(), Some(put)),
                TxnOp::put(keys.last(held.index), last.value(), None),
            ]);
        let reply = self.txn(bound, txn).await?;
        if !reply.succeeded() {
            self.revoke_behind(lease.id);
            self.forget(token);
            return Ok(None);
        }
        self.revoke_behind(held.lease);
        self.remember(token, Held { lease: lease.id, ttl, ..held });
        Ok(Some(lease))
    }

    /// Waits out a takeover's lock-delay until `until`, keeping `lease` alive (every third of
    /// its TTL); returns when the last keep-alive was sent, or `None` if the lease was lost.
    async fn lock_delay(&self, lease: NewLease, until: Instant) -> Result<Option<Instant>, Error> {
        let every = secs(lease.ttl) / 3;
        let mut last_sent = lease.sent_at;
        loop {
            let next = (last_sent + every).min(until);
            tokio::time::sleep_until(next).await;
            let sent = Instant::now();
            if !self.keep_alive(&self.bound("acquire"), lease.id).await? {
                return Ok(None);
            }
            last_sent = sent;
            if next >= until {
                return Ok(Some(last_sent));
            }
        }
    }

    /// The grant to return for a slot, once any lock-delay it owes is over; `started` is
    /// when the acquire began (the caller sent its request before).
    async fn grant_of(
        &self,
        request: &AcquireRequest<'_>,
        held: Held,
        lease: NewLease,
        started: Instant,
    ) -> Result<AcquireOutcome, Error> {
        let mut confirmed = lease.sent_at;
        if let Some(until) = held.delay_until
            && until > Instant::now()
        {
            tracing::info!(group = request.key, fence = held.fence, delay = ?until - Instant::now(), "took over a slot its holder never released; waiting out the lock-delay");
            match self.lock_delay(lease, until).await? {
                Some(sent) => confirmed = sent,
                None => {
                    self.forget(request.token);
                    return Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) });
                }
            }
        }
        // The slot lives at least its TTL (≥ lease_time) from `confirmed`; the caller counts
        // from before `started`.
        let expires_in = confirmed.saturating_duration_since(started) + request.lease_time;
        let now = SystemTime::now();
        Ok(AcquireOutcome::Granted(Grant::new(
            held.fence,
            held.acquired_at,
            now + request.lease_time,
            expires_in,
        )))
    }

    /// The transaction that takes index `index` for `request` on `lease`: `set_max` when the
    /// group has no live slot and its `max_leaders` is to be written.
    fn grant_txn(
        keys: &GroupKeys,
        request: &AcquireRequest<'_>,
        lease: NewLease,
        index: u32,
        group: Option<&Group>,
        acquired_at: SystemTime,
        took_over_ttl: Option<i64>,
    ) -> Txn {
        let slot_key = keys.slot(index);
        let token_key = keys.token(request.token);
        let max = request.max_leaders.get().to_string();
        let mut when = vec![
            Compare::create_revision(slot_key.as_str(), CompareOp::Equal, 0),
            Compare::create_revision(token_key.as_str(), CompareOp::Equal, 0),
        ];
        let put = PutOptions::new().with_lease(lease.id);
        let took_over = took_over_ttl.is_some();
        let last = LastHolder::Held { ttl: lease.ttl.max(took_over_ttl.unwrap_or(0)) };
        let mut then = vec![
            TxnOp::get(keys.last(index), None),
            TxnOp::put(
                slot_key.as_str(),
                Slot::value(request.token, acquired_at, lease.ttl, took_over, request.holder),
                Some(put.clone()),
            ),
            TxnOp::put(token_key.as_str(), index.to_string(), Some(put)),
            TxnOp::put(keys.last(index), last.value(), None),
        ];
        match group {
            // The first try, on no read: the group's `max_leaders` must be the request's.
            None => when.push(Compare::value(keys.max(), CompareOp::Equal, max)),
            Some(group) => {
                when.push(Compare::mod_revision(keys.max(), CompareOp::Equal, group.max_revision));
                // What the read saw of the index's last holder decides the lock-delay.
                let seen = group.last.get(&index).map_or(0, |(_, revision)| *revision);
                when.push(Compare::mod_revision(keys.last(index), CompareOp::Equal, seen));
                if group.max != Some(request.max_leaders.get()) {
                    // A new size is taken only while no slot is live.
                    when.push(
                        Compare::create_revision(keys.slots(), CompareOp::Equal, 0).with_prefix(),
                    );
                    then.push(TxnOp::put(keys.max(), max, None));
                }
            }
        }
        Txn::new()
            .when(when)
            .and_then(then)
            .or_else([TxnOp::get(keys.range.as_str(), Some(GetOptions::new().with_prefix()))])
    }
}

/// A fence as etcd's revision.
fn fence_rev(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

fn secs(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}

fn too_short(lease_time: Duration, min: i64) -> Error {
    Error::invalid_option(
        "lease_time",
        format!("{lease_time:?}"),
        format!(
            "must be at least {min}s with this etcd cluster: its minimum lease TTL (one and a \
             half election timeouts, rounded up to a second)"
        ),
    )
}

/// The `Get` a transaction's branch answered with, at `at`.
fn got(reply: &etcd_client::TxnResponse, at: usize) -> Vec<KeyValue> {
    match reply.op_responses().into_iter().nth(at) {
        Some(TxnOpResponse::Get(get)) => get.kvs().to_vec(),
        _ => Vec::new(),
    }
}

#[async_trait]
impl LeaseStore for EtcdStore {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        let keys = self.keys(request.key)?;
        let ttl = self.ttl_for(request.lease_time)?;
        let started = Instant::now();
        let bound = self.bound("acquire");
        let lease = self.grant_lease(&bound, ttl, Some(request.lease_time)).await?;
        let mut group: Option<Group> = None;
        for _ in 0..MAX_ROUNDS {
            let (index, took_over_ttl) = match &group {
                None => (0, None),
                Some(seen) => {
                    if let Some(slot) = seen.slots.iter().find(|slot| slot.token == request.token) {
                        // Held already: an earlier attempt's grant (its reply lost, say).
                        self.revoke_behind(lease.id);
                        let held = match self.held().get(&request.token) {
                            Some(held) => *held,
                            None => Held {
                                index: slot.index,
                                fence: slot.fence,
                                lease: slot.lease,
                                ttl: slot.ttl,
                                acquired_at: slot.acquired_at,
                                delay_until: slot
                                    .took_over
                                    .then(|| Instant::now() + secs(slot.ttl)),
                            },
                        };
                        // Kept alive first: the grant's time to live counts from now.
                        let sent_at = Instant::now();
                        if !self.keep_alive(&bound, slot.lease).await? {
                            self.forget(request.token);
                            let nearest_expiry = Duration::from_millis(1);
                            return Ok(AcquireOutcome::Full { nearest_expiry });
                        }
                        self.remember(request.token, held);
                        let existing = NewLease { id: slot.lease, ttl: slot.ttl, sent_at };
                        return self.grant_of(&request, held, existing, started).await;
                    }
                    if let Some(max) = seen.max.filter(|_| !seen.slots.is_empty())
                        && max != request.max_leaders.get()
                    {
                        self.revoke_behind(lease.id);
                        return Err(Error::MaxLeadersMismatch {
                            group: request.key.to_owned(),
                            requested: request.max_leaders.get(),
                            existing: max,
                        });
                    }
                    let Some(index) = seen.free_index(request.max_leaders.get(), request.token)
                    else {
                        self.revoke_behind(lease.id);
                        let nearest = seen.slots.iter().map(|slot| slot.ttl).min().unwrap_or(1);
                        return Ok(AcquireOutcome::Full { nearest_expiry: secs(nearest) });
                    };
                    (index, seen.taken_over(index))
                }
            };
            // Kept to the microsecond, as the slot's record holds it.
            let acquired_at = layout::to_micros(SystemTime::now());
            let txn = Self::grant_txn(
                &keys,
                &request,
                lease,
                index,
                group.as_ref(),
                acquired_at,
                took_over_ttl,
            );
            let reply = self.txn(&bound, txn).await?;
            if !reply.succeeded() {
                group = Some(Group::read(&keys, &got(&reply, 0)));
                continue;
            }
            let fence = reply.header().map_or(0, |header| header.revision());
            // The first try reads the index's last holder inside the transaction.
            let previous = got(&reply, 0);
            let delay_ttl = took_over_ttl.or_else(|| match previous.first() {
                Some(kv) => match LastHolder::read(kv.value()) {
                    LastHolder::Held { ttl } => Some(ttl),
                    LastHolder::Released => None,
                },
                None => None,
            });
            if let Some(previous_ttl) = delay_ttl
                && took_over_ttl.is_none()
            {
                // The first try wrote the slot as fresh: record the takeover, and keep the
                // longer of the two holders' TTLs for whoever takes the index next.
                let value =
                    Slot::value(request.token, acquired_at, lease.ttl, true, request.holder);
                let last = LastHolder::Held { ttl: previous_ttl.max(lease.ttl) };
                let slot_key = keys.slot(index);
                let fix = Txn::new()
                    .when([Compare::create_revision(slot_key.as_str(), CompareOp::Equal, fence)])
                    .and_then([
                        TxnOp::put(
                            slot_key.as_str(),
                            value,
                            Some(PutOptions::new().with_lease(lease.id)),
                        ),
                        TxnOp::put(keys.last(index), last.value(), None),
                    ]);
                self.txn(&bound, fix).await?;
            }
            let held = Held {
                index,
                fence: u64::try_from(fence).unwrap_or(0),
                lease: lease.id,
                ttl: lease.ttl,
                acquired_at,
                delay_until: delay_ttl.map(|ttl| Instant::now() + secs(ttl)),
            };
            self.remember(request.token, held);
            return self.grant_of(&request, held, lease, started).await;
        }
        self.revoke_behind(lease.id);
        Ok(AcquireOutcome::Full { nearest_expiry: Duration::from_millis(1) })
    }

    async fn renew(
        &self,
        key: &str,
        token: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        let keys = self.keys(key)?;
        let ttl = self.ttl_for(lease_time)?;
        let bound = self.bound("renew");
        let Some(held) = self.find(&bound, &keys, token).await? else {
            return Ok(RenewOutcome::NotHeld);
        };
        if held.ttl == ttl {
            if !self.keep_alive(&bound, held.lease).await? {
                self.forget(token);
                return Ok(RenewOutcome::NotHeld);
            }
            self.remember(token, held);
        } else {
            // Another TTL: a new lease. The holder may count on the longer of the two.
            let last = LastHolder::Held { ttl: ttl.max(held.ttl) };
            let relet = Relet { ttl, last, lease_time: Some(lease_time) };
            if self.relet(&bound, &keys, token, held, relet).await?.is_none() {
                return Ok(RenewOutcome::NotHeld);
            }
        }
        Ok(RenewOutcome::Renewed {
            expires_at: SystemTime::now() + lease_time,
            expires_in: lease_time,
        })
    }

    async fn release(
        &self,
        key: &str,
        token: LeaseToken,
        min_lease_time: Duration,
    ) -> Result<ReleaseOutcome, Error> {
        let keys = self.keys(key)?;
        let bound = self.bound("release");
        let Some(held) = self.find(&bound, &keys, token).await? else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        // A slot still in its lock-delay was never acted on, but the holder it was taken
        // from may still act: its index stays marked held.
        let delayed = held.delay_until.is_some_and(|until| until > Instant::now());
        let last = if delayed { LastHolder::Held { ttl: held.ttl } } else { LastHolder::Released };
        let keep = (held.acquired_at + min_lease_time)
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        if !keep.is_zero() {
            let min = self.inner.min_ttl.load(Ordering::Relaxed);
            let ttl = self.ttl_for(keep).unwrap_or(min).max(min);
            let relet = Relet { ttl, last, lease_time: None };
            if self.relet(&bound, &keys, token, held, relet).await?.is_none() {
                return Ok(ReleaseOutcome::NotHeld);
            }
            self.forget(token);
            return Ok(ReleaseOutcome::Kept { expires_in: keep });
        }
        let slot_key = keys.slot(held.index);
        let mut then =
            vec![TxnOp::delete(slot_key.as_str(), None), TxnOp::delete(keys.token(token), None)];
        if !delayed {
            then.push(TxnOp::put(keys.last(held.index), last.value(), None));
        }
        let txn = Txn::new()
            .when([Compare::create_revision(
                slot_key.as_str(),
                CompareOp::Equal,
                fence_rev(held.fence),
            )])
            .and_then(then);
        let reply = self.txn(&bound, txn).await?;
        self.forget(token);
        if !reply.succeeded() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        // The slot is free already; revoking the lease makes a renewal under it fail too.
        let lease = held.lease;
        let revoke = self
            .inner
            .members
            .call(&bound, |client| async move { client.lease_client().revoke(lease).await });
        if let Err(error) = revoke.await {
            tracing::warn!(group = key, %error, "released, but could not revoke the slot's etcd lease; it expires by itself");
        }
        Ok(ReleaseOutcome::Released)
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        let keys = self.keys(key)?;
        let bound = self.bound("state");
        let group = self.read(&bound, &keys).await?;
        let lives = group.slots.iter().map(|slot| {
            let (members, lease) = (&self.inner.members, slot.lease);
            let bound = &bound;
            async move {
                members
                    .call(bound, |client| async move {
                        client.lease_client().time_to_live(lease, None).await
                    })
                    .await
            }
        });
        let lives = futures_util::future::join_all(lives).await;
        let mut snapshot = GroupSnapshot::default();
        for (slot, life) in group.slots.iter().zip(lives) {
            let life = life?;
            if life.ttl() < 0 {
                continue; // expired between the two reads
            }
            // etcd truncates the time left to whole seconds: up to one more is left.
            let left = (life.ttl() + 1).min(life.granted_ttl().max(1));
            snapshot.leaders.push(SlotInfo {
                holder: slot.holder.clone(),
                fence: slot.fence,
                acquired_at: slot.acquired_at,
                expires_in: secs(left),
            });
        }
        if !snapshot.leaders.is_empty() {
            snapshot.max_leaders = group.max;
        }
        Ok(snapshot)
    }

    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        let keys = self.keys(key)?;
        let bound = self.bound("watch");
        self.inner.feeds.watch(&self.inner.members, keys, bound, Wakes::Releases).await
    }

    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        let keys = self.keys(key)?;
        let bound = self.bound("watch");
        self.inner.feeds.watch(&self.inner.members, keys, bound, Wakes::Changes).await
    }

    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
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
        let mut groups: Vec<String> = reply
            .kvs()
            .iter()
            .filter_map(|kv| {
                let key = std::str::from_utf8(kv.key()).ok()?;
                let (group, part) = key.strip_prefix(&self.inner.prefix)?.split_once(' ')?;
                (part == "max" && group.ends_with(suffix)).then(|| group.to_owned())
            })
            .collect();
        groups.sort();
        groups.dedup();
        Ok(groups)
    }
}

impl EtcdStore {
    /// The holder a slot was granted to, for a transaction that rewrites its record.
    async fn holder_of(
        &self,
        bound: &Bound,
        keys: &GroupKeys,
        held: Held,
    ) -> Result<String, Error> {
        let slot_key = keys.slot(held.index);
        let reply = self
            .inner
            .members
            .call(bound, |client| {
                let slot_key = slot_key.clone();
                async move { client.kv_client().get(slot_key, None).await }
            })
            .await?;
        Ok(reply
            .kvs()
            .first()
            .and_then(|kv| Slot::read(held.index, kv))
            .map(|slot| slot.holder)
            .unwrap_or_default())
    }
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("cluster", &self.inner.description)
            .field("members", &self.inner.members.endpoints())
            .finish()
    }
}
