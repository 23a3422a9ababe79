//! [`Group`]: one read of a group's keys, and the choice of the index a new slot takes.

use std::collections::HashMap;

use etcd_client::KeyValue;

use super::layout::{GroupKeys, LastHolder, Part, Slot};
use crate::LeaseToken;

/// A group as one read saw it.
#[derive(Debug, Default)]
pub(crate) struct Group {
    /// `max_leaders` as its key holds it.
    pub max: Option<u32>,
    /// The `max` key's `mod_revision` (0: no key).
    pub max_revision: i64,
    /// The live slots, earliest grant first.
    pub slots: Vec<Slot>,
    /// Each index's `last` key: how its last holder left, and the key's `mod_revision`.
    pub last: HashMap<u32, (LastHolder, i64)>,
}

impl Group {
    /// The group that `kvs` (every key of its range) hold.
    pub(crate) fn read(keys: &GroupKeys, kvs: &[KeyValue]) -> Group {
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
                None => {}
            }
        }
        group.slots.sort_by_key(|slot| slot.fence);
        group
    }

    /// The slot `token` holds.
    pub(crate) fn slot_of(&self, token: LeaseToken) -> Option<&Slot> {
        self.slots.iter().find(|slot| slot.token == token)
    }

    /// The `max_leaders` of the live slots, if any is live.
    pub(crate) fn live_max(&self) -> Option<u32> {
        self.max.filter(|_| !self.slots.is_empty())
    }

    /// The TTL of index `index`'s last holder, if it never released it.
    pub(crate) fn taken_over(&self, index: u32) -> Option<i64> {
        match self.last.get(&index) {
            Some((LastHolder::Held { ttl }, _)) => Some(*ttl),
            _ => None,
        }
    }

    /// The `last` key's `mod_revision` for `index` (0: no key).
    pub(crate) fn last_revision(&self, index: u32) -> i64 {
        self.last.get(&index).map_or(0, |(_, revision)| *revision)
    }

    /// The index a new slot takes: among the lowest free ones, those a release freed (or
    /// never used) before those taken over (which wait a lock-delay); spread by token among
    /// up to four, so candidates that race rarely pick the same one, and the `last` keys an
    /// idle group keeps stay few.
    pub(crate) fn free_index(&self, max_leaders: u32, token: LeaseToken) -> Option<u32> {
        let taken: Vec<u32> = self.slots.iter().map(|slot| slot.index).collect();
        let mut free: Vec<u32> =
            (0..max_leaders).filter(|index| !taken.contains(index)).take(taken.len() + 4).collect();
        free.sort_by_key(|index| self.taken_over(*index).is_some());
        let fresh = free.iter().take_while(|index| self.taken_over(**index).is_none()).count();
        let spread = fresh.clamp(1, 4).min(free.len());
        (spread > 0).then(|| free[token_hash(token) % spread])
    }
}

fn token_hash(token: LeaseToken) -> usize {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    token.hash(&mut hasher);
    hasher.finish() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_index_comes_before_a_taken_over_one() {
        let mut group = Group::default();
        group.last.insert(0, (LastHolder::Held { ttl: 5 }, 7));
        group.last.insert(1, (LastHolder::Released, 8));
        for _ in 0..20 {
            let token = LeaseToken::generate().unwrap();
            assert_ne!(group.free_index(2, token), Some(0));
            assert_eq!(group.free_index(1, token), Some(0), "the only one left");
        }
        assert_eq!(group.taken_over(0), Some(5));
        assert_eq!((group.last_revision(1), group.last_revision(9)), (8, 0));
    }
}
