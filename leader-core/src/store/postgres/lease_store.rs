//! [`PostgresStore`]'s [`LeaseStore`] implementation: each operation one statement (a
//! function call, or the acquire's look at the group first), its row read as the Redis
//! scripts' answers are.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::tokio_postgres::types::ToSql;

use super::rows::{add_slot, between, decode, fence_of, millis, renewal, time_of, unexpected};
use super::schema::MAX_KEY_BYTES;
use super::statement::Call;
use super::{PostgresStore, error_class};
use crate::error::Error;
use crate::store::answer::{Answer, Decode};
use crate::store::{
    AcquireOutcome, AcquireRequest, ClaimInfo, GroupSnapshot, GroupWatch, HeldSlot, LeaseStore,
    Preference, RENEW_BATCH_LEN, ReleaseOutcome, RenewOutcome, Revocation, SlotRef,
};
use crate::token::LeaseToken;

impl PostgresStore {
    /// [`LeaseStore::list_groups`]: every group that ever had a slot keeps its row (its
    /// `max_leaders` and last fence), live or idle.
    async fn select_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        let sql = &self.inner.names.list_sql;
        let params: [&(dyn ToSql + Sync); 2] = [&prefix, &suffix];
        let rows = self.query(Call::read("list", sql), &params).await?;
        rows.iter().map(|row| row.try_get::<_, String>(0).map_err(|e| decode("list", e))).collect()
    }

    /// One statement of [`state_many`](LeaseStore::state_many): the groups of `keys`, in
    /// order (a row per live slot, numbered by its group's place in `keys`).
    async fn state_part(&self, keys: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        let sql = &self.inner.names.state_many_sql;
        let params: [&(dyn ToSql + Sync); 1] = [&keys];
        let rows = self.query(Call::read("state", sql), &params).await?;
        let mut answers = vec![GroupSnapshot::default(); keys.len()];
        for row in &rows {
            let place: i64 = row.try_get("n").map_err(|e| decode("state", e))?;
            let Some(snapshot) = usize::try_from(place - 1).ok().and_then(|i| answers.get_mut(i))
            else {
                return Err(unexpected(
                    "state",
                    &format!("a row for group {place} of {}", keys.len()),
                ));
            };
            add_slot("state", row, snapshot)?;
        }
        Ok(answers)
    }

    /// One statement of [`renew_many`](LeaseStore::renew_many): the answers for `keys`
    /// held under `tokens`, in order.
    async fn renew_part(
        &self,
        keys: &[&str],
        tokens: &[String],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        let sql = &self.inner.names.renew_many_sql;
        let lease = millis(lease_time);
        let params: [&(dyn ToSql + Sync); 3] = [&keys, &tokens, &lease];
        let rows = self.query(Call::candidate("renew", sql), &params).await?;
        if rows.len() != keys.len() {
            return Err(unexpected(
                "renew",
                &format!("{} rows for {} slots", rows.len(), keys.len()),
            ));
        }
        rows.iter().map(renewal).collect()
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn keeps_reservations(&self) -> bool {
        true
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            request.check_times()?;
            let Ok(max) = i32::try_from(request.max_leaders.get()) else {
                return Err(Error::invalid_option(
                    "max_leaders",
                    request.max_leaders,
                    format!("must be at most {} with PostgresStore", i32::MAX),
                ));
            };
            if let Some(bad) = request.key.chars().find(|c| c.is_whitespace() || c.is_control()) {
                return Err(Error::InvalidKey {
                    key: request.key.to_owned(),
                    reason: format!(
                        "must not contain whitespace or control characters (found {bad:?}): \
                     PostgresStore notifies with the key as the payload"
                    ),
                });
            }
            if request.key.len() > MAX_KEY_BYTES {
                return Err(Error::invalid_option(
                    "key",
                    format!(
                        "{}… ({} bytes)",
                        request.key.chars().take(32).collect::<String>(),
                        request.key.len()
                    ),
                    format!(
                        "must be at most {MAX_KEY_BYTES} bytes with PostgresStore (a slot's index \
                     entry and a release's NOTIFY payload hold the key)"
                    ),
                ));
            }
            let rows = self.acquire_to_the_end(request, max).await?;
            let row = rows.first().ok_or_else(|| unexpected("acquire", "no row"))?;
            // [outcome, fence, acquired_us, expires_us, now_us, existing_max]
            let fields: Vec<Option<i64>> = row.try_get(0).map_err(|e| decode("acquire", e))?;
            let field = |i: usize| fields.get(i).copied().flatten();
            let (expires, now) = (field(3), field(4));
            let answer = Answer {
                code: field(0).unwrap_or(-1),
                fence: field(1).map(fence_of),
                acquired_at: field(2).map(time_of),
                expires_at: expires.map(time_of),
                expires_in: expires.zip(now).map(|(expires, now)| between(now, expires)),
                existing_max: field(5).map(|max| max.clamp(0, u32::MAX as i64) as u32),
            };
            Decode { store: "postgres", operation: "acquire" }.acquire(answer, request)
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
            let sql = &self.inner.names.renew_sql;
            let (token, lease) = (token.to_string(), millis(lease_time));
            let params: [&(dyn ToSql + Sync); 3] = [&key, &token, &lease];
            let rows = self.query(Call::candidate("renew", sql), &params).await?;
            renewal(rows.first().ok_or_else(|| unexpected("renew", "no row"))?)
        })
        .await
    }

    /// Up to [`RENEW_BATCH_LEN`] slots per statement, each renewed by the `renew` function
    /// in one transaction. Its advisory locks are taken in the order of the keys, sorted
    /// here, so two batches never wait on each other in a cycle.
    async fn renew_many(
        &self,
        slots: &[HeldSlot<'_>],
        lease_time: Duration,
    ) -> Result<Vec<RenewOutcome>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            crate::duration::positive("lease_time", lease_time)?;
            let mut order: Vec<usize> = (0..slots.len()).collect();
            order.sort_by_key(|&i| slots[i].key);
            let mut answers = vec![RenewOutcome::NotHeld; slots.len()];
            for part in order.chunks(RENEW_BATCH_LEN) {
                let keys: Vec<&str> = part.iter().map(|&i| slots[i].key).collect();
                let tokens: Vec<String> =
                    part.iter().map(|&i| slots[i].token.to_string()).collect();
                for (&i, answer) in
                    part.iter().zip(self.renew_part(&keys, &tokens, lease_time).await?)
                {
                    answers[i] = answer;
                }
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
            self.after_acquiring(token, "release").await?;
            let sql = &self.inner.names.release_sql;
            let (token, min_lease) = (token.to_string(), millis(min_lease_time));
            let params: [&(dyn ToSql + Sync); 3] = [&key, &token, &min_lease];
            let rows = self.query(Call::candidate("release", sql), &params).await?;
            let row = rows.first().ok_or_else(|| unexpected("release", "no row"))?;
            let outcome: i32 = row.try_get("outcome").map_err(|e| decode("release", e))?;
            let left: Option<i64> =
                row.try_get("expires_in_us").map_err(|e| decode("release", e))?;
            let answer = Answer {
                code: outcome.into(),
                expires_in: left.map(|left| between(0, left)),
                ..Answer::default()
            };
            Decode { store: "postgres", operation: "release" }.release(answer)
        })
        .await
    }

    /// One function call: the slot, named by its token or its fence, is deleted now or moved
    /// to a fresh token nobody holds (so it lapses at its expiry).
    async fn revoke(
        &self,
        key: &str,
        slot: SlotRef,
        how: Revocation,
    ) -> Result<ReleaseOutcome, Error> {
        crate::store::located(&self.inner.endpoint, async {
            if let SlotRef::Token(token) = slot {
                self.after_acquiring(token, "revoke").await?;
            }
            let sql = &self.inner.names.revoke_sql;
            let (token, fence) = match slot {
                SlotRef::Token(token) => (Some(token.to_string()), None),
                SlotRef::Fence(fence) => (None, Some(i64::try_from(fence).unwrap_or(i64::MAX))),
            };
            let now = how == Revocation::Now;
            let nobody = LeaseToken::generate()?.to_string();
            let params: [&(dyn ToSql + Sync); 5] = [&key, &token, &fence, &now, &nobody];
            let rows = self.query(Call::candidate("revoke", sql), &params).await?;
            let row = rows.first().ok_or_else(|| unexpected("revoke", "no row"))?;
            let outcome: i32 = row.try_get("outcome").map_err(|e| decode("revoke", e))?;
            let left: Option<i64> =
                row.try_get("expires_in_us").map_err(|e| decode("revoke", e))?;
            let answer = Answer {
                code: outcome.into(),
                expires_in: left.map(|left| between(0, left)),
                ..Answer::default()
            };
            Decode { store: "postgres", operation: "revoke" }.release(answer)
        })
        .await
    }

    async fn state(&self, key: &str) -> Result<GroupSnapshot, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let sql = &self.inner.names.state_sql;
            let params: [&(dyn ToSql + Sync); 1] = [&key];
            let rows = self.query(Call::read("state", sql), &params).await?;
            let mut snapshot = GroupSnapshot::default();
            for row in &rows {
                add_slot("state", row, &mut snapshot)?;
            }
            Ok(snapshot)
        })
        .await
    }

    async fn claim(&self, key: &str) -> Result<Option<ClaimInfo>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let sql = &self.inner.names.claim_info_sql;
            let params: [&(dyn ToSql + Sync); 1] = [&key];
            let rows = self.query(Call::read("claim", sql), &params).await?;
            let Some(row) = rows.first() else { return Ok(None) };
            let ms = |column: &str| {
                let ms = row.try_get::<_, i64>(column).map_err(|e| decode("claim", e))?;
                Ok::<_, Error>(between(0, ms.saturating_mul(1000)))
            };
            let claim = ClaimInfo::new(
                row.try_get("holder").map_err(|e| decode("claim", e))?,
                row.try_get("priority").map_err(|e| decode("claim", e))?,
                ms("waited_ms")?,
                ms("expires_in_ms")?,
            );
            let preferred = row.try_get("preferred").map_err(|e| decode("claim", e))?;
            Ok(Some(claim.with_preference(preferred)))
        })
        .await
    }

    async fn prefer(&self, key: &str, preferred: Option<(&str, Duration)>) -> Result<(), Error> {
        crate::store::located(&self.inner.endpoint, async {
            let names = &self.inner.names;
            match preferred {
                Some((holder, ttl)) => {
                    let ttl = millis(ttl).max(1);
                    let params: [&(dyn ToSql + Sync); 3] = [&key, &holder, &ttl];
                    self.query(Call::candidate("prefer", &names.prefer_sql), &params).await?;
                }
                None => {
                    let params: [&(dyn ToSql + Sync); 1] = [&key];
                    self.query(Call::candidate("prefer", &names.unprefer_sql), &params).await?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn preference(&self, key: &str) -> Result<Option<Preference>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let sql = &self.inner.names.preference_sql;
            let params: [&(dyn ToSql + Sync); 1] = [&key];
            let rows = self.query(Call::read("preference", sql), &params).await?;
            let Some(row) = rows.first() else { return Ok(None) };
            let holder = row.try_get("holder").map_err(|e| decode("preference", e))?;
            let ms: i64 = row.try_get("expires_in_ms").map_err(|e| decode("preference", e))?;
            Ok(Some(Preference::new(holder, between(0, ms.saturating_mul(1000)))))
        })
        .await
    }

    /// Up to [`RENEW_BATCH_LEN`] groups per statement, each read by the `state` function.
    async fn state_many(&self, keys: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let mut answers = Vec::with_capacity(keys.len());
            for part in keys.chunks(RENEW_BATCH_LEN) {
                answers.extend(self.state_part(part).await?);
            }
            Ok(answers)
        })
        .await
    }

    /// Every group that ever had a slot keeps its row (its `max_leaders` and last fence),
    /// so idle groups are listed too.
    async fn list_groups(&self, prefix: &str, suffix: &str) -> Result<Vec<String>, Error> {
        crate::store::located(&self.inner.endpoint, async {
            self.select_groups(prefix, suffix).await
        })
        .await
    }

    /// A candidate's watch: it makes the schema first if it is missing, as the acquire that
    /// follows would.
    async fn watch_releases(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            if self.inner.schema_ready.get().is_none() {
                self.schema_ready().await?;
            }
            let watched = self.bound("watch").run(self.inner.releases.watch(key)).await?;
            watched.map_err(|error| error_class::to_error("watch", error))
        })
        .await
    }

    /// `LISTEN`, and the announcement that the group is observed here (so its grants and
    /// releases notify), confirmed before this returns; withdrawn after the last watch of
    /// the group on this store goes, or with the `LISTEN` connection's session.
    async fn watch_changes(&self, key: &str) -> Result<GroupWatch, Error> {
        crate::store::located(&self.inner.endpoint, async {
            let watched = self.bound("watch").run(self.inner.releases.watch_changes(key)).await?;
            watched.map_err(|error| error_class::to_error("watch", error))
        })
        .await
    }
}
