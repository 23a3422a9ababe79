//! The transactions an acquire sends (see `acquire.rs`): a guess at a freed index, or a
//! grant decided on a read of the group; each commits only if nothing happened in the group
//! since the revision it was decided at.

use std::time::SystemTime;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

use super::group::Group;
use super::layout::{GroupKeys, SlotValue, held_marker};
use super::leases::EtcdLease;
use crate::store::AcquireRequest;

/// The compares that nothing happened in the group since `revision`: no slot created, no
/// marker written (each over its range; keys deleted since do not count).
fn unchanged_since(keys: &GroupKeys, revision: i64) -> [Compare; 2] {
    let after = revision.saturating_add(1);
    [
        Compare::create_revision(keys.slots(), CompareOp::Less, after).with_prefix(),
        Compare::mod_revision(keys.markers(), CompareOp::Less, after).with_prefix(),
    ]
}

/// What a granting transaction writes: the slot key on `lease`, and on `marker` the index's
/// marker (the longer of the slot's TTL and the lock-delay it waits) and, with `size`, the
/// group's size (only where a read found it missing or another: a guess needs it, no grant
/// does).
#[allow(clippy::too_many_arguments)]
fn grant_ops(
    keys: &GroupKeys,
    request: &AcquireRequest<'_>,
    lease: EtcdLease,
    marker: EtcdLease,
    index: u32,
    acquired_at: SystemTime,
    delay: Option<i64>,
    size: bool,
) -> Vec<TxnOp> {
    let value = SlotValue {
        token: request.token,
        acquired_at,
        ttl: lease.ttl,
        max_leaders: request.max_leaders.get(),
        delay_ttl: delay,
        holder: request.holder,
    };
    let on_lease = PutOptions::new().with_lease(lease.id);
    let on_marker = || Some(PutOptions::new().with_lease(marker.id));
    let mut ops = vec![
        TxnOp::put(keys.slot(index), value.encode(), Some(on_lease)),
        TxnOp::put(
            keys.last(index),
            held_marker(lease.ttl.max(delay.unwrap_or(0)), request.max_leaders.get()),
            on_marker(),
        ),
    ];
    if size {
        ops.push(TxnOp::put(keys.max(), request.max_leaders.get().to_string(), on_marker()));
    }
    ops
}

/// The transaction that takes index `index`, which a release freed at `revision`, without
/// a read first: if nothing happened in the group since, the index is unmarked and the
/// group's size is the request's; its else branch reads the group.
pub(super) fn guess_txn(
    keys: &GroupKeys,
    request: &AcquireRequest<'_>,
    lease: EtcdLease,
    marker: EtcdLease,
    index: u32,
    revision: i64,
    acquired_at: SystemTime,
) -> Txn {
    let slot_key = keys.slot(index);
    // No claim either: a claim keeps the last free slot, which only a read can tell.
    let mut when = vec![
        Compare::create_revision(slot_key.as_str(), CompareOp::Equal, 0),
        Compare::create_revision(keys.last(index), CompareOp::Equal, 0),
        Compare::create_revision(keys.claim(), CompareOp::Equal, 0),
        Compare::value(keys.max(), CompareOp::Equal, request.max_leaders.get().to_string()),
    ];
    when.extend(unchanged_since(keys, revision));
    Txn::new()
        .when(when)
        .and_then(grant_ops(keys, request, lease, marker, index, acquired_at, None, false))
        .or_else([TxnOp::get(keys.range.as_str(), Some(GetOptions::new().with_prefix()))])
}

/// The transaction that takes index `index` for `request` if nothing happened in the group
/// since `group` was read (and, with `end_claim`, deletes the group's claim: the request
/// held it); its else branch reads the group.
#[allow(clippy::too_many_arguments)]
pub(super) fn grant_txn(
    keys: &GroupKeys,
    request: &AcquireRequest<'_>,
    lease: EtcdLease,
    marker: EtcdLease,
    index: u32,
    group: &Group,
    acquired_at: SystemTime,
    delay: Option<i64>,
    end_claim: bool,
) -> Txn {
    let mut when = vec![Compare::create_revision(keys.slot(index), CompareOp::Equal, 0)];
    when.extend(unchanged_since(keys, group.revision));
    let size = group.last_size != Some(request.max_leaders.get());
    let mut ops = grant_ops(keys, request, lease, marker, index, acquired_at, delay, size);
    if end_claim {
        ops.push(TxnOp::delete(keys.claim(), None));
    }
    Txn::new()
        .when(when)
        .and_then(ops)
        .or_else([TxnOp::get(keys.range.as_str(), Some(GetOptions::new().with_prefix()))])
}

/// What a transaction's first `Get` answered.
pub(crate) fn first_get(reply: &etcd_client::TxnResponse) -> Vec<etcd_client::KeyValue> {
    reply
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .unwrap_or_default()
}
