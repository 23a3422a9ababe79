//! [`RedisStore`]'s [`LeaseStore`] implementation: each operation one script call (renewals
//! in batches of [`RENEW_BATCH_LEN`]), with the replicas' acknowledgement checked when
//! `replica_ack` asks for it.

use std::time::Duration;

use async_trait::async_trait;

use super::connection::ToRedisArgsDyn;
use super::failures::unavailable;
use super::scripts::{
    ACQUIRE, CLAIM, GroupKeys, PREFER, PREFERENCE, RELEASE, RELEASE_CHANNEL_PREFIX, RENEW,
    RENEW_MANY, REVOKE, STATE, STATE_MANY, TokenArg,
};
use super::{RedisStore, observed, reply};
use crate::duration::ceil_millis as millis;
use crate::error::Error;
use crate::store::{
    AcquireOutcome, AcquireRequest, ClaimInfo, GroupSnapshot, GroupWatch, HeldSlot, LeaseStore,
    Preference, RENEW_BATCH_LEN, ReleaseOutcome, RenewOutcome, Revocation, SlotRef,
};
use crate::token::LeaseToken;

impl RedisStore {
    /// One script call of [`renew_many`](LeaseStore::renew_many): `part` holds at most
    /// [`RENEW_BATCH_LEN`] slots.
    async fn renew_part(
        &self,
        part: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        let Some(first) = part.first() else { return Ok(Vec::new()) };
        let groups =
            part.iter().map(|slot| GroupKeys::new(slot.key)).collect::<Result<Vec<_>, _>>()?;
        let named: Vec<_> = groups.iter().map(|keys| keys.group()).collect();
        let tokens: Vec<_> = part.iter().map(|slot| TokenArg(slot.token)).collect();
        let lease = millis(lease_time);
        let keys: Vec<&dyn ToRedisArgsDyn> = named.iter().map(|name| name as _).collect();
        let mut args: Vec<&dyn ToRedisArgsDyn> =
            vec![&lease, &self.inner.idle_group_ttl_ms, &RELEASE_CHANNEL_PREFIX];
        args.extend(tokens.iter().map(|token| token as &dyn ToRedisArgsDyn));
        let (reply, acknowledged) = self
            .call_then_wait(
                "renew_many",
                first.key,
                &RENEW_MANY,
                &keys,
                &args,
                self.inner.replica_ack,
            )
            .await?;
        let outcomes = reply::renew_many(reply, part.len())?;
        self.renewal_replicated("renew_many", acknowledged)?;
        Ok(outcomes)
    }

    /// One script call of [`state_many`](LeaseStore::state_many): `part` holds at most
    /// [`RENEW_BATCH_LEN`] groups.
    async fn state_part(&self, part: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        let Some(first) = part.first() else { return Ok(Vec::new()) };
        let groups = part.iter().map(|key| GroupKeys::new(key)).collect::<Result<Vec<_>, _>>()?;
        let named: Vec<_> = groups.iter().map(|keys| keys.group()).collect();
        let keys: Vec<&dyn ToRedisArgsDyn> = named.iter().map(|name| name as _).collect();
        let reply = self.call("state_many", first, &STATE_MANY, &keys, &[]).await?;
        reply::state_many(reply, part.len())
    }

    /// With `replica_ack`, an error unless enough replicas acknowledged a renewal: the new
    /// expiry is on the primary only, and a failover to a replica would end the slot before
    /// it, so the holder must not count on it (it keeps its earlier deadline, which the
    /// replicas acknowledged, and tries again).
    fn renewal_replicated(
        &self,
        operation: &'static str,
        acknowledged: Option<i64>,
    ) -> Result<(), Error> {
        match (self.inner.replica_ack, acknowledged) {
            (Some((required, timeout)), Some(acknowledged))
                if acknowledged < i64::from(required) =>
            {
                let acknowledged = acknowledged.max(0) as u32;
                Err(Error::NotReplicated { acknowledged, required, timeout, operation })
            }
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn keeps_reservations(&self) -> bool {
        true
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            request.check_times()?;
            let keys = GroupKeys::new(request.key)?;
            let lease = millis(request.lease_time);
            let claim = request.reservation.map_or_else(String::new, |claim| {
                format!("{}:{}:{}", millis(claim.waited), millis(claim.hold_for), claim.priority)
            });
            let (reply, acknowledged) = self
                .call_then_wait(
                    "acquire",
                    request.key,
                    &ACQUIRE,
                    &[&keys.group(), &keys.full(), &keys.preferred()],
                    &[
                        &TokenArg(request.token),
                        &request.holder,
                        &lease,
                        &request.max_leaders.get(),
                        &keys.grant_channel(),
                        &lease.saturating_add(self.inner.idle_group_ttl_ms),
                        &claim,
                    ],
                    self.inner.replica_ack,
                )
                .await?;
            let outcome = reply::acquire(reply, request)?;
            if let (AcquireOutcome::Granted(_), Some((required, timeout)), Some(acknowledged)) =
                (outcome, self.inner.replica_ack, acknowledged)
                && acknowledged < i64::from(required)
            {
                // Give the grant back; if that fails too, the slot expires with its lease.
                // Either way the caller learns what happened to its grant: NotReplicated.
                if let Err(error) = self.release(request.key, request.token, Duration::ZERO).await {
                    tracing::warn!(
                        group = request.key,
                        %error,
                        "could not release a grant too few replicas acknowledged; it expires \
                         with its lease"
                    );
                }
                let acknowledged = acknowledged.max(0) as u32;
                let operation = "acquire";
                return Err(Error::NotReplicated { acknowledged, required, timeout, operation });
            }
            Ok(outcome)
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
            let keys = GroupKeys::new(key)?;
            let lease = millis(lease_time);
            let (reply, acknowledged) = self
                .call_then_wait(
                    "renew",
                    key,
                    &RENEW,
                    &[&keys.group(), &keys.full()],
                    &[
                        &TokenArg(token),
                        &lease,
                        &self.inner.idle_group_ttl_ms,
                        &keys.release_channel(),
                    ],
                    self.inner.replica_ack,
                )
                .await?;
            let outcome = reply::renew(reply)?;
            self.renewal_replicated("renew", acknowledged)?;
            Ok(outcome)
        })
        .await
    }

