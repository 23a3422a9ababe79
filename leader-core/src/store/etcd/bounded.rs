//! [`Bounded`]: the one bounded map of the etcd store's caches (what it last learnt of each
//! group, the leases of unanswered transactions, the session leases, the slots it knows,
//! the keep-alive streams). When full, an insert lets go of the entry used least recently,
//! one entry, never the whole map: a cache that forgot everything at a cap made every user
//! of it start again at once. The caches of live things (slots, streams) are also swept by
//! age ([`Bounded::retain`]) and have the larger cap [`MOST`].

use std::hash::Hash;
use std::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard};

use lru::LruCache;

/// How many entries each cache of a store keeps.
pub(crate) const KEPT: NonZeroUsize = NonZeroUsize::new(4096).expect("not zero");

/// How many entries a cache of live things keeps at most (a node of partition leases holds
/// one slot and its stream per partition it owns); it lets go of its dead ones by age long
/// before.
pub(crate) const MOST: NonZeroUsize = NonZeroUsize::new(1 << 20).expect("not zero");

/// A map of at most `capacity` entries, the least recently used going first.
pub(crate) struct Bounded<K: Hash + Eq, V> {
    entries: Mutex<LruCache<K, V>>,
}

impl<K: Hash + Eq, V> Bounded<K, V> {
    pub(crate) fn new(capacity: NonZeroUsize) -> Self {
        Bounded { entries: Mutex::new(LruCache::new(capacity)) }
    }

    /// The entries, to read and change (a `get` counts as a use, a `peek` does not).
    pub(crate) fn lock(&self) -> MutexGuard<'_, LruCache<K, V>> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lets go of every entry of `entries` (this map's, locked) for which `keep` is false.
    pub(crate) fn retain(entries: &mut LruCache<K, V>, mut keep: impl FnMut(&K, &V) -> bool)
    where
        K: Clone,
    {
        let gone: Vec<K> = entries
            .iter()
            .filter(|(key, value)| !keep(key, value))
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            entries.pop(&key);
        }
    }
}

impl<K: Hash + Eq, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Bounded::new(KEPT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten thousand keys through a map of 4,096: it stays at 4,096, keeps the newest, and
    /// keeps an old key that is used all along.
    #[test]
    fn the_least_recently_used_entry_goes_first_one_at_a_time() {
        let map: Bounded<u32, u32> = Bounded::default();
        map.lock().put(0, 0);
        for key in 1..10_000 {
            map.lock().put(key, key);
            assert_eq!(map.lock().get(&0), Some(&0), "a key used all along stays");
            assert!(map.lock().len() <= KEPT.get());
        }
        let entries = map.lock();
        assert_eq!(entries.len(), KEPT.get());
        assert!(entries.contains(&9_999) && entries.contains(&(10_000 - 4_095)));
        assert!(!entries.contains(&(10_000 - 4_096)), "the oldest unused went");
    }

    #[test]
    fn retain_lets_go_of_what_it_is_told_and_keeps_the_order_of_use() {
        let map: Bounded<u32, u32> = Bounded::new(NonZeroUsize::new(4).expect("not zero"));
        let mut entries = map.lock();
        for key in 0..4 {
            entries.put(key, key * 10);
        }
        entries.get(&0);
        Bounded::retain(&mut entries, |key, _| key % 2 == 0);
        assert_eq!(entries.len(), 2);
        entries.put(4, 40);
        entries.put(5, 50);
        entries.put(6, 60);
        assert!(entries.contains(&0) && !entries.contains(&2), "2 was used least recently");
    }
}
