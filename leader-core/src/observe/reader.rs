//! The one reader of a group per store handle in a process. It watches the group's changes
//! ([`LeaseStore::watch_changes`]), reads the group's state once per change and at its
//! nearest expiry, and shares each read with every observer of the group made from that
//! store handle: a thousand observers cost one watch and one read per change.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until};

use crate::backoff::{Backoff, FIRST_PAUSE, SUBSCRIPTION_CEILING};
use crate::error::Error;
use crate::share::{Share, Shares};
use crate::store::{GroupSnapshot, GroupWatch, SharedStore};
use crate::telemetry;

/// How long after a slot's expiry (as the last read saw it) the reader looks again: the
/// store rounds a slot's time to live down, so the slot is gone, or renewed, by then.
const AFTER_EXPIRY: Duration = Duration::from_millis(1);

/// How often a reader over a store without change notifications reads the state.
pub(crate) const POLL_EVERY: Duration = Duration::from_secs(1);

/// What the reader has seen of its group.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    /// The last state read, if any.
    pub read: Option<Read>,
    /// The failure of the last attempt, until a read succeeds again (shared: each
    /// observer gets its own [`Error::duplicate`]).
    pub failure: Option<Arc<Error>>,
}

/// One read of the group's state.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    pub snapshot: GroupSnapshot,
    /// When the read was sent: each slot lives at least `expires_in` past this.
    pub sent_at: Instant,
}

/// A group's reader, shared by its observers: the reading task runs while one is alive.
/// The task alone holds the sender, so observers learn if it ever ends (its runtime shut
/// down) and start another.
pub(crate) struct Reading {
    /// Kept, so the store's address names it for as long as the registry's entry lives.
    store: SharedStore,
    key: String,
    seen: watch::Receiver<Seen>,
    task: tokio::task::AbortHandle,
}

/// A share of a group's reader.
pub(crate) type Reader = Share<(usize, String), Reading>;

impl Reading {
    /// What the reader saw, and each change from now on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Seen> {
        self.seen.clone()
    }

    /// The store the reader reads.
    pub(crate) fn store(&self) -> &SharedStore {
        &self.store
    }
}

impl std::fmt::Debug for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reading").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The readers alive in this process, by store handle and key.
fn registry() -> &'static Shares<(usize, String), Reading> {
    static READINGS: OnceLock<Shares<(usize, String), Reading>> = OnceLock::new();
    READINGS.get_or_init(Shares::new)
}

/// The reader of `key` on `store`, started if none is alive. Observers made from the same
/// store handle (the same `Arc`) share one.
pub(crate) fn reading(store: &SharedStore, key: &str) -> Reader {
    // The reader holds the store, so its address names it for as long as the entry lives.
    let registered_as = (Arc::as_ptr(store) as *const () as usize, key.to_owned());
    registry().get_or_start(
        &registered_as,
        |reading| !reading.task.is_finished(),
        || {
            let (sender, seen) = watch::channel(Seen::default());
            let task = tokio::spawn(read_changes(store.clone(), key.to_owned(), sender));
            Reading { store: store.clone(), key: key.to_owned(), seen, task: task.abort_handle() }
        },
    )
}

