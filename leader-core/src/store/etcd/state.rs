//! Reading groups' live slots: a group's keys in one range read (many groups' ranges in one
//! read-only transaction of up to [`RENEW_BATCH_LEN`] reads), then the time to live of each
//! lease their slots are bound to, asked once per lease (a node's partitions share its
//! session lease).

use std::collections::HashMap;

use etcd_client::{GetOptions, LeaseTimeToLiveResponse, Txn, TxnOp, TxnOpResponse};

use super::EtcdStore;
use super::group::Group;
use super::leases::secs;
use crate::error::Error;
use crate::store::bound::Bound;
use crate::store::{GroupSnapshot, RENEW_BATCH_LEN, SlotInfo};

/// How many leases' times to live are asked at once.
const LIVES_IN_FLIGHT: usize = 32;

/// Each lease's time to live, by lease id.
type Lives = HashMap<i64, LeaseTimeToLiveResponse>;

impl EtcdStore {
    /// [`LeaseStore::state`](crate::LeaseStore::state): the group of `key`.
    pub(super) async fn state_of(&self, key: &str) -> Result<GroupSnapshot, Error> {
        let keys = self.keys(key)?;
        let bound = self.bound("state");
        let group = self.read(&bound, &keys).await?;
        let lives = self.lives(&bound, std::slice::from_ref(&group)).await?;
        Ok(snapshot(&group, &lives))
    }

    /// [`LeaseStore::state_many`](crate::LeaseStore::state_many): the groups of `keys`, in
    /// order, their ranges read in transactions of up to [`RENEW_BATCH_LEN`] reads each.
    pub(super) async fn states_of(&self, keys: &[&str]) -> Result<Vec<GroupSnapshot>, Error> {
        let keys = keys.iter().map(|key| self.keys(key)).collect::<Result<Vec<_>, _>>()?;
        let mut groups = Vec::with_capacity(keys.len());
        for part in keys.chunks(RENEW_BATCH_LEN) {
            let bound = self.bound("state");
            let ranges: Vec<TxnOp> = part
                .iter()
                .map(|keys| TxnOp::get(keys.range.clone(), Some(GetOptions::new().with_prefix())))
                .collect();
            let read = self.inner.members.call(&bound, |client| {
                let txn = Txn::new().and_then(ranges.clone());
                async move { client.kv_client().txn(txn).await }
            });
            let reply = read.await?;
            let revision = reply.header().map_or(0, |header| header.revision());
            let answers = reply.op_responses();
            if answers.len() != part.len() {
                return Err(Error::Store {
                    store: "etcd",
                    endpoint: String::new(),
                    operation: "state",
                    message: format!(
                        "{} answers to a read of {} groups",
                        answers.len(),
                        part.len()
                    ),
                });
            }
            for (keys, answer) in part.iter().zip(answers) {
                let kvs = match &answer {
                    TxnOpResponse::Get(get) => get.kvs(),
                    _ => &[],
                };
                groups.push(Group::read(keys, kvs, revision)?);
            }
        }
        let lives = self.lives(&self.bound("state"), &groups).await?;
        Ok(groups.iter().map(|group| snapshot(group, &lives)).collect())
    }

    /// The time to live of every lease a slot of `groups` is bound to, each asked once.
    async fn lives(&self, bound: &Bound, groups: &[Group]) -> Result<Lives, Error> {
        let mut leases: Vec<i64> =
            groups.iter().flat_map(|group| group.slots.iter().map(|slot| slot.lease)).collect();
        leases.sort_unstable();
        leases.dedup();
        let mut lives = Lives::with_capacity(leases.len());
        for part in leases.chunks(LIVES_IN_FLIGHT) {
            let asked = part.iter().map(|&lease| {
                let members = &self.inner.members;
                async move {
                    let life = members
                        .call(bound, |client| async move {
                            client.lease_client().time_to_live(lease, None).await
                        })
                        .await?;
                    Ok::<_, Error>((lease, life))
                }
            });
            lives.extend(futures_util::future::try_join_all(asked).await?);
        }
        Ok(lives)
    }
}

/// The snapshot of `group`: its slots whose lease is still alive, pending while in their
/// lock-delay.
fn snapshot(group: &Group, lives: &Lives) -> GroupSnapshot {
    let mut snapshot = GroupSnapshot::default();
    for slot in &group.slots {
        let Some(life) = lives.get(&slot.lease).filter(|life| life.ttl() >= 0) else {
            continue; // expired between the two reads
        };
        // etcd truncates the time left to whole seconds: at least this is left.
        let info = SlotInfo {
            holder: slot.holder.clone(),
            fence: slot.fence,
            acquired_at: slot.acquired_at,
            expires_in: secs(life.ttl().min(life.granted_ttl())),
        };
        // A slot in its lock-delay is taken, but its holder does not lead yet.
        match slot.is_pending() {
            true => snapshot.pending.push(info),
            false => snapshot.leaders.push(info),
        }
    }
    if !snapshot.leaders.is_empty() || !snapshot.pending.is_empty() {
        snapshot.max_leaders = group.size();
    }
    snapshot
}
