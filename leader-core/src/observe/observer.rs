//! [`GroupObserver`]: a group's holders now, and each change, without taking a slot.

use futures_util::Stream;
use tokio::sync::watch;

use super::reader::{self, Reader, Seen};
use crate::election::LeaderGroupState;
use crate::error::Error;
use crate::key::KeyOptions;
use crate::store::{IntoSharedStore, SharedStore};

/// Who holds a group's slots, kept current by the store's events: made from a store and
/// the group's name ([`start`](Self::start), or [`start_with_keys`](Self::start_with_keys)
/// for the candidates' key options), or by
/// [`LeaderGroupElector::observe`](crate::LeaderGroupElector::observe),
/// [`LeaderElector::observe`](crate::LeaderElector::observe) and
/// [`Leadership::observe`](crate::Leadership::observe), which use the candidates' own.
///
/// An observer never takes, writes or holds a slot. Changes arrive from the store as
/// events, in this process or any other: a grant, a release, a renewal that shortens a
/// slot; an expiry (a holder that crashed) is seen by the observer's own timer at the
/// slot's expiry, confirmed by one read. After the store's notifications were interrupted
/// (a lost connection), the state is read again once they are back. Observers of one group
/// made from the same store handle share one reader: one read per change, however many.
///
/// The holder id is what observers learn: set it to what a follower needs to reach the
/// leader, such as `host:port`. A group with no live slot reports its size as unknown
/// (`max_leaders: None`): the store keeps none for it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// use leader_core::{LeaderElectionOptions, LeaderElector, MemoryStore};
///
/// let store = MemoryStore::new();
/// let options = LeaderElectionOptions::new().holder_id("10.0.0.7:8080");
/// let elector = LeaderElector::new(store, options)?;
/// let mut observer = elector.observe("billing").await?;
/// assert!(observer.current().is_empty());
///
/// let (done, finish) = tokio::sync::oneshot::channel::<()>();
/// let leader = tokio::spawn({
///     let elector = elector.clone();
///     async move { elector.run_if_leader("billing", |_| async { finish.await.ok(); }).await }
/// });
/// let state = observer.changed().await?; // the grant
/// assert_eq!(state.leaders[0].holder, "10.0.0.7:8080");
/// done.send(()).unwrap();
/// leader.await.unwrap()?;
/// assert!(observer.changed().await?.is_empty()); // the release
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct GroupObserver {
    name: String,
    key: String,
    seen: watch::Receiver<Seen>,
    reading: Reader,
}

impl GroupObserver {
    /// An observer of group `name` under the default key options (key `leader:{name}`),
    /// once the group has been read: no elector needed. Fails on an invalid name, or with
    /// the first read's error when the store cannot be read now. Observers of one group made
    /// from the same [`SharedStore`] (or clones of it), and those of electors, leaderships
    /// and partition nodes made from it, share one reader. `store` is any
    /// [`IntoSharedStore`]: a `&SharedStore`, a `SharedStore`, or a store by value (which
    /// then has this observer alone).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
    /// use leader_core::GroupObserver;
    ///
    /// let store = leader_core::store::connect("memory://").await?;
    /// let observer = GroupObserver::start(&store, "billing").await?;
    /// assert_eq!((observer.current().max_leaders, observer.leader()), (None, None));
    /// # Ok(()) }
    /// ```
    pub async fn start(store: impl IntoSharedStore, name: &str) -> Result<Self, Error> {
        Self::start_with_keys(store, name, &KeyOptions::new()).await
    }

    /// [`start`](Self::start) with the key options the group's candidates use (a
    /// namespace, a key format, an exact key), so the observer reads their group.
    pub async fn start_with_keys(
        store: impl IntoSharedStore,
        name: &str,
        keys: &KeyOptions,
    ) -> Result<Self, Error> {
        let key = keys.resolve(name)?;
        Self::start_on_key(&store.into_shared_store(), name, key).await
    }

