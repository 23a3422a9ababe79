//! [`Bounded`]: the one bounded map of the etcd store's caches (what it last learnt of each
//! group, the leases of unanswered transactions, the session leases). When full, an insert
//! lets go of the entry used least recently, one entry, never the whole map: a cache that
//! forgot everything at a cap made every user of it start again at once.

use std::hash::Hash;
use std::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard};

use lru::LruCache;

/// How many entries each cache of a store keeps.
pub(crate) const KEPT: NonZeroUsize = NonZeroUsize::new(4096).expect("not zero");

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
}
