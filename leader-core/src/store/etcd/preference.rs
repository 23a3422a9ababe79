//! An operator's preference for the holder that is to lead a group, on etcd: the group's
//! `{prefix}{key} preferred` key, `{until ms since the epoch} {holder}`, on a lease of its
//! own granted for the preference's time (rounded up to whole seconds, at least the
//! cluster's minimum TTL), so etcd deletes it once it lapsed. Readers also compare the
//! `until` with their own clock, so a preference ends within the clocks' skew of its time
//! even when the cluster's minimum TTL is longer. While it lives, the preferred holder's
//! claim goes before every other (`claim.rs`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{DeleteOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};

use super::EtcdStore;
use crate::error::Error;
use crate::store::Preference;

/// The preference key `kv`, if it names a holder until a time still ahead: its holder and
/// its time left. Anything else there is no preference.
fn read(kv: &KeyValue) -> Option<(String, Duration)> {
    let value = std::str::from_utf8(kv.value()).ok()?;
    let (until_ms, holder) = value.split_once(' ')?;
    let until = UNIX_EPOCH.checked_add(Duration::from_millis(until_ms.parse().ok()?))?;
    let left = until.duration_since(SystemTime::now()).ok().filter(|left| !left.is_zero())?;
    // A time beyond the store's range (2^47 ms ahead) was not written by this store.
    let ours = left <= crate::duration::MAX_DURATION && !holder.is_empty();
    ours.then(|| (holder.to_owned(), left))
}

/// The holder the preference key `kv` names, while it lives.
pub(crate) fn preferred_holder(kv: &KeyValue) -> Option<String> {
    read(kv).map(|(holder, _)| holder)
}

impl EtcdStore {
    /// [`LeaseStore::prefer`](crate::LeaseStore::prefer): the preference key written on a
    /// new lease of its time, or deleted.
    pub(crate) async fn set_preference(
        &self,
        key: &str,
        preferred: Option<(&str, Duration)>,
    ) -> Result<(), Error> {
        let keys = self.keys(key)?;
        let bound = self.bound("prefer");
        let Some((holder, ttl)) = preferred else {
            let delete =
                TxnOp::delete(keys.preferred(), Some(DeleteOptions::new().with_prev_key()));
            let reply = self.txn(&bound, Txn::new().and_then([delete])).await?;
            self.revoke_replaced(&reply, None);
            return Ok(());
        };
        let until = SystemTime::now().checked_add(ttl).unwrap_or(SystemTime::now());
        let until_ms = until.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        let lease = self.grant_lease(&bound, self.claim_ttl(ttl), None).await?;
        let on_lease = PutOptions::new().with_lease(lease.id).with_prev_key();
        let put = TxnOp::put(keys.preferred(), format!("{until_ms} {holder}"), Some(on_lease));
        let reply = self.txn(&bound, Txn::new().and_then([put])).await.inspect_err(|_| {
            self.revoke_behind(lease.id);
        })?;
        self.revoke_replaced(&reply, Some(lease.id));
        Ok(())
    }

    /// Revokes the lease of the preference a write replaced or deleted (`reply`, which
    /// asked for the previous key), unless it is `kept`: granted for that preference alone,
    /// it holds nothing any more (it would lapse with the preference's time, which may be
    /// long). A previous value this store did not write leaves its lease alone: it may be
    /// another's, with keys of its own.
    fn revoke_replaced(&self, reply: &TxnResponse, kept: Option<i64>) {
        let previous = reply.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Put(put) => put.prev_key().cloned(),
            TxnOpResponse::Delete(delete) => delete.prev_kvs().first().cloned(),
            _ => None,
        });
        let ours = previous.filter(|kv| {
            let value = std::str::from_utf8(kv.value()).unwrap_or_default();
            let (until_ms, holder) = value.split_once(' ').unwrap_or_default();
            until_ms.parse::<u64>().is_ok() && !holder.is_empty()
        });
        if let Some(lease) = ours.map(|kv| kv.lease()).filter(|l| *l != 0 && Some(*l) != kept) {
            self.revoke_behind(lease);
        }
    }

    /// [`LeaseStore::preference`](crate::LeaseStore::preference): the preference key, read.
    pub(crate) async fn preference_of(&self, key: &str) -> Result<Option<Preference>, Error> {
        let keys = self.keys(key)?;
        let [preferred] = self.read_keys("preference", [keys.preferred()]).await?;
        let read = preferred.as_ref().and_then(read);
        Ok(read.map(|(holder, left)| Preference::new(holder, left)))
    }

    /// The keys `names`, read together in one read-only transaction (each `None` when it is
    /// not there).
    pub(crate) async fn read_keys<const N: usize>(
        &self,
        operation: &'static str,
        names: [String; N],
    ) -> Result<[Option<KeyValue>; N], Error> {
        let bound = self.bound(operation);
        let gets: Vec<TxnOp> = names.iter().map(|name| TxnOp::get(name.as_str(), None)).collect();
        let txn = Txn::new().and_then(gets);
        let read = self.inner.members.call(&bound, |client| {
            let txn = txn.clone();
            async move { client.kv_client().txn(txn).await }
        });
        let reply = read.await?;
        let mut found: [Option<KeyValue>; N] = std::array::from_fn(|_| None);
        for (slot, op) in found.iter_mut().zip(reply.op_responses()) {
            if let TxnOpResponse::Get(get) = op {
                *slot = get.kvs().first().cloned();
            }
        }
        Ok(found)
    }
}