    /// An observer of group `name` (store key `key`), once the group has been read; fails
    /// with the first read's error when the store cannot be read now.
    pub(crate) async fn start_on_key(
        store: &SharedStore,
        name: &str,
        key: String,
    ) -> Result<Self, Error> {
        let reading = reader::reading(store, &key);
        let mut seen = reading.subscribe();
        let failure =
            match seen.wait_for(|seen| seen.read.is_some() || seen.failure.is_some()).await {
                Ok(first) if first.read.is_none() => first.failure.as_ref().map(Error::duplicate),
                // The reader's sender lives as long as `reading`, so this is never an `Err`.
                _ => None,
            };
        if let Some(error) = failure {
            return Err(error);
        }
        Ok(GroupObserver { name: name.to_owned(), key, seen, reading })
    }

    /// An observer of group `name` (store key `key`) at once, before its first read: until
    /// then it reports an empty group, and its first read is its first change.
    pub(crate) fn follow(store: &SharedStore, name: &str, key: String) -> Self {
        let reading = reader::reading(store, &key);
        let seen = reading.subscribe();
        GroupObserver { name: name.to_owned(), key, seen, reading }
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The group's store key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The group's holders as last read, each slot's `expires_in` counted down since the
    /// read (to zero at the expiry the store reported, when the observer looks again). No
    /// I/O; while the store is unreachable, this is the last state read, and
    /// [`changed`](Self::changed) reports the failure.
    pub fn current(&self) -> LeaderGroupState {
        let seen = self.seen.borrow();
        self.state_of(&seen)
    }

    /// Waits for the next change of the group's holders (a grant, a release, an expiry, a
    /// new `max_leaders` after the group emptied) and returns the state after it; a slot
    /// pending its grant (on etcd, a takeover in its lock-delay) is no change. A store
    /// failure ends the wait with that error (transient: the observer keeps trying, and the
    /// next `changed()` returns the state once the store answers again). Cancel-safe.
    pub async fn changed(&mut self) -> Result<LeaderGroupState, Error> {
        while self.seen.changed().await.is_err() {
            // The reader ended (the runtime it ran on shut down): another takes over, and
            // its first read is the next change.
            let store = self.reading.store().clone();
            self.reading = reader::reading(&store, &self.key);
            self.seen = self.reading.subscribe();
        }
        let seen = self.seen.borrow_and_update().clone();
        match &seen.failure {
            Some(error) => Err(Error::duplicate(error)),
            None => Ok(self.state_of(&seen)),
        }
    }

    /// The holder of a single-leader group (one of `max_leaders = 1`) as last read, with
    /// its slot; `None` when nobody holds it, or for a group of more slots (see
    /// [`current`](Self::current)). No I/O.
    pub fn leader(&self) -> Option<crate::SlotInfo> {
        let state = self.current();
        match (state.max_leaders, state.leaders.as_slice()) {
            (Some(1), [only]) => Some(only.clone()),
            _ => None,
        }
    }

    /// A stream of [`changed`](Self::changed)'s results, for `StreamExt` users, from a
    /// clone of this observer (which keeps [`current`](Self::current)); it never ends.
    pub fn stream(&self) -> impl Stream<Item = Result<LeaderGroupState, Error>> + Send + use<> {
        futures_util::stream::unfold(self.clone(), |mut observer| async move {
            let next = observer.changed().await;
            Some((next, observer))
        })
    }

    /// [`stream`](Self::stream), consuming the observer.
    pub fn into_stream(self) -> impl Stream<Item = Result<LeaderGroupState, Error>> + Send {
        self.stream()
    }

    fn state_of(&self, seen: &Seen) -> LeaderGroupState {
        let (snapshot, elapsed) = match &seen.read {
            Some(read) => (read.snapshot.clone(), read.sent_at.elapsed()),
            None => (Default::default(), std::time::Duration::ZERO),
        };
        let (mut leaders, mut pending) = (snapshot.leaders, snapshot.pending);
        for slot in leaders.iter_mut().chain(&mut pending) {
            slot.expires_in = slot.expires_in.saturating_sub(elapsed);
        }
        LeaderGroupState {
            name: self.name.clone(),
            key: self.key.clone(),
            max_leaders: snapshot.max_leaders,
            active_count: leaders.len() as u32,
            leaders,
            pending,
        }
    }
}
