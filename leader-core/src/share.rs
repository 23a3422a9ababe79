//! [`Shares`]: one value per key, kept while someone holds a [`Share`] of it: a group's
//! wake-up signal while it has waiters, an etcd group's watch, an observed group's
//! announcement, a group's reader. Getting, starting, and forgetting the key when the last
//! share goes are here, once, with their races:
//!
//! - a get finds the key's live value, or starts one under the lock (so two first comers
//!   never start two);
//! - the last share's drop forgets the key only if no newcomer has started another value
//!   meanwhile (a get that came after the last share went starts a fresh one);
//! - what the value does when it goes (abort its task, withdraw an announcement) is its own
//!   `Drop`, which runs after the key is forgotten, outside the lock; or, where it must be
//!   ordered with the next value's start (PostgreSQL's announcements, queued on one
//!   connection), a `last_out` hook run under the lock.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The map, and what runs under its lock when a value's last share goes.
struct Map<K: Eq + Hash, V> {
    entries: Mutex<HashMap<K, Weak<Held<K, V>>>>,
    last_out: Option<fn(&V)>,
}

/// The values kept per key; see the module's docs.
pub(crate) struct Shares<K: Eq + Hash, V> {
    map: Arc<Map<K, V>>,
}

/// A counted hold on a key's value: the value lives while a share of it does.
pub(crate) struct Share<K: Eq + Hash, V>(Arc<Held<K, V>>);

struct Held<K: Eq + Hash, V> {
    value: V,
    key: K,
    home: Weak<Map<K, V>>,
}

impl<K: Eq + Hash + Clone, V> Shares<K, V> {
    /// No values yet.
    pub(crate) fn new() -> Self {
        Shares { map: Arc::new(Map { entries: Mutex::default(), last_out: None }) }
    }

    /// No values yet; `last_out` runs with each value whose last share goes, under the lock
    /// [`get_or_start`](Self::get_or_start)'s `start` runs under. So what a value's start
    /// and its end send somewhere (an announcement, its withdrawal) is sent in the order
    /// the starts and ends happened, even when a newcomer starts the key's next value
    /// while the last share of the one before is going. It must not wait, nor get from
    /// these shares.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // PostgreSQL's announcements
    pub(crate) fn with_last_out(last_out: fn(&V)) -> Self {
        Shares { map: Arc::new(Map { entries: Mutex::default(), last_out: Some(last_out) }) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Weak<Held<K, V>>>> {
        self.map.lock()
    }

    /// A share of `key`'s live value if `reuse` accepts it, or of a new one from `start`
    /// (called under the lock: it must not wait, nor get from these shares).
    pub(crate) fn get_or_start(
        &self,
        key: &K,
        reuse: impl FnOnce(&V) -> bool,
        start: impl FnOnce() -> V,
    ) -> Share<K, V> {
        // Declared before the lock, so a value it holds that is not reused is dropped after
        // the lock is let go (its last share's drop takes the lock).
        let found;
        let mut map = self.lock();
        found = map.get(key).and_then(Weak::upgrade);
        if let Some(held) = &found
            && reuse(&held.value)
        {
            return Share(held.clone());
        }
        let held =
            Arc::new(Held { value: start(), key: key.clone(), home: Arc::downgrade(&self.map) });
        map.insert(key.clone(), Arc::downgrade(&held));
        Share(held)
    }

    /// Whether `key` has a live value.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's announcements
    pub(crate) fn contains<Q: Eq + Hash + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.lock().get(key).is_some_and(|held| held.strong_count() > 0)
    }

    /// Calls `f` with `key`'s live value, if any (holding no share after).
    pub(crate) fn with<Q: Eq + Hash + ?Sized>(&self, key: &Q, f: impl FnOnce(&V))
    where
        K: Borrow<Q>,
    {
        let found = self.lock().get(key).and_then(Weak::upgrade);
        if let Some(held) = found {
            f(&held.value);
        }
    }

    /// Calls `f` with every live value (holding no share after).
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))] // waking
    pub(crate) fn for_each(&self, mut f: impl FnMut(&V)) {
        let live: Vec<Arc<Held<K, V>>> = self.lock().values().filter_map(Weak::upgrade).collect();
        for held in &live {
            f(&held.value);
        }
    }

    /// `f` of every live value, under the lock: no value starts or goes meanwhile (a new
    /// connection announcing every watched group does so in order with the rest). `f`
    /// must not wait, nor get from these shares.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // PostgreSQL's announcements
    pub(crate) fn with_all<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = &V>) -> R) -> R {
        // Declared before the lock: a share taken here that turns out to be a value's last
        // is let go after the lock (its going takes the lock).
        let live: Vec<Arc<Held<K, V>>>;
        let map = self.lock();
        live = map.values().filter_map(Weak::upgrade).collect();
        let result = f(&mut live.iter().map(|held| &held.value));
        drop(map);
        result
    }

    /// How many keys have a live value.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().values().filter(|held| held.strong_count() > 0).count()
    }
}

