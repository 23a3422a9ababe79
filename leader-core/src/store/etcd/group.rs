//! [`Group`]: one read of a group's keys, and what a grant decided on it must wait for.

use std::collections::HashMap;

use etcd_client::KeyValue;

use super::claim::ClaimKey;
use super::layout::{GroupKeys, Marker, Part, Slot, read_marker};
use crate::error::Error;
use crate::token::LeaseToken;

/// A group as one read saw it.
#[derive(Debug, Default)]
pub(crate) struct Group {
    /// The cluster's revision the read saw: every key created or written after it is newer.
    pub revision: i64,
    /// The live slots, earliest grant first (pending ones included).
    pub slots: Vec<Slot>,
    /// Each marked index: what its holder, which never released it, was granted.
    pub markers: HashMap<u32, Marker>,
    /// What the `max` key holds (the latest grant's size, for guesses), if it is there.
    pub last_size: Option<u32>,
    /// The group's claim key, if it is there (see `claim.rs`).
    pub claim: Option<ClaimKey>,
    /// The holder an operator prefers, if a live preference names one (see `claim.rs`).
    pub preferred: Option<String>,
}

impl Group {
    /// The group that `kvs` (every key of its range, read at `revision`) hold; an error for
    /// a key whose value this store did not write.
    pub(crate) fn read(keys: &GroupKeys, kvs: &[KeyValue], revision: i64) -> Result<Group, Error> {
        let mut group = Group { revision, ..Group::default() };
        for kv in kvs {
            match keys.part_of(kv.key()) {
                Some(Part::Slot(index)) => group.slots.push(Slot::read(index, kv)?),
                Some(Part::Last(index)) => {
                    group.markers.insert(index, read_marker(kv)?);
                }
                Some(Part::Max) => {
                    // Only a guess's help: a value of another's is not relied on.
                    group.last_size =
                        std::str::from_utf8(kv.value()).ok().and_then(|v| v.parse().ok());
                }
                Some(Part::Claim) => group.claim = Some(ClaimKey::read(kv)),
                Some(Part::Preferred) => group.preferred = super::preference::preferred_holder(kv),
                None => {}
            }
        }
        group.slots.sort_by_key(|slot| slot.fence);
        Ok(group)
    }

    /// The slot `token` holds.
    pub(crate) fn slot_of(&self, token: LeaseToken) -> Option<&Slot> {
        self.slots.iter().find(|slot| slot.token == token)
    }

    /// The group's size, as its live slots were granted (`None`: no slot is live).
    pub(crate) fn size(&self) -> Option<u32> {
        self.slots.first().map(|slot| slot.max_leaders)
    }

    /// How long a grant of index `index` in a group of `max_leaders` must wait before it is
    /// acted on (the lock-delay, in seconds), if at all: the longest TTL among the holders
    /// that never released an index and may still act, there, at the indices a smaller size
    /// leaves out, and anywhere they were granted under another size (a holder of a group of
    /// one believes it is alone). One holder per index below `max_leaders`, granted under
    /// this size, is within the size.
    pub(crate) fn delay_for(&self, index: u32, max_leaders: u32) -> Option<i64> {
        let live: Vec<u32> = self.slots.iter().map(|slot| slot.index).collect();
        self.markers
            .iter()
            .filter(|(marked, marker)| {
                **marked == index
                    || (!live.contains(marked)
                        && (**marked >= max_leaders || marker.max_leaders != max_leaders))
            })
            .map(|(_, marker)| marker.ttl)
            .max()
    }

    /// The index a new slot takes: among the lowest free ones, those without a holder that
    /// may still act before the others (which wait a lock-delay); spread by token among up
    /// to four, so candidates that race rarely pick the same one.
    pub(crate) fn free_index(&self, max_leaders: u32, token: LeaseToken) -> Option<u32> {
        let taken: Vec<u32> = self.slots.iter().map(|slot| slot.index).collect();
        let mut free: Vec<u32> =
            (0..max_leaders).filter(|index| !taken.contains(index)).take(taken.len() + 4).collect();
        free.sort_by_key(|index| self.markers.contains_key(index));
        let unmarked = free.iter().take_while(|index| !self.markers.contains_key(index)).count();
        let spread = unmarked.clamp(1, 4).min(free.len());
        (spread > 0).then(|| free[token_hash(token) % spread])
    }

    /// The markers a grant of `max_leaders` waited out beside its own index's (at and beyond
    /// the size, or of another size): deleted once its lock-delay is over, so the next grant
    /// does not wait for them again.
    pub(crate) fn outgrown_markers(&self, max_leaders: u32) -> Vec<u32> {
        let live: Vec<u32> = self.slots.iter().map(|slot| slot.index).collect();
        let mut outgrown: Vec<u32> = self
            .markers
            .iter()
            .filter(|(index, marker)| {
                !live.contains(index)
                    && (**index >= max_leaders || marker.max_leaders != max_leaders)
            })
            .map(|(index, _)| *index)
            .collect();
        outgrown.sort_unstable();
        outgrown
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

    fn marker(ttl: i64, max_leaders: u32) -> Marker {
        Marker { ttl, max_leaders, lease: 1 }
    }

    #[test]
    fn an_unmarked_index_comes_before_a_marked_one() {
        let mut group = Group::default();
        group.markers.insert(0, marker(5, 2));
        for _ in 0..20 {
            let token = LeaseToken::generate().unwrap();
            assert_ne!(group.free_index(2, token), Some(0));
            assert_eq!(group.free_index(1, token), Some(0), "the only one left");
        }
    }

    #[test]
    fn a_grant_waits_for_holders_there_and_beyond_the_size() {
        let mut group = Group::default();
        group.markers.insert(3, marker(6, 4));
        group.markers.insert(1, marker(2, 4));
        assert_eq!(group.delay_for(0, 4), None, "one holder per index within the size");
        assert_eq!(group.delay_for(1, 4), Some(2), "its own index's holder");
        assert_eq!(group.delay_for(0, 1), Some(6), "a smaller size leaves index 3 out");
        assert_eq!(group.outgrown_markers(1), [1, 3]);
        assert_eq!(group.outgrown_markers(4), Vec::<u32>::new());
        // A holder of a group of one believes it is alone: a larger size waits for it too.
        let mut single = Group::default();
        single.markers.insert(0, marker(5, 1));
        assert_eq!(single.delay_for(1, 3), Some(5));
        assert_eq!(single.outgrown_markers(3), [0]);
    }
}