/// The reading task: watch, read, share, and wait for the next change or expiry.
async fn read_changes(store: SharedStore, key: String, seen: watch::Sender<Seen>) {
    let mut backoff = Backoff::new(FIRST_PAUSE, SUBSCRIPTION_CEILING).jittered();
    let mut changes: Option<GroupWatch> = None;
    let mut polling = false;
    loop {
        if changes.is_none() && !polling {
            match store.watch_changes(&key).await {
                Ok(watch) => changes = Some(watch),
                Err(Error::Unsupported { .. }) => polling = true,
                Err(error) => {
                    failed(&seen, &key, error);
                    sleep(backoff.next_pause()).await;
                    continue;
                }
            }
        }
        let sent_at = Instant::now();
        let look_again = match telemetry::state(&*store, &key).await {
            Ok(snapshot) => {
                backoff.reset();
                // The store counted `expires_in` from a moment between the request and its
                // reply: from the reply, the look comes after the expiry, so one read
                // confirms it. What is left is rounded down to the store's resolution (whole
                // seconds on etcd): a slot read with less left is looked at that much later.
                let replied_at = Instant::now();
                let resolution = store.expiry_resolution();
                let nearest = snapshot
                    .leaders
                    .iter()
                    .chain(&snapshot.pending)
                    .map(|slot| slot.expires_in.max(resolution))
                    .min();
                shared(&seen, &key, Read { snapshot, sent_at });
                nearest.map(|expires_in| replied_at + expires_in + AFTER_EXPIRY)
            }
            Err(error) => {
                failed(&seen, &key, error);
                Some(Instant::now() + backoff.next_pause())
            }
        };
        let look_again = match (look_again, polling) {
            (at, false) => at,
            (Some(at), true) => Some(at.min(Instant::now() + POLL_EVERY)),
            (None, true) => Some(Instant::now() + POLL_EVERY),
        };
        tokio::select! {
            biased;
            () = woken(&mut changes) => {}
            () = until(look_again) => {}
        }
    }
}

async fn woken(changes: &mut Option<GroupWatch>) {
    match changes {
        Some(changes) => changes.woken().await,
        None => std::future::pending().await,
    }
}

async fn until(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Shares `read`, waking the observers only if the holders changed (or the last attempt
/// had failed); a read that finds the same holders only refreshes their times to live.
fn shared(seen: &watch::Sender<Seen>, key: &str, read: Read) {
    seen.send_if_modified(|seen| {
        let holders_changed =
            seen.read.as_ref().is_some_and(|last| !same_holders(&last.snapshot, &read.snapshot));
        if holders_changed {
            let holders: Vec<(&str, u64)> = read
                .snapshot
                .leaders
                .iter()
                .map(|slot| (slot.holder.as_str(), slot.fence))
                .collect();
            tracing::debug!(group = key, ?holders, "leader.observed");
            telemetry::metric::observed(key, "changed");
        }
        // The first read, and the first after a failure, are news to the observers too.
        let wake = holders_changed || seen.read.is_none() || seen.failure.is_some();
        *seen = Seen { read: Some(read), failure: None };
        wake
    });
}

/// Shares a failure with the observers (each `changed()` reports it), keeping the last
/// state read for `current()`.
fn failed(seen: &watch::Sender<Seen>, key: &str, error: Error) {
    tracing::debug!(group = key, %error, "leader.observe failed");
    telemetry::metric::observed(key, "error");
    seen.send_modify(|seen| seen.failure = Some(Arc::new(error)));
}

/// Whether two reads show the same holders: the same slots (holder and fence) under the
/// same `max_leaders`. A pending slot (on etcd, a takeover waiting out its lock-delay)
/// holds nothing yet: its coming and going is no change, nor is the size it makes known
/// while nobody holds a slot (its grant is the change).
fn same_holders(a: &GroupSnapshot, b: &GroupSnapshot) -> bool {
    let same = |a: &[crate::SlotInfo], b: &[crate::SlotInfo]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(a, b)| a.holder == b.holder && a.fence == b.fence)
    };
    same(&a.leaders, &b.leaders) && (a.leaders.is_empty() || a.max_leaders == b.max_leaders)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[tokio::test]
    async fn observers_of_one_store_share_a_reader_that_goes_with_the_last() {
        let store: SharedStore = Arc::new(MemoryStore::new());
        let other: SharedStore = Arc::new(MemoryStore::new());
        let first = reading(&store, "leader:shared");
        let second = reading(&store, "leader:shared");
        assert!(std::ptr::eq(&*first, &*second), "one reader per store handle and key");
        let elsewhere = reading(&other, "leader:shared");
        assert!(!std::ptr::eq(&*first, &*elsewhere), "another store has its own");
        let entry = (Arc::as_ptr(&store) as *const () as usize, "leader:shared".to_owned());
        drop((first, elsewhere));
        assert!(registry().contains(&entry), "one observer is left");
        drop(second);
        assert!(!registry().contains(&entry), "forgotten with the last observer");
    }
}