    /// Up to [`RENEW_BATCH_LEN`] slots per script call (`renew_many.lua`, renew.lua's
    /// work for each slot). A Cluster keeps each group on the server of its own hash slot, so
    /// there the slots are renewed one by one.
    async fn renew_many(
        &self,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        if self.topology() == "cluster" {
            return crate::store::renew_each(self, slots, lease_time).await;
        }
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", lease_time)?;
            let mut answers = Vec::with_capacity(slots.len());
            for part in slots.chunks(RENEW_BATCH_LEN) {
                answers.extend(self.renew_part(part, lease_time).await?);
            }
            Ok(answers)
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
            let keys = GroupKeys::new(key)?;
            let min_lease = millis(min_lease_time);
            let channel = keys.release_channel();
            let reply = self
                .call(
                    "release",
                    key,
                    &RELEASE,
                    &[&keys.group(), &keys.full()],
                    &[&TokenArg(token), &min_lease, &channel],
                )
                .await?;
            reply::release(reply)
        })
        .await
    }

    /// One script call: the slot, named by its token or its fence, is freed now or moved to
    /// a fresh token nobody holds (so it lapses at its expiry).
    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = GroupKeys::new(key)?;
            let (token, fence) = match slot {
                SlotRef::Token(token) => (token.to_string(), String::new()),
                SlotRef::Fence(fence) => (String::new(), fence.to_string()),
            };
            let now = if how == Revocation::Now { "1" } else { "0" };
            let nobody = LeaseToken::generate()?.to_string();
            let channel = keys.release_channel();
            let reply = self
                .call(
                    "revoke",
                    key,
                    &REVOKE,
                    &[&keys.group(), &keys.full()],
                    &[&token, &fence, &now, &nobody, &channel],
                )
                .await?;
            reply::release(reply)
        })
        .await
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = GroupKeys::new(key)?;
            let reply = self.call("state", key, &STATE, &[&keys.group()], &[]).await?;
            reply::state(reply)
        })
        .await
    }

    async fn claim(&self, key: &str) -> Result<Option<ClaimInfo>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = GroupKeys::new(key)?;
            let named: [&dyn ToRedisArgsDyn; 2] = [&keys.group(), &keys.preferred()];
            let reply = self.call("claim", key, &CLAIM, &named, &[]).await?;
            reply::claim(reply)
        })
        .await
    }

    async fn prefer(&self, key: &str, preferred: Option<(&str, Duration)>) -> Result<(), Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = GroupKeys::new(key)?;
            let (holder, ttl) = preferred.unwrap_or(("", Duration::ZERO));
            let ttl = millis(ttl).max(1);
            self.call("prefer", key, &PREFER, &[&keys.preferred()], &[&holder, &ttl]).await?;
            Ok(())
        })
        .await
    }

    async fn preference(&self, key: &str) -> Result<Option<Preference>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let keys = GroupKeys::new(key)?;
            let reply =
                self.call("preference", key, &PREFERENCE, &[&keys.preferred()], &[]).await?;
            reply::preference(reply)
        })
        .await
    }

    /// Up to [`RENEW_BATCH_LEN`] groups per script call (`state_many.lua`, state.lua's
    /// read of each). A Cluster keeps each group on the server of its own hash slot, so there
    /// the groups are read one by one.
    async fn state_many(&self, keys: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        if self.topology() == "cluster" {
            return crate::store::state_each(self, keys).await;
        }
        crate::store::located(&self.inner.endpoint, async {
            let mut answers = Vec::with_capacity(keys.len());
            for part in keys.chunks(RENEW_BATCH_LEN) {
                answers.extend(self.state_part(part).await?);
            }
            Ok(answers)
        })
        .await
    }

    /// Found with `SCAN`, which never blocks the server; a group is listed while its hash
    /// exists (an idle group for `idle_group_ttl`). Standalone and Sentinel only: on a
    /// Cluster this is an error (name the group instead).
    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            self.scan_groups(prefix, suffix).await
        })
        .await
    }

    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            GroupKeys::new(key)?;
            let bound = self.bound("watch", self.command_timeout());
            bound.run(self.inner.releases.watch(key)).await?.map_err(|e| unavailable("watch", e))
        })
        .await
    }

    /// Subscribed (grant and release channels) and announced: the group's grants and
    /// releases are published while the watch lives, and withdrawn after the last watch of
    /// the group on this store goes (a crashed process's announcement lapses after 15
    /// minutes). The announcement is renewed every 5 minutes, and after every gap in the
    /// subscription.
    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            GroupKeys::new(key)?;
            let bound = self.bound("watch", self.command_timeout());
            let watch = bound
                .run(self.inner.releases.watch_changes(key))
                .await?
                .map_err(|e| unavailable("watch", e))?;
            let announcement = observed::announce(self, key).await?;
            Ok(watch.holding(announcement))
        })
        .await
    }
}