impl<K: Eq + Hash + Clone, V> Default for Shares<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Eq + Hash, V> Map<K, V> {
    fn lock(&self) -> MutexGuard<'_, HashMap<K, Weak<Held<K, V>>>> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<K: Eq + Hash, V> Drop for Held<K, V> {
    fn drop(&mut self) {
        let Some(home) = self.home.upgrade() else { return };
        let mut map = home.lock();
        // A newcomer may have started another value since this one's last share went.
        if map.get(&self.key).is_some_and(|held| held.strong_count() == 0) {
            map.remove(&self.key);
        }
        if let Some(last_out) = home.last_out {
            last_out(&self.value);
        }
    }
}

impl<K: Eq + Hash, V> Clone for Share<K, V> {
    fn clone(&self) -> Self {
        Share(self.0.clone())
    }
}

impl<K: Eq + Hash, V: std::fmt::Debug> std::fmt::Debug for Share<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.value.fmt(f)
    }
}

impl<K: Eq + Hash, V> Deref for Share<K, V> {
    type Target = V;

    fn deref(&self) -> &V {
        &self.0.value
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its drops.
    struct Value(Arc<AtomicUsize>, u32);

    impl Drop for Value {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn one_value_per_key_while_shared_and_forgotten_with_the_last_share() {
        let shares: Shares<String, Value> = Shares::new();
        let dropped = Arc::new(AtomicUsize::new(0));
        let key = "a".to_owned();
        let first = shares.get_or_start(&key, |_| true, || Value(dropped.clone(), 1));
        let second = shares.get_or_start(&key, |_| true, || Value(dropped.clone(), 2));
        assert_eq!((first.1, second.1), (1, 1), "the second get shares the first value");
        drop(first);
        assert!(shares.contains(&key));
        drop(second);
        assert!(!shares.contains(&key));
        assert_eq!((dropped.load(Ordering::SeqCst), shares.len()), (1, 0));
        let again = shares.get_or_start(&key, |_| true, || Value(dropped.clone(), 3));
        assert_eq!(again.1, 3, "a get after the last share went starts afresh");
    }

    #[test]
    fn a_value_not_reused_is_replaced_and_its_last_share_forgets_nothing_of_the_new_one() {
        let shares: Shares<String, Value> = Shares::new();
        let dropped = Arc::new(AtomicUsize::new(0));
        let key = "a".to_owned();
        let failed = shares.get_or_start(&key, |_| true, || Value(dropped.clone(), 1));
        let fresh = shares.get_or_start(&key, |value| value.1 != 1, || Value(dropped.clone(), 2));
        assert_eq!(fresh.1, 2);
        drop(failed);
        assert!(shares.contains(&key), "the old value's last share left the new one");
        let mut seen = Vec::new();
        shares.for_each(|value| seen.push(value.1));
        shares.with(&key, |value| seen.push(value.1));
        assert_eq!(seen, [2, 2]);
    }

    #[test]
    fn the_last_out_hook_runs_once_per_value_in_order_with_the_starts() {
        use std::sync::Mutex as StdMutex;
        static LOG: StdMutex<Vec<String>> = StdMutex::new(Vec::new());
        struct Announced(u32);
        fn withdraw(value: &Announced) {
            LOG.lock().unwrap().push(format!("out {}", value.0));
        }
        let shares: Shares<&str, Announced> = Shares::with_last_out(withdraw);
        let start = |n: u32| {
            LOG.lock().unwrap().push(format!("in {n}"));
            Announced(n)
        };
        let first = shares.get_or_start(&"a", |_| true, || start(1));
        let second = shares.get_or_start(&"a", |_| true, || start(2));
        drop(first);
        drop(second);
        let third = shares.get_or_start(&"a", |_| true, || start(3));
        // A value replaced while shared goes later: its end still runs the hook.
        let fourth = shares.get_or_start(&"a", |_| false, || start(4));
        let mut all = Vec::new();
        shares.with_all(|values| all.extend(values.map(|value| value.0)));
        assert_eq!(all, [4]);
        drop(third);
        drop(fourth);
        assert_eq!(*LOG.lock().unwrap(), ["in 1", "out 1", "in 3", "in 4", "out 3", "out 4"]);
        assert_eq!(shares.len(), 0);
    }

    #[test]
    fn a_replaced_value_whose_last_share_is_the_lookup_itself_goes_without_a_deadlock() {
        let shares: Shares<String, Value> = Shares::new();
        let dropped = Arc::new(AtomicUsize::new(0));
        let key = "a".to_owned();
        let only = shares.get_or_start(&key, |_| true, || Value(dropped.clone(), 1));
        // The get upgrades the old value; once `only` goes, the get holds its last share.
        let replaced = shares.get_or_start(
            &key,
            |_| {
                drop(only);
                false
            },
            || Value(dropped.clone(), 2),
        );
        assert_eq!((replaced.1, dropped.load(Ordering::SeqCst)), (2, 1));
        assert!(shares.contains(&key));
    }
}
